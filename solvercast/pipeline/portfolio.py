"""`solve_cpsat`: the portfolio of phases that `optimize`'s "cpsat" method runs, in order.

On a whole graph with one compute stream, with deterministic time, `solve_cpsat` runs, top to bottom:

1. the cut walk, started beside everything else on a second core (solvers/cuts.py);
2. the exact prefix search, on small graphs (solvers/prefixes.py): a proof ends the call;
3. the whole CP-SAT model (`solvers.cpsat.solve_model`): a proof, or a makespan at a lower bound, ends it;
4. exact windows (small graphs), then CP-SAT's windows (`solvers.large.solve_windows`);
5. late exact windows around the stalls (larger graphs);
6. moves of later compute tasks into the stalls left (`heuristics.fill_idle`);
7. the prefix search again, in the counted seconds the windows left (small graphs);
8. the cut bound: the walk's result, or a walk here in the seconds left.

Every phase's share of the time is a field of `PortfolioTuning` (pipeline/tuning.py), passed in with the
other records as one `Tuning`. Anything else (several compute streams, a window, wall-clock time) is one
model: `solve_model`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from solvercast.errors import InvalidScheduleError
from solvercast.heuristics import fill_idle
from solvercast.heuristics.work import pass_cost
from solvercast.ir.bounds import lower_bounds
from solvercast.ir.problem import Problem, Role
from solvercast.ir.schedule import Schedule
from solvercast.ir.simulate import SimResult, simulate, validate
from solvercast.pipeline.tuning import DEFAULT_TUNING, PORTFOLIO_TUNING, PortfolioTuning, Tuning
from solvercast.solvers.common import serial_horizon
from solvercast.solvers.cpsat import solve_model
from solvercast.solvers.cuts import CUT_EXPANSIONS_PER_SECOND, BackgroundCutBound, cut_bound
from solvercast.solvers.large import seconds_spent, solve_windows, window_starts
from solvercast.solvers.prefixes import improve_by_windows, solve_prefixes
from solvercast.solvers.result import SolveResult, SolveStatus


def whole_model_units(problem: Problem, tuning: PortfolioTuning = PORTFOLIO_TUNING) -> float:
    """The deterministic units `solve_cpsat` gives the whole model at most (`PortfolioTuning.whole_model_units`,
    scaled down past `PortfolioTuning.whole_model_full_tasks`)."""
    return tuning.whole_model_units * min(1.0, tuning.whole_model_full_tasks / problem.num_tasks)


def solve_cpsat(
    problem: Problem,
    time_limit: float = 10.0,
    memory_budget: int | None = None,
    hint: Schedule | None = None,
    *,
    deterministic: bool = True,
    polish: bool = True,
    deadline: float | None = None,
    progress: Callable[[str], None] | None = None,
    tuning: Tuning = DEFAULT_TUNING,
    **options,
) -> SolveResult:
    """Solve ``problem`` with CP-SAT, warm-started from ``hint``: `solve_model` of the whole graph, then,
    with ``polish`` (a deterministic solve of the whole graph on one compute stream), windowed search
    (`large.solve_windows`) from what the model found when it ended without a proof.

    The model gets ``whole_model_share`` of ``time_limit`` (at most `whole_model_units`); a proof, a makespan
    at a lower bound, or the lack of a solution ends the call there; otherwise windows of ``polish_window``
    tasks around the idle points take the rest, growing by ``polish_growth`` whenever every window of a size
    has been tried without a gain (counted in deterministic time, so every run gives the same schedule; they
    stop at a lower bound) and the better schedule is returned, FEASIBLE when the windows
    improved it (OPTIMAL when they reached a lower bound), with the model's bound; ``stats["polish"]`` says
    what the windows did. On graphs too large for the prefix search, exact windows around the stalls follow
    (``late_exact_share`` of the limit, ``stats["late_exact_windows"]``); then moves of later compute tasks
    into the stalls left (`heuristics.fill_idle`, ``fill_idle_share`` of the limit, ``stats["fill_idle"]``):
    both on top of the windows' time, counted, and capped by the deadline. On graphs of up to
    ``prefix_max_tasks`` tasks that are not views, the exact prefix search (solvers/prefixes.py) runs first,
    with ``prefix_share`` of the limit, and again with the counted seconds the windows leave when they are
    more, below the makespan found (``stats["prefix_search"]``): when it ends, the result is OPTIMAL. From
    the start, cut bounds (solvers/cuts.py) are walked on a second core until the deadline, or after
    everything else where there is none (``stats["cut_bound"]``): OPTIMAL when one proves the makespan, the
    schedule unchanged. The shares named are `PortfolioTuning`'s (``tuning.portfolio``); ``tuning`` also
    carries each model's, the windows' and the prefix search's records. Other options and what the call
    returns: `solve_model`."""
    whole = (options.get("window") is None and not options.get("fixed_order") and not options.get("left_shift"))
    if not (polish and deterministic and whole and problem.machine.compute_streams == 1):
        return solve_model(problem, time_limit, memory_budget, hint, deterministic=deterministic, deadline=deadline,
                           progress=progress, tuning=tuning.cpsat, **options)
    return _Portfolio(problem, time_limit, memory_budget, hint, deadline, progress, tuning, options).run()


@dataclasses.dataclass(frozen=True)
class _Reached:
    """The best schedule the phases after the whole model reached: ``schedule`` (None: still the model's),
    ``sim`` its simulation, ``seconds_left`` the counted seconds the windows left."""
    schedule: Schedule | None
    sim: SimResult
    seconds_left: float


@dataclasses.dataclass(frozen=True)
class _Windows:
    """What the windows made of the model's schedule: ``exact`` the exact windows' stats, ``polished`` CP-SAT's
    windows' result (None: not run), ``reached`` the best schedule after both."""
    exact: dict
    polished: SolveResult | None
    reached: _Reached


class _Portfolio:
    """`solve_cpsat`'s phases on a whole graph with one compute stream, with deterministic time, one method
    per phase; ``time_limit`` is the limit less the counted seconds of the first prefix search."""

    def __init__(self, problem: Problem, time_limit: float, memory_budget: int | None, hint: Schedule | None,
                 deadline: float | None, progress: Callable[[str], None] | None, tuning: Tuning, options: dict):
        self.problem, self.time_limit, self.memory_budget, self.hint = problem, time_limit, memory_budget, hint
        self.deadline, self.progress, self.tuning, self.options = deadline, progress, tuning, options
        self.share = tuning.portfolio
        self.per_second = tuning.prefixes.expansions_per_second  # the prefix search's counted expansions
        self.started = started = time.perf_counter()
        self.ends = started + time_limit if deadline is None else deadline  # the windows' wall cap (see solve_model)
        self.budgeted = problem if memory_budget is None else problem.with_budget(memory_budget)
        self.small = _prefix_search_fits(problem, self.share)
        self.searched = 0.0  # counted seconds of a prefix search that did not end

    def run(self) -> SolveResult:
        walk = self._start_cut_walk()
        try:
            proof = self._search_prefixes()
            if proof is not None:
                return proof
            first = self._solve_whole_model()
            if first.status not in (SolveStatus.FEASIBLE, SolveStatus.HINT_KEPT):
                return first  # proven (optimal, infeasible) or nothing found
            bound = max(first.bound or 0, lower_bounds(self.problem).makespan)
            if first.makespan <= bound:
                return first  # at a bound already (a scaled model proves nothing of the problem: synthetic 300 tasks)
            windows = self._polish_by_windows(first, bound)
            reached, late = self._late_exact_windows(first, bound, windows.reached)
            reached, fills = self._fill_stalls(first, bound, reached)
            found = self._result(first, bound, windows, late, fills, reached)
            # 7. the prefix search again, below the makespan found (a search with no more time than the first
            # would end where it did)
            if reached.seconds_left > self.searched:
                found = _prove_with_prefixes(self.problem, found, reached.seconds_left, self.memory_budget, self.ends,
                                             self.progress, self.started, self.tuning)
            # 8. the cut bound
            return _bound_by_cuts(self.budgeted, found, self.ends, self.progress, self.started, walk, self.share)
        finally:
            if walk is not None:
                walk.stop()

    def _start_cut_walk(self) -> BackgroundCutBound | None:
        """1. The cut walk on another core from the start (the schedule never waits for it; its pruning bound
        need not be the final makespan: any bound it proves holds): simple_fsdp 1 layer's proof needs 6-8 s of
        it (results/cut_bounds.md)."""
        share = self.share
        # a deadline may be past
        beside = share.cut_walk_beside and self.ends - time.perf_counter() >= share.cut_min_seconds
        if not beside:
            return None
        return BackgroundCutBound.start(self.budgeted, _walk_upper(self.budgeted, self.hint), self.ends)

    def _search_prefixes(self) -> SolveResult | None:
        """2. The exact prefix search, on small graphs: its proof, else None, its counted seconds taken from
        the time limit."""
        if not self.small:
            return None
        exact = solve_prefixes(self.problem, self.time_limit * self.share.prefix_share, self.memory_budget, self.hint,
                               deterministic=True, deadline=self.ends, progress=self.progress,
                               tuning=self.tuning.prefixes)
        if exact.status == SolveStatus.OPTIMAL:
            return dataclasses.replace(exact, stats=dict(exact.stats, prefix_search=_searched(exact)),
                                       wall_time=time.perf_counter() - self.started)
        self.searched = exact.stats["expansions"] / self.per_second
        self.time_limit -= self.searched
        return None

    def _solve_whole_model(self) -> SolveResult:
        """3. The whole model."""
        return solve_model(self.problem, self.time_limit * self.share.whole_model_share, self.memory_budget, self.hint,
                           deterministic=True, deadline=self.deadline, progress=self.progress,
                           max_units=whole_model_units(self.problem, self.share), tuning=self.tuning.cpsat,
                           **self.options)

    def _polish_by_windows(self, first: SolveResult, bound: int) -> _Windows:
        """4. On small graphs exact windows first (cheap where CP-SAT's are weak: fsdp_tp 1 layer 155.3 -> 142.5
        us in 0.3 s), then CP-SAT's windows from what they reached."""
        problem, share, per_second, tuning = self.problem, self.share, self.per_second, self.tuning
        left = self.time_limit - seconds_spent(first, True)
        expansions = int(left * share.exact_windows_share * per_second) if self.small else 0
        start, exact = improve_by_windows(self.budgeted, first.schedule, expansions, size=share.polish_window,
                                          deadline=self.ends, progress=self.progress, tuning=tuning.prefixes)
        left -= exact["expansions"] / per_second
        start_sim = (first.simulated if start is first.schedule
                     else validate(problem, start, memory_budget=self.memory_budget))
        polished = None
        if start_sim.makespan > bound:
            polished = solve_windows(problem, start, left, self.memory_budget, window=share.polish_window,
                                     per_window=share.polish_seconds_per_window, deterministic=True,
                                     progress=self.progress, deadline=self.ends, bound=bound,
                                     grow=share.polish_growth, tuning=tuning.windows, cpsat_tuning=tuning.cpsat)
        seconds_left = polished.stats.get("seconds_left", 0.0) if polished else left
        if polished is not None and polished.status != SolveStatus.HINT_KEPT:
            reached = _Reached(polished.schedule, polished.simulated, seconds_left)
        elif start is not first.schedule:
            reached = _Reached(start, start_sim, seconds_left)
        else:  # no window improved the model's schedule
            reached = _Reached(None, first.simulated, seconds_left)
        return _Windows(exact, polished, reached)

    def _late_exact_windows(self, first: SolveResult, bound: int, reached: _Reached) -> tuple[_Reached, dict]:
        """5. Larger graphs: exact windows from what CP-SAT's reached, around its stalls first, in the counted
        seconds they left and late_exact_share of the limit on top."""
        late = {"windows_tried": 0, "windows_improved": 0, "expansions": 0, "stopped_by_wall_clock": False}
        if not self.small and reached.sim.makespan > bound:
            budgeted, share = self.budgeted, self.share
            late_seconds = reached.seconds_left + self.time_limit * share.late_exact_share
            got, late = improve_by_windows(budgeted, reached.schedule or first.schedule,
                                           int(late_seconds * self.per_second), size=share.polish_window,
                                           deadline=self.ends, progress=self.progress,
                                           starts=lambda s, sim: window_starts(budgeted, s, sim, share.polish_window),
                                           tuning=self.tuning.prefixes)
            reached = dataclasses.replace(reached, seconds_left=0.0)
            if late["windows_improved"]:
                reached = _Reached(got, validate(self.problem, got, memory_budget=self.memory_budget), 0.0)
        return reached, late

    def _fill_stalls(self, first: SolveResult, bound: int, reached: _Reached) -> tuple[_Reached, dict]:
        """6. Moves into the stalls left."""
        fills = {"simulations": 0, "moves": 0, "stopped_by_wall_clock": False, "seconds": 0.0}
        if reached.sim.makespan > bound:
            got, fills = _fill_idle(self.budgeted, reached.schedule or first.schedule,
                                    self.time_limit * self.share.fill_idle_share, self.ends, self.progress)
            if fills["moves"]:
                reached = _Reached(got, validate(self.problem, got, memory_budget=self.memory_budget),
                                   reached.seconds_left)
        return reached, fills

    def _result(self, first: SolveResult, bound: int, windows: _Windows, late: dict, fills: dict,
                reached: _Reached) -> SolveResult:
        """The schedule the phases after the whole model reached, with their stats and what they did."""
        exact, polished = windows.exact, windows.polished
        polish = {k: polished.stats.get(k) for k in ("windows_tried", "windows_improved", "window")} if polished else {}
        stopped = (first.stats.get("stopped_by_wall_clock") or exact["stopped_by_wall_clock"]
                   or late["stopped_by_wall_clock"] or (polished and polished.stats.get("stopped_by_wall_clock"))
                   or fills["stopped_by_wall_clock"])
        stats = dict(first.stats, polish=polish, fill_idle=fills, exact_windows=exact, late_exact_windows=late,
                     stopped_by_wall_clock=bool(stopped))
        if reached.schedule is None:
            return dataclasses.replace(first, stats=stats, wall_time=time.perf_counter() - self.started)
        at_bound = reached.sim.makespan <= bound  # optimal: no schedule is shorter than a lower bound
        message = "; ".join(m for m in (
            first.message, _windows_said("exact windows", exact), polished.message if polished else "",
            _windows_said("exact windows after them", late),
            f"then {fills['moves']} moves into stalls" if fills["moves"] else "",
            "the windows reached a lower bound: optimal" if at_bound else "") if m)
        return SolveResult(dataclasses.replace(reached.schedule, method="cpsat"),
                           SolveStatus.OPTIMAL if at_bound else SolveStatus.FEASIBLE, reached.sim, None, first.bound,
                           time.perf_counter() - self.started, first.solver_status, message, stats)


def _walk_upper(problem: Problem, hint: Schedule | None) -> int:
    """The makespan the cut walk searches below when it starts: the hint's, else the original order's, when
    that schedule holds ``problem``'s budget; else the serial horizon. A makespan over the budget can lie below
    the optimum, and a walk below the optimum proves nothing (original 235 us over the budget, optimum 254)."""
    schedule = hint if hint is not None else Schedule.original(problem)
    try:
        sim = simulate(problem, schedule)
    except InvalidScheduleError:  # a bad hint is reported where it is used, not here
        return serial_horizon(problem)
    budget = problem.machine.memory_budget
    return sim.makespan if budget is None or sim.peak_memory <= budget else serial_horizon(problem)


def _bound_by_cuts(problem: Problem, found: SolveResult, deadline: float, progress, started: float,
                   walk: BackgroundCutBound | None = None, tuning: PortfolioTuning = PORTFOLIO_TUNING) -> SolveResult:
    """``found`` with the best cut bound (solvers/cuts.py) proven until ``deadline``: OPTIMAL when one proves
    its makespan. From ``walk``, the walk beside the search, or else run here in the wall-clock time the
    schedule's search left (the user's, unused otherwise; at least ``tuning.cut_min_seconds``): the schedule
    is the same on every run, while a slower run may prove less."""
    seconds = deadline - time.perf_counter()
    if found.status == SolveStatus.OPTIMAL or found.schedule is None:
        return found
    if walk is not None:
        cut = walk.result(found.makespan, progress)
        seconds = deadline - time.perf_counter()
        if walk.error and seconds >= tuning.cut_min_seconds:  # the walk beside failed: walk here in what is left
            cut = cut_bound(problem, found.makespan, int(seconds * CUT_EXPANSIONS_PER_SECOND), deadline=deadline,
                            progress=progress)
    elif seconds >= tuning.cut_min_seconds:
        cut = cut_bound(problem, found.makespan, int(seconds * CUT_EXPANSIONS_PER_SECOND), deadline=deadline,
                        progress=progress)
    else:
        return found
    said = {"beside": walk is not None} | ({"error": walk.error} if walk is not None and walk.error else {})
    stats = dict(found.stats, cut_bound=cut.to_dict() | said)
    wall = time.perf_counter() - started
    if cut.proven:
        message = f"{found.message}; the cut bound at {cut.cut} proves it optimal"
        return dataclasses.replace(found, status=SolveStatus.OPTIMAL, bound=found.makespan, stats=stats,
                                   message=message, wall_time=wall)
    return dataclasses.replace(found, bound=max(found.bound or 0, cut.bound) or None, stats=stats, wall_time=wall)


def _fill_idle(problem: Problem, schedule: Schedule, seconds: float, deadline: float,
               progress) -> tuple[Schedule, dict]:
    """`heuristics.fill_idle` on ``schedule`` with the simulations ``seconds`` pay for (counted: the same
    schedule on every run, unless the wall clock passes ``deadline`` first, which its stats then say): the
    schedule (the same object when no move gained) and its stats, ``seconds`` the counted seconds spent."""
    per_simulation = pass_cost(problem, "fill_move") * 1e-6
    filled, stats = fill_idle(problem, schedule, max_simulations=max(0, int(seconds / per_simulation)),
                              deadline=deadline)
    if stats["moves"] and progress is not None:
        progress(f"{stats['moves']} moves into stalls: {simulate(problem, filled).makespan / 1e3:.1f} us")
    return filled, dict(stats, seconds=stats["simulations"] * per_simulation)


def _windows_said(what: str, stats: dict) -> str:
    if not stats["windows_improved"]:
        return ""
    return f"{what}: {stats['windows_improved']} of {stats['windows_tried']} improved"


def _prefix_search_fits(problem: Problem, tuning: PortfolioTuning = PORTFOLIO_TUNING) -> bool:
    return sum(1 for task in problem.tasks if task.role != Role.FREE) <= tuning.prefix_max_tasks


def _searched(exact: SolveResult) -> dict:
    return {"expansions": exact.stats["expansions"], "complete": exact.status == SolveStatus.OPTIMAL}


def _prove_with_prefixes(problem: Problem, found: SolveResult, seconds: float, memory_budget: int | None,
                         deadline: float, progress, started: float, tuning: Tuning = DEFAULT_TUNING) -> SolveResult:
    """``found``, or, when the time the windows left suffices and the graph is small enough, what the exact
    prefix search (solvers/prefixes.py) makes of it below its makespan: a proof that it is optimal, or a
    better schedule that is."""
    share = tuning.portfolio
    if (found.status == SolveStatus.OPTIMAL or not _prefix_search_fits(problem, share)
            or seconds < share.prefix_min_seconds):
        return found
    exact = solve_prefixes(problem, seconds, memory_budget, found.schedule, deterministic=True, deadline=deadline,
                           progress=progress, tuning=tuning.prefixes)
    stats = dict(found.stats, prefix_search=_searched(exact),
                 stopped_by_wall_clock=found.stats.get("stopped_by_wall_clock") or exact.stats["stopped_by_wall_clock"])
    wall = time.perf_counter() - started
    if exact.status != SolveStatus.OPTIMAL:
        return dataclasses.replace(found, stats=stats, wall_time=wall)
    message = "; ".join(m for m in (found.message, exact.message or "the prefix search found the optimum") if m)
    return dataclasses.replace(exact, stats=stats, wall_time=wall, message=message, bound=exact.makespan,
                               solver_status=found.solver_status)
