"""Tests of `solvercast.testing`: the random programs and the checkers that judge `optimize` on them."""
