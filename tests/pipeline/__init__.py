"""Tests of solvercast.pipeline."""
