"""Graph rewrites the optimizer may choose with the schedule: each kind in one module, with what may be
rewritten, how, and what it changes (numerics)."""
