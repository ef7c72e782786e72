"""Measurements of solvercast: benchmarks, tuning studies and GPU checks (experiments/README.md)."""
