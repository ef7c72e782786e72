"""CP-SAT quality on zoo graphs up to ~300 tasks with a memory budget (issue 4's target).

Per model: original, best heuristic, CP-SAT (warm-started from it), best bound (max of CP-SAT's own
and lower_bounds), gap, solve time. Everything judged by `simulate`.

    .venv/bin/python experiments/cpsat_quality.py --time-limit 10 --wall-clock > experiments/results/cpsat_quality.md
"""

import argparse
import platform
import time

import ortools
import torch

from solvercast import InfeasibleBudgetError, Schedule, extract_problem, lower_bounds, simulate
from solvercast.heuristics import best_heuristic
from solvercast.models import build
from solvercast.solvers.cpsat import solve_cpsat

CASES = [
    ("tp_mlp", {"layers": 8}),
    ("tp_block", {"layers": 3}),
    ("sp_block", {"layers": 3}),
    ("fsdp_layers", {"layers": 2}),
    ("fsdp_layers", {"layers": 4}),
    ("moe_block", {"layers": 4}),
    ("synthetic", {"tasks": 150, "seed": 1}),
    ("synthetic", {"tasks": 300, "seed": 2}),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--budget", type=float, default=1.0, help="ratio of the original order's peak")
    ap.add_argument("--wall-clock", action="store_true", help="wall-clock time limit instead of deterministic time")
    args = ap.parse_args()
    print(f"# CP-SAT quality, time limit {args.time_limit:g} s, budget {args.budget:g} x original peak\n")
    print(f"Machine: {platform.machine()}, {__import__('os').cpu_count()} cores; python {platform.python_version()}, "
          f"torch {torch.__version__}, ortools {ortools.__version__}; CP-SAT 2 workers, "
          f"{'wall-clock' if args.wall_clock else 'deterministic'} time limit.\n")
    print("| model | tasks | budget MiB | original us | heuristic (method) us | CP-SAT us | best bound us | gap | "
          "CP-SAT vs heuristic | status | solve s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, params in CASES:
        p = extract_problem(build(name, **params))
        orig = simulate(p, Schedule.original(p))
        budget = max(int(args.budget * orig.peak_memory), lower_bounds(p).memory)
        p = p.with_budget(budget)
        label = f"{name} {' '.join(f'{k}={v}' for k, v in params.items())}"
        try:
            hint = best_heuristic(p, memory_budget=budget)
        except InfeasibleBudgetError as e:
            print(f"| {label} | {p.num_tasks} | {budget / 2**20:.2f} | {orig.makespan / 1e3:.1f} | "
                  f"no heuristic fits (best peak {e.best_peak / 2**20:.2f} MiB) | | | | | | |")
            continue
        h = simulate(p, hint)
        t0 = time.perf_counter()
        res = solve_cpsat(p, time_limit=args.time_limit, memory_budget=budget, hint=hint,
                          deterministic=not args.wall_clock)
        wall = time.perf_counter() - t0
        best_bound = max(lower_bounds(p).makespan, res.bound or 0)
        gap = (res.makespan - best_bound) / best_bound
        print(f"| {label} | {p.num_tasks} | {budget / 2**20:.2f} | {orig.makespan / 1e3:.1f} | "
              f"{h.makespan / 1e3:.1f} ({hint.method}) | {res.makespan / 1e3:.1f} | {best_bound / 1e3:.1f} | "
              f"{gap:.2%} | {(res.makespan - h.makespan) / h.makespan:+.2%} | {res.status.value} | {wall:.1f} |",
              flush=True)


if __name__ == "__main__":
    main()
