"""Tests of solvercast.heuristics."""
