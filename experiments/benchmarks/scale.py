"""Solver quality and phase times on 1k-10k-task graphs (issue 7), through `optimize` as a user calls it.

    .venv/bin/python experiments/scale.py --time-limit 60 --wall-clock > experiments/results/scale.md
"""

import argparse
import platform
import time

import ortools
import torch

from solvercast import optimize
from solvercast.models import build

CASES = [
    ("synthetic", {"tasks": 1000, "seed": 1}),
    ("synthetic", {"tasks": 3000, "seed": 1}),
    ("synthetic", {"tasks": 10000, "seed": 1}),
    ("fsdp_layers", {"layers": 76}),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--budget", type=float, default=1.0, help="ratio of the original order's peak")
    ap.add_argument("--method", default="auto")
    ap.add_argument("--wall-clock", action="store_true", help="wall-clock time limit (optimize's deterministic=False)")
    args = ap.parse_args()
    print(f"# Scale: time limit {args.time_limit:g} s, budget {args.budget:g} x original peak, method {args.method}, "
          f"{'wall-clock' if args.wall_clock else 'deterministic'} time limit\n")
    print(f"Machine: {platform.machine()}, 2 cores; python {platform.python_version()}, torch {torch.__version__}, "
          f"ortools {ortools.__version__}.\n")
    print("| graph | tasks | original us | best heuristic us | solver us | best bound us | gap heuristic | gap solver |"
          " method (auto's choice) | status | build s | extract s | heuristics s | solve s | lower s | total s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, params in CASES:
        t0 = time.perf_counter()
        gm = build(name, **params)
        built = time.perf_counter() - t0
        res = optimize(gm, time_limit=args.time_limit, memory_budget=args.budget, method=args.method,
                       deterministic=not args.wall_clock)
        r = res.report
        from solvercast import simulate
        from solvercast.heuristics import best_heuristic

        heuristic = simulate(res.problem, best_heuristic(res.problem)).makespan
        ph = r.phases
        print(f"| {name} {params} | {r.tasks} | {r.baseline_makespan / 1e3:.1f} | {heuristic / 1e3:.1f} | "
              f"{r.optimized_makespan / 1e3:.1f} | {r.best_bound / 1e3:.1f} | "
              f"{(heuristic - r.best_bound) / r.best_bound:.2%} | {r.gap:.2%} | {r.method} ({r.solver}) | "
              f"{r.solver_status} | {built:.1f} | {ph.get('extract', 0):.1f} | {ph.get('heuristics', 0):.1f} | "
              f"{ph.get('solve', 0):.1f} | {ph.get('lower', 0):.1f} | {ph.get('total', 0):.1f} |", flush=True)


if __name__ == "__main__":
    main()
