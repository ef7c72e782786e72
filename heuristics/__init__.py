"""Heuristic schedulers: the solver's warm starts and fallbacks, and the
baselines every experiment compares against (DESIGN.md, "Methods").

* `list_schedule`: upward-rank list scheduling, stream per task by earliest finish.
* `nondelay_schedule`: earliest-start list scheduling (ready work fills the time collectives take).
* `comm_priority_schedule`: raise collectives / sink waits / fill with compute.
* `iterative_swap`: adjacent swaps of collectives and waits under a memory budget.
* `fill_idle`: moves of later compute tasks into the default stream's stalls under a memory budget.
* `best_heuristic` / `run_heuristics`: every heuristic of the heuristics' table (`registry.SCHEDULERS`),
  judged by `simulate`.

Every function returns a `Schedule` that `validate` accepts. Given a memory
budget, each returns a schedule within it whenever the original order (for
`iterative_swap`, its input) is within it; when it cannot hold the budget its
``method`` ends in ``"!over-budget"`` (`held_budget`). `best_heuristic`
raises `InfeasibleBudgetError` (with ``best_peak`` and ``.schedule``) instead.
"""

from solvercast.ir.engine import Timeline

from ._common import OVER_BUDGET, budget_bytes, held_budget
from .best import METHOD_ORDER, best_heuristic, run_heuristics
from .comm_priority import comm_priority_schedule, comm_scores
from .fill_idle import fill_idle
from .iterative_swap import SwapState, iterative_swap
from .list_scheduling import list_schedule, nondelay_schedule, upward_ranks

__all__ = [
    "METHOD_ORDER", "OVER_BUDGET", "SwapState", "Timeline", "best_heuristic", "comm_priority_schedule",
    "comm_scores", "fill_idle", "held_budget", "iterative_swap", "list_schedule", "nondelay_schedule", "budget_bytes", "run_heuristics",
    "upward_ranks",
]
