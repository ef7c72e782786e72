"""How `optimize` shares its ``time_limit`` among its phases, decided before any of them runs.

The plan depends only on the time limit, the task count, the compute-stream count and whether a solver
follows the heuristics, never on a clock: every rank of a job gets the same plan, so the same work
budget for the heuristics (`solvercast.heuristics.work`) and the same deterministic limit for the solver,
hence the same schedule. The wall clock only caps the solver (where it ends the search, the report says
so) and never decides anything else.

Fixed costs (extraction with the baseline's simulation, lowering, and the structural bounds when the limit
pays for them) are predicted per task
from measurements on the reference machine (2 cores; experiments/results/time_limit.md), and what is
left is shared: the heuristics may spend `HEURISTIC_SHARE` of it when a solver follows (all of it
otherwise), as a work budget; the solver gets the rest of it, less what the heuristics spent by the
work count (`solver_seconds`), which is as deterministic as the plan.
"""

from __future__ import annotations

from dataclasses import dataclass

from solvercast.ir.bounds import EXPOSURE_MAX_TASKS

#: seconds per task of extraction and the baseline's simulation on a graph of few tasks; per task it grows
#: with the graph (`graph_walk_seconds`). A fresh process on the quiet 2-core machine: 8.3e-5 at 10,000 tasks,
#: 1.17e-4 at 40,000; a process that has run other calls first (the time_limit experiment's, a user's
#: training script) is slower: 0.9-1.5 s at 10,000 tasks with one compute stream, 1.2-1.8 s with two (whose
#: baseline simulates memory over time). Set for the slow end (experiments/results/time_limit.md)
EXTRACT_SECONDS_PER_TASK = 1.0e-4
#: the graph size at which a Python walk over it costs twice per node what it costs on a small graph: its
#: dictionaries and objects outgrow the caches (most of extraction's lines run 4-9x slower for 4x the nodes from
#: 10,000 to 40,000, each alone linear; fitted to the fresh-process figures above)
GROWTH_TASKS = 64_000
#: seconds per task of lowering and the report: one compute stream; several (cross-stream edges get
#: anchor ops and events); measured 3.1-5.0e-5 and 7.2-8.8e-5 from 10,000 to 40,000 tasks
LOWERING_SECONDS_PER_TASK = (5.0e-5, 9.0e-5)
#: seconds per task of the structural bounds (sequencing, windows; the report's gap only): 2.9-4.9e-5
STRUCTURAL_BOUNDS_SECONDS_PER_TASK = 5.0e-5
#: seconds per task of the exposure bound, part of the structural bounds up to `bounds.EXPOSURE_MAX_TASKS` tasks
#: (its work grows with tasks x collectives x buffers: 0.15 s at 600 tasks on the loaded cores)
EXPOSURE_BOUND_SECONDS_PER_TASK = 2.5e-4
#: seconds every call costs whatever its size (imports on first use, the report)
FIXED_SECONDS = 0.05
#: seconds per graph node of handing back the original order (a copy of the graph, anchors stripped) on a
#: graph of few nodes, growing as extraction does: 2.0-3.5e-5 at 10,000 nodes, 2.4-5.2e-5 at 36,000-40,000
KEEP_ORIGINAL_SECONDS_PER_NODE = 2.2e-5
#: share of the time left after the fixed costs that the heuristics may spend when a solver follows
HEURISTIC_SHARE = 0.4
#: reference microseconds of heuristic work (`heuristics.work.PASS_COST_US`) bought by one second: the
#: reference costs were measured on a loaded machine, so one second pays for about one million
WORK_PER_SECOND = 1.0e6
#: below this many seconds a solver is not started (model building alone takes longer)
MIN_SOLVER_SECONDS = 0.05
#: seconds per task of building a whole-graph CP-SAT model, which cannot be interrupted (0.55 s at 3,000
#: tasks, 2.2 s at 10,000): a solver is started only with twice that
SOLVER_BUILD_SECONDS_PER_TASK = 2.2e-4


@dataclass(frozen=True)
class TimePlan:
    time_limit: float
    fixed_seconds: float  # predicted extraction + lowering + report
    lowering_seconds: float  # the part of it after the solver: lowering and the report
    heuristic_seconds: float  # the heuristics' share, as a work budget: `heuristic_work`
    left_seconds: float  # the time after the fixed costs, for heuristics and solver
    solver_follows: bool
    # the structural bounds are computed (and counted in the fixed costs) only when the limit pays for
    # them and leaves as much again for the search: they sharpen the report, not the schedule
    structural_bounds: bool = True
    num_tasks: int = 0

    @property
    def heuristic_work(self) -> float:
        """Reference microseconds of heuristic work (`heuristics.work.WorkBudget.limit`)."""
        return self.heuristic_seconds * WORK_PER_SECOND

    def solver_seconds(self, heuristic_work_spent: float) -> float:
        """The solver's deterministic limit once the heuristics have spent ``heuristic_work_spent``
        (reference microseconds); 0: no solver (also when what is left cannot pay twice for building its
        model)."""
        if not self.solver_follows:
            return 0.0
        seconds = self.left_seconds - heuristic_work_spent / WORK_PER_SECOND
        least = max(MIN_SOLVER_SECONDS, 2 * SOLVER_BUILD_SECONDS_PER_TASK * self.num_tasks)
        return seconds if seconds >= least else 0.0


def graph_walk_seconds(per_node: float, num_nodes: int) -> float:
    """Seconds of a Python walk over a graph that costs ``per_node`` a node on a small graph: the cost per
    node grows with the graph (`GROWTH_TASKS`)."""
    return per_node * num_nodes * (1 + num_nodes / GROWTH_TASKS)


def plan_time(time_limit: float, num_tasks: int, compute_streams: int, solver_follows: bool) -> TimePlan:
    """Share ``time_limit`` among the phases of one `optimize` call (see the module doc)."""
    lowering = FIXED_SECONDS + num_tasks * LOWERING_SECONDS_PER_TASK[compute_streams > 1]
    fixed = lowering + graph_walk_seconds(EXTRACT_SECONDS_PER_TASK, num_tasks)
    bounds = num_tasks * STRUCTURAL_BOUNDS_SECONDS_PER_TASK
    if num_tasks <= EXPOSURE_MAX_TASKS:
        bounds += num_tasks * EXPOSURE_BOUND_SECONDS_PER_TASK
    structural = time_limit - fixed >= 2 * bounds
    if structural:
        fixed += bounds
    left = max(0.0, time_limit - fixed)
    return TimePlan(time_limit=time_limit, fixed_seconds=fixed, lowering_seconds=lowering,
                    heuristic_seconds=left * HEURISTIC_SHARE if solver_follows else left, left_seconds=left,
                    solver_follows=solver_follows, structural_bounds=structural, num_tasks=num_tasks)


def analysis_seconds(num_nodes: int) -> float:
    """Predicted seconds of the least an analysed call does: read the graph (extraction and the baseline's
    simulation) and hand back a copy of it in its original order."""
    return FIXED_SECONDS + graph_walk_seconds(EXTRACT_SECONDS_PER_TASK + KEEP_ORIGINAL_SECONDS_PER_NODE, num_nodes)


def can_analyse(time_limit: float, num_nodes: int) -> bool:
    """Whether ``time_limit`` pays for `analysis_seconds`; when it does not, `optimize` returns the module
    untouched rather than late. Decided from the node count alone: the same on every rank."""
    return analysis_seconds(num_nodes) <= time_limit
