"""The sweep runner works end to end on a tiny grid, resumes, and summarizes (not a benchmark)."""

import csv
import json

import pytest
import torch

from experiments.benchmarks import sweep
from experiments.benchmarks.torch_overlap import unavailable_reason

# The adapter patches torch 2.13's overlap scheduler (CI's torch); other versions skip it with a reason.
TORCH_OVERLAP_OK = unavailable_reason() is None

TINY = {
    "name": "tiny",
    "models": [{"model": "tp_mlp", "params": {"layers": 2}}],
    "synthetic": {"tasks": [50]},
    "seeds": [0],
    "methods": ["original", "heuristic", "cpsat", "torch_overlap", "milp"],
    "budgets": [1.0],
    "time_limits": [1],
    "compute_streams": [1],
    "milp_max_tasks": 20,
}


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_sweep_runs_resumes_and_summarizes(tmp_path):
    cfg = tmp_path / "tiny.json"
    cfg.write_text(json.dumps(TINY))
    out = tmp_path / "res.csv"
    assert sweep.run(str(cfg), str(out), workers=1, quiet=True) == 10
    rows = _rows(out)
    assert len(rows) == 10
    by = {(r["model"], r["method"]): r for r in rows}
    # milp: runs on the 14-task tp_mlp, skipped (with a reason) on the 50-task synthetic graph
    assert by[("tp_mlp", "milp")]["status"] == "ok"
    assert by[("synthetic", "milp")]["status"] == "skipped" and "milp_max_tasks" in by[("synthetic", "milp")]["skip_reason"]
    peers = ("original", "heuristic", "cpsat") + (("torch_overlap",) if TORCH_OVERLAP_OK else ())
    for m in peers:
        for model in ("tp_mlp", "synthetic"):
            r = by[(model, m)]
            assert r["status"] == "ok", r["error"]
            assert int(r["optimized_makespan"]) > 0 and int(r["optimized_peak_memory"]) > 0
            assert float(r["gap"]) >= 0
    # the solver never loses to the best heuristic (judged by simulate); original is the baseline
    for model in ("tp_mlp", "synthetic"):
        assert int(by[(model, "cpsat")]["optimized_makespan"]) <= int(by[(model, "heuristic")]["optimized_makespan"])
        assert by[(model, "original")]["optimized_makespan"] == by[(model, "original")]["baseline_makespan"]
        if TORCH_OVERLAP_OK:
            # torch's scheduler keeps its compute nodes (flop-counted ops: mm, ...) in their original order
            assert by[(model, "torch_overlap")]["matmul_order_kept"] == "True"
        else:  # another torch: a skipped row that says why, not an error
            r = by[(model, "torch_overlap")]
            assert r["status"] == "skipped" and torch.__version__ in r["skip_reason"]
    # time limits only key solver rows
    assert by[("tp_mlp", "heuristic")]["time_limit"] == "" and by[("tp_mlp", "cpsat")]["time_limit"] == "1"

    # resumption: nothing left to run, no duplicate rows
    assert sweep.run(str(cfg), str(out), workers=1, quiet=True) == 0
    assert len(_rows(out)) == 10
    # a grown grid runs only the new rows
    cfg.write_text(json.dumps({**TINY, "methods": TINY["methods"] + ["list"]}))
    assert sweep.run(str(cfg), str(out), workers=1, quiet=True) == 2
    assert len(_rows(out)) == 12
    assert len({sweep.key_of(r) for r in _rows(out)}) == 12

    md = sweep.summarize(str(out), str(tmp_path / "summary"))
    text = md.read_text()
    assert "Makespan relative to the best heuristic" in text and "torch_overlap" in text
    assert len(list((tmp_path / "summary").glob("*.png"))) == 5
    # per method: cpsat against the best heuristic and torch's scheduler, over the two graphs' groups
    cpsat_row = next(line for line in text.splitlines() if line.startswith("| cpsat@1s | 2 |"))
    assert cpsat_row.count("(2, ") == (2 if TORCH_OVERLAP_OK else 1)


def test_errors_become_rows(tmp_path):
    # a budget of 0.5 x the original peak is infeasible for tp_mlp: an error row, not a crash
    job = {"model": "tp_mlp", "params": json.dumps({"layers": 2}), "method": "heuristic", "budget": "0.5",
           "time_limit": "", "compute_streams": "1", "seed": "", "milp_max_tasks": 20}
    row = sweep.run_one(job)
    assert row["status"] == "error" and "InfeasibleBudgetError" in row["error"]
    bad = {**job, "model": "no_such_model"}
    assert sweep.run_one(bad)["status"] == "error"


@pytest.mark.skipif(not TORCH_OVERLAP_OK, reason=str(unavailable_reason()))
def test_torch_overlap_adapter_maps_every_task():
    pytest.importorskip("torch._inductor.fx_passes.overlap_scheduling")
    from experiments.benchmarks.torch_overlap import torch_overlap_schedule

    from solvercast import extract_problem, simulate
    from solvercast.models import build

    gm = build("fsdp_layers", layers=2)
    before = [n.name for n in gm.graph.nodes]
    p = extract_problem(gm)
    s = torch_overlap_schedule(gm, p, budget_ratio=None)
    assert sorted(s.order) == list(range(p.num_tasks))
    pos = {t: i for i, t in enumerate(s.order)}
    assert all(pos[u] < pos[v] for u, v in p.edges)  # topological
    assert simulate(p, s).makespan > 0
    assert [n.name for n in gm.graph.nodes] == before  # ran on a deep copy


def _run_on_pool(jobs):
    rows, said = {}, []
    sweep._execute(jobs, 1, lambda job, row: rows.setdefault(job["method"], row), said.append)
    return rows, said


def test_pool_turns_a_raising_run_into_an_error_row():
    """A run that raises past run_one (run_one itself never does) is an error row, and the pool goes on."""
    ok = sweep.expand({**TINY, "models": [], "methods": ["original"]})[0]  # synthetic 50, original
    rows, _ = _run_on_pool([{**ok, "method": "heuristic", sweep.TEST_FAULT: "raise"}, ok])
    assert rows["heuristic"]["status"] == "error" and "RuntimeError: test fault" in rows["heuristic"]["error"]
    assert rows["original"]["status"] == "ok"


@pytest.mark.heavy  # four spawned pools (~25 s on 2 loaded cores); the Ray backend's test of a dead worker is not heavy
def test_pool_turns_a_dead_worker_into_an_error_row():
    """A worker that dies (os._exit, as a native abort would) breaks the pool: its run is an error row, the
    runs queued behind it are rerun (the pool is rebuilt)."""
    ok = sweep.expand({**TINY, "models": [], "methods": ["original"]})[0]
    dying = {**ok, "method": "list", sweep.TEST_FAULT: "exit"}
    raising = {**ok, "method": "heuristic", sweep.TEST_FAULT: "raise"}
    rows, said = _run_on_pool([dying, raising, ok])
    assert rows["list"]["status"] == "error" and "worker crashed" in rows["list"]["error"]
    assert rows["heuristic"]["status"] == "error" and "RuntimeError: test fault" in rows["heuristic"]["error"]
    assert rows["original"]["status"] == "ok"
    assert any("a worker crashed" in m for m in said)

def test_progress_reports_done_errors_and_time_left():
    import io

    jobs = sweep.expand({**TINY, "models": [], "methods": ["original", "cpsat"]})  # 2 runs, tl 1 s for cpsat
    plain, bar = io.StringIO(), io.StringIO()
    for stream, tty in ((plain, False), (bar, True)):
        p = sweep.Progress(jobs, stream=stream, tty=tty)
        p.update(jobs[0], {"status": "error", "error": "boom"})
        p.update(jobs[1], {"status": "ok"})
        p.close()
    lines = plain.getvalue().splitlines()
    assert len(lines) == 2 and lines[0].startswith("[1/2  50% errors 1 skipped 0") and "left ~" in lines[0]
    assert lines[1].startswith("[2/2 100% errors 1")
    # on a terminal: the error is printed above a bar redrawn in place
    out = bar.getvalue()
    assert "boom" in out and "\r[###############...............] 1/2" in out and out.count("\n") == 2
