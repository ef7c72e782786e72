"""`solve_cpsat`: the CP-SAT solve driver (the model is solvers/cpsat_model.py).

`solve_model` reads top to bottom: scale the problem to a small horizon, build
the model over its scope (whole, or a window of the hint), add the hint, set
the parameters (deterministic time, seed, workers), solve with a callback that
reports and keeps solutions, choose among them with `simulate`, and return the
result (solvers/result.py): never worse than the hint. `solve_cpsat` runs it
on the whole graph and, when it ends without a proof, polishes its answer
with windowed models (solvers/large.py) for the rest of the time.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import deque
from collections.abc import Callable

from ortools.sat.python import cp_model

from solvercast.ir.bounds import lower_bounds
from solvercast.errors import InfeasibleBudgetError, InvalidScheduleError
from solvercast.ir.problem import Problem, Role
from solvercast.ir.schedule import Schedule
from solvercast.ir.simulate import simulate, validate
from solvercast.solvers.common import scale_problem, serial_horizon
from solvercast.solvers.cpsat_model import CpsatModel, model_horizon_cap
from solvercast.solvers.result import Outcome, SolveResult, SolveStatus, best_valid
from solvercast.solvers.cuts import CUT_EXPANSIONS_PER_SECOND, BackgroundCutBound, cut_bound
from solvercast.solvers.prefixes import EXPANSIONS_PER_SECOND, improve_by_windows, solve_prefixes
from solvercast.solvers.scope import Scope
from solvercast.pipeline.time_plan import SOLVER_BUILD_SECONDS_PER_TASK

#: CP-SAT deterministic time per CPU second of its search, one worker (deterministic mode), by model kind
#: (`model_kind`), measured with OR-Tools 9.15 on the 2-core machine while it was quiet (the solving process
#: had a whole core: `experiments/cpsat_rate.py`, results/cpsat_rate_run3_quiet.csv; on the shared cores
#: the rate per CPU second was 2-3x lower). One compute stream with memory over positions (the default
#: run): the rate grows with the model, about 0.7 per decade of constraints (fsdp_layers 2 layers, 2,734
#: constraints: 0.52; 4 layers, 8,176: 1.01; 8 layers, 27,172: 1.37; fsdp_tp 21,224: 1.24; simple_fsdp
#: 24,935: 0.66, the outlier), so `search_rate` takes it from the constraint count; several compute
#: streams: 0.10-0.44, no trend (median 0.25); program times (past MAX_POSITION_PAIRS): 0.1-0.47 on the
#: shared cores, 0.45 assumed when quiet.
#: Windows of the program (`large.solve_windows`, one compute stream, 200-700 constraints at 40 tasks): 0.16-0.88
#: per CPU second, median 0.3, on the shared cores (load ~3, 2026-11-23), until windows counted the graph
#: outputs made before them (2026-11-24, ninth session): where the budget binds they now search, over program
#: times at 0.08-0.43 per solver second (the windows that reach their limit; quiet machine, fsdp_tp and
#: simple_fsdp 2 layers), over positions (shipped the same session) at 0.23-0.50, faster the larger the window
#: (tenth session: 0.27-0.31 at 40 tasks, 0.40-0.50 at 90; results/cpsat_budgets.md). Planned at 0.2: at 0.25 or
#: 0.3, simple_fsdp (whose whole model runs at 0.6 of its predicted rate) and fsdp_layers 8 layers (130-150
#: windows, many ending early) met the deadline; at 0.2 none did, fsdp_tp using 58-61% of a 10 s limit
SEARCH_UNITS_PER_SECOND = {"positions": (0.5, 0.7), "program_times": (0.45, 0.0), "streams": (0.25, 0.0),
                           "windows": (0.2, 0.0)}
#: (rate at 2,734 constraints, change per decade of constraints), clipped to this range
SEARCH_RATE_RANGE = (0.2, 1.3)
#: CPU seconds per model constraint that earn no deterministic time: building the model in Python (quiet
#: machine, 2026-11-24: 0.20 s for fsdp_tp's 21,224 constraints, 0.22 for simple_fsdp's 24,935, 0.26 for
#: fsdp_layers 8 layers' 27,172). CP-SAT's presolve and loading are not counted here: the rates above are
#: per second of the whole Solve, presolve included (fsdp_tp: 1.19 measured against 1.12 predicted). It was
#: 6e-5, presolve counted twice: a 10 s polish planned fsdp_tp's model (6 units) at 7.95 s, which took 4.97,
#: and the 10 s solves of the FSDP rows that do not finish used 58-65% of their limit
#: (`experiments/polish_plan.py`, results/cpsat_budgets.md, eighth session)
OVERHEAD_SECONDS_PER_CONSTRAINT = 1e-5
#: share of the seconds given that the deterministic limit aims at (the rest absorbs the rates' spread; past
#: the seconds given, the wall clock ends the search and the schedule may differ between runs: at 0.9 the
#: solver fingerprint's fsdp_layers 2 layers, 8 s, the slow end of the fit, was ended by the wall clock)
LIMIT_SHARE = 0.8


def model_kind(model: CpsatModel) -> str:
    """Which entry of SEARCH_UNITS_PER_SECOND applies to ``model``."""
    if not model.single_stream:
        return "streams"
    if model.scope.windowed:
        return "windows"
    return "positions" if model.positions else "program_times"


def search_rate(kind: str, constraints: int) -> float:
    """Predicted deterministic units per CPU second of a search over a model of ``kind`` and this many
    constraints (SEARCH_UNITS_PER_SECOND)."""
    at_reference, per_decade = SEARCH_UNITS_PER_SECOND[kind]
    rate = at_reference + per_decade * math.log10(max(1, constraints) / 2734)
    return min(SEARCH_RATE_RANGE[1], max(SEARCH_RATE_RANGE[0], rate))


def deterministic_limit(seconds: float, model: CpsatModel) -> float:
    """CP-SAT's deterministic limit for a solve of ``model`` that may take ``seconds``: the predicted search
    rate (`search_rate`) times the seconds its size leaves after building the model (presolve is in the
    fitted rates), times LIMIT_SHARE.
    It depends only on the model (its kind and constraint count), never on a clock: the same on every rank."""
    constraints = len(model.m.Proto().constraints)
    search = max(0.0, seconds - OVERHEAD_SECONDS_PER_CONSTRAINT * constraints)
    return max(1e-3, search_rate(model_kind(model), constraints) * search * LIMIT_SHARE)


#: with a caller's deadline, a deterministic search may take this many times its seconds on the wall clock
#: (never past the deadline): on the loaded shared cores the models of the FSDP rows searched at 0.5-0.8 of
#: the fitted rate (SEARCH_UNITS_PER_SECOND; results/cpsat_budgets.md), and a search the wall clock ends may
#: differ between ranks. Up to the
#: deadline itself, `optimize` ran past 1.2 x its limit on the loaded machine (synthetic 1,000 tasks, 1 s:
#: 1.22 s; the windows ended at the deadline and what follows them had no room left). It was 2: windows over
#: program times at the slow end of their rate (0.08 of the 0.2 planned, fsdp_tp's last 40 tasks) met that cap
#: on the quiet machine; windows now take positions (0.23-0.44) and 3 was kept, not measured again at 2
DETERMINISTIC_WALL_SLACK = 3.0
#: ... and ends this long before the deadline (a fixed part and a share of the time it had until it): CP-SAT
#: returns some tens of ms after its wall limit, and its answer is still read off and judged. With the
#: search capped at the deadline less only its judging, `optimize` took 1.05 x its limit on the quiet machine
#: (synthetic 300 tasks, 1 s, budget 1.0); it had kept under 0.98 x when its plan ended every search
DEADLINE_MARGIN_SECONDS = 0.05
DEADLINE_MARGIN_SHARE = 0.05


def planned_seconds(units: float, model: CpsatModel) -> float:
    """The seconds whose `deterministic_limit` for ``model`` is ``units`` (its inverse)."""
    constraints = len(model.m.Proto().constraints)
    rate = search_rate(model_kind(model), constraints) * LIMIT_SHARE
    return OVERHEAD_SECONDS_PER_CONSTRAINT * constraints + units / rate


#: with several streams, how many of the newest solutions CP-SAT reported are simulated to pick the best
KEPT_SOLUTIONS_JUDGED = 32
#: ... and at most this many task simulations in all (validate: ~1e-5 s per task, so 32 solutions of 3,000
#: tasks would take ~1 s after the solver's deadline); a count, not a clock: the same choice on every rank
JUDGED_TASKS = 20_000
#: seconds per task of `validate` (measured 0.9e-5 at 1,000 and 3,000 tasks, 2 streams, on the loaded
#: 2-core machine): the wall clock the solver leaves for judging what it returns
VALIDATE_SECONDS_PER_TASK = 1.0e-5


def solutions_judged(num_tasks: int) -> int:
    """How many of CP-SAT's newest solutions `solve_cpsat` simulates (several streams, a budget)."""
    return max(1, min(KEPT_SOLUTIONS_JUDGED, JUDGED_TASKS // max(1, num_tasks)))


#: share of the deterministic limit (``units``) that CP-SAT's probing during the search may take (its defaults,
#: 1 unit a round, may exceed a short limit), and at most PROBING_UNITS a round: with 0.69 units a round (10%
#: of the README run's limit) fsdp_layers 4 layers kept its 246.7 us warm start in 6.9 units; with 0.3 it
#: proves the optimum, 242.6 us, after 4.55 units (4.9 s)
PROBING_SHARE = 0.1
PROBING_UNITS = 0.3


def bound_presolve(params, units: float) -> None:
    """No probing in presolve, and a share of the limit for probing during the search, so that the search
    (which starts from the hint, loaded as the first solution right after presolve) keeps the limit.

    Presolve probing is off (`cp_model_probing_level = 0`, which disables it whatever its deterministic
    caps say, so none is set): its wall time runs far ahead of its deterministic time (measured on 2
    shared cores: 4 s of wall for 0.05 units on fsdp_layers 8 layers and on 120-task random programs; with
    CP-SAT's defaults it took the whole 8 s of a 160-task FSDP solve before the hint was loaded, OR-Tools
    issue 3750), and without it the same solves prove their hint optimal in 0.6 s. That level does not
    reach the probing of the search: SAT inprocessing (`inprocessing_probing_dtime`, in the one worker of a
    deterministic solve) and probing workers (`probing_deterministic_time_limit`, with several workers), so
    those are capped."""
    params.cp_model_probing_level = 0
    share = min(PROBING_UNITS, units * PROBING_SHARE)
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


#: share of the time a whole-graph solve gives its one model before windowed search polishes what it found
#: (`solve_cpsat`'s ``polish``). Measured with deterministic limits (10 s-equivalent, 2026-11-23,
#: results/cpsat_budgets.md): fsdp_tp 2 layers, budget 1.0, 344.0 us with the whole model alone, 332.4 with
#: 0.75 and windows after (320.2 with 0.5); fsdp_layers 4 layers needs 4.55 units to prove 242.6 us, which its
#: model (8,176 constraints) gets from 0.75 of 10 s (4.67) but not from 0.65 (3.99). 0.8: once the plan also
#: paid for the exposure bound, 0.75 of what it left the solver (9.6 s) no longer proved 242.6 in the README's
#: run (242.7, gap 0.03%); with 0.8 it proves it in 6.8 s, and fsdp_tp keeps 332.4
WHOLE_MODEL_SHARE = 0.8
#: ... and at most this many deterministic units: where the whole model proves an optimum it does so early
#: (the longest measured, fsdp_layers 4 layers under budget 1.0: 4.55 units; fsdp_tp 2 layers without a budget
#: 4.18), and where it does not, its last improvement comes early too (2026-11-23, one worker: fsdp_tp 2
#: layers 344.0 us at 1.6 s, nothing better in 25.8 units; simple_fsdp 2 layers 282.3 at 1.0 s, nothing in
#: 26.7), while windows keep improving (fsdp_tp: 323.2 us in 10 s of windows alone, 298.7 in 30 s). Past
#: this the time goes to the windows. With the overheads planned as measured (eighth session, quiet machine,
#: window overhead 0.03 s, `experiments/cpsat_quality.py --time-limit 10`), 2, 3, 4 and 6 units: fsdp_tp
#: 315.1 / 315.1 / 320.2 / 332.4 us, every other row the same (fsdp_layers 4 layers proven at 242.6 with each:
#: from 3 units' schedule the windows reach the exposure bound; from 1.5 units' (old overheads) they did not
#: in 10 s, 246.7); 3 leaves the windows most of a 10 s limit and takes fsdp_layers 4 layers to its proof in
#: 4.1 s (2: 6.1)
WHOLE_MODEL_UNITS = 3.0
#: ... on graphs of up to this many tasks; on larger ones WHOLE_MODEL_UNITS * this / tasks (`whole_model_units`):
#: there the whole model rarely gains and each unit costs more wall time, while the windows and moves after it
#: do gain. Fourteenth session, 10 s, quiet machine (scratch): at 1.5 units (and at 0.75) fsdp_tp 4 layers (573
#: tasks) 543.29 us -> 536.51, proven optimal, in 4.0 s instead of 7.6; simple_fsdp 4 layers (486) 532.43 ->
#: 528.67, proven, 5.0 s instead of 10.0; fsdp_tp 8 layers (1,145) 1090.41 -> 1065.73 (0.75: 1061.81);
#: fsdp_layers 8 (532) proven either way, fsdp_layers 16 (1,060) the same. Not below 300 tasks: at 1.5 units
#: fsdp_layers 4 layers (268 tasks, the README's run) kept 246.7 us instead of proving 242.6, every other row of
#: the quality table the same
WHOLE_MODEL_FULL_TASKS = 300


def whole_model_units(problem: Problem) -> float:
    """The deterministic units `solve_cpsat` gives the whole model at most (WHOLE_MODEL_FULL_TASKS)."""
    return WHOLE_MODEL_UNITS * min(1.0, WHOLE_MODEL_FULL_TASKS / problem.num_tasks)


#: windows of the polish: tasks per window and planned seconds per window (fsdp_tp after 0.75 of the time on
#: the model: 25 tasks 333.6 us, 40: 332.4, 80: 343.1; from the heuristic alone in 10 s, 40 / 0.5 s: 323.2,
#: 80 / 1.0: 333.8, 120 / 2.0: 330.8)
POLISH_WINDOW = 40
POLISH_SECONDS_PER_WINDOW = 0.5
#: ... and once every window of a size has been tried without a gain, windows (and their seconds) grow by
#: this factor and start over: a long limit is spent on larger neighbourhoods instead of returning early
POLISH_GROWTH = 1.5
#: Graphs of up to this many tasks that are not views get the exact prefix search (solvers/prefixes.py,
#: results/prefix_search.md): a proof, or a better schedule with one. Larger ones do not: FSDP with 2 layers
#: (about 160 such tasks) has too many prefixes to finish in minutes, and the search finds nothing until it ends
PREFIX_MAX_TASKS = 120
#: ... first, before the model, with this share of the limit: where it ends (fsdp_layers 2 layers, 65 such
#: tasks, in 0.6 s where CP-SAT took 5.7 s to its proof) the answer is proven; where it does not, CP-SAT has the
#: rest (fsdp_tp 1 layer needs 1.09 million expansions, 36 s counted; at 10-60 s the search stops at a tenth of
#: its lengths, `prefixes.GROWTH_AFTER_A_TENTH`, and gives the time back)
PREFIX_SHARE = 0.25
#: ... and again below the best makespan found, in the counted seconds the windows leave, when there are at
#: least this many and more than the first search had
PREFIX_MIN_SECONDS = 0.5
#: After the whole model, on the same graphs, exact windows (the prefix search over POLISH_WINDOW positions, the
#: rest kept) get up to this share of what is left, counted in expansions, and CP-SAT's windows the rest. Not
#: on larger graphs: from the model's schedule they did not find simple_fsdp 2 layers' gains, and CP-SAT's
#: windows with 30% less time ended at 276.6 us instead of 270.6 (results/prefix_search.md)
EXACT_WINDOWS_SHARE = 0.3
#: Moves of later compute tasks into the default stream's stalls (heuristics/fill_idle.py) after the windows:
#: a task moved over any distance, where windows span 40-90 positions (fsdp_tp 2 layers 278.94 -> 273.86 us
#: in 58 simulations; 4 layers 642.25 -> 560.27 in about 1,550, results/fill_idle.md). Up to this share of the
#: limit, counted in simulations (`heuristics.work.PASS_COST_US["fill_move"]`), on top of the windows' time
#: and capped by the deadline: the windows end well before it (they plan at a rate below what they reach),
#: and taking the moves' time from theirs made simple_fsdp 2 layers worse (270.60 -> 271.83 us at 10% of it).
#: 0.15 until the fourteenth session: only fsdp_tp 8 layers (1,145 tasks) ran out of moves' time (10 s: 1104.70
#: us at 0.15, 1090.41 at 0.3, 1084.61 at 0.5, 6.1 s of wall; five other graphs of 486-1,060 tasks the same at
#: every share; `experiments/fill_idle.py --solve --shares 0,0.15,0.3,0.5`). 0.3, not 0.5: counted work on top
#: can meet the deadline on a loaded machine. With two busy loops on the two cores, at 0.15 and 0.3: fsdp_tp 8
#: layers 1104.70 / 1090.41 us, 6.3 / 7.4 s, not cut; fsdp_tp 4 layers 543.29 both, its moves done in ~1,200
#: simulations (under either share's), the deadline ending the last scan in one run of the two
FILL_IDLE_SHARE = 0.3
#: Exact windows after CP-SAT's on larger graphs (not small enough for the prefix search), around the stalls
#: first (`large.window_starts`), with this share of the limit on top of the windows' time (capped by the
#: deadline, as the moves): simple_fsdp 2 layers 270.60 -> 268.58 us, its optimum, in the second window
#: (13,920 expansions). Taken from CP-SAT's windows (15%, 30%) it had made simple_fsdp 2 layers worse (273.86)
#: and cost fsdp_layers 8 layers its proof
LATE_EXACT_SHARE = 0.1
#: Cut bounds (solvers/cuts.py: the memory-forced idle after a collective's launch, solved exactly) run on a
#: second core from the start of the call to the deadline (`cuts.BackgroundCutBound`), or, where there is none,
#: last, in the wall-clock seconds left when there are at least this many (their share of the windows' time
#: made worse schedules: fsdp_tp 2 layers 278.9 -> 282.0 us, simple_fsdp 270.6 -> 276.6 at 10 s)
CUT_MIN_SECONDS = 0.2
#: whether the cut walk may run beside the search (off: always last, in the caller's own time)
CUT_WALK_BESIDE = True


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
    **options,
) -> SolveResult:
    """Solve ``problem`` with CP-SAT, warm-started from ``hint``: `solve_model` of the whole graph, then,
    with ``polish`` (a deterministic solve of the whole graph on one compute stream), windowed search
    (`large.solve_windows`) from what the model found when it ended without a proof.

    The model gets WHOLE_MODEL_SHARE of ``time_limit`` (at most `whole_model_units`); a proof, a makespan at
    a lower bound, or the lack of a solution ends the call there; otherwise windows of POLISH_WINDOW tasks
    around the idle points take the rest, growing by POLISH_GROWTH whenever every window of a size has been
    tried without a gain (counted in deterministic time, so every run gives the same schedule; they stop at
    a lower bound) and the better schedule is returned, FEASIBLE when the windows
    improved it (OPTIMAL when they reached a lower bound), with the model's bound; ``stats["polish"]`` says
    what the windows did. On graphs too large for the prefix search, exact windows around the stalls follow
    (LATE_EXACT_SHARE of the limit, ``stats["late_exact_windows"]``); then moves of later compute tasks into
    the stalls left (`heuristics.fill_idle`, FILL_IDLE_SHARE of the limit, ``stats["fill_idle"]``): both on
    top of the windows' time, counted, and capped by the deadline. On graphs of up to PREFIX_MAX_TASKS tasks
    that are not views, the exact prefix search (solvers/prefixes.py) runs first, with PREFIX_SHARE of the
    limit, and again with the counted seconds the windows leave when they are more, below the makespan found
    (``stats["prefix_search"]``): when it ends, the result is OPTIMAL. From the start, cut bounds
    (solvers/cuts.py) are walked on a second core until the deadline, or after everything else where there is
    none (``stats["cut_bound"]``): OPTIMAL when one proves the makespan, the schedule unchanged. Other options
    and what the call returns: `solve_model`."""
    whole = (options.get("window") is None and not options.get("fixed_order") and not options.get("left_shift"))
    if not (polish and deterministic and whole and problem.machine.compute_streams == 1):
        return solve_model(problem, time_limit, memory_budget, hint, deterministic=deterministic, deadline=deadline,
                           progress=progress, **options)
    from solvercast.solvers.large import seconds_spent, solve_windows, window_starts  # large builds on this module

    started = time.perf_counter()
    ends = started + time_limit if deadline is None else deadline  # the windows' wall cap (see solve_model)
    budgeted = problem if memory_budget is None else problem.with_budget(memory_budget)
    # the cut walk on another core from the start (the schedule never waits for it; its pruning bound need
    # not be the final makespan: any bound it proves holds): simple_fsdp 1 layer's proof needs 6-8 s of it
    # (results/cut_bounds.md)
    beside = CUT_WALK_BESIDE and ends - time.perf_counter() >= CUT_MIN_SECONDS  # a caller's deadline may be past
    walk = BackgroundCutBound.start(budgeted, _walk_upper(budgeted, hint), ends) if beside else None
    try:
        searched = 0.0  # counted seconds of a prefix search that did not end
        if _prefix_search_fits(problem):
            exact = solve_prefixes(problem, time_limit * PREFIX_SHARE, memory_budget, hint, deterministic=True,
                                   deadline=ends, progress=progress)
            if exact.status == SolveStatus.OPTIMAL:
                return dataclasses.replace(exact, stats=dict(exact.stats, prefix_search=_searched(exact)),
                                           wall_time=time.perf_counter() - started)
            searched = exact.stats["expansions"] / EXPANSIONS_PER_SECOND
            time_limit -= searched
        first = solve_model(problem, time_limit * WHOLE_MODEL_SHARE, memory_budget, hint, deterministic=True,
                            deadline=deadline, progress=progress, max_units=whole_model_units(problem), **options)
        if first.status not in (SolveStatus.FEASIBLE, SolveStatus.HINT_KEPT):
            return first  # proven (optimal, infeasible) or nothing found
        bound = max(first.bound or 0, lower_bounds(problem).makespan)
        if first.makespan <= bound:
            return first  # at a bound already (a scaled model proves nothing of the problem: synthetic 300 tasks)
        left = time_limit - seconds_spent(first, True)
        # on small graphs exact windows first (cheap where CP-SAT's are weak: fsdp_tp 1 layer 155.3 -> 142.5 us in
        # 0.3 s), then CP-SAT's windows from what they reached
        small = _prefix_search_fits(problem)
        expansions = int(left * EXACT_WINDOWS_SHARE * EXPANSIONS_PER_SECOND) if small else 0
        start, exact = improve_by_windows(budgeted, first.schedule, expansions, size=POLISH_WINDOW, deadline=ends,
                                          progress=progress)
        left -= exact["expansions"] / EXPANSIONS_PER_SECOND
        start_sim = (first.simulated if start is first.schedule
                     else validate(problem, start, memory_budget=memory_budget))
        polished = solve_windows(problem, start, left, memory_budget, window=POLISH_WINDOW,
                                 per_window=POLISH_SECONDS_PER_WINDOW, deterministic=True, progress=progress,
                                 deadline=ends, bound=bound, grow=POLISH_GROWTH) if start_sim.makespan > bound else None
        seconds_left = polished.stats.get("seconds_left", 0.0) if polished else left
        if polished is not None and polished.status != SolveStatus.HINT_KEPT:
            final, final_sim = polished.schedule, polished.simulated
        elif start is not first.schedule:
            final, final_sim = start, start_sim
        else:  # no window improved the model's schedule
            final, final_sim = None, first.simulated
        late = {"windows_tried": 0, "windows_improved": 0, "expansions": 0, "stopped_by_wall_clock": False}
        if not small and final_sim.makespan > bound:
            # larger graphs: exact windows from what CP-SAT's reached, around its stalls first, in the counted
            # seconds they left and LATE_EXACT_SHARE of the limit on top
            late_seconds = seconds_left + time_limit * LATE_EXACT_SHARE
            got, late = improve_by_windows(budgeted, final or first.schedule, int(late_seconds * EXPANSIONS_PER_SECOND),
                                           size=POLISH_WINDOW, deadline=ends, progress=progress,
                                           starts=lambda s, sim: window_starts(budgeted, s, sim, POLISH_WINDOW))
            seconds_left = 0.0
            if late["windows_improved"]:
                final, final_sim = got, validate(problem, got, memory_budget=memory_budget)
        fills = {"simulations": 0, "moves": 0, "stopped_by_wall_clock": False, "seconds": 0.0}
        if final_sim.makespan > bound:
            got, fills = _fill_idle(budgeted, final or first.schedule, time_limit * FILL_IDLE_SHARE, ends, progress)
            if fills["moves"]:
                final, final_sim = got, validate(problem, got, memory_budget=memory_budget)
        polish = {k: polished.stats.get(k) for k in ("windows_tried", "windows_improved", "window")} if polished else {}
        stopped = (first.stats.get("stopped_by_wall_clock") or exact["stopped_by_wall_clock"]
                   or late["stopped_by_wall_clock"] or (polished and polished.stats.get("stopped_by_wall_clock"))
                   or fills["stopped_by_wall_clock"])
        stats = dict(first.stats, polish=polish, fill_idle=fills, exact_windows=exact, late_exact_windows=late,
                     stopped_by_wall_clock=bool(stopped))
        if final is None:
            found = dataclasses.replace(first, stats=stats, wall_time=time.perf_counter() - started)
        else:
            at_bound = final_sim.makespan <= bound  # optimal: no schedule is shorter than a lower bound
            message = "; ".join(m for m in (
                first.message, _windows_said("exact windows", exact), polished.message if polished else "",
                _windows_said("exact windows after them", late),
                f"then {fills['moves']} moves into stalls" if fills["moves"] else "",
                "the windows reached a lower bound: optimal" if at_bound else "") if m)
            found = SolveResult(dataclasses.replace(final, method="cpsat"),
                                SolveStatus.OPTIMAL if at_bound else SolveStatus.FEASIBLE, final_sim, None, first.bound,
                                time.perf_counter() - started, first.solver_status, message, stats)
        if seconds_left > searched:  # a search with no more time than the first would end where it did
            found = _prove_with_prefixes(problem, found, seconds_left, memory_budget, ends, progress, started)
        return _bound_by_cuts(budgeted, found, ends, progress, started, walk)
    finally:
        if walk is not None:
            walk.stop()


def _walk_upper(problem: Problem, hint: Schedule | None) -> int:
    """The makespan the cut walk searches below when it starts: the hint's, else the original order's, when
    that schedule holds ``problem``'s budget; else the serial horizon. A makespan over the budget can lie below
    the optimum, and a walk below the optimum proves nothing (a review's case: original 235 us over the
    budget, optimum 254)."""
    schedule = hint if hint is not None else Schedule.original(problem)
    try:
        sim = simulate(problem, schedule)
    except InvalidScheduleError:  # a bad hint is reported where it is used, not here
        return serial_horizon(problem)
    budget = problem.machine.memory_budget
    return sim.makespan if budget is None or sim.peak_memory <= budget else serial_horizon(problem)


def _bound_by_cuts(problem: Problem, found: SolveResult, deadline: float, progress, started: float,
                   walk: BackgroundCutBound | None = None) -> SolveResult:
    """``found`` with the best cut bound (solvers/cuts.py) proven until ``deadline``: OPTIMAL when one proves
    its makespan. From ``walk``, the walk beside the search, or else run here in the wall-clock time the
    schedule's search left (the user's, unused otherwise): the schedule is the same on every run, while a
    slower run may prove less."""
    seconds = deadline - time.perf_counter()
    if found.status == SolveStatus.OPTIMAL or found.schedule is None:
        return found
    if walk is not None:
        cut = walk.result(found.makespan, progress)
        seconds = deadline - time.perf_counter()
        if walk.error and seconds >= CUT_MIN_SECONDS:  # the walk beside failed: walk here in what is left
            cut = cut_bound(problem, found.makespan, int(seconds * CUT_EXPANSIONS_PER_SECOND), deadline=deadline,
                            progress=progress)
    elif seconds >= CUT_MIN_SECONDS:
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
    from solvercast.heuristics import fill_idle  # the heuristics import the core
    from solvercast.heuristics.work import pass_cost

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


def _prefix_search_fits(problem: Problem) -> bool:
    return sum(1 for task in problem.tasks if task.role != Role.FREE) <= PREFIX_MAX_TASKS


def _searched(exact: SolveResult) -> dict:
    return {"expansions": exact.stats["expansions"], "complete": exact.status == SolveStatus.OPTIMAL}


def _prove_with_prefixes(problem: Problem, found: SolveResult, seconds: float, memory_budget: int | None,
                         deadline: float, progress, started: float) -> SolveResult:
    """``found``, or, when the time the windows left suffices and the graph is small enough, what the exact
    prefix search (solvers/prefixes.py) makes of it below its makespan: a proof that it is optimal, or a
    better schedule that is."""
    if found.status == SolveStatus.OPTIMAL or not _prefix_search_fits(problem) or seconds < PREFIX_MIN_SECONDS:
        return found
    exact = solve_prefixes(problem, seconds, memory_budget, found.schedule, deterministic=True, deadline=deadline,
                           progress=progress)
    stats = dict(found.stats, prefix_search=_searched(exact),
                 stopped_by_wall_clock=found.stats.get("stopped_by_wall_clock") or exact.stats["stopped_by_wall_clock"])
    wall = time.perf_counter() - started
    if exact.status != SolveStatus.OPTIMAL:
        return dataclasses.replace(found, stats=stats, wall_time=wall)
    message = "; ".join(m for m in (found.message, exact.message or "the prefix search found the optimum") if m)
    return dataclasses.replace(exact, stats=stats, wall_time=wall, message=message, bound=exact.makespan,
                               solver_status=found.solver_status)


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
    take DETERMINISTIC_WALL_SLACK times ``time_limit`` (one slower than
    planned still reaches its deterministic limit), ending a margin before
    the deadline (DEADLINE_MARGIN_SECONDS, DEADLINE_MARGIN_SHARE).
    ``max_units``: a deterministic search stops at this many units even if
    ``time_limit`` pays for more (``stats["seconds_given"]`` then counts the
    seconds those units were planned to take).

    Returns the better of the solver's schedule and the hint, judged by
    `simulate`; the status says which. Raises `InfeasibleBudgetError` when the
    solver proves no schedule fits the budget.
    """
    t0 = time.perf_counter()
    seconds_given = time_limit  # what `large.seconds_spent` counts this solve's time in
    budget = problem.machine.memory_budget if memory_budget is None else memory_budget
    build_started = t0
    hint_sim = validate(problem, hint, memory_budget=budget) if hint is not None else None

    modelled = problem.num_tasks if window is None else window[1] - window[0]
    # building the model cannot be interrupted: with the deadline nearer than its predicted cost the call
    # would return late (`optimize`'s plan does not start a solver it cannot pay for; this is the wall's guard)
    if deadline is not None and deadline - time.perf_counter() < SOLVER_BUILD_SECONDS_PER_TASK * modelled:
        outcome = Outcome(hint, hint_sim, time.perf_counter() - t0, "NOT_STARTED", {"stopped_by_wall_clock": True})
        return outcome.no_solution("no time left to build the CP-SAT model before the deadline",
                                   "no time left to build the CP-SAT model before the deadline; kept the warm start")
    serial = serial_horizon(problem)
    horizon = hint_sim.makespan if hint_sim is not None else serial
    factor = max(1, math.ceil(horizon / model_horizon_cap(modelled)))
    scaled = scale_problem(problem, factor)
    scaled_hint_sim = simulate(scaled, hint) if hint is not None else None
    model_horizon = scaled_hint_sim.makespan if scaled_hint_sim is not None else -(-serial // factor)

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

    solver = cp_model.CpSolver()
    params = solver.parameters
    params.random_seed = seed
    if deterministic:
        # One worker: CP-SAT's parallel search is a race between its workers (other ranks, other
        # schedules) whatever the time limit. Its interleaved search is deterministic but, measured
        # with OR-Tools 9.15 on 2 cores, overran max_deterministic_time (fsdp_layers 2 layers: 1.09
        # units on a 0.5 limit, ended by the 5 s wall cap) and, on a 21-task fuzz program, kept
        # searching after its last subsolver finished at 0.09 s until the wall cap at 0.87 s. A single
        # worker honours the deterministic limit and stops at a proof.
        params.num_workers = 1
        units = deterministic_limit(time_limit, model)
        if max_units is not None and units > max_units:  # planned as the seconds that many units take
            units, seconds_given = max_units, planned_seconds(max_units, model)
        params.max_deterministic_time = units
    else:
        params.num_workers = workers
        units = time_limit * search_rate(model_kind(model), len(model.m.Proto().constraints))  # probing caps
    # The deterministic limit, which gives the same answer on every rank, normally ends the search
    # (`deterministic_limit`); the wall clock caps the call at time_limit, or, given the caller's deadline,
    # a deterministic search at DETERMINISTIC_WALL_SLACK times that but never past the deadline: on a
    # machine slower than the predicted rate it then still reaches its deterministic limit (the same answer
    # on every rank). What building the model took is left out of the solver's share, and the cap leaves
    # room for what follows the solve (validating the final solution and the kept ones)
    keep = not model.single_stream and budget is not None
    judged = 2 + (solutions_judged(problem.num_tasks) if keep else 0)
    after_solve = judged * problem.num_tasks * VALIDATE_SECONDS_PER_TASK
    wall_cap = max(0.01, time_limit - (time.perf_counter() - t0) - after_solve)
    if deadline is not None:
        until_deadline = deadline - time.perf_counter() - after_solve
        if deterministic:  # slack on the plan, and a margin before the deadline for CP-SAT's return
            until_deadline -= DEADLINE_MARGIN_SECONDS + DEADLINE_MARGIN_SHARE * (deadline - t0)
        wall_cap = max(0.01, min(wall_cap * (DETERMINISTIC_WALL_SLACK if deterministic else 1), until_deadline))
    params.max_time_in_seconds = wall_cap
    # repair_hint helped at ~1k tasks in the prototype, but OR-Tools 9.15 sometimes aborts the whole
    # process with it ("Check failed: heuristics.fixed_search != nullptr", seen with and without
    # fixed_order when the time limit falls early): off unless asked for.
    params.repair_hint = bool(repair_hint and hint is not None)
    bound_presolve(params, units)
    if debug_hint and hint is not None:
        model.check_hint()
        # and CP-SAT aborts the process if its presolve turns the feasible hint infeasible (OR-Tools
        # issues 4373, 4693): the first solution must stay the hint
        params.debug_crash_if_presolve_breaks_hint = True
    if log_progress:
        params.log_search_progress = True
        if callable(log_progress):
            solver.log_callback = log_progress
            params.log_to_stdout = False
    build_time = time.perf_counter() - build_started
    callback = _Solutions(model, progress, factor, keep=solutions_judged(problem.num_tasks) if keep else 0)
    status = solver.Solve(model.m, callback)
    wall = time.perf_counter() - t0
    name = solver.StatusName(status)
    # a bound on the scaled model (durations rounded up) can exceed the real optimum: reported unscaled only
    # CP-SAT's optimum and bound are the problem's only for the whole, unscaled model with the makespan
    # objective (a scaled model's durations are rounded up; reduced models solve part of it), and, with
    # several compute streams, only without synchronous comm ops (their program order is approximated
    # by start times, which excludes some valid schedules)
    sync_comm = any(not problem.is_async_comm(c) for c in problem.comm_tasks)
    exact = (factor == 1 and not fixed_order and window is None and not left_shift
             and not (sync_comm and problem.machine.compute_streams > 1))
    bound = int(solver.BestObjectiveBound()) if status in (cp_model.OPTIMAL, cp_model.FEASIBLE) and exact else None
    # a search that ended without a proof was ended by a limit: by the wall clock when it reached its cap,
    # or when it stopped short of the deterministic limit (a loaded machine: the wall clock came first)
    stopped_by_wall = deterministic and status in (cp_model.FEASIBLE, cp_model.UNKNOWN) and (
        solver.WallTime() >= wall_cap * 0.98 or solver.deterministic_time < units * 0.98)
    stats = {"scale": factor, "stopped_by_wall_clock": stopped_by_wall, "build_time": build_time,
             "deterministic_time": solver.deterministic_time, "deterministic_limit": units if deterministic else None,
             "seconds_given": seconds_given,
             "solver_wall_time": solver.WallTime(), "variables": len(model.m.Proto().variables),
             "constraints": len(model.m.Proto().constraints), "branches": solver.NumBranches()}

    outcome = Outcome(hint, hint_sim, wall, name, stats)
    if status == cp_model.INFEASIBLE:
        raise InfeasibleBudgetError(
            f"CP-SAT proved that no schedule keeps peak memory within {budget} B"
            + (f" (smallest peak a heuristic found: {hint_sim.peak_memory} B)" if hint_sim else ""),
            best_peak=hint_sim.peak_memory if hint_sim else None)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return outcome.no_solution(f"CP-SAT found no schedule in {time_limit:g} s ({name})",
                                   f"CP-SAT found no solution in {time_limit:g} s ({name}); kept the warm start")

    final = model.extract(solver)
    objective = int(solver.Value(model.makespan)) * factor
    # the newest kept solutions, the final one's repeat left out: each costs a simulation
    earlier = [c for c in reversed(callback.schedules) if c != final][:solutions_judged(problem.num_tasks)]
    schedule, sim, errors = best_valid(problem, [final] + earlier, budget, left_shift)
    if schedule is None:
        if hint is None:  # with several streams, re-simulation can put every solution over the budget
            return outcome.no_solution(f"CP-SAT's schedules failed validation ({errors[0]})", "")
        return outcome.invalid("CP-SAT's", errors[0], objective, bound)
    if schedule is not final:
        status = cp_model.FEASIBLE  # an earlier solution: no longer the proven optimum
        stats["earlier_solution"] = f"the final one: {errors[0]}" if 0 in errors else "the final one simulated slower"
    proven = status == cp_model.OPTIMAL and exact
    return outcome.better_of(problem, schedule, sim, proven=proven, hint_proven=proven, objective=objective, bound=bound,
                             left_shift=left_shift, proved_hint="CP-SAT proved the warm start optimal",
                             kept_hint="CP-SAT found nothing better than the warm start")
