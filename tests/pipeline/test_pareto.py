"""The memory/time trade-off: one solve per budget, the frontier in the result, the report, the CLI."""

import json
import math

import pytest

from solvercast import optimize, simulate, validate
from solvercast.pipeline.pareto import pareto


@pytest.fixture(scope="module")
def frontier_result(zoo_graph):
    """fsdp_layers 2 layers (the budget binds at 1.0) under four budgets, the best heuristic each."""
    return optimize(zoo_graph("fsdp_layers", layers=2), time_limit=8, memory_budget=[1.0, 1.02, 1.05, math.inf],
                    method="heuristic")


def test_each_budget_is_solved_and_held(frontier_result):
    res = frontier_result
    points = res.frontier.points
    baseline_peak = res.baseline.peak_memory
    assert [p.budget for p in points] == [int(r * baseline_peak) for r in (1.0, 1.02, 1.05)] + [None]
    for p in points:
        sim = validate(p.result.problem, p.result.schedule, memory_budget=p.budget)  # within its own budget
        assert (sim.makespan, sim.peak_memory) == (p.makespan, p.peak_memory)
    # the result is the first budget's, with the frontier attached
    assert res is points[0].result and res.report.memory_budget == points[0].budget
    assert simulate(res.problem, res.schedule).makespan == points[0].makespan


def test_dominated_points_are_marked(frontier_result):
    points = frontier_result.frontier.points
    for p in points:
        beaten = any(q.makespan <= p.makespan and q.peak_memory <= p.peak_memory
                     and (q.makespan, q.peak_memory) != (p.makespan, p.peak_memory) for q in points)
        assert p.dominated == beaten
    optimal = frontier_result.frontier.optimal()
    assert optimal and all(not p.dominated for p in optimal)
    # more memory never buys a slower schedule on the frontier
    assert [p.makespan for p in optimal] == sorted((p.makespan for p in optimal), reverse=True)


def test_report_prints_and_serializes_the_frontier(frontier_result, tmp_path):
    text = str(frontier_result.report)
    assert "memory/time trade-off" in text
    for label in ("1x", "1.02x", "1.05x", "none"):
        assert f" {label} " in text
    rows = json.loads(json.dumps(frontier_result.report.to_dict()))["frontier"]
    assert [row["ratio"] for row in rows] == [1.0, 1.02, 1.05, None]
    frontier_result.plot(tmp_path / "frontier.png")
    assert (tmp_path / "frontier.png").stat().st_size > 0


def test_no_budgets_is_an_error(zoo_graph):
    with pytest.raises(ValueError, match="at least one"):
        pareto(zoo_graph("tp_mlp"), [])


def test_cli_budgets(capsys):
    from solvercast.pipeline.cli import main

    assert main(["optimize", "--model", "tp_mlp", "--budgets", "1.0,none", "--method", "heuristic",
                 "--time-limit", "4"]) == 0
    out = capsys.readouterr().out
    assert "memory/time trade-off" in out and " none " in out
    assert main(["optimize", "--model", "tp_mlp", "--budgets", "1.0", "--memory-budget", "1.0"]) == 2
    assert "not both" in capsys.readouterr().err
    assert main(["optimize", "--model", "tp_mlp", "--budgets", "1.0,lots"]) == 2


def test_the_graph_is_extracted_once(zoo_graph, monkeypatch):
    """Every budget shares one extraction (and so one problem), and each point equals `optimize`'s own."""
    import solvercast.pipeline.extracted as api

    calls = []
    extract = api.extract_problem
    monkeypatch.setattr(api, "extract_problem", lambda *a, **k: calls.append(1) or extract(*a, **k))
    gm = zoo_graph("fsdp_layers", layers=2)
    frontier = pareto(gm, [1.0, math.inf], time_limit=4, method="heuristic")
    assert len(calls) == 1
    assert frontier.points[0].result.problem.tasks is frontier.points[1].result.problem.tasks
    alone = optimize(gm, time_limit=2, memory_budget=math.inf, method="heuristic")
    assert alone.schedule == frontier.points[1].result.schedule


def test_a_looser_budget_never_gets_a_slower_schedule(zoo_graph, monkeypatch):
    """Budgets given loosest first are solved tightest first, and each looser one starts from the tighter
    ones' schedules. The solver here solves only its first call (the tightest budget; it proves the optimum
    there) and keeps its warm start after, as CP-SAT did at 5 s a budget on fsdp_layers 4 layers (1.0 x: 242.6 us, 1.02 x and none:
    244.7): the looser budgets still get the tighter one's schedule, faster than their best heuristic."""
    import dataclasses

    from solvercast.pipeline import methods
    from solvercast.heuristics import best_heuristic
    from solvercast.solvers.result import SolveResult, SolveStatus

    real = methods.BY_NAME["cpsat"]
    budgets_seen = []

    def solves_once(problem, hint, *args, **kwargs):
        budgets_seen.append(problem.machine.memory_budget)
        if len(budgets_seen) == 1:  # 10 s and no deadline: it proves 1.0 x's optimum, 129.92 us, on any machine
            return real.run(problem, hint, 10.0, True, lambda msg: None)
        return SolveResult(hint, SolveStatus.HINT_KEPT, simulate(problem, hint), None, None, 0.0, message="kept")

    monkeypatch.setitem(methods.BY_NAME, "cpsat", dataclasses.replace(real, run=solves_once))
    frontier = pareto(zoo_graph("fsdp_layers", layers=2), [math.inf, 1.02, 1.0], time_limit=6, method="cpsat")
    loose, mid, tight = frontier.points
    assert budgets_seen == [tight.budget, mid.budget, None]
    assert tight.solver_status == "optimal" and tight.makespan >= mid.makespan >= loose.makespan
    problem = mid.result.problem
    assert mid.makespan < simulate(problem, best_heuristic(problem, memory_budget=mid.budget)).makespan


def test_progress_lines_name_their_budget(zoo_graph):
    """Several budgets' progress lines follow each other: each says which budget it is about, in the order
    they are solved (tightest first)."""
    lines = []
    pareto(zoo_graph("fsdp_layers", layers=2), [math.inf, 1.0], time_limit=2, method="heuristic",
           progress=lines.append)
    labels = [line.split(":")[0] for line in lines]
    assert labels and set(labels) == {"budget 1x", "budget none"}
    assert labels.index("budget none") > max(i for i, x in enumerate(labels) if x == "budget 1x")


@pytest.mark.parametrize("rewrites", [dict(bucketing=True), dict(decomposition=True),
                                      dict(bucketing=False, decomposition="auto")])
def test_a_list_of_budgets_refuses_rewrites_asked_for_and_leaves_auto_off(rewrites, zoo_graph):
    """Each budget would choose its own rewrites: asked for by name, the call says so instead of dropping
    them; left at "auto" they are off for a list."""
    gm = zoo_graph("tp_mlp")
    asked = [k for k, v in rewrites.items() if v is True]
    if asked:
        with pytest.raises(ValueError, match=f"{asked[0]} cannot be chosen with a list of budgets"):
            optimize(gm, time_limit=2, memory_budget=[1.0, math.inf], method="heuristic", **rewrites)
    else:
        res = optimize(gm, time_limit=2, memory_budget=[1.0, math.inf], method="heuristic", **rewrites)
        assert res.report.buckets is None and res.report.decomposition is None
