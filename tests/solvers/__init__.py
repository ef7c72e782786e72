"""Tests of solvercast.solvers."""
