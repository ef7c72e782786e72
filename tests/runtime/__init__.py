"""Tests of solvercast.runtime."""
