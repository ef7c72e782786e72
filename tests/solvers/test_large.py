"""Reduced models for large graphs: placement (compute order fixed) and windowed search."""

import pytest

from tests.support import brute_force
from solvercast import Machine, Problem, Role, Schedule, Task, simulate, validate
from solvercast.ir.bounds import lower_bounds
from solvercast.heuristics import best_heuristic
from solvercast.ir.simulate import idle_points
from solvercast.solvers.large import solve_placement, solve_windows, window_starts
from solvercast.solvers.result import SolveStatus
from solvercast.testing import random_problem


def test_idle_points_find_where_the_default_stream_waits():
    """mm_a(100), mm_b(100), ag(50) -> wait -> use(10): in the original order the wait (position 3) blocks
    stream 0 from 200 (mm_b's end) to 250 (ag's end): 50 idle."""
    tasks = (Task("mm_a", Role.COMPUTE, 100), Task("mm_b", Role.COMPUTE, 100), Task("ag", Role.COMM, 50),
             Task("wait", Role.WAIT, waits_for=2), Task("use", Role.COMPUTE, 10))
    p = Problem(tasks, ((2, 3), (3, 4), (0, 4)), machine=Machine())
    original = Schedule.original(p)
    assert idle_points(p, original, simulate(p, original)) == [(50, 3)]


@pytest.mark.parametrize("seed", range(3))
def test_window_starts_put_the_windows_tried_most_last(seed):
    """Starts ordered as before (idle points, then the slide), except that those that kept the incumbent
    more often come later; among equals the order is kept."""
    p = random_problem(seed, 40, sync_overhead=3)
    s = Schedule.original(p)
    sim = simulate(p, s)
    starts = window_starts(p, s, sim, 8)
    assert len(starts) >= 4
    tries = {starts[0]: 2, starts[1]: 1, starts[3]: 1}
    assert window_starts(p, s, sim, 8, tries) == (
        [starts[2]] + starts[4:] + [starts[1], starts[3], starts[0]])
    assert window_starts(p, s, sim, 8, {}) == starts


def _scripted_windows(monkeypatch, seed: int, gain_makespan: int):
    """Windows of 8 tasks over a random program, their solves scripted: the second window gains (the same
    schedule, its makespan lowered by ``gain_makespan``), every other keeps the incumbent. Returns the
    window starts in their first order and the starts tried."""
    import dataclasses

    import solvercast.solvers.large as large

    p = random_problem(seed, 40, sync_overhead=3)
    s = Schedule.original(p)
    sim = simulate(p, s)
    starts = window_starts(p, s, sim, 8)
    tried = []

    def scripted(problem, *, hint, window, **options):
        tried.append(window[0])
        hint_sim = simulate(problem, hint)
        if len(tried) != 2:
            return large.SolveResult(hint, SolveStatus.HINT_KEPT, hint_sim, None, None, 0.01)
        gained = dataclasses.replace(hint_sim, makespan=hint_sim.makespan - gain_makespan)
        return large.SolveResult(hint, SolveStatus.FEASIBLE, gained, None, None, 0.01)

    monkeypatch.setattr(large, "solve_model", scripted)
    solve_windows(p, s, time_limit=60, window=8, per_window=0.1)
    return starts, tried


@pytest.mark.parametrize("seed", [0, 2])
def test_after_a_gain_the_window_that_kept_the_incumbent_comes_last(seed, monkeypatch):
    """The search itself, its windows scripted: the first window keeps the incumbent, the second finds a
    shorter schedule; the queue then starts over with every other start before the first one (before this
    rule it went straight back to it)."""
    starts, tried = _scripted_windows(monkeypatch, seed, gain_makespan=1)
    assert tried[:2] == starts[:2]
    assert tried[2:2 + len(starts)] == starts[1:] + [starts[0]]


@pytest.mark.parametrize("seed", [0, 2])
def test_a_gain_of_earlier_starts_alone_goes_on_with_the_pass(seed, monkeypatch):
    """A window that only moves starts earlier (the same makespan) does not start the pass over: every start
    is tried once, in order, before any again (starting over re-tried the windows already tried, and larger
    windows waited)."""
    starts, tried = _scripted_windows(monkeypatch, seed, gain_makespan=0)
    assert tried[:len(starts)] == starts


@pytest.mark.parametrize("gain_at", [None, 8, 16])
def test_windows_grown_to_the_whole_graph_start_over_after_a_gain(gain_at, monkeypatch):
    """Scripted windows of 8 tasks growing 2x over 40 tasks (8, 16, 32, 40): when a grown one found a
    shorter schedule, the windows start over at 8 tasks once the whole graph has been tried (the larger
    windows' gains give the small ones new ground); when none did, or only one of 8 tasks (which the
    windows of 8 followed up before growing), the search ends there."""
    import dataclasses

    import solvercast.solvers.large as large

    p = random_problem(0, 40, sync_overhead=3)
    sizes = []

    def scripted(problem, *, hint, window, **options):
        sizes.append(window[1] - window[0])
        hint_sim = simulate(problem, hint)
        first_of_size = sizes.count(gain_at) == 1 and sizes[-1] == gain_at
        if not first_of_size:
            return large.SolveResult(hint, SolveStatus.HINT_KEPT, hint_sim, None, None, 0.01)
        shorter = dataclasses.replace(hint_sim, makespan=hint_sim.makespan - 1)
        return large.SolveResult(hint, SolveStatus.FEASIBLE, shorter, None, None, 0.01)

    monkeypatch.setattr(large, "solve_model", scripted)
    solve_windows(p, Schedule.original(p), time_limit=60, window=8, per_window=0.1, grow=2.0)
    grown = sizes.index(40)
    assert sorted(set(sizes[:grown + 1])) == [8, 16, 32, 40]
    if gain_at == 16:  # the first window of 16 tasks gained
        assert 8 in sizes[grown:]
    else:
        assert set(sizes[grown:]) == {40}


@pytest.mark.parametrize("seed", range(8))
def test_a_window_over_everything_is_the_exact_model(seed):
    p = random_problem(seed, 7, sync_overhead=(seed % 2) * 4)
    budget = simulate(p, Schedule.original(p)).peak_memory
    best, _ = brute_force(p, budget)
    res = solve_windows(p, Schedule.original(p), time_limit=10, memory_budget=budget, window=p.num_tasks)
    assert res.simulated.makespan == best
    validate(p, res.schedule, memory_budget=budget)


@pytest.mark.parametrize("seed", [4, 14, 16])
def test_windows_that_stall_grow_until_they_reach_the_optimum(seed):
    """Programs (found by search over seeds) whose original order no window of 3 tasks can improve to the
    optimum: with ``grow`` the windows widen once all of a size have been tried, up to the whole graph,
    whose model is exact (brute force judges both)."""
    p = random_problem(seed, 9, sync_overhead=(seed % 2) * 4)
    start = Schedule.original(p)
    budget = simulate(p, start).peak_memory
    best, _ = brute_force(p, budget)
    stalled = solve_windows(p, start, time_limit=30, memory_budget=budget, window=3, per_window=1)
    assert stalled.simulated.makespan > best  # the premise: small windows alone stop above the optimum
    grown = solve_windows(p, start, time_limit=30, memory_budget=budget, window=3, per_window=1, grow=2)
    validate(p, grown.schedule, memory_budget=budget)
    assert grown.simulated.makespan == best
    assert grown.stats["window"] > 3


@pytest.mark.parametrize("grow", [1.0, 0.5])
def test_windows_refuse_a_growth_that_would_not_grow(grow):
    p = random_problem(0, 9)
    with pytest.raises(ValueError, match="grow"):
        solve_windows(p, Schedule.original(p), time_limit=1, window=3, grow=grow)


@pytest.mark.parametrize("seed", range(4))
def test_small_windows_and_placement_are_valid_and_never_worse(seed):
    p = random_problem(seed, 60, sync_overhead=3)
    budget = simulate(p, Schedule.original(p)).peak_memory
    start = Schedule.original(p)
    windows = solve_windows(p, start, time_limit=2, memory_budget=budget, window=20, per_window=0.5)
    validate(p, windows.schedule, memory_budget=budget)
    assert windows.simulated.makespan <= simulate(p, start).makespan
    assert windows.stats["windows_tried"] >= 1
    if windows.status == SolveStatus.HINT_KEPT:
        assert windows.schedule == start

    hint = best_heuristic(p, budget)
    placed = solve_placement(p, hint, time_limit=1, memory_budget=budget)
    validate(p, placed.schedule, memory_budget=budget)
    assert placed.simulated.makespan <= simulate(p, hint).makespan
    compute = [t for t in hint.order if p.tasks[t].role == Role.COMPUTE]
    assert [t for t in placed.schedule.order if p.tasks[t].role == Role.COMPUTE] == compute


def test_auto_uses_windowed_search_past_the_monolithic_size(monkeypatch):
    from solvercast import optimize
    from solvercast.pipeline import solve
    from solvercast.models import build

    monkeypatch.setattr(solve, "AUTO_CPSAT_MAX_TASKS", 50)
    # seed 5: its best heuristic is above the lower bound, so a solver runs (at the bound none would)
    gm = build("synthetic", tasks=120, seed=5)
    res = optimize(gm, time_limit=4)
    hint = best_heuristic(res.problem, memory_budget=res.problem.machine.memory_budget)
    assert simulate(res.problem, hint).makespan > lower_bounds(res.problem).makespan
    assert res.report.solver == "cpsat-windows"
    validate(res.problem, res.schedule)


@pytest.mark.parametrize("streams", [1, 2])
@pytest.mark.parametrize("seed", range(6))
def test_a_window_model_keeps_the_past_and_the_future_and_never_loses(seed, streams):
    """Only positions lo:hi are modelled: the tasks before keep their positions, the tasks after keep
    their order at the end, and the result is valid and no worse (makespan, then how early the shifted
    tasks start)."""
    from solvercast.pipeline.portfolio import solve_cpsat

    p = random_problem(seed, 40, compute_streams=streams, sync_overhead=3, comm_fraction=0.25)
    budget = simulate(p, Schedule.original(p)).peak_memory
    hint = best_heuristic(p, budget)
    before = simulate(p, hint)
    lo, hi = 5 + seed, 25 + seed
    res = solve_cpsat(p, time_limit=3, memory_budget=budget, hint=hint, window=(lo, hi), left_shift=True,
                      debug_hint=True)
    after = validate(p, res.schedule, memory_budget=budget)
    assert res.schedule.order[:lo] == hint.order[:lo]
    assert res.schedule.order[hi:] == hint.order[hi:]
    assert set(res.schedule.order[lo:hi]) == set(hint.order[lo:hi])
    # what a window lowers after the makespan: the collectives' starts and launches with one compute
    # stream, every start with several (written out here, not read from the solver)
    shifted = p.comm_tasks if streams == 1 else [t for t, task in enumerate(p.tasks) if task.role != Role.FREE]
    key = lambda sim: (sim.makespan, sum(sim.start[t] for t in shifted) + sum(sim.launch.values()))  # noqa: E731
    assert key(after) <= key(before)
    if res.status != SolveStatus.HINT_KEPT:
        assert key(after) < key(before)


def test_left_shift_puts_the_makespan_first():
    """x(50) -> c(200) -> w -> y(1), and five 1 ns tasks issued after y: makespan 256 (they wait for
    c). Moving them before the wait gives 251, which a window over everything must find."""
    from solvercast.pipeline.portfolio import solve_cpsat

    tasks = [Task("x", Role.COMPUTE, 50), Task("c", Role.COMM, 200), Task("w", Role.WAIT, waits_for=1),
             Task("y", Role.COMPUTE, 1)] + [Task(f"a{i}", Role.COMPUTE, 1) for i in range(5)]
    p = Problem(tuple(tasks), ((0, 1), (1, 2), (2, 3)), machine=Machine())
    hint = Schedule.original(p)
    assert simulate(p, hint).makespan == 256
    res = solve_cpsat(p, time_limit=5, hint=hint, window=(0, p.num_tasks), left_shift=True, debug_hint=True)
    assert res.simulated.makespan == 251


def test_reduced_models_report_no_bound():
    p = random_problem(1, 30, sync_overhead=3)
    budget = simulate(p, Schedule.original(p)).peak_memory
    placed = solve_placement(p, best_heuristic(p, budget), time_limit=2, memory_budget=budget)
    assert placed.bound is None and placed.status != SolveStatus.OPTIMAL


def test_windows_launch_collectives_sooner_and_reach_the_optimum():
    """fsdp_layers 2 layers under a budget of 1.0 x the traced order's peak: the heuristic leaves the
    compute stream idle while the gradient reduce-scatters run; the optimum, which is the lower bound,
    issues compute that feeds no collective after the reduce-scatters' launches instead. Windows that pull
    every start earlier keep that compute ahead (134.0 us where the bound is 129.9); windows that pull the
    collectives earlier reach the bound (deterministic limits, a deadline far enough not to end any)."""
    import time

    from solvercast import extract_problem, lower_bounds
    from solvercast.models import build
    from solvercast.pipeline.tuning import PORTFOLIO_TUNING

    p = extract_problem(build("fsdp_layers", layers=2))
    budget = simulate(p, Schedule.original(p)).peak_memory
    p = p.with_budget(budget)
    hint = best_heuristic(p, budget)
    bound = lower_bounds(p).makespan
    assert simulate(p, hint).makespan > bound
    # as the polish runs them: 40-task windows that grow once all have been tried (since windows take
    # program positions each 40-task window ends its 0.08 units without a gain here, grown they reach the bound)
    res = solve_windows(p, hint, time_limit=5, memory_budget=budget, window=40, per_window=0.5,
                        deadline=time.perf_counter() + 300, bound=bound, grow=PORTFOLIO_TUNING.polish_growth)
    assert not res.stats["stopped_by_wall_clock"]
    assert validate(p, res.schedule, memory_budget=budget).makespan == bound
    # at the bound nothing is shorter: no window is tried from there
    again = solve_windows(p, res.schedule, time_limit=5, memory_budget=budget, window=40, per_window=0.5, bound=bound)
    assert again.stats["windows_tried"] == 0 and again.schedule is res.schedule


def _output_then_overlap(streams: int = 1) -> Problem:
    """g(1) makes the graph output G (100 B, never freed) and comes first; then a(10) -> c(20, async, output
    C 60 B) -> w -> d(1) reads C, and x(20) makes X (60 B) for y(1). Overlapping x with c needs G + C + X =
    220 B."""
    from solvercast import Buffer

    tasks = (Task("g", Role.COMPUTE, 1), Task("a", Role.COMPUTE, 10), Task("c", Role.COMM, 20),
             Task("w", Role.WAIT, waits_for=2), Task("d", Role.COMPUTE, 1), Task("x", Role.COMPUTE, 20),
             Task("y", Role.COMPUTE, 1))
    buffers = (Buffer("G", 100, 0, is_output=True), Buffer("C", 60, 2, users=(4,)), Buffer("X", 60, 5, users=(6,)))
    return Problem(tasks, ((0, 1), (0, 5), (1, 2), (2, 3), (3, 4), (5, 6)), buffers,
                   machine=Machine(compute_streams=streams))


@pytest.mark.parametrize("streams", [1, 2])
@pytest.mark.parametrize("budget", [220, 160])
def test_a_window_counts_the_outputs_made_before_it(budget, streams):
    """An output produced before the window stays resident through it: the window's memory model must
    count it, or its schedules break the budget (and are thrown away by `validate`). From the order that
    hides nothing, a window over all but g reaches the brute-force optimum: x under c when 220 B fit,
    and no overlap at 160 B."""
    from solvercast.pipeline.portfolio import solve_cpsat

    p = _output_then_overlap(streams)
    hint = Schedule(order=(0, 1, 2, 3, 4, 5, 6), streams={}, method="hint")
    optimum, _ = brute_force(p, budget)
    res = solve_cpsat(p, time_limit=3, memory_budget=budget, hint=hint, window=(1, p.num_tasks), left_shift=True,
                      debug_hint=True)
    assert "failed validation" not in res.message
    assert validate(p, res.schedule, memory_budget=budget).makespan == optimum


def test_with_two_streams_a_window_counts_what_the_past_still_holds_when_it_starts():
    """p(1) makes B (100 B) for L(50, half the GPU), which runs on stream 1 from t=1; the window holds
    q(30) and x(20), making X (60 B) for y(1). Under a 150 B budget X cannot be born while L holds B,
    though L is in the past: with several streams a window counts memory over time, and the past may
    still run when it starts. (Counting only what the window's tasks hold, x at t=1 was feasible.)"""
    from ortools.sat.python import cp_model

    from solvercast import Buffer
    from solvercast.solvers.cpsat_model import CpsatModel
    from solvercast.solvers.scope import Scope

    tasks = (Task("p", Role.COMPUTE, 1), Task("L", Role.COMPUTE, 50, 0.5), Task("q", Role.COMPUTE, 30, 0.5),
             Task("x", Role.COMPUTE, 20, 0.5), Task("y", Role.COMPUTE, 1))
    buffers = (Buffer("B", 100, 0, users=(1,)), Buffer("X", 60, 3, users=(4,)))
    p = Problem(tasks, ((0, 1), (3, 4)), buffers, machine=Machine(compute_streams=2))
    hint = Schedule(order=(0, 1, 2, 3, 4), streams={0: 0, 1: 1, 2: 1, 3: 1, 4: 1}, method="hint")
    sim = validate(p, hint, memory_budget=150)

    def feasible(x_start):
        model = CpsatModel(p, sim.makespan, 150, Scope.of_window(p, hint, sim, 2, 5))
        model.add_variables()
        model.add_constraints()
        model.m.Add(model.start[3] == x_start)
        return cp_model.CpSolver().Solve(model.m) in (cp_model.OPTIMAL, cp_model.FEASIBLE)

    assert not feasible(1) and not feasible(31)
    assert feasible(51)  # once L has freed B


def test_a_window_under_a_budget_takes_program_positions():
    """Windows with one compute stream and a budget order their tasks by positions (small domains that
    propagate); the past's constants take the negative positions, in the incumbent's order."""
    from solvercast.solvers.cpsat_model import CpsatModel
    from solvercast.solvers.scope import Scope

    p = random_problem(3, 40, sync_overhead=3, comm_fraction=0.25)
    budget = simulate(p, Schedule.original(p)).peak_memory
    hint = best_heuristic(p, budget)
    sim = simulate(p, hint)
    model = CpsatModel(p, sim.makespan, budget, Scope.of_window(p, hint, sim, 10, 30))
    assert model.positions
    assert [model.ptime[t] for t in hint.order[:10] if t in model.ptime] == sorted(
        model.ptime[t] for t in hint.order[:10] if t in model.ptime)
    assert all(model.ptime[t] < 0 for t in hint.order[:10] if t in model.ptime)


def test_a_view_of_the_past_is_issued_before_the_window_first_task():
    """a makes B (100 B), read only through the view V; x makes X (100 B) for an async collective. In the
    window after a, V frees B: the model puts V right after a, so B and X never coexist (budget 150). Its
    order must keep V before x, which shares V's program position (the schedule was
    issued x first and broke the budget)."""
    from solvercast import Buffer
    from solvercast.pipeline.portfolio import solve_cpsat

    tasks = (Task("a", Role.COMPUTE, 1), Task("x", Role.COMPUTE, 1), Task("coll", Role.COMM, 50),
             Task("w", Role.WAIT, waits_for=2), Task("V", Role.FREE), Task("c", Role.COMPUTE, 50))
    buffers = (Buffer("B", 100, 0, users=(4,)), Buffer("X", 100, 1, users=(2,)))
    p = Problem(tasks, ((0, 4), (4, 5), (1, 2), (2, 3)), buffers, machine=Machine())
    hint = Schedule(order=(0, 4, 5, 1, 2, 3), streams={}, method="hint")
    optimum, _ = brute_force(p, 150)
    res = solve_cpsat(p, time_limit=2, memory_budget=150, hint=hint, window=(1, 6), left_shift=True, debug_hint=True)
    assert "failed validation" not in res.message
    assert validate(p, res.schedule, memory_budget=150).makespan == optimum
