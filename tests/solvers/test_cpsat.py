"""CP-SAT against brute force on tiny graphs, on the zoo, and its promises (determinism, fallbacks, errors)."""

import pytest
from ortools.sat.python import cp_model

from tests.support import brute_force
from solvercast import InfeasibleBudgetError, Schedule, extract_problem, lower_bounds, simulate, validate
from solvercast.heuristics import best_heuristic
from solvercast.models import build, list_models
from solvercast.pipeline.portfolio import solve_cpsat
from solvercast.solvers.cpsat_model import CpsatModel
from solvercast.solvers.result import SolveStatus
from solvercast.testing import random_problem


def binding_case(seed, streams, n=7):
    """A random tiny problem and a budget between its memory bound and its original peak that still
    admits some schedule (the original peak if nothing tighter does)."""
    p = random_problem(seed, n, compute_streams=streams, sync_overhead=(seed % 3) * 4)
    original_peak = simulate(p, Schedule.original(p)).peak_memory
    budget = (lower_bounds(p).memory + original_peak) // 2
    best, best_schedule = brute_force(p, budget)
    if best is None:
        budget = original_peak
        best, best_schedule = brute_force(p, budget)
    return p, budget, best, best_schedule


def warm_start(p, budget, fallback):
    try:
        return best_heuristic(p, memory_budget=budget)
    except InfeasibleBudgetError:
        return fallback  # no heuristic holds this budget: start from a brute-force schedule


@pytest.mark.parametrize("seed", range(50))
def test_one_stream_matches_brute_force_under_binding_budget(seed):
    p, budget, best, best_schedule = binding_case(seed, 1)
    res = solve_cpsat(p, time_limit=5, memory_budget=budget, hint=warm_start(p, budget, best_schedule),
                      debug_hint=True)
    assert res.simulated.makespan == best
    validate(p, res.schedule, memory_budget=budget)


@pytest.mark.parametrize("seed", range(12))
def test_two_streams_match_brute_force_without_budget(seed):
    p = random_problem(seed, 6, compute_streams=2, sync_overhead=(seed % 3) * 4)
    best, _ = brute_force(p, None)
    res = solve_cpsat(p, time_limit=5, hint=best_heuristic(p), debug_hint=True)
    assert res.simulated.makespan == best


@pytest.mark.parametrize("seed", range(12))
def test_two_streams_with_budget_are_valid_and_never_worse_than_the_hint(seed):
    """With several compute streams memory is judged over time; re-simulating the model's timing may
    start a producer earlier than the model did, so exactness is not claimed (see cpsat.py)."""
    p, budget, best, best_schedule = binding_case(seed, 2, n=6)
    hint = warm_start(p, budget, best_schedule)
    res = solve_cpsat(p, time_limit=5, memory_budget=budget, hint=hint, debug_hint=True)
    validate(p, res.schedule, memory_budget=budget)
    assert best <= res.simulated.makespan <= simulate(p, hint).makespan


@pytest.mark.parametrize("name", list_models())
def test_zoo_models_valid_within_budget_and_never_slower_than_best_heuristic(name):
    p = extract_problem(build(name))
    budget = simulate(p, Schedule.original(p)).peak_memory
    hint = best_heuristic(p, memory_budget=budget)
    res = solve_cpsat(p, time_limit=3, memory_budget=budget, hint=hint, debug_hint=True)
    validate(p, res.schedule, memory_budget=budget)
    assert res.simulated.makespan <= simulate(p, hint).makespan
    if res.status == SolveStatus.OPTIMAL:
        assert res.bound is not None and res.bound <= res.simulated.makespan


def test_deterministic_solves_repeat_exactly():
    p = extract_problem(build("tp_block", layers=2))
    budget = simulate(p, Schedule.original(p)).peak_memory
    hint = best_heuristic(p, memory_budget=budget)
    first = solve_cpsat(p, time_limit=2, memory_budget=budget, hint=hint, deterministic=True)
    second = solve_cpsat(p, time_limit=2, memory_budget=budget, hint=hint, deterministic=True)
    assert first.schedule == second.schedule


def test_budget_below_any_schedule_is_proven_infeasible():
    p = random_problem(3, 6)
    with pytest.raises(InfeasibleBudgetError, match="no schedule keeps peak memory"):
        solve_cpsat(p, time_limit=5, memory_budget=lower_bounds(p).memory - 1)


def test_a_model_that_finds_its_feasible_warm_start_infeasible_proves_nothing(monkeypatch):
    """CP-SAT's INFEASIBLE is a proof only when no schedule within the budget is at hand: with a warm start that
    `simulate` keeps within the budget (CP-SAT once answered INFEASIBLE on a window whose hint, fixed, solved),
    the warm start is kept and no InfeasibleBudgetError claims a proof; without one, the error stands. The
    wrong answer is stood in for by a model no schedule meets."""
    from solvercast.solvers import cpsat

    p = random_problem(3, 6)
    hint = best_heuristic(p)
    budget = simulate(p, hint).peak_memory
    memory_rule = CpsatModel._memory

    def stricter(model):  # a memory rule that no schedule meets
        memory_rule(model)
        model.m.AddBoolOr([])

    monkeypatch.setattr(CpsatModel, "_memory", stricter)
    res = cpsat.solve_model(p, time_limit=1, memory_budget=budget, hint=hint)
    assert res.status == SolveStatus.HINT_KEPT and res.schedule == hint and res.stats["infeasible_with_feasible_hint"]
    with pytest.raises(InfeasibleBudgetError, match="no schedule keeps peak memory"):
        cpsat.solve_model(p, time_limit=1, memory_budget=budget)


def test_without_hint_and_without_time_there_is_no_disguised_answer():
    p = extract_problem(build("fsdp_layers", layers=4))
    res = solve_cpsat(p, time_limit=0.0001, memory_budget=lower_bounds(p).memory + 1)
    if res.schedule is None:
        assert res.status == SolveStatus.NO_SOLUTION and "found no schedule" in res.message
    else:  # it did find one that fast: then it must be valid
        validate(p, res.schedule, memory_budget=lower_bounds(p).memory + 1)


def test_the_kept_solution_that_simulates_best_is_returned():
    """With several streams the model is not the simulator: of the solutions CP-SAT reports, the one
    `validate` accepts with the lowest simulated makespan wins, whichever came last. Candidates here:
    the original order (valid, slow), an unbudgeted nondelay order (faster, over the budget), the best
    heuristic within the budget (valid, faster than the original)."""
    from solvercast.heuristics import nondelay_schedule
    from solvercast.solvers.result import best_valid as _best_valid

    p = random_problem(0, 12, sync_overhead=3)
    original = Schedule.original(p)
    budget = simulate(p, original).peak_memory
    over, fits = nondelay_schedule(p, None), best_heuristic(p, budget)
    assert simulate(p, over).peak_memory > budget
    assert simulate(p, fits).makespan < simulate(p, original).makespan
    best, sim, errors = _best_valid(p, [original, over, fits], budget, left_shift=False)
    assert best is fits and sim.makespan == simulate(p, fits).makespan
    assert list(errors) == [1] and "exceeds the budget" in str(errors[1])
    assert _best_valid(p, [over], budget, left_shift=False)[0] is None



@pytest.mark.parametrize("seed", [2, 4, 6, 14, 19, 23])
def test_two_streams_with_free_collective_order_keep_the_warm_start_feasible(seed):
    """Collectives the warm start issues at one instant, a higher id first, are a feasible order of the
    model, whose ties follow the warm start's order (`solve_cpsat` passes it; ties by id made the hint
    infeasible), and the model's point for the warm start extracts to the warm start's collective order."""
    p = random_problem(seed, 20, compute_streams=2, preserve_collective_order=False, sync_overhead=seed % 3 * 4,
                       comm_fraction=0.4)
    hint = best_heuristic(p)
    sim = simulate(p, hint)
    model = CpsatModel(p, sim.makespan, None, issue_order=hint.order)
    model.add_variables()
    model.add_constraints()
    model.add_objective()
    model.add_hint(hint, sim)
    solver = cp_model.CpSolver()
    solver.parameters.fix_variables_to_their_hinted_value = True
    solver.parameters.num_workers = 1
    assert solver.Solve(model.m) == cp_model.OPTIMAL
    comms = set(p.comm_tasks)
    assert [t for t in model.extract(solver).order if t in comms] == [t for t in hint.order if t in comms]
