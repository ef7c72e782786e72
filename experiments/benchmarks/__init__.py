"""Benchmarks a user may rerun: the sweep, scale and time limits, the fuzz profile."""
