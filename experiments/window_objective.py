"""What windows pull earlier once their makespan is settled (`solvers.common.shifted_tasks`): the
collectives and their launches (shipped, one compute stream) or every task (before 2026-11-23, night).
Windowed search alone (`large.solve_windows`) from the best heuristic, budget 1.0 x the traced order's
peak, deterministic limits and a deadline far enough that the wall clock ends no window; the two variants
run side by side in one process.

    .venv/bin/python experiments/window_objective.py --seconds 3 --random 16
    .venv/bin/python experiments/window_objective.py --seconds 10 --zoo fsdp_layers:2,fsdp_tp:2,simple_fsdp:2,fsdp_layers:8

``--random N``: N random programs of 80 tasks (seeds 0..N-1, one compute stream, sync 3, a quarter
collectives), windows of 25 tasks; ``--zoo``: zoo graphs, windows of 40 tasks (the polish's size).
"""

import argparse
import time

from solvercast import Role, Schedule, extract_problem, lower_bounds, simulate
from solvercast.heuristics import best_heuristic
from solvercast.models import build
from solvercast.solvers import common, cpsat_model, large, result
from solvercast.testing import random_problem

SHIPPED = common.shifted_tasks


def every_task(problem):
    return tuple(t for t, task in enumerate(problem.tasks) if task.role != Role.FREE)


def use(shifted) -> None:
    cpsat_model.shifted_tasks = result.shifted_tasks = shifted


def windows(problem, seconds: float, window: int):
    budget = simulate(problem, Schedule.original(problem)).peak_memory
    problem = problem.with_budget(budget)
    hint = best_heuristic(problem, budget)
    res = large.solve_windows(problem, hint, seconds, budget, window=window, per_window=0.5, deterministic=True,
                              deadline=time.perf_counter() + 20 * seconds + 60)
    return simulate(problem, hint).makespan, res, lower_bounds(problem).makespan


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3.0, help="planned seconds of windowed search per graph")
    ap.add_argument("--random", type=int, default=0)
    ap.add_argument("--zoo", default="")
    args = ap.parse_args()
    variants = (("collectives", SHIPPED), ("every task", every_task))
    if args.random:
        print(f"| variant | sum of heuristic makespans | sum after windows | improved | ({args.random} random programs, "
              f"80 tasks, {args.seconds:g} s each) |\n|---|---|---|---|---|")
        for name, shifted in variants:
            use(shifted)
            rows = [windows(random_problem(seed, 80, compute_streams=1, sync_overhead=3, comm_fraction=0.25),
                            args.seconds, 25) for seed in range(args.random)]
            print(f"| {name} | {sum(h for h, _, _ in rows)} | {sum(r.makespan for _, r, _ in rows)} | "
                  f"{sum(r.makespan < h for h, r, _ in rows)} | |", flush=True)
    if args.zoo:
        print(f"\n| graph | heuristic us | bound us | collectives us (windows tried) | every task us (windows tried) |"
              f" ({args.seconds:g} s) |\n|---|---|---|---|---|---|")
        for case in args.zoo.split(","):
            model, layers = case.split(":")
            problem = extract_problem(build(model, layers=int(layers)))
            cells = []
            for _, shifted in variants:
                use(shifted)
                heuristic, res, bound = windows(problem, args.seconds, 40)
                wall = " wall clock!" if res.stats["stopped_by_wall_clock"] else ""
                cells.append(f"{res.makespan / 1e3:.1f} ({res.stats['windows_tried']}){wall}")
            print(f"| {model} {layers} | {heuristic / 1e3:.1f} | {bound / 1e3:.2f} | {' | '.join(cells)} | |", flush=True)
    use(SHIPPED)


if __name__ == "__main__":
    main()
