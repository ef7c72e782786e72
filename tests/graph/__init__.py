"""Tests of solvercast.graph."""
