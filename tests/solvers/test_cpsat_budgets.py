"""CP-SAT under binding memory budgets: the position model, the warm start as first solution,
proofs on PyTorch's reordering-test shapes, the same schedule on every run.

Every claim is checked by `validate` and against an independent answer (brute force on small versions
of the shapes); effort is measured in CP-SAT's deterministic time, never the wall clock.
"""

import dataclasses

import pytest
from ortools.sat.python import cp_model

from tests.support import SHAPES, brute_force
from solvercast import Machine, Problem, Role, Schedule, Task, simulate, validate
from solvercast.heuristics import best_heuristic
from solvercast.pipeline.portfolio import solve_cpsat
from solvercast.pipeline.tuning import DEFAULT_TUNING, PORTFOLIO_TUNING
from solvercast.solvers import cpsat
from solvercast.solvers.cpsat_model import MAX_POSITION_PAIRS, CpsatModel
from solvercast.solvers.result import SolveStatus

C = Role.COMPUTE


def tuned(windows_rate: float = 0.012, **portfolio):
    """The shipped tuning with every model's search rate flat at 0.012 units a second (windows' at
    ``windows_rate``) and ``portfolio``'s fields replaced."""
    rates = {kind: ((windows_rate if kind == "windows" else 0.012), 0.0)
             for kind in cpsat.CPSAT_TUNING.search_units_per_second}
    models = dataclasses.replace(cpsat.CPSAT_TUNING, search_units_per_second=rates, search_rate_range=(0.012, 1.3))
    shares = dataclasses.replace(PORTFOLIO_TUNING, **portfolio)
    return dataclasses.replace(DEFAULT_TUNING, cpsat=models, portfolio=shares)


def at_original_peak(p):
    """``p`` with a budget of its original order's peak (1.0): the budget the CLI defaults to."""
    return p.with_budget(simulate(p, Schedule.original(p)).peak_memory)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_small_shapes_match_brute_force_at_budget_one(shape):
    """Two layers (9-13 tasks): CP-SAT's optimum under the binding budget is the brute-force optimum."""
    p = at_original_peak(SHAPES[shape](2))
    best, _ = brute_force(p)
    res = solve_cpsat(p, time_limit=5, hint=best_heuristic(p, memory_budget=p.machine.memory_budget),
                      debug_hint=True)
    assert res.status == SolveStatus.OPTIMAL or res.makespan == best  # a kept hint may already be optimal
    assert res.makespan == best
    validate(p, res.schedule)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_shapes_are_proven_optimal_at_budget_one(shape):
    """Full size (25-26 tasks): proven optimal from the best heuristic, within a small deterministic
    effort (the program-time model of before proved two of the five in 10 s), and never
    worse than the heuristic. The model alone: `solve_cpsat` asks the prefix search first on graphs this
    small (tests/solvers/test_prefixes.py checks that both agree)."""
    p = at_original_peak(SHAPES[shape]())
    hint = best_heuristic(p, memory_budget=p.machine.memory_budget)
    res = cpsat.solve_model(p, time_limit=10, hint=hint, debug_hint=True)
    assert res.status == SolveStatus.OPTIMAL
    assert res.bound == res.makespan <= simulate(p, hint).makespan
    assert res.stats["deterministic_time"] < 0.5
    validate(p, res.schedule)


def test_position_model_is_used_with_a_budget_and_falls_back_past_its_pairs():
    p = at_original_peak(SHAPES["fsdp_prefetch"]())
    model = CpsatModel(p, 10**6, p.machine.memory_budget)
    assert model.positions and 0 < len(model._unordered_pairs) <= MAX_POSITION_PAIRS
    assert not CpsatModel(p, 10**6, None).positions  # no budget: no memory to place
    assert not CpsatModel(p, 10**6, p.machine.memory_budget, positions=False).positions


def test_positions_order_the_default_stream():
    """a(10), b(10) unordered on one stream, budget large: a's position before b's forces a to end
    before b starts; the positions are 0 and 1."""
    p = Problem((Task("a", C, 10), Task("b", C, 10)), (), machine=Machine())

    def solve(b_starts_early: bool):
        model = CpsatModel(p, 100, 10**9)
        model.add_variables()
        model.add_constraints()
        model.m.Add(model.ptime[0] < model.ptime[1])
        if b_starts_early:
            model.m.Add(model.start[1] < 10)
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = 1
        status = solver.Solve(model.m)
        if status != cp_model.OPTIMAL:
            return status, None
        return status, (solver.Value(model.ptime[0]), solver.Value(model.ptime[1]), solver.Value(model.start[1]))

    assert solve(True)[0] == cp_model.INFEASIBLE
    status, (pa, pb, start_b) = solve(False)
    assert (pa, pb) == (0, 1) and start_b >= 10


def test_the_same_schedule_on_every_run(zoo_graph, monkeypatch):
    """Deterministic: two solves of a graph the search does not finish give the same schedule, the windows
    that polish the model's answer included. (The conversion is lowered so that the deterministic limit,
    about 0.08 units for the model, ends the search long before the wall clock on a busy machine.)"""
    from solvercast import extract_problem

    tuning = tuned(prefix_max_tasks=0)  # the model and its windows, no prefix search
    p = at_original_peak(extract_problem(zoo_graph("fsdp_layers", layers=2)))
    hint = best_heuristic(p, memory_budget=p.machine.memory_budget)
    first, second = (solve_cpsat(p, time_limit=10, hint=hint, tuning=tuning) for _ in range(2))
    assert first.stats["deterministic_time"] >= first.stats["deterministic_limit"] > 0.05
    assert first.stats["polish"]["windows_tried"] >= 1
    assert not first.stats["stopped_by_wall_clock"] and not second.stats["stopped_by_wall_clock"]
    assert (first.schedule.order, first.schedule.streams) == (second.schedule.order, second.schedule.streams)


def test_presolve_keeps_the_hint_on_a_binding_budget(zoo_graph):
    """debug_hint makes CP-SAT abort if presolve breaks the feasible hint (OR-Tools 4373, 4693), and the
    hint is the first solution: never worse than it, whatever the limit."""
    from solvercast import extract_problem

    p = at_original_peak(extract_problem(zoo_graph("fsdp_layers", layers=2)))
    hint = best_heuristic(p, memory_budget=p.machine.memory_budget)
    res = solve_cpsat(p, time_limit=0.2, hint=hint, debug_hint=True)
    assert res.schedule is not None and res.makespan <= simulate(p, hint).makespan
    validate(p, res.schedule)


def test_the_deterministic_limit_follows_the_model_not_the_clock(zoo_graph):
    """The seconds given become deterministic units at the search rate predicted for the model's kind and
    size, less what its size costs before the search: a function of the model alone (the same on every
    rank), higher for the position model than for several streams."""
    from solvercast import extract_problem
    from solvercast.solvers import cpsat
    from solvercast.solvers.cpsat_model import CpsatModel

    def built(streams):
        p = at_original_peak(extract_problem(zoo_graph("fsdp_layers", layers=2), compute_streams=streams))
        model = CpsatModel(p, 200_000, p.machine.memory_budget)
        model.add_variables()
        model.add_constraints()
        return model

    one, two = built(1), built(2)
    assert (cpsat.model_kind(one), cpsat.model_kind(two)) == ("positions", "streams")
    for model in (one, two):
        constraints = len(model.m.Proto().constraints)
        rate = cpsat.search_rate(cpsat.model_kind(model), constraints) * cpsat.CPSAT_TUNING.limit_share
        for seconds in (1.0, 10.0):
            units = cpsat.deterministic_limit(seconds, model)
            assert units == cpsat.deterministic_limit(seconds, model)
            overhead = cpsat.CPSAT_TUNING.overhead_seconds_per_constraint
            assert units == pytest.approx(rate * (seconds - overhead * constraints))
    assert cpsat.deterministic_limit(10.0, one) > cpsat.deterministic_limit(10.0, two)
    # the position model's rate grows with its size (measured: 0.52 at 2,734 constraints, 1.37 at 27,172),
    # within the range measured
    low, high = cpsat.CPSAT_TUNING.search_rate_range
    assert low <= cpsat.search_rate("positions", 2_734) < cpsat.search_rate("positions", 27_172) <= high
    assert cpsat.search_rate("streams", 1_000) == cpsat.search_rate("streams", 10_000)
    # a model too large for the seconds given still gets a (tiny) positive limit: its hint stands
    assert cpsat.deterministic_limit(1e-3, one) == 1e-3
    # and the seconds a number of units is planned to take is its inverse
    for model in (one, two):
        for units in (0.5, 3.0):
            assert cpsat.deterministic_limit(cpsat.planned_seconds(units, model), model) == pytest.approx(units)


def test_windows_polish_what_the_model_left(zoo_graph, monkeypatch):
    """A whole-graph solve the model does not finish goes on with windows from the model's answer: never
    worse than the model alone with its share of the time, valid, with the model's bound. (The model's
    conversion is lowered so that its deterministic limit, not the clock, ends it.)"""
    from solvercast import extract_problem
    from solvercast.solvers import cpsat

    tuning = tuned(windows_rate=0.25, prefix_max_tasks=0)  # the model and its windows, no prefix search
    p = at_original_peak(extract_problem(zoo_graph("fsdp_layers", layers=2)))
    hint = best_heuristic(p, memory_budget=p.machine.memory_budget)
    polished = solve_cpsat(p, time_limit=4, hint=hint, tuning=tuning)
    alone = cpsat.solve_model(p, time_limit=4 * tuning.portfolio.whole_model_share, hint=hint, tuning=tuning.cpsat)
    assert polished.stats["polish"]["windows_tried"] >= 1
    assert polished.makespan <= alone.makespan and polished.bound == alone.bound
    validate(p, polished.schedule)


def test_the_whole_model_stops_at_its_units_and_leaves_the_rest_to_the_windows(zoo_graph, monkeypatch):
    """Past ``whole_model_units`` the model stops even if its share of the seconds pays for more, and counts
    only the seconds those units were planned to take: the windows get the rest."""
    from solvercast import extract_problem

    tuning = dataclasses.replace(DEFAULT_TUNING, portfolio=dataclasses.replace(
        PORTFOLIO_TUNING, whole_model_units=0.05, prefix_max_tasks=0))  # the model and its windows, no prefix search
    p = at_original_peak(extract_problem(zoo_graph("fsdp_layers", layers=2)))
    hint = best_heuristic(p, memory_budget=p.machine.memory_budget)
    res = solve_cpsat(p, time_limit=4, hint=hint, tuning=tuning)
    assert res.stats["deterministic_limit"] == 0.05 <= res.stats["deterministic_time"]
    assert res.stats["seconds_given"] < 4 * PORTFOLIO_TUNING.whole_model_share
    assert res.stats["polish"]["windows_tried"] >= 1
    validate(p, res.schedule)


def test_a_proof_ends_the_solve_before_the_windows():
    p = at_original_peak(SHAPES[sorted(SHAPES)[0]](2))
    res = solve_cpsat(p, time_limit=5)
    assert res.status == SolveStatus.OPTIMAL and "polish" not in res.stats



def test_a_makespan_at_the_bound_ends_the_solve_before_the_windows(monkeypatch):
    """A schedule at `lower_bounds` is optimal even when the model cannot say so (a scaled model proves
    nothing of the problem): no windows follow. The model is replaced by one that returns its hint
    unproven."""
    from solvercast import lower_bounds
    from solvercast.pipeline import portfolio
    from solvercast.solvers.result import SolveResult

    p = at_original_peak(SHAPES["raise_comms"](2))
    optimal = solve_cpsat(p, time_limit=5)
    assert optimal.makespan == lower_bounds(p).makespan  # the bound is tight here
    unproven = SolveResult(optimal.schedule, SolveStatus.HINT_KEPT, optimal.simulated, None, None, 0.0)
    monkeypatch.setattr(portfolio, "solve_model", lambda *args, **kwargs: unproven)
    tuning = dataclasses.replace(DEFAULT_TUNING, portfolio=dataclasses.replace(
        PORTFOLIO_TUNING, prefix_max_tasks=0))  # the model and its windows, no prefix search
    res = portfolio.solve_cpsat(p, time_limit=5, hint=optimal.schedule, tuning=tuning)
    assert res is unproven


def test_the_parameter_harness_leaves_the_solver_as_it_found_it():
    """experiments/tuning/cpsat.py params (results/cpsat_params.md) swaps `solve_model`'s limit, parameters, hint and
    callback for one run: afterwards they are the solver's own again, and a setting run twice (a decision
    strategy, which adds to the model) gives the same schedule at the same deterministic time, within its
    deterministic limit and never worse than the warm start."""
    from experiments.tuning import cpsat as cpsat_params

    from solvercast.solvers import cpsat

    own = (cpsat.deterministic_limit, cpsat.bound_presolve, CpsatModel.add_hint, cpsat._Solutions)
    p = at_original_peak(SHAPES["fsdp_prefetch"](2))
    budget = p.machine.memory_budget
    hint = best_heuristic(p, memory_budget=budget)
    runs = [cpsat_params.run(p, budget, hint, "starts_portfolio", 0.05, 0, 60.0, None) for _ in range(2)]
    assert (cpsat.deterministic_limit, cpsat.bound_presolve, CpsatModel.add_hint, cpsat._Solutions) == own
    # the same schedule and search; CP-SAT's deterministic time is a float sum, equal up to rounding, and the
    # wall seconds are the clock's
    clocked = ("det_end", "seconds")
    assert {k: v for k, v in runs[0].items() if k not in clocked} == {k: v for k, v in runs[1].items() if k not in clocked}
    assert runs[0]["det_end"] == pytest.approx(runs[1]["det_end"], rel=1e-9)
    assert runs[0]["makespan"] <= runs[0]["warm"]
    assert runs[0]["status"] == "optimal" or runs[0]["det_end"] <= runs[0]["units"] * 1.05


def test_the_windows_result_has_no_stall_a_later_task_could_fill(zoo_graph, monkeypatch):
    """After the windows, moves into stalls (heuristics/fill_idle.py): none of them is left that gains.
    (The model's conversion is lowered so that its deterministic limit ends it far from the optimum, and no
    exact windows follow CP-SAT's: they reach the optimum here.)"""
    from solvercast import extract_problem
    from solvercast.heuristics import fill_idle

    tuning = tuned(windows_rate=0.25, prefix_max_tasks=0)  # the model and its windows, no prefix search
    tuning = dataclasses.replace(tuning, portfolio=dataclasses.replace(tuning.portfolio, late_exact_share=0.0))
    p = at_original_peak(extract_problem(zoo_graph("fsdp_layers", layers=2)))
    hint = best_heuristic(p, memory_budget=p.machine.memory_budget)
    res = solve_cpsat(p, time_limit=2, hint=hint, tuning=tuning)
    assert res.stats["fill_idle"]["simulations"] >= 1
    again, stats = fill_idle(p, res.schedule)
    assert stats["moves"] == 0 and again is res.schedule


def test_exact_windows_after_cp_sats_start_at_its_stalls(zoo_graph, monkeypatch):
    """On a graph too large for the prefix search, exact windows follow CP-SAT's windows with
    ``late_exact_share`` of the limit, around the stalls first (here they reach fsdp_layers 2 layers' optimum,
    129.92 us, which the lowered CP-SAT conversion does not): the result valid, never worse, the same on a
    second run."""
    from solvercast import extract_problem

    tuning = tuned(windows_rate=0.25, prefix_max_tasks=0)
    p = at_original_peak(extract_problem(zoo_graph("fsdp_layers", layers=2)))
    hint = best_heuristic(p, memory_budget=p.machine.memory_budget)
    first, second = (solve_cpsat(p, time_limit=2, hint=hint, tuning=tuning) for _ in range(2))
    assert first.stats["late_exact_windows"]["windows_improved"] >= 1
    assert validate(p, first.schedule).makespan <= simulate(p, hint).makespan
    assert first.schedule.order == second.schedule.order
    tuning = dataclasses.replace(tuning, portfolio=dataclasses.replace(tuning.portfolio, late_exact_share=0.0))
    without = solve_cpsat(p, time_limit=2, hint=hint, tuning=tuning)
    assert first.makespan < without.makespan

