"""The time limit as a plan: the heuristics' deterministic work budget, the plan's arithmetic,
and `optimize`'s accounting. Nothing here is timed: each test checks counted work or the plan."""

import json
import time

import pytest

from solvercast import Schedule, optimize, simulate
from solvercast.errors import SolvercastError
from solvercast.heuristics import best_heuristic, run_heuristics
from solvercast.heuristics.best import PORTFOLIO
from solvercast.heuristics.work import WorkBudget, pass_cost, work_budget
from solvercast.ir.bounds import lower_bounds
from solvercast.fx.lower import anchor_nodes, lower
from solvercast.models import build
from solvercast.testing import random_problem
from solvercast.pipeline.portfolio import solve_cpsat
from solvercast.solvers.result import SolveStatus
from solvercast.ir.bounds import EXPOSURE_MAX_TASKS
from solvercast.pipeline.time_plan import TIME_PLAN_TUNING, analysis_seconds, can_analyse, plan_time
from solvercast.solvers.cpsat import CPSAT_TUNING


@pytest.fixture(scope="module")
def problem():
    return random_problem(3, 300)


def test_unlimited_budget_changes_nothing(problem):
    meter = WorkBudget(limit=None)
    with work_budget(meter):
        inside = run_heuristics(problem)
    outside = run_heuristics(problem)
    assert {k: (s.order, s.streams) for k, (s, _) in inside.items()} == \
           {k: (s.order, s.streams) for k, (s, _) in outside.items()}
    assert meter.cut == [] and meter.spent > 0


def test_no_budget_judges_only_the_original_order(problem):
    meter = WorkBudget(limit=0)
    with work_budget(meter):
        results = run_heuristics(problem)
    assert list(results) == ["original"]
    assert set(PORTFOLIO[1]) <= set(meter.cut)
    with work_budget(WorkBudget(limit=0)):
        assert best_heuristic(problem).order == Schedule.original(problem).order


def test_the_original_order_is_not_simulated_again(problem):
    """Given the original order's simulation (optimize has it from its baseline), the portfolio uses it:
    the same results, one simulation less counted."""
    fresh, reused = WorkBudget(limit=None), WorkBudget(limit=None)
    with work_budget(fresh):
        expected = run_heuristics(problem)
    baseline = simulate(problem, Schedule.original(problem))
    with work_budget(reused):
        results = run_heuristics(problem, original_simulation=baseline)
    assert results["original"][1] is baseline and results["original"][1] == expected["original"][1]
    assert {k: (s.order, s.streams) for k, (s, _) in results.items()} == \
        {k: (s.order, s.streams) for k, (s, _) in expected.items()}
    assert fresh.spent - reused.spent == pytest.approx(pass_cost(problem, "simulate"))


@pytest.mark.parametrize("fraction", [0.1, 0.3, 0.6] + [0.30 + 0.005 * k for k in range(10)])
def test_heuristics_stop_at_their_budget(problem, fraction):
    """Without a memory budget every heuristic is one pass plus its judging simulation, and each runs only
    when the budget pays for both: the work counted never exceeds the limit, and every heuristic either
    ran or is named as cut."""
    full = WorkBudget(limit=None)
    with work_budget(full):
        run_heuristics(problem)
    limit = fraction * full.spent
    meter = WorkBudget(limit=limit)
    with work_budget(meter):
        results = run_heuristics(problem)
    assert 0 < meter.spent <= limit
    assert meter.cut, "a budget below the full portfolio's cost must cut something"
    ran = {name for name in PORTFOLIO[1] if name in results}
    assert ran.isdisjoint(meter.cut) and ran | set(meter.cut) >= set(PORTFOLIO[1])
    assert PORTFOLIO[1][0] in ran or fraction < 0.2
    again = WorkBudget(limit=limit)
    with work_budget(again):
        results_again = run_heuristics(problem)
    assert again.spent == meter.spent and again.cut == meter.cut
    assert {k: s.order for k, (s, _) in results.items()} == {k: s.order for k, (s, _) in results_again.items()}


def test_nondelay_stops_its_passes_under_a_memory_budget(problem):
    from solvercast.heuristics import nondelay_schedule

    budget = simulate(problem, Schedule.original(problem)).peak_memory
    full = WorkBudget(limit=None)
    with work_budget(full):
        nondelay_schedule(problem, memory_budget=budget)
    passes = full.spent / pass_cost(problem, "nondelay_pass")
    assert passes > 2, "the test needs a graph where nondelay makes several passes"
    meter = WorkBudget(limit=pass_cost(problem, "nondelay_pass", 1.5))
    with work_budget(meter):
        schedule = nondelay_schedule(problem, memory_budget=budget)
    assert any(c.startswith("nondelay") for c in meter.cut)
    assert meter.spent < full.spent
    assert simulate(problem, schedule).peak_memory <= budget


@pytest.mark.parametrize("limit,tasks,streams,solver", [(10, 300, 1, True), (1, 10000, 1, True), (10, 10000, 2, True),
                                                        (5, 1000, 1, False), (0.001, 10, 1, True), (5, 36000, 1, True)])
def test_plan_shares_what_the_fixed_costs_leave(limit, tasks, streams, solver):
    plan = plan_time(limit, tasks, streams, solver)
    assert plan.fixed_seconds > plan.lowering_seconds > 0
    # the structural bounds are paid for only where they leave as much again for the search
    bounds = tasks * (TIME_PLAN_TUNING.structural_bounds_seconds_per_task
                      + (TIME_PLAN_TUNING.exposure_bound_seconds_per_task if tasks <= EXPOSURE_MAX_TASKS else 0))
    without = plan.fixed_seconds - (bounds if plan.structural_bounds else 0)
    assert plan.structural_bounds == (limit - without >= 2 * bounds)
    # by hand, from the constants' measured values: 36,000 tasks at 5 s leave nothing after extraction
    # (1e-4 s per task x (1 + 36,000 / 64,000): 5.6 s) and lowering (5e-5 s per task: 1.85 s), less than
    # twice the bounds' 1.8 s; 300 tasks at 10 s leave 9.8 s
    if (limit, tasks) in ((5, 36000), (10, 300)):
        assert plan.structural_bounds == (tasks == 300)
    assert plan.left_seconds == pytest.approx(max(0.0, limit - plan.fixed_seconds))
    assert 0 <= plan.heuristic_seconds <= plan.left_seconds
    solver_time = plan.solver_seconds(0.0)
    if not solver:
        assert plan.heuristic_seconds == plan.left_seconds and solver_time == 0
    else:
        assert solver_time == 0 or TIME_PLAN_TUNING.min_solver_seconds <= solver_time <= plan.left_seconds
        # whatever the heuristics spend comes out of the solver's time
        spent = plan.heuristic_work
        assert plan.solver_seconds(spent) <= max(0.0, solver_time - plan.heuristic_seconds) + 1e-9


def test_optimize_under_a_tiny_limit_returns_the_original_order_within_budget():
    gm = build("synthetic", tasks=300, seed=1)
    res = optimize(gm, time_limit=analysis_seconds(len(gm.graph.nodes)))  # reads the graph, no more
    r = res.report
    assert r.time_plan["left_seconds"] == 0
    assert set(PORTFOLIO[1]) <= set(r.heuristics_cut)
    assert r.solver is None and r.method == "original"
    assert r.optimized_peak_memory <= r.memory_budget
    # nothing left after the fixed costs: the costly structural bounds are left out, and the report says so
    assert r.bounds["sequencing"] is None and r.bounds["windows"] is None
    assert "sequencing -" in str(r)
    full = lower_bounds(res.problem)
    assert r.bounds["makespan"] == max(full.critical_path, full.compute, full.comm)
    # the original order is returned as a copy of the input, not lowered: same code, a new module
    assert res.gm is not gm and res.gm.graph is not gm.graph and res.gm.code == gm.code


def test_lowering_a_kept_original_order_equals_the_copy():
    """The module `optimize` returns for a kept original order, without lowering, is what lowering that
    order builds: also from a lowered two-stream graph, whose anchors lowering strips."""
    gm = build("tp_block", layers=1)
    res = optimize(gm, time_limit=analysis_seconds(len(gm.graph.nodes)))
    assert res.report.method == "original"
    assert lower(gm, res.problem, Schedule.original(res.problem)).code == res.gm.code
    two = optimize(gm, compute_streams=2, time_limit=5)
    assert anchor_nodes(two.gm), "the two-stream schedule must put work on a side stream"
    again = optimize(two.gm, method="original", time_limit=5)
    assert not anchor_nodes(again.gm)
    assert lower(two.gm, again.problem, Schedule.original(again.problem)).code == again.gm.code


def test_optimize_plan_is_the_same_on_every_run():
    """Under a limit tight enough to cut heuristics, two calls cut the same ones and return the same
    schedule: the cut is counted work, not a clock."""
    gm = build("synthetic", tasks=3000, seed=1)
    a = optimize(gm, time_limit=1.2, method="heuristic")
    b = optimize(gm, time_limit=1.2, method="heuristic")
    assert a.report.heuristics_cut, "the limit must be tight enough to cut something"
    assert a.report.time_plan == b.report.time_plan and a.report.heuristics_cut == b.report.heuristics_cut
    assert a.schedule.order == b.schedule.order


def test_no_solver_is_started_that_cannot_pay_for_building_its_model():
    """A whole-graph CP-SAT model is built before any limit applies: the plan starts a solver only with
    twice its predicted build time left (deterministic), and solve_cpsat itself refuses to build with the
    deadline nearer than that (the wall's guard, reported as the wall clock's doing)."""
    tasks = 10_000
    build = CPSAT_TUNING.build_seconds_per_task * tasks
    for limit in (1.0, 2.0, 5.0, 10.0, 30.0):
        plan = plan_time(limit, tasks, 1, solver_follows=True)
        seconds = plan.solver_seconds(0.0)
        assert seconds == 0 or seconds >= 2 * build
        assert (seconds > 0) == (plan.left_seconds >= 2 * build)
    problem = random_problem(3, 40)
    hint = Schedule.original(problem)
    res = solve_cpsat(problem, time_limit=5, hint=hint, deadline=time.perf_counter())
    assert res.status == SolveStatus.HINT_KEPT and res.schedule == hint and res.stats["stopped_by_wall_clock"]
    assert "no time left to build" in res.message


def test_a_limit_that_cannot_pay_for_reading_the_graph_returns_it_untouched(monkeypatch, tmp_path, capsys):
    """Below `analysis_seconds` `optimize` does not even extract (it would be late): the input comes back
    as it is, and the report says so; at the limit it analyses. Decided by the node count alone."""
    gm = build("synthetic", tasks=300, seed=1)
    nodes = len(gm.graph.nodes)
    needed = analysis_seconds(nodes)
    assert can_analyse(needed, nodes) and not can_analyse(needed * 0.99, nodes)
    assert not can_analyse(needed, nodes + 100)  # more nodes need more time

    import solvercast.pipeline.extracted as api

    def no_extraction(*args, **kwargs):
        raise AssertionError("an unanalysed call must not extract")

    with monkeypatch.context() as m:
        m.setattr(api, "extract_problem", no_extraction)
        heard = []
        res = optimize(gm, time_limit=needed * 0.99, memory_budget=[1.0, None], progress=heard.append)
        assert res.gm is gm and res.problem is res.schedule is res.baseline is res.optimized is None
        r = res.report
        assert not r.analysed and r.method == "original" and r.tasks == nodes
        assert r.optimized_makespan is None and r.speedup is None and r.gap is None
        assert "not analysed" in str(r) and f"{needed:.1f} s" in r.fallback and heard == [r.fallback]
        assert json.loads(json.dumps(r.to_dict()))["analysed"] is False
        with pytest.raises(SolvercastError, match="not analysed"):
            res.save_trace(str(tmp_path / "trace.json"))
        # the CLI prints the report and skips the pictures instead of failing
        from solvercast.pipeline.cli import main

        assert main(["optimize", "--model", "synthetic", "--param", "tasks=300", "--param", "seed=1",
                     "--time-limit", f"{needed * 0.99}", "--trace", str(tmp_path / "t.json"),
                     "--plot", str(tmp_path / "p.png")]) == 0
        out = capsys.readouterr()
        assert "not analysed" in out.out and "no trace or plot" in out.err
        assert not (tmp_path / "t.json").exists()
    assert optimize(gm, time_limit=needed).report.analysed
