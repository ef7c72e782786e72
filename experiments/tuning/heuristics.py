"""What each heuristic costs and what it brings: the data behind `best.PORTFOLIO`'s order and
`work.PASS_COST_US`.

For each graph (zoo models and synthetic graphs), budget (1.0 x original peak, none) and compute-stream
count, every heuristic of the portfolio runs alone under an unlimited work budget; the table gives its
counted work (reference microseconds, `heuristics.work`), its wall time, and its makespan relative to
the best of all. The summary ranks methods by value per cost: how often a method is the best (alone or
tied), and its mean excess over the best, per unit of work.

    .venv/bin/python experiments/heuristic_portfolio.py > experiments/results/heuristic_portfolio.md
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections import defaultdict

from solvercast import extract_problem, simulate
from solvercast.gc_paused import gc_paused
from solvercast.heuristics import iterative_swap
from solvercast.heuristics._common import budget_bytes, renamed
from solvercast.heuristics.work import WorkBudget, work_budget
from solvercast.pipeline.methods import schedule_methods
from solvercast.models import build
from solvercast.ir.schedule import Schedule

GRAPHS = [
    ("fsdp_layers", {"layers": 4}),
    ("fsdp_layers", {"layers": 16}),
    ("tp_block", {"layers": 4}),
    ("sp_block", {"layers": 4}),
    ("moe_block", {"layers": 2}),
    ("synthetic", {"tasks": 1000, "seed": 1}),
    ("synthetic", {"tasks": 3000, "seed": 2}),
    ("synthetic", {"tasks": 10000, "seed": 1}),
]


def measure(problem, fn):
    meter = WorkBudget(limit=None)
    start = time.perf_counter()
    with work_budget(meter), gc_paused():  # as `optimize` runs them: collections would walk the FX graph too
        schedule = fn()
    wall = time.perf_counter() - start
    sim = simulate(problem, schedule)
    return schedule, sim, meter.spent, wall


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", default="1,2")
    args = ap.parse_args()
    print("# Heuristic portfolio: cost and value per method\n")
    print(f"Command: `.venv/bin/python experiments/heuristic_portfolio.py`; {platform.machine()}, "
          f"{os.cpu_count()} cores, load average at start {os.getloadavg()[0]:.1f} (wall times are noisy, work "
          f"counts are exact; the garbage collector paused, as `optimize` runs the heuristics).\n")
    print("| graph | streams | budget | tasks | method | work (ref ms) | wall (ms) | wall/work | makespan / best | "
          "within budget |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    stats = defaultdict(lambda: {"best": 0, "runs": 0, "excess": 0.0, "work": 0.0, "wall": 0.0})
    for model, params in GRAPHS:
        gm = build(model, **params)
        for streams in [int(s) for s in args.streams.split(",")]:
            if streams > 1 and params.get("tasks", 0) >= 10000:
                continue
            base_problem = extract_problem(gm, compute_streams=streams)
            for ratio in (1.0, None):
                problem = base_problem
                budget = budget_bytes(problem, ratio) if ratio is not None else None
                problem = problem.with_budget(budget)
                rows = {}
                for m in schedule_methods():
                    rows[m.name] = measure(problem, lambda m=m: m.run(problem, memory_budget=budget))
                for base in list(rows):
                    if base in ("raise_comms", "sink_waits"):
                        continue
                    rows[base + "+swap"] = measure(
                        problem,
                        lambda base=base: iterative_swap(problem, renamed(rows[base][0], base), budget))
                ok = {k: v for k, v in rows.items() if budget is None or v[1].peak_memory <= budget}
                best = min(v[1].makespan for v in ok.values())
                for name, (sched, sim, work, wall) in rows.items():
                    fits = name in ok
                    ratio_best = sim.makespan / best
                    print(f"| {model} {params} | {streams} | {ratio} | {problem.num_tasks} | {name} | {work / 1e3:.1f} | "
                          f"{wall * 1e3:.1f} | {wall * 1e6 / max(work, 1):.2f} | {ratio_best:.4f} | {fits} |", flush=True)
                    st = stats[(name, streams)]
                    st["runs"] += 1
                    st["work"] += work / problem.num_tasks
                    st["wall"] += wall / problem.num_tasks
                    if fits:
                        st["best"] += ratio_best <= 1.0
                        st["excess"] += ratio_best - 1
                    else:
                        st["excess"] += 0.5  # over budget: no use
    print("\n## Summary per method\n")
    print("| method | streams | runs | best (or tied) | mean excess over best | mean work per task (ref us) | "
          "mean wall per task (us) |")
    print("|---|---|---|---|---|---|---|")
    for (name, streams), st in sorted(stats.items(), key=lambda kv: (kv[0][1], kv[1]["excess"] / kv[1]["runs"])):
        r = st["runs"]
        print(f"| {name} | {streams} | {r} | {st['best']} | {st['excess'] / r:.4f} | {st['work'] / r:.1f} | "
              f"{st['wall'] / r * 1e6:.1f} |")


if __name__ == "__main__":
    main()
