"""Tests of solvercast.models."""
