"""The sweep on Ray: a local Ray of 2 CPUs gives the same rows as the process pool, and a run that raises
or whose worker dies is an error row while the rest of the sweep goes on (not a benchmark)."""

import csv
import json

import pytest

from experiments.benchmarks import sweep

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install -e '.[ray]'); the Ray backend is untested")

# 8 runs: 2 graphs x (original, best heuristic, CP-SAT, torch's scheduler); CP-SAT proves both optimal in
# well under its 2 s (deterministic) limit, so its rows are reproducible on a loaded machine
GRID = {
    "name": "ray_vs_pool",
    "models": [{"model": "tp_mlp", "params": {"layers": 2}}],
    "synthetic": {"tasks": [50]},
    "seeds": [0],
    "methods": ["original", "heuristic", "cpsat", "torch_overlap"],
    "budgets": [1.0],
    "time_limits": [2],
    "compute_streams": [1],
}
# what may differ between two runs of the same grid: where the time went
TIMING = {"wall_s"} | {c for c in sweep.columns() if c.startswith("phase_")}


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray of 2 CPUs for this module's tests (ray.init(num_cpus=2), carrying the experiments package)."""
    sweep.connect_ray(num_cpus=2)
    yield
    ray.shutdown()


def _rows(path):
    with open(path, newline="") as f:
        return {sweep.key_of(r): r for r in csv.DictReader(f)}


def test_ray_rows_match_the_process_pool(tmp_path, local_ray):
    cfg = tmp_path / "grid.json"
    cfg.write_text(json.dumps(GRID))
    assert sweep.run(str(cfg), str(tmp_path / "ray.csv"), backend="ray", quiet=True) == 8
    assert ray.is_initialized()  # the sweep used the Ray it found and left it running
    assert sweep.run(str(cfg), str(tmp_path / "pool.csv"), workers=1, quiet=True) == 8
    on_ray, on_pool = _rows(tmp_path / "ray.csv"), _rows(tmp_path / "pool.csv")
    assert on_ray.keys() == on_pool.keys() and len(on_ray) == 8
    for key, r in on_ray.items():
        p = on_pool[key]
        assert r["status"] == "ok", r["error"]
        if "wall clock" in r["solver_message"] + p["solver_message"]:
            continue  # the machine was too loaded for the deterministic limit to end the search (reported)
        assert {c: v for c, v in r.items() if c not in TIMING} == {c: v for c, v in p.items() if c not in TIMING}
    # resuming on Ray runs nothing
    assert sweep.run(str(cfg), str(tmp_path / "ray.csv"), backend="ray", quiet=True) == 0


def test_a_raising_run_and_a_dead_worker_are_error_rows(local_ray):
    jobs = sweep.expand({**GRID, "models": [], "methods": ["original"]})  # one run: synthetic 50, original
    assert len(jobs) == 1
    raising = {**jobs[0], "method": "heuristic", sweep.TEST_FAULT: "raise"}
    dying = {**jobs[0], "method": "list", sweep.TEST_FAULT: "exit"}
    rows = {}
    sweep._execute_ray([dying, raising, jobs[0]], lambda job, row: rows.setdefault(job["method"], row),
                       lambda msg: None)
    assert rows["heuristic"]["status"] == "error" and "RuntimeError: test fault" in rows["heuristic"]["error"]
    assert rows["list"]["status"] == "error" and "worker died (WorkerCrashedError)" in rows["list"]["error"]
    assert rows["original"]["status"] == "ok"  # the sweep went on
    assert all(sweep.key_of(rows[m]) == sweep.key_of(j) for m, j in
               (("list", dying), ("heuristic", raising), ("original", jobs[0])))
