"""One module per formulation on the IR: the CP-SAT model (cpsat_model) and its solve (cpsat), windows and
placement for large graphs (large), the MILP (milp), the exact prefix search (prefixes) and cut bounds
(cuts)."""
