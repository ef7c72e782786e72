"""Whole-graph CP-SAT with windows after the model (`solve_cpsat`'s polish), compared deterministically:
each solve gets the deterministic limits of a ``--time-limit`` solve and ``--slack`` times that on the wall
clock, so that on the shared cores no run is ended by the clock and the figures are those of a quiet machine.

    .venv/bin/python experiments/cpsat_polish.py --share 0.75 --cases fsdp_tp:2,fsdp_layers:4,simple_fsdp:2

``--share``: WHOLE_MODEL_SHARE; ``--share 1`` is the model alone (no time left for windows); ``--units``:
WHOLE_MODEL_UNITS (``--units inf``: the model's share uncapped).
"""

import argparse
import time

from solvercast import Schedule, extract_problem, lower_bounds, simulate
from solvercast.heuristics import best_heuristic
from solvercast.models import build
from solvercast.solvers import cpsat, large


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--share", type=float, default=cpsat.WHOLE_MODEL_SHARE)
    ap.add_argument("--window", type=int, default=cpsat.POLISH_WINDOW)
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--slack", type=float, default=4.0)
    ap.add_argument("--units", type=float, default=cpsat.WHOLE_MODEL_UNITS, help="WHOLE_MODEL_UNITS (inf: no cap)")
    ap.add_argument("--cases", default="fsdp_tp:2,fsdp_layers:4,fsdp_layers:2,simple_fsdp:2,fsdp_layers:8")
    args = ap.parse_args()
    limit = cpsat.deterministic_limit
    cpsat.deterministic_limit = lambda seconds, model: limit(seconds / args.slack, model)
    inverse = cpsat.planned_seconds
    cpsat.planned_seconds = lambda units, model: args.slack * inverse(units, model)
    large.WINDOW_OVERHEAD_SECONDS *= args.slack  # planned seconds scale with the clock
    cpsat.WHOLE_MODEL_SHARE, cpsat.POLISH_WINDOW, cpsat.WHOLE_MODEL_UNITS = args.share, args.window, args.units
    cpsat.POLISH_SECONDS_PER_WINDOW *= args.slack
    for case in args.cases.split(","):
        name, layers = case.split(":")
        p = extract_problem(build(name, layers=int(layers)))
        budget = max(simulate(p, Schedule.original(p)).peak_memory, lower_bounds(p).memory)
        p = p.with_budget(budget)
        hint = best_heuristic(p, memory_budget=budget)
        t0 = time.perf_counter()
        r = cpsat.solve_cpsat(p, time_limit=args.time_limit * args.slack, memory_budget=budget, hint=hint)
        print(f"{name} {layers}: T {args.time_limit:g}, share {args.share}, units {args.units:g}, window {args.window}: {r.makespan} ns {r.status.value}, "
              f"bound {max(r.bound or 0, lower_bounds(p).makespan)}, polish {r.stats.get('polish')}, "
              f"ended by the wall clock {r.stats['stopped_by_wall_clock']}, wall {time.perf_counter() - t0:.1f} s",
              flush=True)


if __name__ == "__main__":
    main()
