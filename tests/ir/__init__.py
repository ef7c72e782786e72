"""Tests of solvercast.ir."""
