"""One CP-SAT model, built and solved: `solve_model` (the model itself is solvers/cpsat_model.py).

`solve_model` reads top to bottom: scale the problem to a small horizon, build the model over its scope
(whole, or a window of the hint), add the hint, set the parameters (deterministic time, seed, workers),
solve with a callback that reports and keeps solutions, choose among them with `simulate`, and return the
result (solvers/result.py): never worse than the hint. The rates and margins that turn seconds into
CP-SAT's deterministic limit are a `CpsatTuning` record. The order of phases around it (prefix search, the
whole model, windows, moves, cut walk) is the portfolio's: solvercast/pipeline/portfolio.py.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ortools.sat.python import cp_model

from solvercast.ir.bounds import lower_bounds
from solvercast.errors import InfeasibleBudgetError
from solvercast.ir.problem import Problem
from solvercast.ir.schedule import Schedule
from solvercast.ir.simulate import SimResult, simulate, validate
from solvercast.solvers.common import scale_problem, serial_horizon
from solvercast.solvers.cpsat_model import CpsatModel, model_horizon_cap
from solvercast.solvers.result import Outcome, SolveResult, best_valid
from solvercast.solvers.scope import Scope


def _search_units_per_second() -> Mapping[str, tuple[float, float]]:
    return MappingProxyType({"positions": (0.5, 0.7), "program_times": (0.45, 0.0), "streams": (0.25, 0.0),
                             "windows": (0.2, 0.0)})


@dataclass(frozen=True)
class CpsatTuning:
    """The rates, shares and margins of one CP-SAT solve; vary them with `dataclasses.replace`.
    Measurements: experiments/results/cpsat_budgets.md, experiments/results/tuning_notes.md."""

    #: deterministic units per CPU second of search, by `model_kind`: (rate at 2,734 constraints, change per
    #: decade of constraints); fitted on one quiet core, windows set low so that the slow ones meet the deadline
    #: (results/cpsat_rate_run3_quiet.csv, results/cpsat_budgets.md, results/tuning_notes.md#search-rates)
    search_units_per_second: Mapping[str, tuple[float, float]] = field(default_factory=_search_units_per_second)
    #: `search_rate` is clipped to this range: the fit holds between the models measured (cpsat_rate_run3_quiet.csv)
    search_rate_range: tuple[float, float] = (0.2, 1.3)
    #: CPU seconds per constraint of building the model in Python, which earn no deterministic time; presolve is
    #: in the rates (results/cpsat_budgets.md, "a plan that counts what the solves take")
    overhead_seconds_per_constraint: float = 1e-5
    #: share of the seconds given that the deterministic limit aims at: the rest absorbs the rates' spread, so the
    #: wall clock rarely ends a search (at 0.9 it ended one; results/tuning_notes.md#limit-share)
    limit_share: float = 0.8
    #: with a caller's deadline, a deterministic search may take this many times its seconds of wall clock (never
    #: past the deadline), so that a slow machine still ends on the deterministic limit (results/cpsat_budgets.md)
    deterministic_wall_slack: float = 3.0
    #: ... and ends this long before the deadline, plus a share of the time it had until it: CP-SAT returns tens
    #: of ms after its wall limit and its answer is still judged (results/tuning_notes.md#deadline-margin)
    deadline_margin_seconds: float = 0.05
    deadline_margin_share: float = 0.05
    #: with several streams, how many of the newest solutions CP-SAT reported are simulated to pick the best
    #: (re-simulation may put the last over the budget: results/cpsat_budgets.md)
    kept_solutions_judged: int = 32
    #: ... and at most this many task simulations in all: a count, not a clock, so every rank makes the same choice
    #: (32 solutions of 3,000 tasks would take ~1 s past the solver's deadline)
    judged_tasks: int = 20_000
    #: seconds per task of `validate` (0.9e-5 measured at 1,000 and 3,000 tasks, 2 streams, loaded machine): the
    #: wall clock the solver leaves for judging what it returns (results/tuning_notes.md#validate)
    validate_seconds_per_task: float = 1.0e-5
    #: share of the deterministic limit that probing during the search may take, and at most `probing_units` a
    #: round: CP-SAT's default rounds of 1 unit can eat a short limit (results/cpsat_budgets.md, probing)
    probing_share: float = 0.1
    probing_units: float = 0.3
    #: seconds per task of building a whole-graph model, which cannot be interrupted (0.55 s at 3,000 tasks, 2.2 s
    #: at 10,000): no model is built nearer the deadline than this, and the time plan starts a solver only with
    #: twice it (results/time_limit.md)
    build_seconds_per_task: float = 2.2e-4


#: the shipped values
CPSAT_TUNING = CpsatTuning()


def model_kind(model: CpsatModel) -> str:
    """Which entry of `CpsatTuning.search_units_per_second` applies to ``model``."""
    if not model.single_stream:
        return "streams"
    if model.scope.windowed:
        return "windows"
    return "positions" if model.positions else "program_times"


def search_rate(kind: str, constraints: int, tuning: CpsatTuning = CPSAT_TUNING) -> float:
    """Predicted deterministic units per CPU second of a search over a model of ``kind`` and this many
    constraints (`CpsatTuning.search_units_per_second`)."""
    at_reference, per_decade = tuning.search_units_per_second[kind]
    rate = at_reference + per_decade * math.log10(max(1, constraints) / 2734)
    return min(tuning.search_rate_range[1], max(tuning.search_rate_range[0], rate))


def deterministic_limit(seconds: float, model: CpsatModel, tuning: CpsatTuning = CPSAT_TUNING) -> float:
    """CP-SAT's deterministic limit for a solve of ``model`` that may take ``seconds``: the predicted search
    rate (`search_rate`) times the seconds its size leaves after building the model (presolve is in the
    fitted rates), times `CpsatTuning.limit_share`.
    It depends only on the model (its kind and constraint count), never on a clock: the same on every rank."""
    constraints = len(model.m.Proto().constraints)
    search = max(0.0, seconds - tuning.overhead_seconds_per_constraint * constraints)
    return max(1e-3, search_rate(model_kind(model), constraints, tuning) * search * tuning.limit_share)


def planned_seconds(units: float, model: CpsatModel, tuning: CpsatTuning = CPSAT_TUNING) -> float:
    """The seconds whose `deterministic_limit` for ``model`` is ``units`` (its inverse)."""
    constraints = len(model.m.Proto().constraints)
    rate = search_rate(model_kind(model), constraints, tuning) * tuning.limit_share
    return tuning.overhead_seconds_per_constraint * constraints + units / rate


def solutions_judged(num_tasks: int, tuning: CpsatTuning = CPSAT_TUNING) -> int:
    """How many of CP-SAT's newest solutions `solve_model` simulates (several streams, a budget)."""
    return max(1, min(tuning.kept_solutions_judged, tuning.judged_tasks // max(1, num_tasks)))


def bound_presolve(params, units: float, tuning: CpsatTuning = CPSAT_TUNING) -> None:
    """No probing in presolve, and a share of the limit for probing during the search, so that the search
    (which starts from the hint, loaded as the first solution right after presolve) keeps the limit.

    Presolve probing is off (`cp_model_probing_level = 0`, which disables it whatever its deterministic
    caps say, so none is set): its wall time runs far ahead of its deterministic time (measured on 2
    shared cores: 4 s of wall for 0.05 units on fsdp_layers 8 layers and on 120-task random programs; with
    CP-SAT's defaults it took the whole 8 s of a 160-task FSDP solve before the hint was loaded:
    OR-Tools issue 3750), and without it the same solves prove their hint optimal in 0.6 s. That level does not
    reach the probing of the search: SAT inprocessing (`inprocessing_probing_dtime`, in the one worker of a
    deterministic solve) and probing workers (`probing_deterministic_time_limit`, with several workers), so
    those are capped."""
    params.cp_model_probing_level = 0
    share = min(tuning.probing_units, units * tuning.probing_share)
    params.probing_deterministic_time_limit = min(params.probing_deterministic_time_limit, share)
    params.inprocessing_probing_dtime = min(params.inprocessing_probing_dtime, share)


class _Solutions(cp_model.CpSolverSolutionCallback):
    """Reports each improving solution, and with several compute streams keeps
    their schedules for `best_valid`: re-simulation may push the last one over
    the budget (memory is judged over time there), or time an earlier one faster."""

    def __init__(self, model: CpsatModel, say: Callable[[str], None] | None, factor: int, keep: int):
        super().__init__()
        self.model, self.say, self.factor, self.keep = model, say, factor, keep
        self.schedules: deque[Schedule] = deque(maxlen=max(1, keep + 1))  # the newest, the final one's repeat too

    def on_solution_callback(self) -> None:
        if self.say:
            self.say(f"  CP-SAT: makespan {self.Value(self.model.makespan) * self.factor / 1e3:.1f} us "
                     f"(model bound {self.BestObjectiveBound() * self.factor / 1e3:.1f}) at {self.WallTime():.1f} s")
        if self.keep:
            self.schedules.append(self.model.extract(self))


def solve_model(
    problem: Problem,
    time_limit: float = 10.0,
    memory_budget: int | None = None,
    hint: Schedule | None = None,
    *,
    deterministic: bool = True,
    workers: int = 2,
    seed: int = 0,
    log_progress: bool | Callable[[str], None] = False,
    debug_hint: bool = False,  # first check that the hint is a feasible point of the model (raises if not)
    progress: Callable[[str], None] | None = None,
    fixed_order: set[int] | None = None,
    window: tuple[int, int] | None = None,
    left_shift: bool = False,
    repair_hint: bool = False,
    deadline: float | None = None,
    max_units: float | None = None,
    tuning: CpsatTuning = CPSAT_TUNING,
) -> SolveResult:
    """Solve ``problem`` with one CP-SAT model, warm-started from ``hint``.

    ``memory_budget`` defaults to the problem's machine budget. With
    ``deterministic`` the time limit is CP-SAT's deterministic time (same
    answer on every run and rank) instead of wall-clock seconds, converted by
    `deterministic_limit`; the wall clock still caps the call at
    ``time_limit``, and ``stats["stopped_by_wall_clock"]`` says when that cap,
    which is not deterministic, ended the search. ``progress`` receives a line
    per improved solution. ``fixed_order``: tasks kept in the hint's relative
    order and on its streams (a reduced model; see solvers/large.py).
    ``window``: (lo, hi) positions of the hint's order; only those tasks are
    modelled (see solvers/scope.py).
    ``left_shift``: keep the hint's makespan as a cap and minimize it, then
    the sum of the starts of `common.shifted_tasks` and of the launch points;
    a schedule with the same makespan and those earlier then counts as an
    improvement.
    ``deadline``: a `time.perf_counter` reading by which the call must
    return (`optimize`'s whole-call limit), a wall-clock cap that leaves the
    deterministic limit as it is; with ``deterministic`` the search may then
    take `CpsatTuning.deterministic_wall_slack` times ``time_limit`` (one slower than
    planned still reaches its deterministic limit), ending a margin before
    the deadline (`CpsatTuning.deadline_margin_seconds` and ``_share``).
    ``max_units``: a deterministic search stops at this many units even if
    ``time_limit`` pays for more (``stats["seconds_given"]`` then counts the
    seconds those units were planned to take).
    ``tuning``: the rates, shares and margins above (`CpsatTuning`).

    Returns the better of the solver's schedule and the hint, judged by
    `simulate`; the status says which. Raises `InfeasibleBudgetError` when the
    solver proves no schedule fits the budget.
    """
    t0 = time.perf_counter()
    budget = problem.machine.memory_budget if memory_budget is None else memory_budget
    hint_sim = validate(problem, hint, memory_budget=budget) if hint is not None else None
    modelled = problem.num_tasks if window is None else window[1] - window[0]
    # building the model cannot be interrupted: with the deadline nearer than its predicted cost the call
    # would return late (`optimize`'s plan does not start a solver it cannot pay for; this is the wall's guard)
    if deadline is not None and deadline - time.perf_counter() < tuning.build_seconds_per_task * modelled:
        return _not_started(hint, hint_sim, t0)
    factor, scaled, scaled_hint_sim, model_horizon = _scaled(problem, hint, hint_sim, modelled)
    model = _build_model(problem, scaled, factor, model_horizon, budget, hint, scaled_hint_sim,
                         window=window, left_shift=left_shift, fixed_order=fixed_order)
    solver = cp_model.CpSolver()
    params = solver.parameters
    params.random_seed = seed
    units, seconds_given = _set_search_limit(params, model, time_limit, deterministic, workers, max_units, tuning)
    keep = not model.single_stream and budget is not None
    params.max_time_in_seconds = wall_cap = _wall_cap(problem, time_limit, deadline, deterministic, keep, t0, tuning)
    _set_hint_presolve_and_log_options(solver, model, units, tuning, repair_hint=repair_hint and hint is not None,
                                       check_hint=debug_hint and hint is not None, log_progress=log_progress)
    build_time = time.perf_counter() - t0
    callback = _Solutions(model, progress, factor, keep=solutions_judged(problem.num_tasks, tuning) if keep else 0)
    status = solver.Solve(model.m, callback)
    wall = time.perf_counter() - t0
    exact = _exact(problem, factor, fixed_order=fixed_order, windowed=window is not None, left_shift=left_shift)
    stats = _solve_stats(solver, status, model, factor, deterministic, units, wall_cap, build_time, seconds_given)
    outcome = Outcome(hint, hint_sim, wall, solver.StatusName(status), stats)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return _without_solution(status, outcome, budget, time_limit)
    return _judged(problem, solver, status, model, callback, outcome, budget, factor, left_shift, exact, tuning)


def _not_started(hint: Schedule | None, hint_sim: SimResult | None, t0: float) -> SolveResult:
    """The result of a call whose deadline leaves no time to build the model: the warm start, or none."""
    outcome = Outcome(hint, hint_sim, time.perf_counter() - t0, "NOT_STARTED", {"stopped_by_wall_clock": True})
    return outcome.no_solution("no time left to build the CP-SAT model before the deadline",
                               "no time left to build the CP-SAT model before the deadline; kept the warm start")


def _scaled(problem: Problem, hint: Schedule | None, hint_sim: SimResult | None,
            modelled: int) -> tuple[int, Problem, SimResult | None, int]:
    """The factor that brings the horizon within what a model of ``modelled`` tasks holds, the problem scaled
    by it, the hint's simulation there, and the model's horizon."""
    serial = serial_horizon(problem)
    horizon = hint_sim.makespan if hint_sim is not None else serial
    factor = max(1, math.ceil(horizon / model_horizon_cap(modelled)))
    scaled = scale_problem(problem, factor)
    scaled_hint_sim = simulate(scaled, hint) if hint is not None else None
    model_horizon = scaled_hint_sim.makespan if scaled_hint_sim is not None else -(-serial // factor)
    return factor, scaled, scaled_hint_sim, model_horizon


def _build_model(problem: Problem, scaled: Problem, factor: int, model_horizon: int, budget: int | None,
                 hint: Schedule | None, scaled_hint_sim: SimResult | None, *, window: tuple[int, int] | None,
                 left_shift: bool, fixed_order: set[int] | None) -> CpsatModel:
    """The model of ``scaled`` over its scope (whole, or a window of the hint), with its objective, the
    bounds, the order kept and the hint."""
    if window is not None and hint is None:
        raise ValueError("window models part of the hint: give a hint")
    scope = Scope.whole() if window is None else Scope.of_window(scaled, hint, scaled_hint_sim, *window)
    model = CpsatModel(scaled, model_horizon, budget, scope, issue_order=hint.order if hint is not None else None)
    model.add_variables()
    model.add_constraints()
    model.add_objective(left_shift)
    if left_shift:
        if hint is None:
            raise ValueError("left_shift improves on the hint: give a hint")
        model.m.Add(model.makespan <= model_horizon)
    # our bounds hold for the scaled problem too (its durations are rounded up), and CP-SAT's own bound
    # with memory is weak: telling it lets it prove optimality sooner
    if window is None:
        model.m.Add(model.makespan >= lower_bounds(problem).makespan // factor)
    if fixed_order:
        if hint is None:
            raise ValueError("fixed_order keeps the hint's order: give a hint")
        model.fix_order(hint, scaled_hint_sim, fixed_order)
    if hint is not None:
        model.add_hint(hint, scaled_hint_sim)
    return model


def _set_search_limit(params, model: CpsatModel, time_limit: float, deterministic: bool, workers: int,
                      max_units: float | None, tuning: CpsatTuning) -> tuple[float, float]:
    """The workers and, with ``deterministic``, CP-SAT's deterministic limit. Returns the units the search is
    planned to take (the probing caps' base) and the seconds given (those ``max_units`` take, when it cuts
    the limit)."""
    seconds_given = time_limit  # what `large.seconds_spent` counts this solve's time in
    if deterministic:
        # One worker: CP-SAT's parallel search is a race between its workers (other ranks, other
        # schedules) whatever the time limit. Its interleaved search is deterministic but, measured
        # with OR-Tools 9.15 on 2 cores, overran max_deterministic_time (fsdp_layers 2 layers: 1.09
        # units on a 0.5 limit, ended by the 5 s wall cap) and, on a 21-task fuzz program, kept
        # searching after its last subsolver finished at 0.09 s until the wall cap at 0.87 s. A single
        # worker honours the deterministic limit and stops at a proof.
        params.num_workers = 1
        units = deterministic_limit(time_limit, model, tuning)
        if max_units is not None and units > max_units:  # planned as the seconds that many units take
            units, seconds_given = max_units, planned_seconds(max_units, model, tuning)
        params.max_deterministic_time = units
    else:
        params.num_workers = workers
        units = time_limit * search_rate(model_kind(model), len(model.m.Proto().constraints), tuning)  # probing caps
    return units, seconds_given


def _wall_cap(problem: Problem, time_limit: float, deadline: float | None, deterministic: bool, keep: bool,
              t0: float, tuning: CpsatTuning) -> float:
    """The wall-clock cap of a solve that started at ``t0`` (``keep``: the kept solutions are judged after it).

    The deterministic limit, which gives the same answer on every rank, normally ends the search
    (`deterministic_limit`); the wall clock caps the call at time_limit, or, given the caller's deadline,
    a deterministic search at `deterministic_wall_slack` times that but never past the deadline: on a
    machine slower than the predicted rate it then still reaches its deterministic limit (the same answer
    on every rank). What building the model took is left out of the solver's share, and the cap leaves
    room for what follows the solve (validating the final solution and the kept ones)."""
    judged = 2 + (solutions_judged(problem.num_tasks, tuning) if keep else 0)
    after_solve = judged * problem.num_tasks * tuning.validate_seconds_per_task
    wall_cap = max(0.01, time_limit - (time.perf_counter() - t0) - after_solve)
    if deadline is not None:
        until_deadline = deadline - time.perf_counter() - after_solve
        if deterministic:  # slack on the plan, and a margin before the deadline for CP-SAT's return
            until_deadline -= tuning.deadline_margin_seconds + tuning.deadline_margin_share * (deadline - t0)
        wall_cap = max(0.01, min(wall_cap * (tuning.deterministic_wall_slack if deterministic else 1), until_deadline))
    return wall_cap


def _set_hint_presolve_and_log_options(solver: cp_model.CpSolver, model: CpsatModel, units: float,
                                       tuning: CpsatTuning, *, repair_hint: bool, check_hint: bool,
                                       log_progress: bool | Callable[[str], None]) -> None:
    """CP-SAT's hint repair, presolve's bounds (`bound_presolve`, for a search of ``units``), with ``check_hint``
    a first check that the hint is a feasible point of the model and CP-SAT's check that presolve keeps it,
    and with ``log_progress`` CP-SAT's search log (to that callable, if one)."""
    params = solver.parameters
    # repair_hint helped at ~1k tasks in the prototype, but OR-Tools 9.15 sometimes aborts the whole
    # process with it ("Check failed: heuristics.fixed_search != nullptr", seen with and without
    # fixed_order when the time limit falls early): off unless asked for.
    params.repair_hint = bool(repair_hint)
    bound_presolve(params, units, tuning)
    if check_hint:
        model.check_hint()
        # and CP-SAT aborts the process if its presolve turns the feasible hint infeasible (OR-Tools
        # issues 4373, 4693): the first solution must stay the hint
        params.debug_crash_if_presolve_breaks_hint = True
    if log_progress:
        params.log_search_progress = True
        if callable(log_progress):
            solver.log_callback = log_progress
            params.log_to_stdout = False


def _exact(problem: Problem, factor: int, *, fixed_order: set[int] | None, windowed: bool, left_shift: bool) -> bool:
    """Whether CP-SAT's optimum and bound are the problem's.

    They are only for the whole, unscaled model with the makespan objective (a scaled model's durations are
    rounded up; reduced models solve part of it), and, with several compute streams, only without synchronous
    comm ops (their program order is approximated by start times, which excludes some valid schedules)."""
    sync_comm = any(not problem.is_async_comm(c) for c in problem.comm_tasks)
    return (factor == 1 and not fixed_order and not windowed and not left_shift
            and not (sync_comm and problem.machine.compute_streams > 1))


def _solve_stats(solver: cp_model.CpSolver, status: int, model: CpsatModel, factor: int, deterministic: bool,
                 units: float, wall_cap: float, build_time: float, seconds_given: float) -> dict:
    """The stats of a finished solve."""
    # a search that ended without a proof was ended by a limit: by the wall clock when it reached its cap,
    # or when it stopped short of the deterministic limit (a loaded machine: the wall clock came first)
    stopped_by_wall = deterministic and status in (cp_model.FEASIBLE, cp_model.UNKNOWN) and (
        solver.WallTime() >= wall_cap * 0.98 or solver.deterministic_time < units * 0.98)
    return {"scale": factor, "stopped_by_wall_clock": stopped_by_wall, "build_time": build_time,
            "deterministic_time": solver.deterministic_time, "deterministic_limit": units if deterministic else None,
            "seconds_given": seconds_given,
            "solver_wall_time": solver.WallTime(), "variables": len(model.m.Proto().variables),
            "constraints": len(model.m.Proto().constraints), "branches": solver.NumBranches()}


def _without_solution(status: int, outcome: Outcome, budget: int | None, time_limit: float) -> SolveResult:
    """The result of a solve that returned no solution (``status`` neither OPTIMAL nor FEASIBLE): the warm
    start, or none; raises `InfeasibleBudgetError` when CP-SAT proved that no schedule fits the budget."""
    hint_sim, name = outcome.hint_sim, outcome.solver_status
    if status == cp_model.INFEASIBLE and hint_sim is not None and (budget is None or hint_sim.peak_memory <= budget):
        # no proof: the warm start is a schedule within the budget by `simulate`. Seen on a window of
        # dsv3_bw_128 (OR-Tools 9.15): the same model with the hint's values fixed solves OPTIMAL, every
        # constraint holds at the hint, so the INFEASIBLE was the solver's wrong answer (OR-Tools issues 4373 and
        # 4693 are of this kind: presolve losing a feasible hint)
        outcome.stats["infeasible_with_feasible_hint"] = True
        return outcome.no_solution("", "CP-SAT answered INFEASIBLE though the warm start is within the budget by "
                                       "simulate (a wrong answer of the solver): kept the warm start")
    if status == cp_model.INFEASIBLE:
        raise InfeasibleBudgetError(
            f"CP-SAT proved that no schedule keeps peak memory within {budget} B"
            + (f" (smallest peak a heuristic found: {hint_sim.peak_memory} B)" if hint_sim else ""),
            best_peak=hint_sim.peak_memory if hint_sim else None)
    return outcome.no_solution(f"CP-SAT found no schedule in {time_limit:g} s ({name})",
                               f"CP-SAT found no solution in {time_limit:g} s ({name}); kept the warm start")


def _judged(problem: Problem, solver: cp_model.CpSolver, status: int, model: CpsatModel, callback: _Solutions,
            outcome: Outcome, budget: int | None, factor: int, left_shift: bool, exact: bool,
            tuning: CpsatTuning) -> SolveResult:
    """The result of a solve that found solutions: the best valid one by `simulate` (the final one or one of
    the kept earlier ones), or the warm start when that is no worse."""
    # a bound on the scaled model (durations rounded up) can exceed the real optimum: reported unscaled only
    bound = int(solver.BestObjectiveBound()) if exact else None
    final = model.extract(solver)
    objective = int(solver.Value(model.makespan)) * factor
    # the newest kept solutions, the final one's repeat left out: each costs a simulation
    earlier = [c for c in reversed(callback.schedules) if c != final][:solutions_judged(problem.num_tasks, tuning)]
    schedule, sim, errors = best_valid(problem, [final] + earlier, budget, left_shift)
    if schedule is None:
        if outcome.hint is None:  # with several streams, re-simulation can put every solution over the budget
            return outcome.no_solution(f"CP-SAT's schedules failed validation ({errors[0]})", "")
        return outcome.invalid("CP-SAT's", errors[0], objective, bound)
    if schedule is not final:
        status = cp_model.FEASIBLE  # an earlier solution: no longer the proven optimum
        outcome.stats["earlier_solution"] = (f"the final one: {errors[0]}" if 0 in errors
                                             else "the final one simulated slower")
    proven = status == cp_model.OPTIMAL and exact
    return outcome.better_of(problem, schedule, sim, proven=proven, hint_proven=proven, objective=objective, bound=bound,
                             left_shift=left_shift, proved_hint="CP-SAT proved the warm start optimal",
                             kept_hint="CP-SAT found nothing better than the warm start")
