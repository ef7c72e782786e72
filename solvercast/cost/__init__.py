"""What a task costs: device profiles, the roofline, the CostModel protocol and its analytic model,
calibration on this machine, costs from profiler traces."""
