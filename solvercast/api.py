"""`optimize(gm)`: extract, solve, lower, and a report the user can trust."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch.fx as fx

from solvercast.bounds import Bounds, lower_bounds
from solvercast.errors import InfeasibleBudgetError, SolvercastError
from solvercast.extract import extract_problem
from solvercast.problem import Problem
from solvercast.report import Report
from solvercast.schedule import Schedule
from solvercast.simulate import SimResult, simulate

METHODS = ("auto", "cpsat", "milp", "heuristic", "list", "comm_priority", "original")
AUTO_CPSAT_MAX_TASKS = 3000  # beyond this a monolithic CP-SAT model rarely gets past presolve (notes/cpsat-scaling.md)


@dataclass
class OptimizeResult:
    gm: fx.GraphModule  # the optimized, lowered module (the input is untouched)
    schedule: Schedule
    report: Report
    problem: Problem
    baseline: SimResult
    optimized: SimResult

    def save_trace(self, path: str) -> None:
        """The predicted baseline and optimized schedules as a Chrome trace (Perfetto, chrome://tracing)."""
        from solvercast.visualize import write_chrome_trace

        write_chrome_trace(path, self.problem, {"baseline": self.baseline, "optimized": self.optimized},
                           memory_budget=self.report.memory_budget)

    def plot(self, path: str) -> None:
        """A PNG: Gantt chart per stream (baseline above, optimized below) and memory against the budget."""
        from solvercast.visualize import plot_schedules

        plot_schedules(path, self.problem, {"baseline": self.baseline, "optimized": self.optimized},
                       memory_budget=self.report.memory_budget)


def resolve_budget(memory_budget: int | float | None, original_peak: int) -> int | None:
    """bytes (int), ratio of the original order's peak (float), None (= 1.0), or math.inf (no budget:
    returns None)."""
    if memory_budget is None:
        return original_peak
    if isinstance(memory_budget, float) and math.isinf(memory_budget) and memory_budget > 0:
        return None
    if isinstance(memory_budget, bool) or not isinstance(memory_budget, (int, float)):
        raise ValueError(f"memory_budget must be bytes (int), a ratio (float) or None, got {memory_budget!r}")
    if memory_budget < 0:
        raise ValueError(f"memory_budget must be >= 0, got {memory_budget!r}")
    if isinstance(memory_budget, float):
        return int(memory_budget * original_peak)
    return memory_budget


def optimize(
    gm: fx.GraphModule,
    time_limit: float = 10.0,
    memory_budget: int | float | None = None,
    device="h100",
    compute_streams: int = 1,
    method: str = "auto",
    preserve_collective_order: bool = True,
    deterministic: bool = True,
    *,
    comm_ops=None,
    cost_fn=None,
    progress: Callable[[str], None] | None = None,
) -> OptimizeResult:
    """Reorder ``gm`` (and assign streams) to minimize its step time within a memory budget.

    ``memory_budget``: bytes (int), a ratio of the original order's peak
    (float), None (the default: 1.0, never worse than today) or ``math.inf``
    (no budget).

    Returns an `OptimizeResult`; ``res.gm`` is a new module. If no method
    beats the original order, the original order is returned and the report
    says so. Raises `InfeasibleBudgetError` (naming the smallest peak any
    method reached) when nothing fits the budget, `ExtractionError` for graphs
    without shape metadata, `ValueError` for bad arguments.
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    if time_limit <= 0:
        raise ValueError(f"time_limit must be > 0 seconds, got {time_limit!r}")
    say = progress or (lambda msg: None)
    clock = time.perf_counter()
    phases: dict[str, float] = {}

    def phase(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        phases[name] = phases.get(name, 0.0) + now - clock
        clock = now

    start_all = clock
    problem = extract_problem(gm, device=device, compute_streams=compute_streams, comm_ops=comm_ops,
                              cost_fn=cost_fn, preserve_collective_order=preserve_collective_order)
    original = Schedule.original(problem)
    baseline = simulate(problem, original)
    budget = resolve_budget(memory_budget, baseline.peak_memory)
    problem = problem.with_budget(budget)
    bounds = lower_bounds(problem)
    phase("extract")
    say(f"extracted {problem.num_tasks} tasks; baseline makespan {baseline.makespan / 1e3:.1f} us, "
        f"peak {baseline.peak_memory} B, budget {'none' if budget is None else f'{budget} B'}")

    schedule, solver_info = _solve(problem, method, time_limit - (time.perf_counter() - start_all), deterministic,
                                   say, phase)
    optimized = simulate(problem, schedule)
    fallback = solver_info.get("fallback")
    if optimized.makespan >= baseline.makespan and (budget is None or baseline.peak_memory <= budget):
        if schedule.order != original.order or schedule.streams:
            fallback = (fallback + "; " if fallback else "") + "no method beat the original order: kept it"
        schedule, optimized = original, baseline
    solver_info["fallback"] = fallback

    from solvercast.lower import lower

    out_gm = lower(gm, problem, schedule)
    phase("lower")
    phases["total"] = time.perf_counter() - start_all
    report = Report.build(problem, baseline, optimized, bounds, budget, schedule, solver_info, phases, time_limit)
    return OptimizeResult(gm=out_gm, schedule=schedule, report=report, problem=problem, baseline=baseline,
                          optimized=optimized)


def _solve(problem: Problem, method: str, time_left: float, deterministic: bool, say, phase) -> tuple[Schedule, dict]:
    """The chosen method's schedule (always within budget) and what happened."""
    from solvercast.heuristics import best_heuristic, comm_priority_schedule, list_schedule

    info: dict = {"method": method}
    budget = problem.machine.memory_budget
    if method == "original":
        return Schedule.original(problem), {**info, "method": "original"}
    if method in ("list", "comm_priority"):
        fn = list_schedule if method == "list" else comm_priority_schedule
        schedule = fn(problem) if method == "comm_priority" else fn(problem, budget)
        phase("heuristics")
        return _within_budget(problem, schedule, budget), {**info, "method": method}

    say("running heuristics")
    try:
        hint = best_heuristic(problem, memory_budget=budget)
        hint_error = None
    except InfeasibleBudgetError as e:
        hint, hint_error = None, e
    phase("heuristics")
    if hint is not None:
        say(f"best heuristic: {hint.method}, makespan {simulate(problem, hint).makespan / 1e3:.1f} us")
    info["heuristic"] = hint.method if hint is not None else None

    use_solver = method in ("cpsat", "milp") or (method == "auto" and problem.num_tasks <= AUTO_CPSAT_MAX_TASKS)
    if method == "auto" and not use_solver:
        info["fallback"] = (f"{problem.num_tasks} tasks is beyond the monolithic CP-SAT model "
                            f"({AUTO_CPSAT_MAX_TASKS}); used the best heuristic")
    if not use_solver or time_left <= 0.05:
        if hint is None:
            raise hint_error
        if use_solver:
            info["fallback"] = "no time left for the solver; used the best heuristic"
        info["method"] = hint.method
        return hint, info

    if method == "milp":
        from solvercast.solvers.milp import solve_milp

        say(f"solving with MILP ({time_left:.1f} s)")
        res = solve_milp(problem, time_limit=time_left, memory_budget=budget, hint=hint)
    else:
        from solvercast.solvers.cpsat import solve_cpsat

        say(f"solving with CP-SAT ({time_left:.1f} s{', deterministic' if deterministic else ''})")
        res = solve_cpsat(problem, time_limit=time_left, memory_budget=budget, hint=hint,
                          deterministic=deterministic, progress=say)
    phase("solve")
    info.update(solver=method if method != "auto" else "cpsat", solver_status=res.status.value,
                solver_raw_status=res.solver_status, solver_objective=res.objective, solver_bound=res.bound,
                solver_message=res.message, solver_time=res.wall_time)
    if res.stats.get("stopped_by_wall_clock"):
        info["solver_message"] = ((res.message + "; ") if res.message else "") + (
            "the wall clock, not the deterministic limit, ended the search: other ranks may get another schedule")
    if res.schedule is None:
        if hint is None:
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


def _within_budget(problem: Problem, schedule: Schedule, budget: int | None) -> Schedule:
    peak = simulate(problem, schedule).peak_memory
    if budget is not None and peak > budget:
        raise InfeasibleBudgetError(
            f"{schedule.method or 'the schedule'} reaches a peak of {peak} B, over the budget of {budget} B",
            best_peak=peak)
    return schedule


class SolvercastPass:
    """``optimize`` as a ``gm -> gm`` pass for pipelines (e.g. a torch.compile
    custom post-grad pass). Options are `optimize`'s keyword arguments. The
    last result is kept on ``.last_result``."""

    def __init__(self, **options):
        self.options = options
        self.last_result: OptimizeResult | None = None

    def __call__(self, gm: fx.GraphModule) -> fx.GraphModule:
        self.last_result = optimize(gm, **self.options)
        return self.last_result.gm
