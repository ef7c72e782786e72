"""Tools on lowered modules and schedules: measuring a lowered module with stand-in collectives, and
pictures and traces of schedules."""
