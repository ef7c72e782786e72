"""Moves into the default stream's stalls (heuristics/fill_idle.py) on the graphs of the quality table.

    .venv/bin/python experiments/fill_idle.py

Per case, budget 1.0 (the larger of the original order's peak and the memory bound), one compute stream:
the best heuristic, then `fill_idle` on it: makespans, moves kept, simulations, seconds; every schedule
checked by `validate`. (`solve_cpsat` runs the same moves on its windows' answer: results/cpsat_quality.md.)
"""

from __future__ import annotations

import argparse
import time

from solvercast import Schedule, lower_bounds, simulate, validate
from solvercast.heuristics import best_heuristic, fill_idle

from cpsat_quality import cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", help="cases whose label contains this")
    args = parser.parse_args()
    print("| case | tasks | heuristic (method) us | + fill_idle us | change | moves | simulations | s |")
    print("|---|---|---|---|---|---|---|---|")
    for label, p in cases(args.only):
        p = p.with_budget(max(simulate(p, Schedule.original(p)).peak_memory, lower_bounds(p).memory))
        hint = best_heuristic(p, p.machine.memory_budget)
        before = validate(p, hint).makespan
        t0 = time.perf_counter()
        filled, stats = fill_idle(p, hint)
        seconds = time.perf_counter() - t0
        after = validate(p, filled).makespan
        print(f"| {label} | {p.num_tasks} | {before / 1e3:.2f} ({hint.method}) | {after / 1e3:.2f} | "
              f"{(after - before) / before:+.2%} | {stats['moves']} | {stats['simulations']} | {seconds:.2f} |",
              flush=True)


if __name__ == "__main__":
    main()
