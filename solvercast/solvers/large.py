"""Reduced CP-SAT models for graphs past what a monolithic model handles.

A monolithic model with memory stalls past a few hundred tasks on 2 cores
(shared/notes/cpsat-scaling.md). Two reductions of the same model, both
warm-started from the incumbent and accepting only improvements judged by
`simulate`:

* placement (`solve_model` with ``fixed_order``): compute tasks keep the
  incumbent's order and streams; only where collectives launch, where waits
  land (and views) is free.
* windows (`solve_model` with ``window``): large-neighbourhood search. Only a
  window of consecutive tasks (in program order) is modelled, the model's
  `Scope` (solvers/scope.py): what comes
  before it is constant, what comes after it is left out, so each model has a
  few hundred tasks whatever the graph's size. The window minimizes its own
  span, then the start times of its collectives and their launch points
  (``left_shift``, `common.shifted_tasks`; every start with several compute
  streams), and a window is kept when the whole schedule's makespan is no worse
  and those start earlier: progress
  that the next windows build on. Windows are centred on the places where the
  default stream sits idle (the only places a reorder can shorten a
  one-stream schedule), largest idle first, then slide over the rest. After a
  shorter schedule the queue starts over, the windows that kept the incumbent
  behind those that kept it fewer times (a window's count halves when an
  overlapping one gains): else every gain sends the search back to the same
  largest idle points, which the memory budget may hold where they are. A gain
  of earlier starts alone goes on with the pass. Windows that all keep the
  incumbent grow (``grow``), up to the whole graph, and start over at their
  first size if a shorter schedule was found since they last did.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from solvercast.ir.problem import Problem, Role
from solvercast.ir.schedule import Schedule
from solvercast.ir.simulate import SimResult, idle_points, simulate
from solvercast.solvers.cpsat import CPSAT_TUNING, CpsatTuning, solve_model
from solvercast.solvers.result import SolveResult, SolveStatus, potential


@dataclass(frozen=True)
class WindowTuning:
    """What windowed search plans besides each window's deterministic time; vary with `dataclasses.replace`."""

    #: planned seconds per window besides its deterministic time (building its model, checking its answer, the
    #: presolve of a window that ends early): at 0.025 windows that end early met the deadline, at 0.03 they
    #: end by the plan at 85-91% of the limit (results/cpsat_budgets.md, results/tuning_notes.md#window-overhead)
    overhead_seconds: float = 0.03
    #: a window is started only with this many planned seconds of search left for it
    min_window_seconds: float = 0.25


#: the shipped values
WINDOW_TUNING = WindowTuning()


def solve_placement(problem: Problem, hint: Schedule, time_limit: float, memory_budget: int | None = None,
                    **options) -> SolveResult:
    """CP-SAT with the compute order (and streams) of ``hint`` fixed; ``options``: `solve_model`'s."""
    fixed = {t for t, task in enumerate(problem.tasks) if task.role == Role.COMPUTE}
    return solve_model(problem, time_limit=time_limit, memory_budget=memory_budget, hint=hint, fixed_order=fixed,
                       **options)


def solve_placement_then_windows(problem: Problem, hint: Schedule, time_limit: float,
                                 memory_budget: int | None = None, *, deterministic: bool = True,
                                 progress: Callable[[str], None] | None = None,
                                 deadline: float | None = None, tuning: WindowTuning = WINDOW_TUNING,
                                 cpsat_tuning: CpsatTuning = CPSAT_TUNING) -> SolveResult:
    """A quarter of the time on the placement model, the rest on windowed
    search from its result. Returns the better of the two (the hint, with
    HINT_KEPT and both reasons, if neither improved). With ``deterministic``
    time, so every rank searches the same windows; ``deadline`` (a
    `time.perf_counter` reading) caps the call (``stats["stopped_by_wall_clock"]``
    says when it ended it). ``tuning``, ``cpsat_tuning``: the windows' and each model's (`WindowTuning`,
    `CpsatTuning`)."""
    say = progress or (lambda msg: None)
    deadline = time.perf_counter() + time_limit if deadline is None else deadline
    say(f"solving with CP-SAT, compute order fixed ({time_limit / 4:.1f} s)")
    placed = solve_placement(problem, hint, time_limit / 4, memory_budget, deterministic=deterministic,
                             progress=progress, deadline=deadline, tuning=cpsat_tuning)
    start = placed.schedule if placed.schedule is not None else hint
    spent = seconds_spent(placed, deterministic)
    say(f"windowed search ({time_limit - spent:.1f} s)")
    windows = solve_windows(problem, start, time_limit - spent, memory_budget, deterministic=deterministic,
                            progress=progress, deadline=deadline, tuning=tuning, cpsat_tuning=cpsat_tuning)
    if placed.stats.get("stopped_by_wall_clock"):  # the windows start from what the clock left: say so
        windows.stats["stopped_by_wall_clock"] = True
    if windows.status != SolveStatus.HINT_KEPT:
        return windows
    if placed.status != SolveStatus.HINT_KEPT and placed.schedule is not None:
        return placed
    return SolveResult(hint, SolveStatus.HINT_KEPT, windows.simulated, None, None,
                       placed.wall_time + windows.wall_time, "",
                       f"placement: {placed.message or placed.status.value}; {windows.message}", windows.stats)


def seconds_spent(res: SolveResult, deterministic: bool) -> float:
    """What a solve used of its time: its deterministic time in planned seconds (the same on every rank),
    or its wall time."""
    if deterministic and res.stats.get("deterministic_limit"):  # the share of its limit, in the seconds given
        return res.stats["seconds_given"] * min(1.0, res.stats["deterministic_time"] / res.stats["deterministic_limit"])
    return res.wall_time


def window_starts(problem: Problem, schedule: Schedule, sim: SimResult, size: int,
                  tried: Mapping[int, float] | None = None) -> list[int]:
    """Where windows begin: around each idle point (most idle first), then a slide with half overlap; with
    ``tried`` (start -> how often a window there kept the incumbent, halved whenever an overlapping window
    gained), the lowest first."""
    n = problem.num_tasks
    last = max(0, n - size)
    starts = [min(last, max(0, pos - size // 4)) for _, pos in idle_points(problem, schedule, sim)]
    starts += list(range(0, last + 1, max(1, size // 2)))
    seen, ordered = set(), []
    for s in starts:
        if s not in seen:
            seen.add(s)
            ordered.append(s)
    if tried is not None:
        ordered.sort(key=lambda s: tried.get(s, 0.0))  # stable: idle points first among equals
    return ordered


def solve_windows(problem: Problem, hint: Schedule, time_limit: float, memory_budget: int | None = None, *,
                  window: int = 200, per_window: float = 4.0, deterministic: bool = True,
                  progress: Callable[[str], None] | None = None,
                  deadline: float | None = None, bound: int = 0, grow: float | None = None,
                  tuning: WindowTuning = WINDOW_TUNING, cpsat_tuning: CpsatTuning = CPSAT_TUNING) -> SolveResult:
    """Large-neighbourhood search over windows of ``window`` tasks until ``time_limit``, or until the
    makespan reaches ``bound`` (a lower bound: nothing shorter exists).

    ``grow``: when every window of the current size has been tried since the last shorter schedule and time
    is left, windows grow by this factor (their seconds with them) and start over, up to the whole graph: a
    schedule no window of one size improves is a local optimum of that size only. After the whole graph they
    start over at ``window`` tasks if any of them found a shorter schedule since they last did, else the
    search ends. Without ``grow`` it ends once every window of ``window`` tasks has been tried since the
    last shorter schedule. ``tuning``: the windows' planned overhead and least seconds (`WindowTuning`);
    ``cpsat_tuning``: each window's model (`CpsatTuning`).

    Returns the best schedule found (the hint if nothing improved, with
    HINT_KEPT); ``stats`` records windows tried and improved, and the largest size tried.
    """
    if grow is not None and not grow > 1:
        raise ValueError(f"grow must be a factor above 1, got {grow!r}")
    say = progress or (lambda msg: None)
    started = time.perf_counter()
    best, best_sim = hint, simulate(problem, hint)
    hint_sim = best_sim
    tried = improved = 0
    # window start -> tries that kept the incumbent (at this size), halved whenever an overlapping window
    # gains (its tasks changed): a recomputed queue puts the windows that failed most behind the others
    fruitless: dict[int, float] = {}
    queue = window_starts(problem, best, best_sim, window)
    # time left, counted in planned seconds: the windows' deterministic time plus a fixed overhead each
    # (with ``deterministic``, so every rank tries the same windows), else in wall time
    left = time_limit - (0.0 if deterministic else time.perf_counter() - started)
    # the caller's deadline, when given, is the windows' only wall-clock cap (deterministic windows that run
    # slower than planned still end by their deterministic limits: see `solve_model`)
    deadline = started + time_limit if deadline is None else deadline
    stopped_by_wall = False
    base_window, base_seconds = window, per_window
    largest = window  # the largest size tried (windows start over at the base size after a cycle that gained)
    cycle_gained = False  # a lower makespan from a grown window since the windows last started at the base size
    while best_sim.makespan > bound:
        if not queue and (grow is None or (window >= problem.num_tasks and not cycle_gained)):
            break  # every window tried, none larger to try (or, grown to the whole graph, none gained since)
        if left - tuning.overhead_seconds < tuning.min_window_seconds:
            break
        if deadline - time.perf_counter() < 0.5:
            stopped_by_wall = deterministic
            break
        if not queue:  # grown only when a window of the new size will run
            if window >= problem.num_tasks:  # the gains of larger windows give the small ones new ground
                window, per_window, cycle_gained = base_window, base_seconds, False
            else:
                window, per_window = min(problem.num_tasks, max(window + 1, int(window * grow))), per_window * grow
            fruitless.clear()  # windows of the new size are new neighbourhoods
            queue = window_starts(problem, best, best_sim, window)
            say(f"  every window tried: windows of {window} tasks")
        lo = queue.pop(0)
        largest = max(largest, window)
        res = solve_model(problem, time_limit=min(per_window, left - tuning.overhead_seconds),
                          memory_budget=memory_budget, hint=best, window=(lo, lo + window), left_shift=True,
                          deterministic=deterministic, deadline=deadline, tuning=cpsat_tuning)
        stopped_by_wall |= bool(res.stats.get("stopped_by_wall_clock"))
        left -= seconds_spent(res, deterministic) + tuning.overhead_seconds
        tried += 1
        if res.status == SolveStatus.HINT_KEPT:
            fruitless[lo] = fruitless.get(lo, 0.0) + 1
        else:  # lower makespan, or the same with earlier starts
            shorter = res.simulated.makespan < best_sim.makespan
            cycle_gained |= shorter and window > base_window  # the base size has followed up its own
            best, best_sim = res.schedule, res.simulated
            improved += 1
            for start in [k for k in fruitless if abs(k - lo) < window]:
                fruitless[start] /= 2  # an overlapping window gained: its tasks changed, worth another try
            say(f"  window at {lo}: makespan {best_sim.makespan / 1e3:.1f} us, "
                f"shifted starts {potential(problem, best_sim, True)[1]}")
            # a shorter schedule moved the idle points: the windows start over, those that kept the incumbent
            # most behind the others. Earlier starts alone go on with the pass: starting over after each kept
            # the windows of one size busy re-trying what they had tried, and larger windows waited
            # (fsdp_tp 2 layers, 60 s: 4.6 s of 40-task windows after its last shorter schedule)
            if shorter:
                queue = window_starts(problem, best, best_sim, window, fruitless)
    wall = time.perf_counter() - started
    stats = {"windows_tried": tried, "windows_improved": improved, "window": largest,
             "stopped_by_wall_clock": stopped_by_wall, "seconds_left": max(0.0, left)}
    if best_sim.makespan >= hint_sim.makespan:  # earlier starts alone are no gain to the caller
        return SolveResult(hint, SolveStatus.HINT_KEPT, hint_sim, None, None, wall, "",
                           f"windowed search: no window of up to {largest} tasks lowered the makespan "
                           f"({tried} tried, {improved} moved starts earlier)", stats)
    best = Schedule(order=best.order, streams=best.streams, method="cpsat-windows")
    return SolveResult(best, SolveStatus.FEASIBLE, best_sim, None, None, wall, "",
                       f"windowed search: {improved} of {tried} windows improved", stats)
