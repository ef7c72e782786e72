"""Where the default heuristic portfolio spends its time: cProfile of `best_heuristic`, uncut.

Builds ``models.build("synthetic", tasks=N, seed=1)``, extracts it, and profiles `best_heuristic` (every
heuristic, swaps, judging simulations; no work budget) once per compute-stream count and memory budget,
with Python's cyclic garbage collector paused as `optimize` runs it (``--gc`` leaves it on: a direct
call's cost then includes collections that walk the whole heap, the FX graph's included). Prints the wall
time unprofiled and the top functions by their own time.

    .venv/bin/python experiments/portfolio_profile.py --tasks 10000 --streams 1 --top 25
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import pstats
import time

from solvercast import extract_problem
from solvercast.heuristics import best_heuristic
from solvercast.heuristics._common import budget_bytes
from solvercast.models import build


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=10000)
    parser.add_argument("--streams", type=int, nargs="+", default=[1])
    parser.add_argument("--budgets", default="1.0,none", help="comma-separated ratios of the original peak, or none")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--gc", action="store_true", help="leave the garbage collector on")
    args = parser.parse_args(argv)
    gm = build("synthetic", tasks=args.tasks, seed=1)
    if not args.gc:
        gc.disable()
    for streams in args.streams:
        base = extract_problem(gm, compute_streams=streams)
        for text in args.budgets.split(","):
            ratio = None if text == "none" else float(text)
            budget = budget_bytes(base, ratio) if ratio is not None else None
            problem = base.with_budget(budget)
            start = time.perf_counter()
            best_heuristic(problem, budget)
            plain = time.perf_counter() - start
            profiler = cProfile.Profile()
            profiler.enable()
            best = best_heuristic(problem, budget)
            profiler.disable()
            print(f"\n### synthetic {args.tasks} tasks, {streams} compute stream(s), budget {ratio}, "
                  f"garbage collector {'on' if args.gc else 'paused'}: best_heuristic {plain:.2f} s unprofiled, "
                  f"picks {best.method}\n")
            stats = pstats.Stats(profiler)
            out = io.StringIO()
            stats.stream = out
            stats.sort_stats("tottime").print_stats(args.top)
            lines = out.getvalue().splitlines()
            start_at = next(i for i, line in enumerate(lines) if "ncalls" in line)
            print("```")
            print("\n".join(line for line in lines[start_at:] if line.strip()))
            print("```")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
