"""Time every heuristic on random graphs and report its simulated quality.

For each size, a `random_problem(seed, size)` is built and each heuristic is
timed (best of ``--repeat`` runs, one core, pure Python). Quality is the
simulated makespan relative to the original order and to the best lower
bound (`lower_bounds(p).makespan`), and the simulated peak relative to the
original order's.

    .venv/bin/python experiments/heuristics_speed.py                    # sizes 1000 and 10000
    .venv/bin/python experiments/heuristics_speed.py --budget-ratio 1.0 --out experiments/results/x.md
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys
import time

from solvercast import Schedule, lower_bounds, simulate, validate
from solvercast.heuristics import (best_heuristic, comm_priority_schedule, iterative_swap, list_schedule,
                                   nondelay_schedule, budget_bytes)
from solvercast.testing import random_problem


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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000], help="numbers of tasks")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--compute-streams", type=int, default=1)
    parser.add_argument("--sync", type=int, default=0, help="sync_overhead in ns")
    parser.add_argument("--budget-ratio", type=float, default=None,
                        help="memory budget as a ratio of the original peak (default: none)")
    parser.add_argument("--repeat", type=int, default=3, help="time the best of this many runs")
    parser.add_argument("--out", help="also write the report to this file")
    args = parser.parse_args(argv)

    lines = [
        f"command: `{shlex.join([os.path.relpath(sys.executable)] + sys.argv)}`" if argv is None
        else f"command: `heuristics_speed.py {shlex.join(argv)}`",
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


if __name__ == "__main__":
    raise SystemExit(main())
