"""From a graph to an answer: the methods registry, the time plan, one budget's solve, pareto, the
report, `optimize` / `SolvercastPass`, and the CLI."""
