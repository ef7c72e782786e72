"""Costs from measurements: `solvercast.cost.calibrate`, profile-guided costs (`solvercast.cost.profiled`),
collective fitting and rank agreement.

Graphs are traced with make_fx on fake tensors and run on real CPU tensors; no assertion depends on
how fast anything ran (timings are noisy on shared cores), only on where measured numbers go.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import statistics
import subprocess
import sys
import time

import pytest

import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.profiler import ProfilerActivity, profile

from solvercast import Schedule, extract_problem, optimize, simulate
from solvercast.cost.calibrate import (
    CACHE_ENV,
    CollectiveRow,
    CollectiveRows,
    MeasuredCostModel,
    cache_path,
    calibrate,
    carried_free_nodes,
    fit_link_parameters,
    node_op_key,
)
from solvercast.cost.model import collective_time
from solvercast.cost.model import AnalyticCostModel, CostModel, to_ns
from solvercast.cost.device import H100
from solvercast.graph.nodes import NodeKind, classify
from solvercast.cost.profiled import profile_cost_model, read_trace
from solvercast.graph.local_run import LocalCollectives, random_inputs, run_local
from tests.support import SCRIPTS

CAL = importlib.import_module("solvercast.cost.calibrate")  # the module; `solvercast.cost.calibrate` is the function
UNCHECKED = CAL.CacheTrust(check_ops=0, noisy_median_over_min=float("inf"))  # every cached entry trusted as it is
CPU = torch.device("cpu")


def mlp(x, w1, w2):
    """x -> mm1 -> relu -> view -> mm2 -> sum;  w2 also read by the second mm of the same shapes."""
    h = torch.relu(x @ w1)
    v = h.view(h.shape[0], -1)
    return (v @ w2).sum(0) + (v @ w2).sum(0)


@pytest.fixture(scope="module")
def mlp_gm():
    return make_fx(mlp, tracing_mode="fake")(torch.randn(16, 32), torch.randn(32, 64), torch.randn(64, 32))


def priced(gm):
    return [n for n in gm.graph.nodes if n.op == "call_function" and classify(n).kind is NodeKind.COMPUTE]


# ---- calibrate -------------------------------------------------------------------------------------


def test_calibrate_times_each_distinct_op_once_and_caches(mlp_gm, tmp_path, monkeypatch):
    """Two mm nodes of one shape share a key: measured once. The second call finds everything cached
    and, without the spot check of the cache, runs nothing (time_calls must not be called)."""
    keys = {node_op_key(n) for n in mlp_gm.graph.nodes if n.op == "call_function"}
    model = calibrate(mlp_gm, "cpu", cache_dir=str(tmp_path), warmup=1, repeats=3)
    assert model.new_measurements == len(keys)
    assert len([n for n in priced(mlp_gm) if n.target == torch.ops.aten.mm.default]) == 3  # 2 keys for 3 mms
    path = cache_path(CPU, str(tmp_path))
    assert os.path.isfile(path) and torch.__version__.replace("+", "_") in os.path.basename(path)
    assert set(json.load(open(path))["ops"]) == keys

    def must_not_run(*a, **k):
        raise AssertionError("a cached calibration ran an op")

    monkeypatch.setattr(CAL, "time_calls", must_not_run)
    again = calibrate(mlp_gm, "cpu", cache_dir=str(tmp_path), trust=UNCHECKED)
    assert again.new_measurements == 0
    assert again == model and again.cache_key() == model.cache_key()


def mlp_with_norms(x, w1, w2, w3):
    h = torch.nn.functional.layer_norm(torch.relu(x @ w1), (w1.shape[1],))
    h = torch.nn.functional.layer_norm(torch.relu(h @ w2), (w2.shape[1],))
    return h @ w3


def _poisoned(fresh_dir, poisoned_dir, factor: float) -> None:
    """``fresh_dir``'s cache with every timing ``factor`` x longer and no spread (a cache that says nothing of
    its noise), written to ``poisoned_dir``."""
    data = json.load(open(cache_path(CPU, str(fresh_dir))))
    data["ops"] = {k: {"median": v["median"] * factor, "low": v["median"] * factor, "high": v["median"] * factor,
                       "load": None, "at": None} for k, v in data["ops"].items()}
    os.makedirs(poisoned_dir)
    with open(cache_path(CPU, str(poisoned_dir)), "w") as f:
        json.dump(data, f)


def test_a_cache_taken_under_load_is_measured_again(tmp_path):
    """x -> mm -> relu -> layer_norm -> mm -> relu -> layer_norm -> mm, on CPU. A cache written while the machine
    was busy (every timing 3 x too long, no spread recorded) predicts a step 3 x too long when trusted as it is;
    the spot check times the slowest cached ops again, finds them 3 x faster, warns and measures every op anew:
    the predicted step is then within 15% of the step measured in the same rounds (the whole graph run once after
    each round of op timings, `calibrate`'s ``after_round``, so both see one machine load), where the poisoned
    cache's was 200% off. Timed on one thread by its CPU time, as on shared cores."""
    gm = make_fx(mlp_with_norms, tracing_mode="fake")(torch.randn(256, 512), torch.randn(512, 512),
                                                      torch.randn(512, 512), torch.randn(512, 256))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _calibrations_under_load(gm, tmp_path)
    finally:
        torch.set_num_threads(threads)


def _calibrations_under_load(gm, tmp_path) -> None:
    def step(model) -> float:
        p = extract_problem(gm, cost_model=model)
        return simulate(p, Schedule.original(p)).makespan * 1e-9

    inputs = random_inputs(gm, seed=0)
    warmup = 3
    module_seconds: list[float] = []

    def time_the_module(round_index: int) -> None:
        with torch.no_grad():
            started = time.thread_time()
            gm(*inputs)
            seconds = time.thread_time() - started
        if round_index >= warmup:
            module_seconds.append(seconds)

    calibrate(gm, "cpu", cache_dir=str(tmp_path / "warm-up"), clock="thread")  # the process's first runs are slower
    fresh = calibrate(gm, "cpu", cache_dir=str(tmp_path / "fresh"), clock="thread")
    _poisoned(tmp_path / "fresh", tmp_path / "poisoned", 3.0)
    trusted = calibrate(gm, "cpu", cache_dir=str(tmp_path / "poisoned"), trust=UNCHECKED, clock="thread")
    assert trusted.new_measurements == 0 and step(trusted) > 2 * step(fresh)
    with pytest.warns(UserWarning, match="measuring every op of this graph anew"):
        checked = calibrate(gm, "cpu", cache_dir=str(tmp_path / "poisoned"), clock="thread", warmup=warmup,
                            after_round=time_the_module)
    assert checked.new_measurements == len(fresh.seconds)
    measured = statistics.median(module_seconds)
    assert step(checked) == pytest.approx(measured, rel=0.15)
    assert step(trusted) > 2 * measured
    # the cache now holds the new timings, with their spread and load (whether the next call's spot check
    # trusts them depends on this machine's noise then: not asserted), and read as they are they give the
    # re-measured step, not the poisoned one
    entries = json.load(open(cache_path(CPU, str(tmp_path / "poisoned"))))["ops"].values()
    assert all(e["low"] <= e["median"] <= e["high"] and e["load"] is not None and e["at"] for e in entries)
    again = calibrate(gm, "cpu", cache_dir=str(tmp_path / "poisoned"), trust=UNCHECKED, clock="thread")
    assert again.new_measurements == 0 and step(again) == step(checked)


def test_a_noisy_entry_is_measured_again_and_refresh_measures_all(mlp_gm, tmp_path):
    """An entry whose median ran 3 x its fastest call (and above the noise floor) is timed again, the others
    are not; ``refresh=True`` times every op; a cache of plain medians (no spread kept) still loads."""
    model = calibrate(mlp_gm, "cpu", cache_dir=str(tmp_path), warmup=0, repeats=1)
    path = cache_path(CPU, str(tmp_path))
    data = json.load(open(path))
    noisy = sorted(data["ops"])[0]
    data["ops"][noisy].update(median=1e-3, low=1e-3 / 3, high=2e-3)
    json.dump(data, open(path, "w"))
    checks_off = dataclasses.replace(CAL.CacheTrust(), check_ops=0)
    again = calibrate(mlp_gm, "cpu", cache_dir=str(tmp_path), warmup=0, repeats=1, trust=checks_off)
    assert again.new_measurements == 1 and again.timings[noisy].median != 1e-3
    assert calibrate(mlp_gm, "cpu", cache_dir=str(tmp_path), warmup=0, repeats=1,
                     refresh=True).new_measurements == len(model.seconds)
    json.dump({"ops": {k: v["median"] for k, v in json.load(open(path))["ops"].items()}}, open(path, "w"))
    plain = calibrate(mlp_gm, "cpu", cache_dir=str(tmp_path), trust=UNCHECKED)
    assert plain.new_measurements == 0 and set(plain.seconds) == set(model.seconds)


def test_the_costs_line_says_how_old_and_noisy_the_measurements_are(mlp_gm, tmp_path):
    model = calibrate(mlp_gm, "cpu", cache_dir=str(tmp_path), warmup=0, repeats=3)
    line = model.coverage(mlp_gm)
    assert "taken " in line and " ago" in line and "x the fastest call" in line


def test_cache_directory_from_the_environment(mlp_gm, tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "env"))
    calibrate(mlp_gm, "cpu", warmup=0, repeats=1)
    assert os.path.dirname(cache_path(CPU)) == str(tmp_path / "env")
    assert os.path.isfile(cache_path(CPU))


def test_calibrated_durations_reach_the_problem(mlp_gm, tmp_path):
    """Every compute task takes its measured time plus the views it carries (CPU); the view before the
    mms is carried once, by the first mm reading it; sync overhead is 0 on CPU."""
    model = calibrate(mlp_gm, "cpu", cache_dir=str(tmp_path), warmup=0, repeats=1)
    problem = extract_problem(mlp_gm, cost_model=model)
    by_name = {t.name: t for t in problem.tasks}
    carriers = {}
    for node in priced(mlp_gm):
        carried = carried_free_nodes(node)
        for v in carried:
            assert v.name not in carriers, f"{v.name} charged twice"
            carriers[v.name] = node.name
        expected = to_ns(model.seconds[node_op_key(node)]) + to_ns(sum(model.seconds[node_op_key(v)] for v in carried))
        assert by_name[node.name].duration == expected
    views = [n for n in mlp_gm.graph.nodes if n.target == torch.ops.aten.view.default]
    assert views and all(carriers[v.name].startswith("mm") for v in views)
    first_mm_reading = min((u for u in views[0].users), key=lambda u: list(mlp_gm.graph.nodes).index(u))
    assert carriers[views[0].name] == first_mm_reading.name
    assert problem.machine.sync_overhead == 0
    assert model.fallbacks(mlp_gm) == []


def test_in_place_ops_are_timed_on_fresh_copies(tmp_path):
    """An op that writes its input (add_) is timed on copies: the graph's values are untouched and
    repeats see the same input."""

    def f(x, y):
        z = x * 2
        z.add_(y)
        return z

    gm = make_fx(f, tracing_mode="fake")(torch.randn(8, 8), torch.randn(8, 8))
    seen = []
    real_time_once = CAL._time_once

    def spy(fn, args, kwargs, *rest):
        if fn == torch.ops.aten.add_.Tensor:
            seen.append(args[0].clone())
        return real_time_once(fn, args, kwargs, *rest)

    CAL._time_once, saved = spy, CAL._time_once
    try:
        calibrate(gm, "cpu", cache_dir=str(tmp_path), warmup=1, repeats=3)
    finally:
        CAL._time_once = saved
    assert len(seen) == 4 and all(torch.equal(s, seen[0]) for s in seen)


def test_calibrate_with_local_collectives_times_the_stand_ins(zoo_graph, tmp_path):
    """With mode=LocalCollectives (the CPU check), collectives are timed too: nothing falls back."""
    gm = zoo_graph("tp_mlp", layers=1, hidden=32, seq=8, batch=1, world_size=2, dtype="float32")
    model = calibrate(gm, "cpu", cache_dir=str(tmp_path), mode=LocalCollectives, warmup=0, repeats=1)
    assert model.fallbacks(gm) == []
    plain = calibrate(gm, "cpu", cache_dir=str(tmp_path), warmup=0, repeats=1)
    collectives = [n.name for n in gm.graph.nodes if classify(n).kind is NodeKind.COLLECTIVE]
    assert collectives and plain.fallbacks(gm) == collectives
    assert f"{len(collectives)} fell back" in plain.coverage(gm)


# ---- the measured model ---------------------------------------------------------------------------


def test_measured_model_is_a_cost_model_and_falls_back(mlp_gm):
    base = AnalyticCostModel(H100)
    mm = next(n for n in priced(mlp_gm) if n.target == torch.ops.aten.mm.default)
    model = MeasuredCostModel(base=base, seconds={node_op_key(mm): 1e-3})
    assert isinstance(model, CostModel)
    assert model.duration(mm) == 1_000_000
    relu = next(n for n in priced(mlp_gm) if n.target == torch.ops.aten.relu.default)
    assert model.duration(relu) == base.duration(relu)
    assert relu.name in model.fallbacks(mlp_gm) and mm.name not in model.fallbacks(mlp_gm)
    assert model.sync_overhead() == base.sync_overhead()
    other = MeasuredCostModel(base=base, seconds={node_op_key(mm): 2e-3})
    assert other.cache_key() != model.cache_key()


def test_collective_rows_interpolate_between_measured_sizes():
    rows = CollectiveRows((CollectiveRow("all_reduce", 1000, 2, 1e-5), CollectiveRow("all_reduce", 3000, 2, 3e-5),
                           CollectiveRow("all_reduce", 3000, 2, 5e-5), CollectiveRow("all_reduce", 3000, 2, 4e-5),
                           CollectiveRow("all_gather", 1000, 4, 7e-5)))
    assert rows.seconds("all_reduce", 1000, 2) == 1e-5
    assert rows.seconds("all_reduce", 3000, 2) == 4e-5  # median of the repeated size
    assert rows.seconds("all_reduce", 2000, 2) == pytest.approx(2.5e-5)  # halfway: (1e-5 + 4e-5) / 2
    assert rows.seconds("all_reduce", 10, 2) == 1e-5  # below: the smallest size's latency
    assert rows.seconds("all_reduce", 5000, 2) == pytest.approx(4e-5 + 2000 * 3e-5 / 2000)  # last slope
    assert rows.seconds("all_reduce", 2000, 4) is None  # no rows for that group size
    assert rows.seconds("all_gather", 2000, 4) == pytest.approx(14e-5)  # one point: grows with size
    with pytest.raises(ValueError):
        CollectiveRow("all_shuffle", 1, 2, 1.0)


def test_fit_link_parameters_recovers_the_profile():
    """Rows computed by the alpha-beta formulas of a known profile (every kind, both all_reduce
    regimes) give back its latency and bandwidth."""
    truth = dataclasses.replace(H100, link_latency=3e-6, link_bandwidth=20e9)
    rows = [CollectiveRow(kind, n, p, collective_time(kind, n, p, truth))
            for kind in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")
            for n in (4096, 1 << 20, 64 << 20) for p in (2, 8)]
    fitted = fit_link_parameters(rows, base=H100)
    assert fitted.link_latency == pytest.approx(3e-6, rel=1e-6)
    assert fitted.link_bandwidth == pytest.approx(20e9, rel=1e-6)
    assert fitted.peak_flops == H100.peak_flops and fitted.name == "h100-fitted"
    # times that shrink as bytes grow: a negative latency is clamped to 0
    clamp = fit_link_parameters([CollectiveRow("all_gather", 1000, 2, 1e-6),
                                 CollectiveRow("all_gather", 2000, 2, 3e-6)])
    assert clamp.link_latency == 0.0 and clamp.link_bandwidth > 0
    with pytest.raises(ValueError):
        fit_link_parameters([CollectiveRow("all_reduce", 1000, 2, 1e-5)])


# ---- profile-guided ---------------------------------------------------------------------------------


def test_profile_matches_compute_ops_of_a_real_cpu_trace(mlp_gm, tmp_path):
    """A trace of the graph run on CPU: every compute node matches its events, and an mm's duration
    is the median of its own recorded aten::mm events (read straight from the JSON here)."""
    args = random_inputs(mlp_gm)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(3):
            mlp_gm(*args)
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    model = profile_cost_model(str(trace))
    assert model.fallbacks(mlp_gm) == []
    first_mm = next(n for n in priced(mlp_gm) if n.target == torch.ops.aten.mm.default)
    dims = [list(a.meta["val"].shape) for a in first_mm.args]
    events = [e for e in json.loads(trace.read_text())["traceEvents"]
              if e.get("name") == "aten::mm" and e.get("args", {}).get("Input Dims") == dims]
    assert len(events) == 3
    assert model.duration(first_mm) == to_ns(statistics.median(e["dur"] for e in events) / 1e6)
    problem = extract_problem(mlp_gm, cost_model=model)
    assert simulate(problem, Schedule.original(problem)).makespan > 0


def test_profile_counts_what_falls_back(zoo_graph, tmp_path):
    """A CPU trace of a graph with collectives run on the local stand-ins: compute ops match, the
    collectives (no collective events in the trace) fall back to the model and the coverage says so."""
    gm = zoo_graph("tp_block", layers=1, hidden=32, seq=8, batch=1, heads=2, world_size=2, dtype="float32")
    args = random_inputs(gm)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        run_local(gm, args)
    prof.export_chrome_trace(str(tmp_path / "t.json"))
    model = profile_cost_model(str(tmp_path / "t.json"))
    collectives = [n.name for n in gm.graph.nodes if classify(n).kind is NodeKind.COLLECTIVE]
    assert model.fallbacks(gm) == collectives
    assert f"{len(collectives)} fell back to the model" in model.coverage(gm)
    base = AnalyticCostModel(H100)
    coll = next(n for n in gm.graph.nodes if n.name == collectives[0])
    assert model.duration(coll) == base.duration(coll)
    report = optimize(gm, time_limit=2, method="heuristic", cost_model=model).report
    assert report.costs == model.coverage(gm) and f"costs            {report.costs}" in str(report)


def test_read_trace_rejects_other_files(tmp_path):
    (tmp_path / "x.json").write_text("{not json")
    with pytest.raises(ValueError, match="Chrome trace"):
        read_trace(str(tmp_path / "x.json"))


# ---- two gloo ranks ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """tests/support/scripts/calibration_workers.py as ranks 0 and 1 of a gloo group: their JSON results."""
    workdir = tmp_path_factory.mktemp("gloo")
    script = SCRIPTS / "calibration_workers.py"
    env = {**os.environ, CACHE_ENV: str(workdir / "unused")}
    procs = [subprocess.Popen([sys.executable, str(script), str(r), str(workdir)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
    return workdir, [json.loads((workdir / f"rank{r}.json").read_text()) for r in (0, 1)]


def test_gloo_collectives_are_measured_fitted_and_read_from_a_trace(two_ranks):
    """Real gloo collectives between 2 processes: the same rows on both ranks (the slowest rank's
    time), a fitted profile, and the same collectives read back from a profiler trace, interpolated
    between the traced sizes."""
    workdir, (r0, r1) = two_ranks
    sizes = r0["sizes"]
    assert r0["rows"] == r1["rows"]
    rows = [CollectiveRow(*r) for r in r0["rows"]]
    expected = {(kind, n, 2) for kind in ("all_reduce", "all_gather") for n in sizes}
    assert {(r.kind, r.nbytes, r.group_size) for r in rows} == expected
    assert all(r.seconds > 0 for r in rows)
    fitted = fit_link_parameters(rows, base="h100", name="gloo")
    assert fitted.name == "gloo" and fitted.link_latency >= 0 and fitted.link_bandwidth > 0
    assert fitted.hbm_bandwidth == H100.hbm_bandwidth  # only the link parameters are fitted

    traced = read_trace(str(workdir / "collectives_trace0.json"))  # group size from distributedInfo
    assert {(r.kind, r.nbytes, r.group_size) for r in traced.collectives} == expected
    model = profile_cost_model(str(workdir / "collectives_trace0.json"))
    lo, hi = (model.collectives.seconds("all_gather", n, 2) for n in sizes[:2])
    mid = model.collectives.seconds("all_gather", (sizes[0] + sizes[1]) // 2, 2)
    assert min(lo, hi) <= mid <= max(lo, hi)
    assert model.collective_time("all_gather", (sizes[0] + sizes[1]) // 2, 2) == to_ns(mid)


def test_ranks_agree_on_profile_guided_costs(two_ranks):
    """Each rank read its own trace: the models differ unless the ranks agree."""
    _, (r0, r1) = two_ranks
    assert r0["profile_own_key"] != r1["profile_own_key"]
    assert r0["profile_agreed_key"] == r1["profile_agreed_key"]


def test_ranks_agree_on_one_table_and_one_schedule(two_ranks):
    """Rank 1's timings were made 5x slower: the ranks' own tables differ, the agreed tables are the
    same on both ranks (the per-op median of the two own tables), and so are durations and schedule."""
    _, (r0, r1) = two_ranks
    assert r0["own"].keys() == r1["own"].keys()
    assert all(r1["own"][k] != r0["own"][k] for k in r0["own"])
    assert r0["agreed"] == r1["agreed"]
    for k, v in r0["agreed"].items():
        assert v == pytest.approx(statistics.median([r0["own"][k], r1["own"][k]]), rel=1e-12)
    assert r0["agreed_key"] == r1["agreed_key"]
    assert r0["durations"] == r1["durations"]
    assert r0["order"] == r1["order"] and r0["streams"] == r1["streams"]


# ---- the check against measured runs ------------------------------------------------------------------


@pytest.mark.heavy
def test_calibrated_simulate_predicts_measured_cpu_runs(tmp_path):
    """experiments/gpu/calibration.py: for every zoo model, the makespan simulate predicts for the original
    order with calibrated costs is within 15% of the module's measured run (one CPU thread, medians;
    see the script for the clock and the collectives). Can fail: it compares two measurements."""
    import experiments.gpu.calibration as experiment

    saved = torch.get_num_threads()
    try:
        status = experiment.main(["--trials", "3", "--out", str(tmp_path / "calibration.md")])
    finally:
        torch.set_num_threads(saved)
    assert status == 0, (tmp_path / "calibration.md").read_text()


def test_cli_calibrate_and_profile(tmp_path, monkeypatch, capsys):
    """--calibrate and --profile price the model with measured costs (the progress line says how many
    ops were covered); both at once, or a file that is not a trace, end with exit status 2."""
    from solvercast.pipeline.cli import main

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    model = ["--model", "tp_mlp", "--param", "layers=1", "--param", "hidden=32", "--param", "seq=8",
             "--param", "batch=1", "--param", "dtype=float32", "--method", "heuristic", "--time-limit", "2"]
    assert main(["optimize", *model, "--calibrate"]) == 0
    err = capsys.readouterr().err
    assert "measured costs (calibrated on cpu" in err and "fell back to the model" in err
    assert os.listdir(tmp_path / "cache")

    gm = make_fx(mlp, tracing_mode="fake")(torch.randn(4, 8), torch.randn(8, 8), torch.randn(8, 8))
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        gm(*random_inputs(gm))
    prof.export_chrome_trace(str(tmp_path / "t.json"))
    assert main(["optimize", *model, "--profile", str(tmp_path / "t.json")]) == 0
    assert "measured costs (profile" in capsys.readouterr().err
    assert main(["optimize", *model, "--calibrate", "--profile", str(tmp_path / "t.json")]) == 2
    (tmp_path / "bad.json").write_text("[")
    assert main(["optimize", *model, "--profile", str(tmp_path / "bad.json")]) == 2
    assert "Chrome trace" in capsys.readouterr().err
