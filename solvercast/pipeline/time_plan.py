"""How `optimize` shares its ``time_limit`` among its phases, decided before any of them runs.

The plan depends only on the time limit, the task count, the compute-stream count and whether a solver
follows the heuristics, never on a clock: every rank of a job gets the same plan, so the same work
budget for the heuristics (`solvercast.heuristics.work`) and the same deterministic limit for the solver,
hence the same schedule. The wall clock only caps the solver (where it ends the search, the report says
so) and never decides anything else.

Fixed costs (extraction with the baseline's simulation, lowering, and the structural bounds when the limit
pays for them) are predicted per task
from measurements on the reference machine (2 cores; experiments/results/time_limit.md), and what is
left is shared: the heuristics may spend `TimePlanTuning.heuristic_share` of it when a solver follows (all
of it otherwise), as a work budget; the solver gets the rest of it, less what the heuristics spent by the
work count (`solver_seconds`), which is as deterministic as the plan. The per-task costs and shares are a
`TimePlanTuning` record, passed in.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from solvercast.ir.bounds import EXPOSURE_MAX_TASKS
from solvercast.solvers.cpsat import CPSAT_TUNING


@dataclass(frozen=True)
class TimePlanTuning:
    """The predicted fixed costs of a call and the heuristics' share; vary with `dataclasses.replace`.
    Measured on the 2-core reference machine: experiments/results/time_limit.md."""

    #: seconds per task of extraction and the baseline's simulation on a small graph, set for the slow end: a
    #: process that has run other calls first is slower than a fresh one (results/tuning_notes.md#fixed-costs)
    extract_seconds_per_task: float = 1.0e-4
    #: the graph size at which a Python walk over it costs twice per node what it costs on a small graph (its
    #: objects outgrow the caches; fitted from 10,000 to 40,000 tasks, `graph_walk_seconds`)
    growth_tasks: int = 64_000
    #: seconds per task of lowering and the report: (one compute stream, several: cross-stream edges get anchor
    #: ops and events); measured 3.1-5.0e-5 and 7.2-8.8e-5 from 10,000 to 40,000 tasks
    lowering_seconds_per_task: tuple[float, float] = (5.0e-5, 9.0e-5)
    #: seconds per task of the structural bounds (sequencing, windows; the report's gap only): 2.9-4.9e-5 measured
    structural_bounds_seconds_per_task: float = 5.0e-5
    #: seconds per task of the exposure bound, part of the structural bounds up to `bounds.EXPOSURE_MAX_TASKS`
    #: tasks (its work grows with tasks x collectives x buffers: 0.15 s at 600 tasks on the loaded cores)
    exposure_bound_seconds_per_task: float = 2.5e-4
    #: seconds every call costs whatever its size (imports on first use, the report)
    fixed_seconds: float = 0.05
    #: seconds per graph node of handing back the original order (a copy of the graph, anchors stripped) on a
    #: small graph, growing as extraction does: 2.0-3.5e-5 at 10,000 nodes, 2.4-5.2e-5 at 36,000-40,000
    keep_original_seconds_per_node: float = 2.2e-5
    #: share of the time left after the fixed costs that the heuristics may spend when a solver follows
    heuristic_share: float = 0.4
    #: share of the time limit that trying bucket plans may spend (`solvercast.pipeline.buckets`), counted in
    #: heuristic work (deterministic: every rank tries the same plans) with each plan's extraction priced at
    #: `extract_seconds_per_task`; each kind's caps and the halving of buckets take parts of it
    bucket_share: float = 0.6
    #: seconds per task of writing a bucket plan's graph (every node copied, the buckets' fake values, the
    #: module's code), counted with its extraction: measured 1.1-2.0 s for the 10,000-task synthetic graph's
    #: greedy plan (10,335 tasks), where extraction takes 0.7-0.9 s
    bucket_write_seconds_per_task: float = 1.2e-4
    #: seconds per task of a bucket plan's problem built from the unbucketed one, without writing its graph
    #: (`solvercast.rewrites.bucket_problem`: how the search judges plans; only the kept one is written)
    bucket_merge_seconds_per_task: float = 2.0e-5
    #: seconds of pricing one bucket shape (`solvercast.rewrites.bucket_problem.BucketPricer`: the bucket written
    #: alone and extracted): measured 0.056 s a shape on bw_64_2d (30 shapes in 12 plans)
    bucket_price_seconds: float = 0.06
    #: PyTorch's overlap scheduler run on the graph, per node, its answer judged beside the search's plans
    #: (`solvercast.rewrites.pytorch_buckets.pytorch_overlap`): 0.5-1.0 ms a node on autoparallel's
    #: 5-16k-node graphs (public_graphs_built_plans.md's "PyTorch s")
    bucket_pytorch_seconds_per_task: float = 0.9e-3
    #: loading torch's passes (``torch._inductor.fx_passes``: 3-4.5 s on these machines), counted on every
    #: call whether or not this process has loaded them, so that every rank decides alike
    bucket_pytorch_seconds: float = 4.0
    #: share of the time limit that one bucket plan's heuristics may spend (a plan judged with more work
    #: scores better, so every plan of a search gets the same)
    bucket_plan_share: float = 0.03
    #: share of the time limit that trying collective-matmul decompositions may spend
    #: (`solvercast.pipeline.decompose`), counted as `bucket_share` is; it follows the bucket search and also
    #: gets the work that search left
    decompose_share: float = 0.25
    #: share of the time limit that one decomposition plan's heuristics may spend
    decompose_plan_share: float = 0.25 / 12
    #: seconds per task of writing a decomposition plan's graph (a fake value for every node it adds, chunks
    #: carried through pointwise work), counted with its extraction: measured 3.0 s for `fw_64_2d` at x4
    #: (12,235 tasks), where extraction takes 0.5 s
    decompose_write_seconds_per_task: float = 2.5e-4
    #: reference microseconds of heuristic work (`heuristics.work.PASS_COST_US`) bought by one second: the
    #: reference costs were measured on a loaded machine, so one second pays for about one million
    work_per_second: float = 1.0e6
    #: below this many seconds a solver is not started (model building alone takes longer)
    min_solver_seconds: float = 0.05
    #: where every rank must compute one schedule (deterministic, collectives of two or more groups free to
    #: interleave: `schedules_must_agree`), the wall clock ends a search only at this multiple of the limit:
    #: the counted limits decide, and a loaded rank runs longer instead of choosing another schedule (4 gloo
    #: ranks on 2 cores took up to 2x their limit; one rank cut by the clock hung the others)
    agreeing_wall_clock_factor: float = 3.0


#: the shipped values
TIME_PLAN_TUNING = TimePlanTuning()


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
    # what the plan was made with (not part of the report's `as_dict`)
    tuning: TimePlanTuning = field(default=TIME_PLAN_TUNING, repr=False, compare=False)
    build_seconds_per_task: float = field(default=CPSAT_TUNING.build_seconds_per_task, repr=False, compare=False)

    def as_dict(self) -> dict:
        """The plan's numbers, for the report (its tuning left out)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.repr}

    @property
    def heuristic_work(self) -> float:
        """Reference microseconds of heuristic work (`heuristics.work.WorkBudget.limit`)."""
        return self.heuristic_seconds * self.tuning.work_per_second

    def solver_seconds(self, heuristic_work_spent: float) -> float:
        """The solver's deterministic limit once the heuristics have spent ``heuristic_work_spent``
        (reference microseconds); 0: no solver (also when what is left cannot pay twice for building its
        model, `CpsatTuning.build_seconds_per_task`)."""
        if not self.solver_follows:
            return 0.0
        seconds = self.left_seconds - heuristic_work_spent / self.tuning.work_per_second
        least = max(self.tuning.min_solver_seconds, 2 * self.build_seconds_per_task * self.num_tasks)
        return seconds if seconds >= least else 0.0


def graph_walk_seconds(per_node: float, num_nodes: int, tuning: TimePlanTuning = TIME_PLAN_TUNING) -> float:
    """Seconds of a Python walk over a graph that costs ``per_node`` a node on a small graph: the cost per
    node grows with the graph (`TimePlanTuning.growth_tasks`)."""
    return per_node * num_nodes * (1 + num_nodes / tuning.growth_tasks)


def plan_time(time_limit: float, num_tasks: int, compute_streams: int, solver_follows: bool, *,
              tuning: TimePlanTuning = TIME_PLAN_TUNING,
              build_seconds_per_task: float = CPSAT_TUNING.build_seconds_per_task) -> TimePlan:
    """Share ``time_limit`` among the phases of one `optimize` call (see the module doc).
    ``build_seconds_per_task``: what building the solver's model costs (`CpsatTuning.build_seconds_per_task`)."""
    lowering = tuning.fixed_seconds + num_tasks * tuning.lowering_seconds_per_task[compute_streams > 1]
    fixed = lowering + graph_walk_seconds(tuning.extract_seconds_per_task, num_tasks, tuning)
    bounds = num_tasks * tuning.structural_bounds_seconds_per_task
    if num_tasks <= EXPOSURE_MAX_TASKS:
        bounds += num_tasks * tuning.exposure_bound_seconds_per_task
    structural = time_limit - fixed >= 2 * bounds
    if structural:
        fixed += bounds
    left = max(0.0, time_limit - fixed)
    return TimePlan(time_limit=time_limit, fixed_seconds=fixed, lowering_seconds=lowering,
                    heuristic_seconds=left * tuning.heuristic_share if solver_follows else left, left_seconds=left,
                    solver_follows=solver_follows, structural_bounds=structural, num_tasks=num_tasks, tuning=tuning,
                    build_seconds_per_task=build_seconds_per_task)


def analysis_seconds(num_nodes: int, tuning: TimePlanTuning = TIME_PLAN_TUNING) -> float:
    """Predicted seconds of the least an analysed call does: read the graph (extraction and the baseline's
    simulation) and hand back a copy of it in its original order."""
    return tuning.fixed_seconds + graph_walk_seconds(
        tuning.extract_seconds_per_task + tuning.keep_original_seconds_per_node, num_nodes, tuning)


def can_analyse(time_limit: float, num_nodes: int, tuning: TimePlanTuning = TIME_PLAN_TUNING) -> bool:
    """Whether ``time_limit`` pays for `analysis_seconds`; when it does not, `optimize` returns the module
    untouched rather than late. Decided from the node count alone: the same on every rank."""
    return analysis_seconds(num_nodes, tuning) <= time_limit
