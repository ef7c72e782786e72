"""MILP (PuLP: HiGHS / CBC) against brute force, warm starts, statuses and limits."""

import pytest

from tests.support import brute_force
from solvercast.ir.bounds import lower_bounds
from solvercast.errors import InfeasibleBudgetError, UnsupportedProblemError
from solvercast.ir.problem import Buffer, Machine, Problem, Role, Task
from solvercast.ir.schedule import Schedule
from solvercast.ir.simulate import simulate, validate
from solvercast.solvers.milp import highs_available, solve_milp
from solvercast.solvers.result import SolveStatus
from solvercast.testing import random_problem

BACKENDS = ["cbc"] + (["highs"] if highs_available() else [])


def _tiny(seed, compute_streams=1):
    return random_problem(seed, 6 + seed % 2, sync_overhead=4 * (seed % 3 == 0), compute_streams=compute_streams)


def _binding_budget(p):
    """A budget between the memory lower bound and the original order's peak;
    the original peak if brute force finds nothing within it."""
    lo = lower_bounds(p).memory
    hi = simulate(p, Schedule.original(p)).peak_memory
    budget = (lo + hi) // 2
    best, _ = brute_force(p, budget)
    if best is None:
        budget = hi
        best, _ = brute_force(p, budget)
    return budget, best


@pytest.mark.parametrize("seed", range(32))
def test_matches_brute_force_under_budget(seed):
    p = _tiny(seed)
    budget, best = _binding_budget(p)
    r = solve_milp(p, time_limit=20, memory_budget=budget)
    assert r.status == SolveStatus.OPTIMAL
    sim = validate(p, r.schedule, memory_budget=budget)
    assert sim.makespan == r.makespan == best
    assert r.objective == best
    assert sim.peak_memory <= budget


@pytest.mark.parametrize("seed", range(100, 110))
def test_two_compute_streams_match_brute_force(seed):
    p = _tiny(seed, compute_streams=2)
    best, _ = brute_force(p)
    r = solve_milp(p, time_limit=20)
    assert r.status == SolveStatus.OPTIMAL
    assert validate(p, r.schedule).makespan == r.makespan == best


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", [0, 3, 7])
def test_backends_agree(backend, seed):
    p = _tiny(seed)
    budget, best = _binding_budget(p)
    r = solve_milp(p, time_limit=20, memory_budget=budget, solver=backend)
    assert r.status == SolveStatus.OPTIMAL
    assert r.makespan == best
    assert r.stats["solver"] == backend


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", [1, 4, 9, 12])
def test_warm_start_never_worse_than_hint(backend, seed):
    p = _tiny(seed)
    hint = Schedule.original(p)
    hint_ms = simulate(p, hint).makespan
    best, _ = brute_force(p)
    r = solve_milp(p, time_limit=20, hint=hint, solver=backend)
    assert r.makespan <= hint_ms
    assert r.makespan == best
    if r.schedule is hint:
        assert r.status in (SolveStatus.OPTIMAL, SolveStatus.HINT_KEPT) and r.message
    else:
        assert r.status == SolveStatus.OPTIMAL and r.makespan < hint_ms


def _hand_problem(sync=0):
    """a(10) -> all_reduce c(30) -> wait w -> d(5); b(20) independent, read by d.

    With sync 0 the optimum is the original order a, c, b, w, d: a runs 0-10,
    c is launched at 10 and runs 10-40 while b runs 10-30 on the compute
    stream, w ends at 40, d runs 40-45. Makespan 45 = a + c + d, the critical
    path, so no schedule is better. Issuing b before c (a, b, c, w, d) delays
    the launch to 30: c 30-60, d 60-65, makespan 65.
    """
    tasks = (
        Task("a", Role.COMPUTE, 10),
        Task("c", Role.COMM, 30, op="all_reduce"),
        Task("b", Role.COMPUTE, 20),
        Task("w", Role.WAIT, waits_for=1),
        Task("d", Role.COMPUTE, 5),
    )
    edges = ((0, 1), (1, 3), (3, 4), (2, 4))
    buffers = (
        Buffer("x", 8, None, users=(0, 2)),
        Buffer("a_out", 4, 0, users=(1,)),
        Buffer("c_out", 4, 1, users=(3, 4)),
        Buffer("b_out", 4, 2, users=(4,)),
        Buffer("d_out", 4, 4, is_output=True),
    )
    return Problem(tasks, edges, buffers, Machine(sync_overhead=sync), name="hand")


def test_hand_built_optimum_from_a_bad_hint():
    p = _hand_problem()
    bad = Schedule(order=(0, 2, 1, 3, 4))
    assert simulate(p, bad).makespan == 65
    assert simulate(p, Schedule.original(p)).makespan == 45
    for backend in BACKENDS:
        r = solve_milp(p, hint=bad, solver=backend)
        assert r.status == SolveStatus.OPTIMAL
        assert r.makespan == 45 and r.objective == 45
        assert r.schedule.order.index(1) < r.schedule.order.index(2)  # c issued before b


def test_hand_built_optimal_hint_is_kept():
    p = _hand_problem()
    hint = Schedule.original(p)
    r = solve_milp(p, hint=hint)
    assert r.schedule is hint
    assert r.status == SolveStatus.OPTIMAL and r.makespan == 45 and "warm start" in r.message


def test_infeasible_budget_raises():
    p = _tiny(2)
    budget = lower_bounds(p).memory - 1
    assert brute_force(p, budget)[0] is None
    with pytest.raises(InfeasibleBudgetError):
        solve_milp(p, memory_budget=budget)


def test_limits_are_explicit():
    with pytest.raises(UnsupportedProblemError, match="cpsat"):
        solve_milp(random_problem(0, 25))
    with pytest.raises(UnsupportedProblemError):
        solve_milp(random_problem(0, 6, compute_streams=2), memory_budget=10**6)
    with pytest.raises(UnsupportedProblemError):
        solve_milp(random_problem(0, 6, compute_streams=3))
    with pytest.raises(ValueError):
        solve_milp(_hand_problem(), solver="gurobi")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("time_limit", [0.01, 0.2, 0.4])
def test_short_time_limits_keep_a_valid_answer(backend, time_limit):
    """Short limits: no exception (CBC may crash or claim "Integer infeasible"
    after a MIP start at some limits), never worse than the warm start."""
    p = random_problem(5, 15, sync_overhead=4)
    hint = Schedule.original(p)
    r = solve_milp(p, time_limit=time_limit, hint=hint, solver=backend)
    validate(p, r.schedule)
    assert r.makespan <= simulate(p, hint).makespan
    if r.status == SolveStatus.HINT_KEPT:
        assert r.schedule is hint and r.message


def test_coexists_with_cpsat_and_agrees():
    from solvercast.pipeline.portfolio import solve_cpsat

    for seed in (0, 3):
        p = random_problem(seed, 9, sync_overhead=4)
        budget = simulate(p, Schedule.original(p)).peak_memory
        a = solve_cpsat(p, time_limit=10, memory_budget=budget, deterministic=True)
        b = solve_milp(p, time_limit=20, memory_budget=budget)
        assert b.status == SolveStatus.OPTIMAL
        # both proofs: CP-SAT proves these in milliseconds of deterministic time (its limit here: 1.0)
        assert a.status == SolveStatus.OPTIMAL and not a.stats["stopped_by_wall_clock"]
        assert a.makespan == b.makespan
