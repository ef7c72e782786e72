"""Is `optimize`'s time_limit a promise? Wall time of whole calls against their limit (issue 17).

For each size of synthetic graph (seed 1), time limit, compute-stream count and budget (1.0 x the
original peak, or none), one `optimize` call (method auto, deterministic) is timed from the built module
to the returned one; the model's build is not counted. The table gives wall / T, the phases, what the
heuristics' work budget cut, and the quality against the full heuristic portfolio (`best_heuristic`
with no work budget; up to --quality-max tasks, since it is slow beyond).

    .venv/bin/python experiments/time_limit.py > experiments/results/time_limit.md
    .venv/bin/python experiments/time_limit.py --sizes 300,10000 --limits 1,2 --streams 1   # a subset
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys
import time

from solvercast import optimize, simulate
from solvercast.errors import InfeasibleBudgetError
from solvercast.models import build


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10,300,1000,3000,10000,40000")
    ap.add_argument("--limits", default="1,2,10")
    ap.add_argument("--streams", default="1,2")
    ap.add_argument("--budgets", default="1.0,none")
    ap.add_argument("--quality-max", type=int, default=3000, help="compare with the full portfolio up to this size")
    args = ap.parse_args()
    print("# time_limit: wall time of whole `optimize` calls\n")
    print(f"Command: `.venv/bin/python {' '.join(shlex.quote(a) for a in sys.argv)}`\n")
    print(f"Machine: {platform.machine()}, nproc {os.cpu_count()}, Python {platform.python_version()}; "
          f"load average at start {os.getloadavg()[0]:.1f}.\n")
    print("| tasks | streams | budget | T (s) | wall (s) | wall / T | extract | heuristics | solve | lower | "
          "method | cut by the work budget | makespan / full portfolio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    from solvercast.heuristics import best_heuristic

    for size in [int(x) for x in args.sizes.split(",")]:
        gm = build("synthetic", tasks=size, seed=1)
        for streams in [int(x) for x in args.streams.split(",")]:
            for budget_arg in args.budgets.split(","):
                budget = None if budget_arg == "none" else float(budget_arg)
                budget = float("inf") if budget is None else budget
                full = None
                for limit in [float(x) for x in args.limits.split(",")]:
                    start = time.perf_counter()
                    res = optimize(gm, time_limit=limit, compute_streams=streams, memory_budget=budget)
                    wall = time.perf_counter() - start
                    r = res.report
                    if full is None and size <= args.quality_max and r.analysed:
                        try:
                            full = simulate(res.problem, best_heuristic(res.problem)).makespan
                        except InfeasibleBudgetError:
                            full = float("nan")
                    quality = f"{r.optimized_makespan / full:.4f}" if full and r.analysed else "-"
                    ph = r.phases
                    cut = ", ".join(r.heuristics_cut) or "-" if r.analysed else "**not analysed**: returned untouched"
                    print(f"| {size} | {streams} | {budget_arg} | {limit:g} | {wall:.2f} | {wall / limit:.2f} | "
                          f"{ph.get('extract', 0):.2f} | {ph.get('heuristics', 0):.2f} | {ph.get('solve', 0):.2f} | "
                          f"{ph.get('lower', 0):.2f} | {r.method} | {cut} | {quality} |",
                          flush=True)


if __name__ == "__main__":
    main()
