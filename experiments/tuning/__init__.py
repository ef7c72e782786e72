"""The studies that set the solver's and the heuristics' tuning values."""
