"""How much of its limit a polished CP-SAT solve uses, and whether it gives the same schedule every run
(issue 16, item 4).

`solve_cpsat` plans its time in deterministic units (the same on every rank): the whole model's units and
each window's are converted to seconds by predicted rates (solvers/cpsat.py `planned_seconds`,
large.py `seconds_spent` and WINDOW_OVERHEAD_SECONDS). Per case (budget 1.0, the heuristic's warm start, the
limit also the deadline, as `optimize` gives it) and run: the seconds the plan counted for the model and
for the windows against the wall seconds they took, the call's wall seconds (those and what surrounds them)
as a share of the limit, whether the wall clock ended any search ("cap": then the schedule may differ
between runs), the makespan and a hash of the schedule (order and streams). Wall seconds: say the machine's
load next to the figures.

    .venv/bin/python experiments/polish_plan.py --time-limit 10 --repeat 2
"""

import argparse
import hashlib
import time

import solvercast.solvers.cpsat as cpsat
import solvercast.solvers.large as large
from solvercast import Schedule, extract_problem, lower_bounds, simulate
from solvercast.heuristics import best_heuristic
from solvercast.models import build
from solvercast.solvers.cpsat import solve_cpsat

CASES = [("fsdp_tp", {"layers": 2}), ("simple_fsdp", {"layers": 2}), ("fsdp_layers", {"layers": 8}),
         ("fsdp_layers", {"layers": 4}), ("fsdp_layers", {"layers": 2})]


def timed_polish(problem, hint, budget: int, time_limit: float, seed: int = 0) -> tuple:
    """`solve_cpsat` with the whole model's wall seconds and every window's planned and wall seconds."""
    windows: list[tuple[float, float]] = []
    model_wall: list[float] = []
    solve_window, solve_model = large.solve_cpsat, cpsat.solve_model

    def timed_model(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return solve_model(*args, **kwargs)
        finally:
            if kwargs.get("window") is None:  # the whole model (windows solve through here too)
                model_wall.append(time.perf_counter() - t0)

    def timed_window(*args, **kwargs):
        t0 = time.perf_counter()
        res = solve_window(*args, **kwargs)
        windows.append((large.seconds_spent(res, True) + large.WINDOW_OVERHEAD_SECONDS, time.perf_counter() - t0))
        return res

    large.solve_cpsat, cpsat.solve_model = timed_window, timed_model
    try:
        t0 = time.perf_counter()
        res = solve_cpsat(problem, time_limit=time_limit, memory_budget=budget, hint=hint, deadline=t0 + time_limit,
                          seed=seed)
        wall = time.perf_counter() - t0
    finally:
        large.solve_cpsat, cpsat.solve_model = solve_window, solve_model
    return res, wall, sum(model_wall), windows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--repeat", type=int, default=2, help="runs per case (the schedule hash should not change)")
    ap.add_argument("--only", help="cases whose label contains this")
    ap.add_argument("--seed", type=int, default=0, help="CP-SAT's random seed for the whole model")
    args = ap.parse_args()
    print(f"# Polished CP-SAT solves: planned against wall seconds, time limit {args.time_limit:g} s, budget 1.0, "
          f"seed {args.seed}\n")
    print("| case | run | model planned s | model wall s | windows | windows planned s | windows wall s | "
          "wall s (of the limit) | cap | makespan us | schedule |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, params in CASES:
        label = f"{name} {' '.join(f'{k}={v}' for k, v in params.items())}"
        if args.only and args.only not in label:
            continue
        p = extract_problem(build(name, **params))
        budget = max(simulate(p, Schedule.original(p)).peak_memory, lower_bounds(p).memory)
        p = p.with_budget(budget)
        hint = best_heuristic(p, memory_budget=budget)
        for run in range(args.repeat):
            res, wall, model_wall, windows = timed_polish(p, hint, budget, args.time_limit, args.seed)
            model_planned = large.seconds_spent(res, True)  # the stats are the model's, windows or not
            windows_wall = sum(w for _, w in windows)
            streams = sorted(res.schedule.streams.items())
            digest = hashlib.sha1(repr((res.schedule.order, streams)).encode()).hexdigest()[:10]
            windows_planned = sum(planned for planned, _ in windows)
            cap = "cap" if res.stats.get("stopped_by_wall_clock") else ""
            print(f"| {label} | {run + 1} | {model_planned:.2f} | {model_wall:.2f} | {len(windows)} | "
                  f"{windows_planned:.2f} | {windows_wall:.2f} | {wall:.2f} ({wall / args.time_limit:.0%}) | {cap} | "
                  f"{res.makespan / 1e3:.1f} ({res.status.value}) | {digest} |", flush=True)


if __name__ == "__main__":
    main()
