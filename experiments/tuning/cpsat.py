"""CP-SAT quality under a memory budget: PyTorch's reordering-test shapes (tests/reorder_shapes.py) and
zoo graphs up to ~300 tasks (issues 4 and 16).

Per case: original, best heuristic, CP-SAT (warm-started from it), best bound (max of CP-SAT's own and
lower_bounds), gap, status, wall and CPU seconds of the solve (CPU / time limit: the share of the limit
a solve that does not finish early uses on an idle core), CP-SAT deterministic time. Everything judged by
`simulate`. Wall seconds are noisy (2 cores shared with other jobs); deterministic time is not. The time
limit is also the solve's deadline, as in `optimize`; "wall cap" marks a solve that deadline ended.

    .venv/bin/python experiments/cpsat_quality.py --time-limit 10   # tables of results/cpsat_quality.md
"""

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import ortools
import torch

from solvercast import InfeasibleBudgetError, Schedule, extract_problem, lower_bounds, simulate
from solvercast.heuristics import best_heuristic
from solvercast.models import build
from solvercast.solvers.cpsat import solve_cpsat

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from reorder_shapes import SHAPES  # noqa: E402

ZOO = [
    ("tp_mlp", {"layers": 8}),
    ("tp_block", {"layers": 3}),
    ("sp_block", {"layers": 3}),
    ("fsdp_layers", {"layers": 2}),
    ("fsdp_layers", {"layers": 4}),
    ("fsdp_layers", {"layers": 8}),
    ("moe_block", {"layers": 4}),
    ("synthetic", {"tasks": 150, "seed": 1}),
    ("synthetic", {"tasks": 300, "seed": 2}),
    ("simple_fsdp", {"layers": 2}),
    ("fsdp_tp", {"layers": 2}),
    # the real-machinery models' other shapes up to ~300 tasks: one layer, the forward graphs, llama_tp
    ("simple_fsdp", {"layers": 1}),
    ("fsdp_tp", {"layers": 1}),
    ("llama_tp", {"layers": 2}),
    ("simple_fsdp", {"layers": 3, "backward": 0}),
    ("fsdp_tp", {"layers": 3, "backward": 0}),
    ("llama_tp", {"layers": 3, "backward": 0}),
]


def cases(only: str | None):
    for name, make in SHAPES.items():
        if not only or only in name:
            yield name, make()
    for name, params in ZOO:
        label = f"{name} {' '.join(f'{k}={v}' for k, v in params.items())}"
        if not only or only in label:
            yield label, extract_problem(build(name, **params))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--budget", type=float, default=1.0, help="ratio of the original order's peak")
    ap.add_argument("--wall-clock", action="store_true", help="wall-clock time limit instead of deterministic time")
    ap.add_argument("--only", help="cases whose label contains this")
    args = ap.parse_args()
    print(f"# CP-SAT quality, time limit {args.time_limit:g} s, budget {args.budget:g} x original peak\n")
    print(f"Machine: {platform.machine()}, {os.cpu_count()} cores (shared); python {platform.python_version()}, "
          f"torch {torch.__version__}, ortools {ortools.__version__}; "
          f"{'wall-clock, 2 workers' if args.wall_clock else 'deterministic time limit, 1 worker'}.\n")
    print("| case | tasks | original us | heuristic (method) us | CP-SAT us | best bound us | gap | "
          "CP-SAT vs heuristic | status | wall s | CPU s (of the limit) | det. time |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for label, p in cases(args.only):
        orig = simulate(p, Schedule.original(p))
        budget = max(int(args.budget * orig.peak_memory), lower_bounds(p).memory)
        p = p.with_budget(budget)
        try:
            hint = best_heuristic(p, memory_budget=budget)
        except InfeasibleBudgetError as e:
            print(f"| {label} | {p.num_tasks} | {orig.makespan / 1e3:.1f} | "
                  f"no heuristic fits (best peak {e.best_peak / 2**20:.2f} MiB) | | | | | | | | |")
            continue
        h = simulate(p, hint)
        t0, c0 = time.perf_counter(), time.process_time()
        # the limit is also the call's deadline, as `optimize` gives it: a deterministic search may then run
        # slower than planned and still end on its deterministic limit (`solve_model`)
        res = solve_cpsat(p, time_limit=args.time_limit, memory_budget=budget, hint=hint,
                          deterministic=not args.wall_clock, deadline=t0 + args.time_limit)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        best_bound = max(lower_bounds(p).makespan, res.bound or 0)
        gap = (res.makespan - best_bound) / best_bound
        wall_note = " (wall cap)" if res.stats.get("stopped_by_wall_clock") else ""
        print(f"| {label} | {p.num_tasks} | {orig.makespan / 1e3:.1f} | "
              f"{h.makespan / 1e3:.1f} ({hint.method}) | {res.makespan / 1e3:.1f} | {best_bound / 1e3:.2f} | "
              f"{gap:.2%} | {(res.makespan - h.makespan) / h.makespan:+.2%} | {res.status.value} | {wall:.1f}{wall_note} | "
              f"{cpu:.1f} ({cpu / args.time_limit:.0%}) | "
              f"{res.stats.get('deterministic_time', 0):.2f} |", flush=True)


if __name__ == "__main__":
    main()
