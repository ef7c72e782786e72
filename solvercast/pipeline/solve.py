"""One extracted graph under one memory budget: the time plan, the heuristics, the chosen method, lowering,
and the report (`optimize_extracted`); `optimize` and `pareto` are built on it."""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch.fx as fx

from solvercast.ir.bounds import lower_bounds
from solvercast.ir.budget import resolve_budget
from solvercast.errors import InfeasibleBudgetError, SolvercastError
from solvercast.fx.extract import graph_name
from solvercast.fx.lower import lower, strip_anchors
from solvercast.gc_paused import gc_paused
from solvercast.graph.nodes import schemaless_ops, waits_on_inputs
from solvercast.heuristics import best_heuristic
from solvercast.heuristics.work import WorkBudget, work_budget
from solvercast.pipeline.extracted import Extracted
from solvercast.pipeline.methods import BY_NAME, Kind, names
from solvercast.ir.problem import Problem, collective_order_value
from solvercast.pipeline.report import Report
from solvercast.ir.schedule import Schedule
from solvercast.ir.simulate import SimResult, simulate, validate
from solvercast.runtime.visualize import plot_schedules, write_chrome_trace
from solvercast.pipeline.time_plan import TIME_PLAN_TUNING, TimePlan, TimePlanTuning, analysis_seconds, plan_time
from solvercast.pipeline.tuning import DEFAULT_TUNING, Tuning
from solvercast.solvers.result import SolveResult

#: `optimize`'s methods: the registry's selectable entries (`solvercast.pipeline.methods`)
METHODS = names(Kind.SOLVER, Kind.BEST, Kind.HEURISTIC, Kind.ORIGINAL, selectable=True)
# auto: a monolithic CP-SAT model up to this many tasks (measured: it still improves on the heuristic at
# 3,000 tasks and finds nothing at 10,000: experiments/results/scale.md); beyond, placement then windows
AUTO_CPSAT_MAX_TASKS = 4000


@dataclass
class OptimizeResult:
    # the optimized, lowered module (the input is untouched); the input itself when the time limit could
    # not pay for reading it (``report.analysed`` False: then schedule, problem and simulations are None)
    gm: fx.GraphModule
    schedule: Schedule | None
    report: Report
    problem: Problem | None
    baseline: SimResult | None
    optimized: SimResult | None
    frontier: object = None  # `solvercast.pipeline.pareto.Frontier` when several memory budgets were given
    # the rewrite kinds' choices that rewrote the graph, by name, in the order they ran
    # (`solvercast.pipeline.rewrite_search.RewriteChoice`): then ``problem`` and ``schedule`` are the rewritten
    # graph's, ``baseline`` the input graph's original order, of ``baseline_problem``
    rewrites: dict = field(default_factory=dict)
    baseline_problem: Problem | None = None

    @property
    def buckets(self):
        """The bucket search's choice (`solvercast.pipeline.buckets.BucketChoice`) where it merged some."""
        return self.rewrites.get("buckets")

    @property
    def decomposition(self):
        """The decomposition search's choice (`solvercast.pipeline.decompose.DecomposeChoice`) where kept."""
        return self.rewrites.get("decomposition")

    @property
    def rewritten(self) -> fx.GraphModule | None:
        """The rewritten graph ``schedule`` orders (the last rewrite's), or None without rewrites."""
        return list(self.rewrites.values())[-1].gm if self.rewrites else None

    def _runs(self) -> dict:
        baseline = self.baseline if self.baseline_problem is None else (self.baseline_problem, self.baseline)
        return {"baseline": baseline, "optimized": self.optimized}

    def _members(self) -> dict:
        return {} if self.buckets is None else self.buckets.launch_members()

    def _require_analysis(self) -> None:
        if not self.report.analysed:
            raise SolvercastError(f"nothing to draw: {self.report.fallback}")

    def save_trace(self, path: str) -> None:
        """The predicted baseline and optimized schedules as a Chrome trace (Perfetto, chrome://tracing)."""
        self._require_analysis()

        write_chrome_trace(path, self.problem, self._runs(), memory_budget=self.report.memory_budget,
                           members=self._members())

    def plot(self, path: str) -> None:
        """A PNG: Gantt chart per stream (baseline above, optimized below) and memory against the budget."""
        self._require_analysis()
        plot_schedules(path, self.problem, self._runs(), memory_budget=self.report.memory_budget,
                       frontier=self.frontier, members=self._members())


def check_arguments(method: str, time_limit: float, preserve_collective_order: bool | str = True) -> None:
    """Raises ValueError for an unknown method, a time limit that is not > 0, or a collective order that is
    none of True / "global", "group", False / "free" (`InvalidProblemError`, a ValueError)."""
    if preserve_collective_order != "auto":  # `solvercast.pipeline.api.collective_order` resolves it
        collective_order_value(preserve_collective_order)
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    if isinstance(time_limit, bool) or not isinstance(time_limit, (int, float)) or not time_limit > 0:
        raise ValueError(f"time_limit must be > 0 seconds, got {time_limit!r}")


@gc_paused()  # also for `solvercast.pipeline.pareto`, which calls it once per budget
def optimize_extracted(gm: fx.GraphModule, extracted: Extracted, time_limit: float = 10.0,
                       memory_budget: int | float | None = None, method: str = "auto", deterministic: bool = True,
                       *, started: float | None = None, cost_model=None,
                       progress: Callable[[str], None] | None = None,
                       warm_starts: Sequence[Schedule] = (), tuning: Tuning | None = None,
                       must_agree: bool = False, spent_seconds: float = 0.0,
                       least_heuristic_seconds: float = 0.0) -> OptimizeResult:
    """`optimize` from an `Extracted` graph (``gm`` is the graph it came from): the rest of the call, under
    one memory budget. ``started``: the `time.perf_counter` reading the ``time_limit`` counts from (the
    call's start, extraction included; default now). ``warm_starts``: schedules of this problem (another
    budget's results: `solvercast.pipeline.pareto`) that compete with the heuristics for the warm start where they
    hold this budget; a solver or the best-heuristic method then returns one of them when nothing beats it.
    ``tuning``: the time plan's and the solvers' records (`solvercast.pipeline.tuning.Tuning`; None: the shipped
    `DEFAULT_TUNING`). ``must_agree``: the caller needs the schedule the same on every rank whatever the graph
    (it chooses between solves by their steps); deterministic, the wall clock then ends a search only far past
    the limit, as where `schedules_must_agree`. ``spent_seconds``: the part of ``time_limit`` the caller's
    earlier phases took (deterministic: their counted work, the same on every rank): the time plan shares
    what is left; ``least_heuristic_seconds``: the heuristics' share is at least this (a rewrite search judged
    the graph with that much: its step is then reached again)."""
    tuning = DEFAULT_TUNING if tuning is None else tuning
    check_arguments(method, time_limit)
    requested = method
    start_all = time.perf_counter() if started is None else started
    agree = deterministic and (must_agree or schedules_must_agree(extracted.problem))
    # the wall clock's cap on every search; the counted limits fit in ``time_limit`` on a machine as fast as
    # the time plan's records
    deadline = start_all + time_limit * (tuning.time_plan.agreeing_wall_clock_factor if agree else 1.0)
    clock = time.perf_counter()

    def tell(msg: str) -> None:  # every progress line says how much of the limit is left
        progress(f"{msg} [{max(0.0, start_all + time_limit - time.perf_counter()):.1f} s of {time_limit:.3g} s left]")

    say = _quiet if progress is None else tell

    phases: dict[str, float] = {}

    def phase(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        phases[name] = phases.get(name, 0.0) + now - clock
        clock = now

    problem, original, baseline = extracted.problem, extracted.original, extracted.baseline
    if started is not None:  # this call extracted: charge it
        phases["extract"] = extracted.seconds
    budget = resolve_budget(memory_budget, lambda: baseline.peak_memory, default=baseline.peak_memory)
    problem = problem.with_budget(budget)
    if method == "auto":
        method = "cpsat" if problem.num_tasks <= AUTO_CPSAT_MAX_TASKS else "cpsat-windows"
    plan = plan_time(max(0.0, time_limit - spent_seconds), problem.num_tasks, problem.machine.compute_streams,
                     solver_follows=BY_NAME[method].kind == Kind.SOLVER, tuning=tuning.time_plan,
                     build_seconds_per_task=tuning.cpsat.build_seconds_per_task)
    if plan.heuristic_seconds < least_heuristic_seconds:
        plan = dataclasses.replace(plan, heuristic_seconds=least_heuristic_seconds)
    bounds = lower_bounds(problem, structural=plan.structural_bounds)  # the report's gap only
    phase("extract")
    say(f"extracted {problem.num_tasks} tasks; baseline makespan {baseline.makespan / 1e3:.1f} us, "
        f"peak {baseline.peak_memory} B, budget {'none' if budget is None else f'{budget} B'}")

    # a method asked for by name runs (an experiment compares it; the MILP refuses what it cannot model)
    at_bound = bounds.makespan if requested == "auto" else None
    schedule, solver_info = _solve(problem, method, plan, deadline, deterministic, say, phase, baseline, at_bound,
                                   warm_starts, tuning)
    if agree:
        solver_info["time_plan"]["wall_clock_cap_seconds"] = round(deadline - start_all, 3)
    if method != requested:
        solver_info["auto_choice"] = method

    def is_original(s: Schedule) -> bool:
        return s.order == original.order and not s.streams

    optimized = baseline if is_original(schedule) else validate(problem, schedule, memory_budget=sys.maxsize)
    fallback = solver_info.get("fallback")
    if optimized.makespan >= baseline.makespan and (budget is None or baseline.peak_memory <= budget):
        if not is_original(schedule):
            fallback = (fallback + "; " if fallback else "") + "no method beat the original order: kept it"
        schedule, optimized = original, baseline
        solver_info["method"] = "original"
    solver_info["fallback"] = fallback
    solver_info["schemaless_ops"] = schemaless_ops(gm.graph)
    solver_info["earlier_collectives"] = [n.name for n in waits_on_inputs(gm.graph)]
    if hasattr(cost_model, "coverage"):  # measured costs say how many ops fell back to the model
        solver_info["costs"] = cost_model.coverage(gm)

    if is_original(schedule):  # what lowering builds without reordering: the input, anchors and dead code gone
        out_gm = strip_anchors(gm)
    else:
        say(f"lowering {solver_info['method']}'s schedule")
        out_gm = lower(gm, problem, schedule, check=False)
    phase("lower")
    phases["total"] = time.perf_counter() - start_all
    report = Report.build(problem, baseline, optimized, bounds, budget, schedule, solver_info, phases, time_limit)
    return OptimizeResult(gm=out_gm, schedule=schedule, report=report, problem=problem, baseline=baseline,
                          optimized=optimized)


def unanalysed(gm: fx.GraphModule, num_nodes: int, time_limit: float, started: float, progress,
               tuning: TimePlanTuning = TIME_PLAN_TUNING) -> OptimizeResult:
    """`optimize` when ``time_limit`` cannot pay for reading ``gm``: ``gm`` itself, and a report that says
    so (`Report.unanalysed`); no problem, schedule or simulation."""
    report = Report.unanalysed(graph_name(gm), num_nodes, analysis_seconds(num_nodes, tuning), time_limit,
                               {"total": round(time.perf_counter() - started, 4)})
    if progress is not None:
        progress(report.fallback)
    return OptimizeResult(gm=gm, schedule=None, report=report, problem=None, baseline=None, optimized=None)


def _quiet(msg: str) -> None:
    """`optimize`'s progress when nobody listens."""


def _solve(problem: Problem, method: str, plan: TimePlan, deadline: float, deterministic: bool, say,
           phase, baseline: SimResult, lower_bound: int | None = None,
           warm_starts: Sequence[Schedule] = (), tuning: Tuning = DEFAULT_TUNING) -> tuple[Schedule, dict]:
    """The chosen method's schedule (always within budget) and what happened. The heuristics run under
    the plan's work budget (``baseline``: the original order's simulation, which they need not repeat);
    the solver gets the plan's deterministic time, capped by the wall clock left before ``deadline``
    (less the predicted lowering). A solver is not run when the best heuristic's makespan is at
    ``lower_bound`` (a makespan no schedule beats): it is optimal already. A schedule of ``warm_starts``
    that holds the budget and beats the best heuristic replaces it as the warm start. ``tuning`` goes to the
    solver."""

    info: dict = {"method": method, "time_plan": plan.as_dict()}
    budget = problem.machine.memory_budget
    entry = BY_NAME[method]
    work = WorkBudget(limit=plan.heuristic_work)
    info["heuristics_cut"] = work.cut
    if entry.kind in (Kind.ORIGINAL, Kind.HEURISTIC):
        with work_budget(work):
            schedule = entry.run(problem, memory_budget=budget)
        if entry.kind == Kind.HEURISTIC:
            phase("heuristics")
        return _within_budget(problem, schedule, budget), info

    use_solver = entry.kind == Kind.SOLVER
    warm = _warm_start(problem, baseline, work, use_solver, say, warm_starts)
    hint, hint_error = warm.schedule, warm.error
    phase("heuristics")
    info["heuristic"] = hint.method if hint is not None else None
    if hint is not None and use_solver and lower_bound is not None and warm.makespan <= lower_bound:
        # synthetic 1,000 tasks, budget 1.0: nondelay at the compute bound, and CP-SAT spent 1.2 s to keep it
        info["fallback"] = f"the warm start ({hint.method}) reaches a lower bound: it is optimal, no solver run"
        info["method"] = hint.method
        return hint, info

    wall_left = deadline - time.perf_counter() - plan.lowering_seconds
    # deterministic: the plan's time, the same on every rank; else whatever the wall clock leaves
    solver_time = plan.solver_seconds(work.spent) if deterministic else wall_left
    info["time_plan"].update(heuristic_work_spent=round(work.spent), solver_seconds=round(solver_time, 3))
    least = plan.tuning.min_solver_seconds
    if not use_solver or solver_time < least or wall_left < least:
        if hint is None:
            raise hint_error
        if use_solver and deterministic and solver_time >= least:  # the clock, not the plan, left no time
            info["fallback"] = ("the wall clock left no time for the solver; used the best heuristic: other ranks "
                                "may get another schedule")
        elif use_solver:
            info["fallback"] = "no time left for the solver; used the best heuristic"
        info["method"] = hint.method
        return hint, info

    if hint is None and entry.needs_hint:
        raise hint_error  # reduced models keep parts of a heuristic schedule: they need one
    try:
        res = entry.run(problem, hint, solver_time, deterministic, say, deadline=deadline - plan.lowering_seconds,
                        tuning=tuning)
    except InfeasibleBudgetError as e:
        if e.best_peak is None and hint_error is not None:  # the solver's proof: the heuristics' smallest peak
            e.best_peak = hint_error.best_peak
        raise
    phase("solve")
    return _solver_outcome(problem, method, res, warm, deterministic, info)


@dataclass(frozen=True)
class _WarmStart:
    """The solver's warm start: ``schedule`` the best heuristic's, or a warm start's that beats it (None: none
    holds the budget), ``sim`` its simulation where it was needed, ``error`` why the heuristics found none."""
    schedule: Schedule | None
    sim: SimResult | None
    error: InfeasibleBudgetError | None

    @property
    def makespan(self) -> int | None:
        return None if self.sim is None else self.sim.makespan


def _warm_start(problem: Problem, baseline: SimResult, work: WorkBudget, use_solver: bool, say,
                warm_starts: Sequence[Schedule]) -> _WarmStart:
    """The best heuristic's schedule under ``work`` (``baseline``: the original order's simulation), replaced
    by a schedule of ``warm_starts`` that holds the budget and beats it."""
    budget = problem.machine.memory_budget
    say("running heuristics")
    with work_budget(work):
        try:
            hint = best_heuristic(problem, memory_budget=budget, original_simulation=baseline)
            hint_error = None
        except InfeasibleBudgetError as e:
            hint, hint_error = None, e
    # its simulation for the progress line, and to skip a solver that cannot beat it
    hint_sim = None if hint is None or not (use_solver or say is not _quiet or warm_starts) else simulate(problem, hint)
    hint_makespan = None if hint_sim is None else hint_sim.makespan
    if hint is not None and say is not _quiet:
        say(f"best heuristic: {hint.method}, makespan {hint_makespan / 1e3:.1f} us"
            + (f" (cut by the time limit: {', '.join(work.cut)})" if work.cut else ""))
    for start in warm_starts:  # a tighter budget's schedule holds this one: the frontier never gets worse
        sim = simulate(problem, start)
        better = hint is None or (sim.makespan, sim.peak_memory) < (hint_makespan, hint_sim.peak_memory)
        if (budget is None or sim.peak_memory <= budget) and better:  # as fast and smaller: the frontier's point
            hint, hint_sim, hint_error = start, sim, None
            hint_makespan = sim.makespan
            say(f"warm start: {hint.method}, makespan {hint_makespan / 1e3:.1f} us")
    return _WarmStart(hint, hint_sim, hint_error)


def _solver_outcome(problem: Problem, method: str, res: SolveResult, warm: _WarmStart, deterministic: bool,
                    info: dict) -> tuple[Schedule, dict]:
    """The solver's schedule, or the warm start where the solver found none or its schedule may differ
    between ranks, and ``info`` with what the solver did."""
    hint, hint_error = warm.schedule, warm.error
    info.update(solver=method, solver_status=res.status.value,
                solver_raw_status=res.solver_status, solver_objective=res.objective, solver_bound=res.bound,
                solver_message=res.message, solver_time=res.wall_time)
    if res.stats.get("stopped_by_wall_clock"):
        info["solver_message"] = ((res.message + "; ") if res.message else "") + (
            "the wall clock, not the deterministic limit, ended the search: other ranks may get another schedule")
        if deterministic and res.schedule is not None and hint is not None \
                and not _keeps_global_order(problem, res.schedule):
            # ranks whose searches stop at different points may launch collectives of two groups in opposite
            # orders and hang (docs/execution_rules.md, "Collective order"); the warm start, found under counted
            # work, is the same on every rank
            info["fallback"] = ("the wall clock ended the search, and its schedule launches collectives out of "
                                "their original order: kept the warm start, which every rank computes alike")
            info["method"] = hint.method
            return hint, info
    if res.schedule is None:
        if hint is None:
            budget = problem.machine.memory_budget
            raise InfeasibleBudgetError(
                f"no schedule within the budget of {budget} B was found; {hint_error}", best_peak=hint_error.best_peak)
        info["fallback"] = res.message
        info["method"] = hint.method
        return hint, info
    if res.status.value == "hint_kept":
        info["fallback"] = res.message
        info["method"] = hint.method if hint is not None else info["solver"]
    else:
        info["method"] = info["solver"]
    return res.schedule, info


def schedules_must_agree(problem: Problem) -> bool:
    """Whether ranks that compute different schedules of ``problem`` may hang: its collectives keep their
    order per process group only, and two or more groups launch asynchronous collectives, so two schedules
    may interleave the groups in opposite orders (docs/execution_rules.md, "Collective order"). With one
    group, or the global order, every schedule launches the collectives in one order."""
    if problem.collective_order != "group":
        return False
    return len({problem.tasks[c].group for c in problem.async_chain}) > 1


def _keeps_global_order(problem: Problem, schedule: Schedule) -> bool:
    """Whether ``schedule`` launches every comm op in its original order: safe whatever other ranks compute."""
    position = {t: i for i, t in enumerate(schedule.order)}
    return sorted(problem.comm_tasks, key=position.__getitem__) == list(problem.comm_tasks)


def _within_budget(problem: Problem, schedule: Schedule, budget: int | None) -> Schedule:
    peak = simulate(problem, schedule).peak_memory
    if budget is not None and peak > budget:
        raise InfeasibleBudgetError(
            f"{schedule.method or 'the schedule'} reaches a peak of {peak} B, over the budget of {budget} B",
            best_peak=peak)
    return schedule
