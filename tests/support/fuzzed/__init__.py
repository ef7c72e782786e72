"""Programs a fuzz found failing, kept as they were generated."""
