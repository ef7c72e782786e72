"""Tests of solvercast.fx."""
