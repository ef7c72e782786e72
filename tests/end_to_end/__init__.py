"""Tests that run the whole path (extract, optimize, lower, torch.compile) on real graphs."""
