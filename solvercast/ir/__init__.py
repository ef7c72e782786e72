"""The IR and its judge: Problem, Schedule, the execution engine, simulate/validate, lower bounds and
memory budgets. Nothing here imports torch.fx."""
