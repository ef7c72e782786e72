"""Sweeps: solver vs heuristics vs PyTorch's own overlap scheduler, one CSV row per run.

    python -m experiments.benchmarks.sweep run experiments/configs/quick.json --out results.csv [--workers N]
    python -m experiments.benchmarks.sweep run CONFIG --out results.csv --backend ray [--address auto|ray://host:port]
    python -m experiments.benchmarks.sweep summarize results.csv --out experiments/results/
    python -m experiments.benchmarks.sweep compare before.csv after.csv

``compare`` matches the rows of two CSVs of the same grid by the sweep's key. Heuristic and original
methods must agree exactly (they are deterministic); a solver row is compared only where both runs proved
their answer optimal (a solver stopped by its time limit may legitimately end elsewhere on a loaded
machine). Status, makespan, peak and the method used are compared; timing columns are not. Exits 1 on any
difference.

``run`` expands the config's grid (models x methods x memory budgets x time limits x compute streams
x seeds) and appends one row per run to the CSV: every figure of the `Report` (all judged by
`simulate`), flattened (``bounds_*``, ``phase_*``; the report's ``method`` and ``time_limit`` become ``method_used`` and
``report_time_limit``), plus ``over_budget`` and whether the schedule keeps the original relative order
of all compute tasks (``compute_order_kept``), of torch's flop-counted ops (``matmul_order_kept``) and
of collectives (``collective_order_kept``), plus ``status`` (ok / error / skipped), ``error``
and ``skip_reason``. A rerun skips rows already in the CSV (key: model, params, method, budget,
time limit, streams, seed), so an interrupted sweep resumes where it stopped. A failing run (e.g. an
infeasible budget) is an ``error`` row, never a crash.

Methods: those of the registry (`solvercast.pipeline.methods`) marked ``swept``: today ``original``,
``comm_priority``, ``list``, ``nondelay``, ``heuristic`` (best heuristic) and the solvers
``cpsat`` / ``milp``, all go through `solvercast.optimize` (so, like for a user, a method that does
not beat the original order returns the original order); ``torch_overlap`` is PyTorch's overlap
scheduler (experiments/benchmarks/torch_overlap.py), whose own answer is recorded as is. Only the solvers use
the time limit: other methods run once per (model, budget, streams, seed), with an empty time limit.
``milp`` runs only on graphs of at most ``milp_max_tasks`` tasks (default 20) and one compute stream
(its documented limits: several streams only without a budget, and `optimize` always sets one); elsewhere a ``skipped`` row says why.
``torch_overlap`` knows one compute stream: skipped for ``compute_streams > 1``.

Budgets: a number is a ratio of the original order's peak (``optimize``'s float budget); ``null``
(``none`` in the CSV) means unconstrained, passed as the sum of every buffer's bytes (no order can
exceed it).

Backends. ``pool`` (default): a local process pool (spawn) of ``--workers``, default ``max(1, nproc // 2)``:
a whole-graph CP-SAT solve keeps two CPUs busy (its one deterministic search worker, and the cut walk
beside it, `cpus_of`). ``ray`` (``pip install -e '.[ray]'``): one Ray task per
run, asking for `cpus_of` CPUs (CP-SAT's one deterministic search worker, and the cut walk beside it), so a
node runs no more runs than it has CPUs and a solver's time limit means what it says; on the cluster at ``--address`` (``auto``:
the one this node belongs to; ``ray://host:port``: Ray Client), or on a local Ray of ``--num-cpus`` CPUs.
The experiments package travels with the Ray job; solvercast must be installed on every node.
With either backend rows are appended as runs finish; a run that raises, or whose worker dies (a native
abort in the solver), is an ``error`` row and the sweep goes on. Progress (done / total, errors, time
left): a bar on a terminal, one line per finished run otherwise.

Config (JSON)::

    {"name": "quick",
     "models": [{"model": "tp_mlp", "params": {"layers": 4}}, ...],
     "synthetic": {"tasks": [50, 200], "params": {}},      # expanded with every seed
     "seeds": [0],                     # graph seeds (synthetic only; other models get seed "")
     "methods": ["original", "heuristic", "cpsat", "torch_overlap"],
     "budgets": [0.9, 1.0, 1.1, null],
     "time_limits": [1, 10],
     "compute_streams": [1, 2],
     "milp_max_tasks": 20}
"""

from __future__ import annotations

import csv
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import fields
from functools import lru_cache
from pathlib import Path

from solvercast.pipeline import methods as registry

from experiments.benchmarks import method_summary
from experiments.benchmarks.method_summary import method_column
from experiments.common import command_line

#: the experiments package (experiments/), which a Ray job carries to its workers
PACKAGE = Path(__file__).resolve().parents[1]

# the registry's compared methods (solvercast.pipeline.methods), then PyTorch's own scheduler
SOLVER_METHODS = registry.names(registry.Kind.SOLVER, swept=True)
METHODS = registry.names(registry.Kind.ORIGINAL, registry.Kind.HEURISTIC, registry.Kind.BEST, swept=True) + \
    SOLVER_METHODS + ("torch_overlap",)
KEY = ("model", "params", "method", "budget", "time_limit", "compute_streams", "seed")
BOUND_KEYS = ("critical_path", "compute", "comm", "makespan", "memory")
PHASE_KEYS = ("extract", "heuristics", "solve", "lower", "total")
# Report fields whose names collide with the run key
RENAMED = {"method": "method_used", "time_limit": "report_time_limit"}


def _report_fields() -> list[str]:
    from solvercast.pipeline.report import Report

    out = []
    for f in fields(Report):
        if f.name == "bounds":
            out += [f"bounds_{k}" for k in BOUND_KEYS]
        elif f.name == "phases":
            out += [f"phase_{k}" for k in PHASE_KEYS]
        elif f.name in RENAMED:
            out.append(RENAMED[f.name])
        else:
            out.append(f.name)
    return out + ["speedup"]


def columns() -> list[str]:
    return [*KEY, "status", "error", "skip_reason", "wall_s", "over_budget", "compute_order_kept",
            "matmul_order_kept", "collective_order_kept", *_report_fields()]


# ---------------------------------------------------------------- config -> jobs


def _fmt_budget(b) -> str:
    return "none" if b is None else f"{float(b):g}"


def _fmt_tl(t) -> str:
    return "" if t in (None, "") else f"{float(t):g}"


def expand(config: dict) -> list[dict]:
    """Every run of the grid, as dicts of the KEY fields (strings, as in the CSV) plus ``milp_max_tasks``."""
    methods = config.get("methods", list(METHODS))
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        raise ValueError(f"unknown method(s) {unknown}; choose from {', '.join(METHODS)}")
    seeds = config.get("seeds", [0])
    graphs: list[tuple[str, dict, str]] = []
    for m in config.get("models", []):
        params = dict(m.get("params", {}))
        if m["model"] == "synthetic" and "seed" not in params:
            graphs += [(m["model"], {**params, "seed": s}, str(s)) for s in seeds]
        elif m["model"] == "synthetic":
            graphs.append((m["model"], params, str(params["seed"])))
        else:
            graphs.append((m["model"], params, ""))
    syn = config.get("synthetic")
    if syn:
        for n in syn.get("tasks", []):
            graphs += [("synthetic", {**syn.get("params", {}), "tasks": n, "seed": s}, str(s)) for s in seeds]
    jobs = []
    for model, params, seed in graphs:
        for streams in config.get("compute_streams", [1]):
            for budget in config.get("budgets", [1.0]):
                for method in methods:
                    tls = config.get("time_limits", [10]) if method in SOLVER_METHODS else [None]
                    for tl in tls:
                        jobs.append({"model": model, "params": json.dumps(params, sort_keys=True), "method": method,
                                     "budget": _fmt_budget(budget), "time_limit": _fmt_tl(tl),
                                     "compute_streams": str(streams), "seed": seed,
                                     "milp_max_tasks": int(config.get("milp_max_tasks", 20))})
    return jobs


def key_of(row: dict) -> tuple:
    return tuple(str(row.get(k, "")) for k in KEY)


def done_keys(path: Path) -> set[tuple]:
    if not path.exists() or path.stat().st_size == 0:
        return set()
    with open(path, newline="") as f:
        return {key_of(r) for r in csv.DictReader(f)}


# ---------------------------------------------------------------- one run (in a worker)


@lru_cache(maxsize=16)
def _graph(model: str, params_json: str):
    from solvercast.models import build

    return build(model, **json.loads(params_json))


def _kept(sub: list[int], order: tuple[int, ...]) -> bool:
    pos = {t: i for i, t in enumerate(order)}
    return all(pos[a] < pos[b] for a, b in zip(sub, sub[1:]))


def run_one(job: dict) -> dict:
    """One run of the grid -> one CSV row. Never raises."""
    row = {k: job[k] for k in KEY}
    t0 = time.perf_counter()
    try:
        row.update(_run(job))
        row.setdefault("status", "ok")
    except Exception as e:  # noqa: BLE001 - a failed run is a row, not a crash
        from solvercast.errors import InfeasibleBudgetError

        row["status"] = "error"
        msg = f"{type(e).__name__}: {e}"
        if isinstance(e, InfeasibleBudgetError) and getattr(e, "best_peak", None) is not None:
            msg += f" (best_peak={e.best_peak})"
        row["error"] = msg.replace("\n", " ")[:500]
    row["wall_s"] = round(time.perf_counter() - t0, 3)
    return row


def _flatten(report) -> dict:
    d = report.to_dict()
    out = {RENAMED.get(k, k): v for k, v in d.items() if k not in ("bounds", "phases")}
    out.update({f"bounds_{k}": d["bounds"].get(k) for k in BOUND_KEYS})
    out.update({f"phase_{k}": d["phases"].get(k) for k in PHASE_KEYS})
    return out


def _run(job: dict) -> dict:
    from solvercast import Role, Schedule, extract_problem, lower_bounds, optimize, simulate
    from solvercast.pipeline.report import Report

    gm = _graph(job["model"], job["params"])
    streams = int(job["compute_streams"])
    method = job["method"]
    problem = extract_problem(gm, compute_streams=streams)
    if job["budget"] == "none":
        budget_arg = problem.resident_bytes + sum(b.size for b in problem.buffers if b.producer is not None)
        ratio = None
    else:
        ratio = float(job["budget"])
        budget_arg = ratio

    if method == "milp":
        if problem.num_tasks > job["milp_max_tasks"]:
            return {"status": "skipped", "tasks": problem.num_tasks,
                    "skip_reason": f"{problem.num_tasks} tasks > milp_max_tasks={job['milp_max_tasks']} "
                                   "(the MILP is for small graphs)"}
        if streams > 1:
            return {"status": "skipped", "tasks": problem.num_tasks,
                    "skip_reason": "the MILP takes several compute streams only without a budget, and optimize "
                                   "always passes one (None means 1.0)"}
    if method == "torch_overlap" and streams > 1:
        return {"status": "skipped", "tasks": problem.num_tasks,
                "skip_reason": "torch's overlap scheduler orders one compute stream"}

    if method == "torch_overlap":
        from experiments.benchmarks.torch_overlap import torch_overlap_schedule, unavailable_reason

        if unavailable_reason():
            return {"status": "skipped", "tasks": problem.num_tasks, "skip_reason": unavailable_reason()}

        t = time.perf_counter()
        baseline = simulate(problem, Schedule.original(problem))
        budget = budget_arg if isinstance(budget_arg, int) else int(ratio * baseline.peak_memory)
        problem = problem.with_budget(budget)
        bounds = lower_bounds(problem)
        t1 = time.perf_counter()
        schedule = torch_overlap_schedule(gm, problem, budget_ratio=ratio)
        t2 = time.perf_counter()
        optimized = simulate(problem, schedule)
        phases = {"extract": t1 - t, "solve": t2 - t1, "total": time.perf_counter() - t}
        report = Report.build(problem, baseline, optimized, bounds, budget, schedule, {"method": "torch_overlap"},
                              phases, 0.0)
    else:
        tl = float(job["time_limit"]) if job["time_limit"] else 10.0
        res = optimize(gm, time_limit=tl, memory_budget=budget_arg, compute_streams=streams, method=method)
        report, schedule, problem = res.report, res.schedule, res.problem
    order = schedule.order
    compute = [i for i, t in enumerate(problem.tasks) if t.role == Role.COMPUTE]
    comms = list(problem.comm_tasks)
    out = _flatten(report)
    from torch._inductor.fx_passes.overlap_scheduling import is_compute_node  # torch's "compute": flop-counted ops

    flop_names = {n.name for n in gm.graph.nodes if n.op == "call_function" and is_compute_node(n)}
    mms = [i for i, t in enumerate(problem.tasks) if t.name in flop_names]
    out.update(over_budget=report.optimized_peak_memory > report.memory_budget,
               compute_order_kept=_kept(compute, order), matmul_order_kept=_kept(mms, order),
               collective_order_kept=_kept(comms, order))
    return out


# ---------------------------------------------------------------- run command


def _fmt_dur(s: float) -> str:
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


BACKENDS = ("pool", "ray")


def run(config_path: str, out: str, workers: int | None = None, quiet: bool = False, backend: str = "pool",
        address: str | None = None, num_cpus: int | None = None) -> int:
    """Run the pending rows of the config's grid; returns how many ran.

    ``backend`` "pool" (default): a local process pool of ``workers``. "ray": one Ray task per run (see
    `_execute_ray`), on the cluster at ``address`` ("auto", "ray://host:port"), or on a local Ray started
    with ``num_cpus`` CPUs when ``address`` is None; a Ray already initialised in this process is used as is."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")
    config = json.loads(Path(config_path).read_text())
    out_path = Path(out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    jobs = expand(config)
    done = done_keys(out_path)
    pending = [j for j in jobs if key_of(j) not in done]
    # largest graphs and solver runs first: they dominate the wall time
    pending.sort(key=lambda j: (j["method"] not in SOLVER_METHODS, -len(j["params"])))
    workers = workers or max(1, (os.cpu_count() or 2) // 2)
    say = (lambda msg: None) if quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    where = f"{workers} worker(s)" if backend == "pool" else f"Ray ({address or 'local'})"
    say(f"sweep {config.get('name', config_path)}: {len(jobs)} runs in the grid, {len(jobs) - len(pending)} "
        f"already in {out_path}, {len(pending)} to run on {where}")
    if not pending:
        return 0
    cols = columns()
    new_file = not out_path.exists() or out_path.stat().st_size == 0
    if not new_file:
        with open(out_path, newline="") as f:
            header = next(csv.reader(f), None)
        if header != cols:
            raise SystemExit(f"{out_path} has other columns than this version writes; use a new --out file")

    with open(out_path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        if new_file:
            w.writeheader()
            f.flush()
        progress = Progress(pending, quiet=quiet)

        def record(job: dict, row: dict) -> None:
            w.writerow(row)
            f.flush()
            progress.update(job, row)

        try:
            if backend == "ray":
                _execute_ray(pending, record, progress.say, address, num_cpus)
            else:
                _execute(pending, workers, record, progress.say)
        finally:
            progress.close()
    return len(pending)


class Progress:
    """Done / total, errors and time left, for either backend: a bar redrawn in place on a terminal
    (runs that end in an error are printed above it), one plain line per finished run otherwise (logs, CI).

    Time left weighs each run by its time limit plus one second (solver runs dominate and run first, so
    a plain average of the finished runs would overstate it): left = elapsed x pending weight / done weight."""

    def __init__(self, jobs: list[dict], quiet: bool = False, stream=None, tty: bool | None = None):
        self.total, self.done = len(jobs), 0
        self.counts = {"ok": 0, "error": 0, "skipped": 0}
        self.weight_left = sum(self._weight(j) for j in jobs)
        self.weight_done = 0.0
        self.quiet, self.stream = quiet, stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.t0 = time.perf_counter()
        self._drawn = False

    @staticmethod
    def _weight(job: dict) -> float:
        return (_f(job["time_limit"]) or 0.0) + 1.0

    def status(self) -> str:
        el = time.perf_counter() - self.t0
        left = el * self.weight_left / self.weight_done if self.weight_done else None
        c = self.counts
        return (f"{self.done}/{self.total} {100 * self.done / max(1, self.total):3.0f}% errors {c['error']} "
                f"skipped {c['skipped']} elapsed {_fmt_dur(el)} left {'?' if left is None else '~' + _fmt_dur(left)}")

    def update(self, job: dict, row: dict) -> None:
        self.done += 1
        st = row.get("status", "error")
        self.counts[st] = self.counts.get(st, 0) + 1
        w = self._weight(job)
        self.weight_left -= w
        self.weight_done += w
        what = (f"{job['model']} {job['params']} {job['method']} budget={job['budget']} "
                f"tl={job['time_limit'] or '-'} streams={job['compute_streams']}: {st}")
        if not self.tty:
            self.say(f"[{self.status()}] {what}")
            return
        if st == "error":
            self.say(f"{what}: {str(row.get('error', ''))[:200]}")
        self._draw()

    def _draw(self) -> None:
        if self.quiet:
            return
        width = 30
        full = width * self.done // max(1, self.total)
        self.stream.write(f"\r[{'#' * full}{'.' * (width - full)}] {self.status()}\x1b[K")
        self.stream.flush()
        self._drawn = True

    def say(self, msg: str) -> None:
        """A line of its own (above the bar on a terminal)."""
        if self.quiet:
            return
        self.stream.write(("\r\x1b[K" if self._drawn else "") + msg + "\n")
        self.stream.flush()
        if self._drawn:
            self._draw()

    def close(self) -> None:
        if self._drawn and not self.quiet:
            self.stream.write("\n")
            self.stream.flush()


#: Test-only fault injection: a job with ``{TEST_FAULT: "raise"}`` raises past `run_one` in its worker, one
#: with ``"exit"`` kills its worker process (``os._exit``), as a native abort in a solver would.
TEST_FAULT = "_test_fault"


def _task(job: dict) -> dict:
    """What a worker runs for one job (either backend)."""
    fault = job.get(TEST_FAULT)
    if fault == "exit":
        os._exit(3)
    if fault == "raise":
        raise RuntimeError("test fault: raised outside run_one")
    return run_one(job)


def _error_row(job: dict, msg: str) -> dict:
    row = {k: job[k] for k in KEY}
    row.update(status="error", error=msg.replace("\n", " ")[:500])
    return row


def _execute(jobs: list[dict], workers: int, record, say) -> None:
    """Run ``jobs`` on a spawn process pool, calling ``record(job, row)`` as each finishes.

    A native crash in a worker (e.g. an OR-Tools CHECK failure aborts the process) breaks the whole
    pool, failing every unfinished future. Then the first ``workers + 1`` unfinished jobs (the ones
    that can have been running or queued in the pool's call queue: the culprit is among them) are re-run
    one by one in fresh single-worker pools, so only a job that crashes on its own becomes an error
    row, and the rest go to a new pool. A job that raises in its worker (`run_one` itself never does)
    is an error row too."""
    import multiprocessing as mp
    from concurrent.futures.process import BrokenProcessPool

    ctx = mp.get_context("spawn")

    def isolated(job: dict) -> dict:
        with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as p1:
            try:
                return p1.submit(_task, job).result()
            except BrokenProcessPool as e:
                return _error_row(job, f"worker crashed (native abort, e.g. in the solver): {e}")
            except Exception as e:  # noqa: BLE001 - a failed run is a row, not a crash
                return _error_row(job, f"worker raised {type(e).__name__}: {e}")

    queue = list(jobs)
    while queue:
        failed: list[dict] = []
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
            futures = [(pool.submit(_task, j), j) for j in queue]
            index = {fut: j for fut, j in futures}
            for fut in as_completed(index):
                try:
                    row = fut.result()
                except BrokenProcessPool:
                    continue
                except Exception as e:  # noqa: BLE001
                    row = _error_row(index[fut], f"worker raised {type(e).__name__}: {e}")
                record(index[fut], row)
            failed = [j for fut, j in futures if isinstance(fut.exception(), BrokenProcessPool)]
        if not failed:
            return
        say(f"a worker crashed; re-running {min(len(failed), workers + 1)} suspect run(s) one by one, "
            f"then the other {max(0, len(failed) - workers - 1)}")
        for job in failed[:workers + 1]:
            record(job, isolated(job))
        queue = failed[workers + 1:]


def cpus_of(job: dict) -> int:
    """The CPUs one run keeps busy, which its Ray task asks for. `optimize` runs CP-SAT deterministically,
    i.e. with one search worker (solvercast/solvers/cpsat.py sets ``num_workers = 1``); the heuristics
    and torch's pass run in the task's own thread, and the MILP (graphs of at most 20 tasks) in one HiGHS
    subprocess while the task waits on it. With one compute stream a whole-graph CP-SAT solve (``cpsat``,
    and ``auto`` up to its size limit) also walks cut bounds in a forked process beside its search
    (`solvercast.solvers.cuts.BackgroundCutBound`): two CPUs for those, one for the rest, so a node runs
    no more at once than it has CPUs and a solver's time limit means what it says."""
    return 2 if job["method"] in ("cpsat", "auto") and int(job["compute_streams"]) == 1 else 1


def connect_ray(address: str | None = None, num_cpus: int | None = None) -> None:
    """Start a local Ray (``address`` None, ``num_cpus`` CPUs, default all) or connect to a cluster
    ("auto", "ray://host:port"). The experiments package travels with the job (``py_modules``, so workers
    can import this module and torch_overlap); solvercast itself must be installed on every node."""
    import ray

    if address is None:
        # a local Ray sends no usage report home (these machines have no network; a cluster keeps its own setting)
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(address=address, num_cpus=num_cpus if address is None else None, include_dashboard=False,
             runtime_env={"py_modules": [str(PACKAGE)], "excludes": ["results/", "__pycache__/"]})


def _execute_ray(jobs: list[dict], record, say, address: str | None = None, num_cpus: int | None = None) -> None:
    """Run ``jobs`` as Ray tasks (one per run, asking for `cpus_of` CPUs), calling ``record(job, row)``
    as each finishes. A task that raises (`RayTaskError`) or whose worker dies (`WorkerCrashedError`,
    e.g. a native abort in the solver) is an error row; tasks are not retried (``max_retries=0``): a
    solver's abort repeats, and resuming the sweep reruns nothing that has a row. Starts (or connects to)
    Ray unless this process already has, and then shuts it down again."""
    try:
        import ray
    except ImportError as e:
        raise SystemExit(f"--backend ray needs Ray: pip install -e '.[ray]' ({e})") from e

    started = not ray.is_initialized()
    if started:
        connect_ray(address, num_cpus)
    try:
        say(f"Ray cluster: {ray.cluster_resources().get('CPU', 0):g} CPUs")
        remote = ray.remote(max_retries=0)(_task)
        index = {remote.options(num_cpus=cpus_of(j)).remote(j): j for j in jobs}
        pending = list(index)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            job = index.pop(ready[0])
            try:
                row = ray.get(ready[0])
            except ray.exceptions.RayTaskError as e:
                row = _error_row(job, f"task raised {type(e.cause).__name__}: {e.cause}")
            except ray.exceptions.RayError as e:  # the worker (or its node) died: WorkerCrashedError, ...
                row = _error_row(job, f"worker died ({type(e).__name__}): {e}")
            record(job, row)
    finally:
        if started:
            ray.shutdown()


# ---------------------------------------------------------------- compare

#: what ``compare`` checks per row
COMPARED = ("status", "optimized_makespan", "optimized_peak_memory", "method_used")


def _keyed_rows(path: str) -> dict[tuple, dict]:
    with open(path, newline="") as f:
        return {tuple(r[k] for k in KEY): r for r in csv.DictReader(f)}


def compare(before: dict, after: dict) -> tuple[list[str], dict]:
    """Differences between two sweeps' rows (`_keyed_rows`), and counts of what was compared."""
    diffs, counts = [], {"compared": 0, "solver_rows_not_proved": 0, "missing": 0}
    for key in sorted(set(before) | set(after)):
        a, b = before.get(key), after.get(key)
        if a is None or b is None:
            counts["missing"] += 1
            diffs.append(f"{key}: only in {'after' if a is None else 'before'}")
            continue
        if key[KEY.index("method")] in SOLVER_METHODS and not (
                a.get("solver_status") == b.get("solver_status") == "optimal"):
            counts["solver_rows_not_proved"] += 1
            continue
        counts["compared"] += 1
        for f in COMPARED:
            if a.get(f) != b.get(f):
                diffs.append(f"{key}: {f} {a.get(f)!r} -> {b.get(f)!r}")
    return diffs, counts


# ---------------------------------------------------------------- summarize


def _f(x) -> float | None:
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def _label(r: dict) -> str:
    p = json.loads(r["params"])
    return r["model"] + ("" if not p else " " + " ".join(f"{k}={v}" for k, v in p.items()))


def summarize(csv_path: str, out_dir: str, title: str | None = None) -> Path:
    """Markdown tables and PNG plots from a sweep CSV; returns the markdown file's path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = Path(csv_path).stem
    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    ok = [r for r in rows if r["status"] == "ok"]

    def group_key(r):
        return (_label(r), r["compute_streams"], r["budget"])

    groups: dict[tuple, dict[str, dict]] = {}
    for r in rows:
        groups.setdefault(group_key(r), {})[method_column(r)] = r
    mcols = sorted({method_column(r) for r in rows},
                   key=lambda c: (METHODS.index(c.split("@")[0]), _f(c.split("@")[1][:-1]) if "@" in c else 0))

    def tasks_of(g):
        for r in g.values():
            if _f(r.get("tasks")):
                return int(float(r["tasks"]))
        return 0

    lines = [f"# {title or 'Sweep ' + stem}", "",
             f"{len(rows)} runs ({len(ok)} ok, {sum(r['status'] == 'error' for r in rows)} errors, "
             f"{sum(r['status'] == 'skipped' for r in rows)} skipped).", "",
             "## Makespan relative to the best heuristic", "",
             "Cells: method's makespan / makespan of `heuristic` (best heuristic, same graph, budget, streams); "
             "< 1 is better. `*` = over the memory budget (by `simulate`), `err` = error row, `skip` = skipped. "
             "`heuristic us` is the best heuristic's makespan in microseconds.", "",
             "| model | tasks | streams | budget | heuristic us | " + " | ".join(mcols) + " |",
             "|---|---:|---:|---|---:|" + "---:|" * len(mcols)]
    for gk in sorted(groups, key=lambda k: (k[0].split()[0], tasks_of(groups[k]), k[0], k[1], k[2])):
        g = groups[gk]
        h = g.get("heuristic")
        hm = _f(h["optimized_makespan"]) if h and h["status"] == "ok" else None
        cells = []
        for c in mcols:
            r = g.get(c)
            if r is None:
                cells.append("")
            elif r["status"] == "error":
                cells.append("err")
            elif r["status"] == "skipped":
                cells.append("skip")
            elif hm:
                v = float(r["optimized_makespan"]) / hm
                cells.append(f"{v:.3f}" + ("*" if r["over_budget"] == "True" else ""))
            else:
                cells.append(f"{float(r['optimized_makespan']) / 1e3:.1f}us" + ("*" if r["over_budget"] == "True" else ""))
        lines.append(f"| {gk[0]} | {tasks_of(g)} | {gk[1]} | {gk[2]} | "
                     f"{hm / 1e3 if hm else float('nan'):.1f} | " + " | ".join(cells) + " |")

    # per method: against the best heuristic and torch's scheduler, gap to the bound, time
    lines += ["", "## Per method", "",
              "Geometric means of makespan / reference over the (graph, streams, budget) groups where both rows are "
              "ok; better / worse: ratio < 0.999 / > 1.001. torch_overlap orders one compute stream, so the "
              "comparison with it covers the 1-stream groups. Gap: (makespan - best bound) / best bound. Time: "
              "`optimize`'s total, or torch's pass (`phase_total`). Plot: "
              f"![per method]({stem}_per_method.png)", ""]
    lines += method_summary.table(rows, mcols)

    # solvers: gap and status
    sol = [r for r in ok if r["method"] in SOLVER_METHODS]
    if sol:
        lines += ["", "## Solver runs: gap to the best bound, status, time", "",
                  "| model | tasks | streams | budget | method | limit s | gap | status | method used | total s |",
                  "|---|---:|---:|---|---|---:|---:|---|---|---:|"]
        for r in sorted(sol, key=lambda r: (r["model"], int(float(r["tasks"])), _label(r), r["compute_streams"],
                                            r["budget"], r["method"], float(r["time_limit"]))):
            lines.append(f"| {_label(r)} | {r['tasks']} | {r['compute_streams']} | {r['budget']} | {r['method']} | "
                         f"{r['time_limit']} | {float(r['gap']):.2%} | {r['solver_status']} | {r['method_used']} "
                         f"| {float(r['phase_total']):.1f} |")
    errs = [r for r in rows if r["status"] != "ok"]
    if errs:
        lines += ["", "## Errors and skips", "", "| model | streams | budget | method | limit | status | reason |",
                  "|---|---:|---|---|---:|---|---|"]
        for r in errs:
            lines.append(f"| {_label(r)} | {r['compute_streams']} | {r['budget']} | {r['method']} | "
                         f"{r['time_limit']} | {r['status']} | {(r['error'] or r['skip_reason'])[:160]} |")

    # ------------------------------------------------ plots
    pngs = [out / f"{stem}_per_method.png"]
    method_summary.plot(rows, mcols, pngs[0])
    # 1. makespan relative to best heuristic, per model and budget (streams 1 + 2 as separate bars groups)
    gks = [gk for gk in sorted(groups, key=lambda k: (k[0].split()[0], tasks_of(groups[k]), k[0], k[1], k[2]))
           if groups[gk].get("heuristic", {}).get("status") == "ok"]
    plot_cols = [c for c in mcols if c != "heuristic"]
    if gks and plot_cols:
        fig, ax = plt.subplots(figsize=(max(8, 0.5 * len(gks) + 3), 5))
        wdt = 0.8 / len(plot_cols)
        for j, c in enumerate(plot_cols):
            xs, ys = [], []
            for i, gk in enumerate(gks):
                r = groups[gk].get(c)
                if r and r["status"] == "ok":
                    xs.append(i + (j - len(plot_cols) / 2 + 0.5) * wdt)
                    ys.append(float(r["optimized_makespan"]) / float(groups[gk]["heuristic"]["optimized_makespan"]))
            ax.bar(xs, ys, width=wdt, label=c)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xticks(range(len(gks)))
        ax.set_xticklabels([f"{gk[0]} s{gk[1]} b{gk[2]}" for gk in gks], rotation=75, fontsize=7, ha="right")
        ax.set_ylabel("makespan / best heuristic")
        lo = min([0.8] + [b.get_height() for b in ax.patches if b.get_height() > 0])
        ax.set_ylim(max(0, lo - 0.05), None)
        ax.legend(fontsize=7, ncol=3)
        ax.set_title("Makespan relative to the best heuristic (lower is better)")
        fig.tight_layout()
        pngs.append(out / f"{stem}_makespan_vs_heuristic.png")
        fig.savefig(pngs[-1], dpi=110)
        plt.close(fig)
    # 2. gap against time limit
    if sol:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        series: dict[tuple, list] = {}
        for r in sol:
            series.setdefault((_label(r), r["compute_streams"], r["budget"], r["method"]), []).append(
                (float(r["time_limit"]), 100 * float(r["gap"])))
        for (lab, s, b, m), pts in sorted(series.items()):
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o" if m == "cpsat" else "s", lw=1,
                    label=f"{m} {lab} s{s} b{b}")
        ax.set_xscale("log")
        ax.set_xlabel("time limit (s)")
        ax.set_ylabel("gap to best bound (%)")
        ax.set_title("Solver gap to the best bound against time limit")
        if len(series) <= 24:
            ax.legend(fontsize=5, ncol=2)
        fig.tight_layout()
        pngs.append(out / f"{stem}_gap_vs_time_limit.png")
        fig.savefig(pngs[-1], dpi=110)
        plt.close(fig)
    # 3. peak memory against budget
    fig, ax = plt.subplots(figsize=(7, 4.5))
    meths = sorted({r["method"] for r in ok}, key=METHODS.index)
    budgets = sorted({r["budget"] for r in ok}, key=lambda b: (b == "none", _f(b) or 0))
    for j, m in enumerate(meths):
        xs, ys = [], []
        for r in ok:
            if r["method"] == m:
                xs.append(budgets.index(r["budget"]) + (j - len(meths) / 2) * 0.06)
                ys.append(float(r["optimized_peak_memory"]) / float(r["baseline_peak_memory"]))
        ax.scatter(xs, ys, s=12, label=m)
    for i, b in enumerate(budgets):
        if _f(b):
            ax.plot([i - 0.4, i + 0.4], [float(b)] * 2, color="k", lw=1)
    ax.set_xticks(range(len(budgets)))
    ax.set_xticklabels([f"budget {b}" for b in budgets])
    ax.set_ylabel("peak memory / original peak")
    ax.set_title("Peak memory against budget (black bars: the budget)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    pngs.append(out / f"{stem}_peak_vs_budget.png")
    fig.savefig(pngs[-1], dpi=110)
    plt.close(fig)
    # 4. solve time against graph size
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for m in meths:
        for tl in sorted({r["time_limit"] for r in ok if r["method"] == m}, key=lambda t: _f(t) or 0):
            pts = [(float(r["tasks"]), float(r["phase_total"])) for r in ok
                   if r["method"] == m and r["time_limit"] == tl and _f(r["phase_total"])]
            if pts:
                ax.scatter([p[0] for p in pts], [max(p[1], 1e-3) for p in pts], s=12,
                           label=m + (f"@{tl}s" if tl else ""))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("tasks")
    ax.set_ylabel("time (s): optimize total / torch pass")
    ax.set_title("Time against graph size")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    pngs.append(out / f"{stem}_time_vs_tasks.png")
    fig.savefig(pngs[-1], dpi=110)
    plt.close(fig)

    lines += ["", "## Plots", ""] + [f"![{p.stem}]({p.name})" for p in pngs]
    md = out / f"{stem}.md"
    md.write_text("\n".join(lines) + "\n")
    return md


def main(argv=None):
    """How do the solver, the heuristics and PyTorch's overlap scheduler compare over a grid of graphs, budgets, time
    limits and streams? `run` appends one row per run to a CSV (experiments/results/<config>.csv), `summarize` writes
    <csv stem>.md and PNG plots beside it in --out, `compare` diffs two CSVs of one grid. Configs:
    experiments/configs/."""
    ap = command_line("experiments.benchmarks.sweep", main.__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run (or resume) a sweep")
    r.add_argument("config")
    r.add_argument("--out", required=True, help="CSV to append to")
    r.add_argument("--workers", type=int, default=None, help="pool size (default: nproc // 2, see module doc)")
    r.add_argument("--backend", choices=BACKENDS, default="pool",
                   help="pool: a local process pool (default); ray: one Ray task per run (pip install -e '.[ray]')")
    r.add_argument("--address", default=None,
                   help="Ray cluster to use (auto, ray://host:port); default: start a local Ray")
    r.add_argument("--num-cpus", type=int, default=None, help="CPUs of the local Ray it starts (default: all)")
    s = sub.add_parser("summarize", help="markdown table and PNG plots from a sweep CSV")
    s.add_argument("csv")
    s.add_argument("--out", required=True, help="output folder")
    s.add_argument("--title", default=None)
    c = sub.add_parser("compare", help="rows of two CSVs of one grid that differ (exit 1 on any)")
    c.add_argument("before")
    c.add_argument("after")
    a = ap.parse_args(argv)
    if a.cmd == "run":
        run(a.config, a.out, a.workers, backend=a.backend, address=a.address, num_cpus=a.num_cpus)
    elif a.cmd == "compare":
        diffs, counts = compare(_keyed_rows(a.before), _keyed_rows(a.after))
        print("\n".join(diffs) if diffs else "no differences")
        print(", ".join(f"{k} {v}" for k, v in counts.items()))
        return 1 if diffs else 0
    else:
        print(summarize(a.csv, a.out, a.title))
    return 0


if __name__ == "__main__":
    # run as the module `experiments.benchmarks.sweep`, not `__main__`, so Ray pickles its tasks by reference
    # (workers import it from the package the job carries) instead of by value
    from experiments.benchmarks.sweep import main as _main

    sys.exit(_main())
