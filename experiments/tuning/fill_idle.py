"""Moves into the default stream's stalls (heuristics/fill_idle.py) on the graphs of the quality table.

    python -m experiments.tuning.fill_idle                         # results/fill_idle.md, first table
    python -m experiments.tuning.fill_idle --solve --time-limit 10  # results/fill_idle.md, the shares

Per case, budget 1.0 (the larger of the original order's peak and the memory bound), one compute stream:
the best heuristic, then `fill_idle` on it: makespans, moves kept, simulations, seconds; every schedule
checked by `validate`. With ``--solve``: on larger graphs (300-1,150 tasks), `solve_cpsat` as `optimize`
runs it, with the moves after its windows given each of ``--shares`` of the limit (`PortfolioTuning.fill_idle_share`; 0: none),
side by side.
"""

from __future__ import annotations

import dataclasses
import time

from experiments.common import command_line
from experiments.tuning.cases import cases
from solvercast import Schedule, extract_problem, lower_bounds, simulate, validate
from solvercast.heuristics import best_heuristic, fill_idle
from solvercast.models import build
from solvercast.pipeline.portfolio import solve_cpsat
from solvercast.pipeline.tuning import DEFAULT_TUNING, PORTFOLIO_TUNING

LARGER = [("fsdp_tp", {"layers": 4}), ("simple_fsdp", {"layers": 4}), ("llama_tp", {"layers": 4}),
          ("fsdp_layers", {"layers": 16}), ("fsdp_tp", {"layers": 8}), ("simple_fsdp", {"layers": 8})]


def solve_side_by_side(time_limit: float, shares: list[float]) -> None:
    shipped = PORTFOLIO_TUNING.fill_idle_share
    print(f"Shares of the limit for the moves (shipped: {shipped:g}); each cell: makespan us (moves, simulations, "
          "wall s, * where the wall clock ended the moves).\n")
    print("| case | tasks | heuristic us | " + " | ".join(f"share {x:g}" for x in shares) + " | best bound us |")
    print("|---|---|---|" + "---|" * len(shares) + "---|")
    for name, params in LARGER:
        p = extract_problem(build(name, **params))
        p = p.with_budget(max(simulate(p, Schedule.original(p)).peak_memory, lower_bounds(p).memory))
        hint = best_heuristic(p, p.machine.memory_budget)
        cells, bound = [], lower_bounds(p).makespan
        for share in shares:
            tuning = dataclasses.replace(
                DEFAULT_TUNING, portfolio=dataclasses.replace(PORTFOLIO_TUNING, fill_idle_share=share))
            t0 = time.perf_counter()
            got = solve_cpsat(p, time_limit=time_limit, hint=hint, tuning=tuning)
            wall = time.perf_counter() - t0
            fills = got.stats.get("fill_idle") or {}
            bound = max(bound, got.bound or 0)
            cut = "*" if fills.get("stopped_by_wall_clock") else ""
            cells.append(f"{validate(p, got.schedule).makespan / 1e3:.2f} ({fills.get('moves', '-')}, "
                         f"{fills.get('simulations', '-')}, {wall:.1f}{cut})")
        label = f"{name} {' '.join(f'{k}={v}' for k, v in params.items())}"
        print(f"| {label} | {p.num_tasks} | {validate(p, hint).makespan / 1e3:.2f} | " + " | ".join(cells)
              + f" | {bound / 1e3:.2f} |", flush=True)


def main() -> None:
    """What do moves into the default stream's stalls gain, and what share of the limit should they get
    (`PortfolioTuning.fill_idle_share`)? Tables to stdout (results: experiments/results/fill_idle.md)."""
    parser = command_line("experiments.tuning.fill_idle", main.__doc__, __doc__)
    parser.add_argument("--only", help="cases whose label contains this")
    parser.add_argument("--solve", action="store_true", help="solve_cpsat with and without the moves, larger graphs")
    parser.add_argument("--time-limit", type=float, default=10.0, help="solve_cpsat's limit, seconds (--solve)")
    parser.add_argument("--shares", default="0,0.15", help="fill_idle_share values side by side (--solve)")
    args = parser.parse_args()
    if args.solve:
        solve_side_by_side(args.time_limit, [float(x) for x in args.shares.split(",")])
        return
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
