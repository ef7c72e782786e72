"""What the heuristics cost and what they bring: the data behind the portfolio's order (`best.PORTFOLIO`), the
work budget's prices (`work.PASS_COST_US`), and their speed before and after a change.

    python -m experiments.tuning.heuristics portfolio > experiments/results/heuristic_portfolio.md
    python -m experiments.tuning.heuristics speed --sizes 1000 10000 --out experiments/results/heuristics_speed.md
    python -m experiments.tuning.heuristics compare --base 7b0d0bb --sizes 1000 3000 10000 --streams 1 2

``portfolio``: For each graph (zoo models and synthetic graphs), budget (1.0 x original peak, none) and compute-stream
count, every heuristic of the portfolio runs alone under an unlimited work budget; the table gives its
counted work (reference microseconds, `heuristics.work`), its wall time, and its makespan relative to
the best of all. The summary ranks methods by value per cost: how often a method is the best (alone or
tied), and its mean excess over the best, per unit of work.

``speed``: Time every heuristic on random graphs and report its simulated quality. For each size, a `random_problem(seed, size)` is built and each heuristic is
timed (best of ``--repeat`` runs, one core, pure Python). Quality is the
simulated makespan relative to the original order and to the best lower
bound (`lower_bounds(p).makespan`), and the simulated peak relative to the
original order's.

``compare``: the heuristics' CPU and wall time before and after a change, side by side in one run. For each size and compute-stream count, ``models.build("synthetic", tasks=N, seed=1)`` is extracted and
every heuristic, the swap pass and the whole default portfolio (`best_heuristic`: every heuristic, the
swaps, a judging `validate` of each; no work budget) are timed, under memory budget 1.0 x original peak
and none, by two worker processes: one importing the code of a base commit (a ``git archive`` of it,
laid out as the installed package), one this checkout. The two alternate per size, so both see the same
machine load (``--passes``: also one pass of each kind `heuristics.work.PASS_COST_US` prices, to re-fit
them). Times are the best of ``--repeat`` runs, with the garbage collector paused (as `optimize`
runs the heuristics): the process's CPU time (less sensitive to other processes on a shared machine) and
its wall time. Each worker also reports the schedules' makespans, which must agree.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shlex
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import defaultdict
from pathlib import Path

# public names only at the top: `compare`'s worker imports this module on a base commit's code too
from experiments.common import below_commands, command_line, zoo_graphs
from solvercast import Schedule, lower_bounds, simulate, validate
from solvercast.heuristics import (best_heuristic, budget_bytes, comm_priority_schedule, iterative_swap,
                                   list_schedule, nondelay_schedule)
from solvercast.testing import random_problem

ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------- portfolio


GRAPHS = zoo_graphs("fsdp_layers layers=4; fsdp_layers layers=16; tp_block layers=4; sp_block layers=4; "
                    "moe_block layers=2; synthetic tasks=1000 seed=1; synthetic tasks=3000 seed=2; "
                    "synthetic tasks=10000 seed=1")


def measure(problem, fn):
    from solvercast.gc_paused import gc_paused
    from solvercast.heuristics.work import WorkBudget, work_budget

    meter = WorkBudget(limit=None)
    start = time.perf_counter()
    with work_budget(meter), gc_paused():  # as `optimize` runs them: collections would walk the FX graph too
        schedule = fn()
    wall = time.perf_counter() - start
    sim = simulate(problem, schedule)
    return schedule, sim, meter.spent, wall


def cmd_portfolio(args) -> None:
    from solvercast import extract_problem
    from solvercast.heuristics._common import renamed
    from solvercast.models import build
    from solvercast.pipeline.methods import schedule_methods

    print("# Heuristic portfolio: cost and value per method\n")
    print(f"Command: `python -m experiments.tuning.heuristics portfolio --streams {args.streams}`; {platform.machine()}, "
          f"{os.cpu_count()} cores, load average at start {os.getloadavg()[0]:.1f} (wall times are noisy, work "
          f"counts are exact; the garbage collector paused, as `optimize` runs the heuristics).\n")
    print("| graph | streams | budget | tasks | method | work (ref ms) | wall (ms) | wall/work | makespan / best | "
          "within budget |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    stats = defaultdict(lambda: {"best": 0, "runs": 0, "excess": 0.0, "work": 0.0, "wall": 0.0})
    for model, params in GRAPHS:
        gm = build(model, **params)
        for streams in [int(s) for s in args.streams.split(",")]:
            if streams > 1 and params.get("tasks", 0) >= 10000:
                continue
            base_problem = extract_problem(gm, compute_streams=streams)
            for ratio in (1.0, None):
                problem = base_problem
                budget = budget_bytes(problem, ratio) if ratio is not None else None
                problem = problem.with_budget(budget)
                rows = {}
                for m in schedule_methods():
                    rows[m.name] = measure(problem, lambda m=m: m.run(problem, memory_budget=budget))
                for base in list(rows):
                    if base in ("raise_comms", "sink_waits"):
                        continue
                    rows[base + "+swap"] = measure(
                        problem,
                        lambda base=base: iterative_swap(problem, renamed(rows[base][0], base), budget))
                ok = {k: v for k, v in rows.items() if budget is None or v[1].peak_memory <= budget}
                best = min(v[1].makespan for v in ok.values())
                for name, (sched, sim, work, wall) in rows.items():
                    fits = name in ok
                    ratio_best = sim.makespan / best
                    print(f"| {model} {params} | {streams} | {ratio} | {problem.num_tasks} | {name} | {work / 1e3:.1f} | "
                          f"{wall * 1e3:.1f} | {wall * 1e6 / max(work, 1):.2f} | {ratio_best:.4f} | {fits} |", flush=True)
                    st = stats[(name, streams)]
                    st["runs"] += 1
                    st["work"] += work / problem.num_tasks
                    st["wall"] += wall / problem.num_tasks
                    if fits:
                        st["best"] += ratio_best <= 1.0
                        st["excess"] += ratio_best - 1
                    else:
                        st["excess"] += 0.5  # over budget: no use
    print("\n## Summary per method\n")
    print("| method | streams | runs | best (or tied) | mean excess over best | mean work per task (ref us) | "
          "mean wall per task (us) |")
    print("|---|---|---|---|---|---|---|")
    for (name, streams), st in sorted(stats.items(), key=lambda kv: (kv[0][1], kv[1]["excess"] / kv[1]["runs"])):
        r = st["runs"]
        print(f"| {name} | {streams} | {r} | {st['best']} | {st['excess'] / r:.4f} | {st['work'] / r:.1f} | "
              f"{st['wall'] / r * 1e6:.1f} |")



# ---------------------------------------------------------------- speed


def machine_info() -> str:
    try:
        import torch

        torch_version = torch.__version__
    except ImportError:  # pragma: no cover - torch is a dependency
        torch_version = "not installed"
    return (f"nproc {os.cpu_count()}, {platform.processor() or platform.machine()}, "
            f"Python {platform.python_version()}, torch {torch_version}, {platform.system()} {platform.release()}")


def heuristic_runs(p, budget, polish) -> dict:
    """Each heuristic, the swap pass (on the original order and on ``polish``: the swap alone) and the whole
    portfolio (`best_heuristic`: all of them, the swaps, and judging simulations), as calls to time."""
    return {
        "list": lambda: list_schedule(p, budget),
        "nondelay": lambda: nondelay_schedule(p, budget),
        "comm_priority": lambda: comm_priority_schedule(p, memory_budget=budget),
        "raise_comms": lambda: comm_priority_schedule(p, True, False, False, memory_budget=budget),
        "sink_waits": lambda: comm_priority_schedule(p, False, True, False, memory_budget=budget),
        "original+swap": lambda: iterative_swap(p, Schedule.original(p), budget),
        f"{polish.method}+swap (swap only)": lambda: iterative_swap(p, polish, budget),
        "best_heuristic (all + judging)": lambda: best_heuristic(p, budget),
    }


def timed(fn, repeat: int):
    best, result = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def run(size: int, args) -> list[str]:
    p = random_problem(args.seed, size, compute_streams=args.compute_streams, sync_overhead=args.sync)
    budget = budget_bytes(p, args.budget_ratio)
    original = simulate(p, Schedule.original(p))
    bound = lower_bounds(p).makespan
    heuristics = heuristic_runs(p, budget, comm_priority_schedule(p, memory_budget=budget))
    rows = [f"| {size} | original | - | 1.000 | {original.makespan / bound:.3f} | 1.000 | original |"]
    for name, fn in heuristics.items():
        seconds, schedule = timed(fn, args.repeat)
        r = validate(p, schedule, memory_budget=sys.maxsize)
        rows.append(f"| {size} | {name} | {seconds:.3f} | {r.makespan / original.makespan:.3f} | "
                    f"{r.makespan / bound:.3f} | {r.peak_memory / original.peak_memory:.3f} | {schedule.method} |")
    return rows


def cmd_speed(args, argv) -> int:
    lines = [
        f"command: `python -m experiments.tuning.heuristics {shlex.join(argv)}`",
        f"machine: {machine_info()}",
        f"graphs: random_problem(seed={args.seed}, n, compute_streams={args.compute_streams}, "
        f"sync_overhead={args.sync}); budget: "
        + ("none" if args.budget_ratio is None else f"{args.budget_ratio} x original peak"),
        "",
        "| tasks | heuristic | time (s) | makespan / original | makespan / lower bound | peak / original | method |",
        "|---:|---|---:|---:|---:|---:|---|",
    ]
    for size in args.sizes:
        lines.extend(run(size, args))
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 0



# ---------------------------------------------------------------- compare


def worker(tasks: int, streams: int, repeat: int, passes: bool) -> None:
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
    """One worker process: ``site``'s solvercast (a base commit's) or, with None, this checkout's; the
    experiments package is this checkout's in both. ``cwd`` is outside the checkout, so that the
    working directory `-m` puts first on the path shadows neither."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(([str(site)] if site is not None else []) + [str(ROOT)])
    command = [sys.executable, "-m", "experiments.tuning.heuristics", "compare", "--worker", str(tasks), str(streams),
               "--repeat", str(repeat)]
    out = subprocess.run(command + (["--passes"] if passes else []),
                         env=env, cwd=cwd, capture_output=True, text=True, check=True).stdout
    return {(r["budget"], r["method"]): r for r in map(json.loads, out.splitlines())}


def cmd_compare(args, argv) -> int:
    if args.worker:
        worker(*args.worker, args.repeat, args.passes)
        return 0
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "solvercast", "heuristics"],
                           capture_output=True, text=True, check=True).stdout.strip()
    print(f"command: `python -m experiments.tuning.heuristics {shlex.join(argv)}`")
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


def main(argv=None) -> int:
    """What does each heuristic cost and bring, and how fast is the portfolio? Tables to stdout (results:
    experiments/results/heuristic_portfolio.md, heuristics_speed.md)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = command_line("experiments.tuning.heuristics", main.__doc__, below_commands(__doc__))
    sub = ap.add_subparsers(dest="cmd", required=True)
    po = sub.add_parser("portfolio", help="work, wall time and quality of every heuristic alone (markdown)")
    po.add_argument("--streams", default="1,2")
    sp = sub.add_parser("speed", help="time every heuristic on random graphs, with its simulated quality")
    sp.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000], help="numbers of tasks")
    sp.add_argument("--seed", type=int, default=0)
    sp.add_argument("--compute-streams", type=int, default=1)
    sp.add_argument("--sync", type=int, default=0, help="sync_overhead in ns")
    sp.add_argument("--budget-ratio", type=float, default=None,
                    help="memory budget as a ratio of the original peak (default: none)")
    sp.add_argument("--repeat", type=int, default=3, help="time the best of this many runs")
    sp.add_argument("--out", help="also write the report to this file")
    co = sub.add_parser("compare", help="CPU and wall time of a base commit's heuristics against this checkout's")
    co.add_argument("--base", default="7b0d0bb", help="the commit to compare with")
    co.add_argument("--sizes", type=int, nargs="+", default=[1000, 3000, 10000])
    co.add_argument("--streams", type=int, nargs="+", default=[1, 2])
    co.add_argument("--repeat", type=int, default=2)
    co.add_argument("--passes", action="store_true",
                    help="also time one pass of each kind the work budget prices (heuristics.work)")
    co.add_argument("--worker", type=int, nargs=2, metavar=("TASKS", "STREAMS"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.cmd == "portfolio":
        cmd_portfolio(args)
        return 0
    if args.cmd == "speed":
        return cmd_speed(args, argv)
    return cmd_compare(args, argv)


if __name__ == "__main__":
    raise SystemExit(main())
