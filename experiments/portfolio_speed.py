"""The heuristics' CPU and wall time before and after a change, side by side in one run.

For each size and compute-stream count, ``models.build("synthetic", tasks=N, seed=1)`` is extracted and
every heuristic, the swap pass and the whole default portfolio (`best_heuristic`: every heuristic, the
swaps, a judging `validate` of each; no work budget) are timed, under memory budget 1.0 x original peak
and none, by two worker processes: one importing the code of a base commit (a ``git archive`` of it,
laid out as the installed package), one this checkout. The two alternate per size, so both see the same
machine load (``--passes``: also one pass of each kind `heuristics.work.PASS_COST_US` prices, to re-fit
them). Times are the best of ``--repeat`` runs, with the garbage collector paused (as `optimize`
runs the heuristics): the process's CPU time (less sensitive to other processes on a shared machine) and
its wall time. Each worker also reports the schedules' makespans, which must agree.

    .venv/bin/python experiments/portfolio_speed.py --base 7b0d0bb --sizes 1000 3000 10000 --streams 1 2
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shlex
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def worker(tasks: int, streams: int, repeat: int, passes: bool) -> None:
    from heuristics_speed import heuristic_runs  # beside this script
    from solvercast import extract_problem, simulate, validate
    from solvercast.heuristics import nondelay_schedule
    from solvercast.heuristics._common import budget_bytes, renamed
    from solvercast.models import build

    gm = build("synthetic", tasks=tasks, seed=1)
    base = extract_problem(gm, compute_streams=streams)
    gc.collect()
    gc.disable()
    for ratio in (1.0, None):
        budget = budget_bytes(base, ratio) if ratio is not None else None
        p = base.with_budget(budget)
        nondelay = renamed(nondelay_schedule(p, budget), "nondelay")
        runs = heuristic_runs(p, budget, nondelay)
        if passes:  # one pass of each kind `heuristics.work.PASS_COST_US` prices (private, same in both)
            from solvercast.heuristics.comm_priority import _comm_pass, comm_scores
            from solvercast.heuristics.list_scheduling import _list_pass, _nondelay_pass, upward_ranks

            ranks = upward_ranks(p)
            by_rank = sorted(range(p.num_tasks), key=lambda t: (-ranks[t], t))
            scores = comm_scores(p)
            by_score = sorted(range(p.num_tasks), key=scores.__getitem__)
            runs.update({
                "pass: simulate (validate)": lambda: (validate(p, nondelay, memory_budget=sys.maxsize), nondelay)[1],
                "pass: comm_pass": lambda: _comm_pass(p, by_score, True, budget, "comm_priority"),
                "pass: list_pass": lambda: _list_pass(p, by_rank, budget, "list")[0],
                "pass: nondelay_pass": lambda: _nondelay_pass(p, ranks, budget, budget)[0] or nondelay,
            })
        for name in runs:
            wall = cpu = float("inf")
            schedule = None
            for _ in range(repeat):
                start, start_cpu = time.perf_counter(), time.process_time()
                schedule = runs[name]()
                cpu = min(cpu, time.process_time() - start_cpu)
                wall = min(wall, time.perf_counter() - start)
            print(json.dumps({"budget": ratio, "method": name, "seconds": wall, "cpu": cpu,
                              "makespan": simulate(p, schedule).makespan, "picked": schedule.method}), flush=True)


def base_tree(commit: str, into: Path) -> Path:
    """``commit``'s code laid out as installed (`solvercast`, with `heuristics` and `models` inside it)."""
    archive = into / "src.tar"
    with open(archive, "wb") as f:
        subprocess.run(["git", "-C", str(ROOT), "archive", commit, "solvercast", "heuristics", "models"], stdout=f,
                       check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into / "src")
    site = into / "site"
    (site).mkdir()
    os.rename(into / "src" / "solvercast", site / "solvercast")
    os.rename(into / "src" / "heuristics", site / "solvercast" / "heuristics")
    os.rename(into / "src" / "models", site / "solvercast" / "models")
    return site


def run_worker(site: Path | None, tasks: int, streams: int, repeat: int, passes: bool, cwd: str) -> dict:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if site is not None:
        env["PYTHONPATH"] = str(site)  # found before the editable install of this checkout
    command = [sys.executable, __file__, "--worker", str(tasks), str(streams), "--repeat", str(repeat)]
    out = subprocess.run(command + (["--passes"] if passes else []),
                         env=env, cwd=cwd, capture_output=True, text=True, check=True).stdout
    return {(r["budget"], r["method"]): r for r in map(json.loads, out.splitlines())}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default="7b0d0bb", help="the commit to compare with")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 3000, 10000])
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--passes", action="store_true",
                        help="also time one pass of each kind the work budget prices (heuristics.work)")
    parser.add_argument("--worker", type=int, nargs=2, metavar=("TASKS", "STREAMS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(*args.worker, args.repeat, args.passes)
        return 0
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "solvercast", "heuristics"],
                           capture_output=True, text=True, check=True).stdout.strip()
    given = argv if argv is not None else sys.argv[1:]
    print(f"command: `{shlex.join([os.path.relpath(sys.executable, ROOT), 'experiments/portfolio_speed.py'] + given)}`")
    print(f"base {args.base} against {head}{' (with uncommitted changes)' if dirty else ''}; {os.cpu_count()} cores, "
          f"load average at start {os.getloadavg()[0]:.1f}; best of {args.repeat}, seconds, garbage collector paused; "
          f"the 'pass:' rows time one pass of each kind `heuristics.work` prices\n")
    print("| tasks | streams | budget | method | CPU before (s) | CPU after (s) | after / before | wall before (s) | "
          "wall after (s) | same makespan |")
    print("|---:|---:|---|---|---:|---:|---:|---:|---:|---|")
    with tempfile.TemporaryDirectory() as tmp:
        site = base_tree(args.base, Path(tmp))
        for tasks in args.sizes:
            for streams in args.streams:
                before = run_worker(site, tasks, streams, args.repeat, args.passes, tmp)
                after = run_worker(None, tasks, streams, args.repeat, args.passes, tmp)
                for key, b in before.items():
                    a = after[key]
                    same = a["makespan"] == b["makespan"] and a["picked"] == b["picked"]
                    print(f"| {tasks} | {streams} | {key[0]} | {key[1]} | {b['cpu']:.3f} | {a['cpu']:.3f} | "
                          f"{a['cpu'] / max(b['cpu'], 1e-9):.2f} | {b['seconds']:.3f} | {a['seconds']:.3f} | {same} |",
                          flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
