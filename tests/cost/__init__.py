"""Tests of solvercast.cost."""
