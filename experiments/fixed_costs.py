"""The fixed costs of an `optimize` call, phase by phase, on synthetic graphs (issue 17): extraction, the
baseline's simulation, the structural and the quick bounds, and lowering of nondelay's schedule on one and
two compute streams, each with the garbage collector paused as `optimize` runs them. Wall seconds, and per
task: the figures `solvercast/time_budget.py`'s constants come from.

    .venv/bin/python experiments/fixed_costs.py --sizes 10000,40000
"""

from __future__ import annotations

import argparse
import os
import time

import solvercast.cost.roofline as roofline
from solvercast.ir.bounds import lower_bounds
from solvercast.fx.extract import extract_problem
from solvercast.gc_paused import gc_paused
from solvercast.heuristics.list_scheduling import nondelay_schedule
from solvercast.fx.lower import lower
from solvercast.models import build
from solvercast.ir.schedule import Schedule
from solvercast.ir.simulate import simulate


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,40000")
    args = ap.parse_args()
    print("| tasks | extract | simulate | bounds | bounds (quick) | lower, 1 stream | lower, 2 streams | load |")
    print("|---|---|---|---|---|---|---|---|")
    for n in [int(x) for x in args.sizes.split(",")]:
        gm = build("synthetic", tasks=n, seed=1)
        roofline._PRICES.clear()  # a first call: no prices remembered from another
        seconds: dict[str, float] = {}

        def timed(name, fn):
            with gc_paused():
                start = time.perf_counter()
                out = fn()
                seconds[name] = time.perf_counter() - start
            return out

        p = timed("extract", lambda: extract_problem(gm))
        baseline = timed("simulate", lambda: simulate(p, Schedule.original(p)))
        p = p.with_budget(baseline.peak_memory)
        timed("bounds", lambda: lower_bounds(p))
        timed("quick", lambda: lower_bounds(p, structural=False))
        one = nondelay_schedule(p)
        timed("lower1", lambda: lower(gm, p, one, check=False))
        p2 = extract_problem(gm, compute_streams=2).with_budget(baseline.peak_memory)
        two = nondelay_schedule(p2)
        timed("lower2", lambda: lower(gm, p2, two, check=False))
        cells = " | ".join(f"{seconds[k]:.2f} s ({seconds[k] / n:.1e}/task)"
                           for k in ("extract", "simulate", "bounds", "quick", "lower1", "lower2"))
        print(f"| {n} | {cells} | {os.getloadavg()[0]:.1f} |", flush=True)


if __name__ == "__main__":
    main()
