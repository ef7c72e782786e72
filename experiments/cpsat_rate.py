"""CP-SAT deterministic time per CPU second, one worker, on solves that do not finish (for
solvers/cpsat.py `search_rate` and `deterministic_limit`): per case the model's size (variables, Booleans, constraints,
intervals: all deterministic), the status, CPU seconds of the solving process, when the search started
(after presolve) and the deterministic time. Rate = deterministic time / CPU seconds of the whole Solve
(presolve and loading included, which a deterministic limit must also pay for): CPU, not wall, because the
2 cores are shared with other jobs (wall ran 1-4x CPU).

    .venv/bin/python experiments/cpsat_rate.py --seconds 6 > rates.csv
"""
import argparse
import re
import sys
import time

from ortools.sat.python import cp_model

import solvercast.solvers.cpsat as cpsat
from solvercast import Schedule, extract_problem, simulate
from solvercast.heuristics import best_heuristic
from solvercast.models import build
from solvercast.testing import random_problem

CASES = [
    ("fsdp_layers", {"layers": 2}, 1), ("fsdp_layers", {"layers": 3}, 1), ("fsdp_layers", {"layers": 4}, 1),
    ("fsdp_layers", {"layers": 6}, 1), ("fsdp_layers", {"layers": 8}, 1), ("fsdp_layers", {"layers": 4}, 2),
    ("simple_fsdp", {"layers": 2}, 1), ("fsdp_tp", {"layers": 2}, 1), ("sp_block", {"layers": 3}, 2),
    ("moe_block", {"layers": 4}, 2), ("synthetic", {"tasks": 300, "seed": 2}, 1),
    ("synthetic", {"tasks": 300, "seed": 2}, 2), ("synthetic", {"tasks": 1000, "seed": 1}, 1),
    ("synthetic", {"tasks": 1000, "seed": 1}, 2), ("synthetic", {"tasks": 150, "seed": 1}, 2),
    ("fsdp_layers", {"layers": 2}, 2), ("simple_fsdp", {"layers": 2}, 2), ("fsdp_tp", {"layers": 2}, 2),
    ("fsdp_layers", {"layers": 5}, 1), ("synthetic", {"tasks": 200, "seed": 3}, 1),
]


def problems(only):
    for name, params, streams in CASES:
        label = f"{name} {' '.join(f'{k}={v}' for k, v in params.items())} streams={streams}"
        if not only or only in label:
            yield label, extract_problem(build(name, **params), compute_streams=streams)
    for seed, streams in ((1, 1), (4, 1), (2, 2), (5, 2)):
        label = f"random200 seed={seed} streams={streams}"
        if not only or only in label:
            yield label, random_problem(seed, 200, compute_streams=streams, sync_overhead=4, comm_fraction=0.3)


def features(model_proto) -> dict:
    variables = model_proto.variables
    booleans = sum(1 for v in variables if list(v.domain) == [0, 1])
    intervals = sum(1 for c in model_proto.constraints if c.has_interval())
    return {"variables": len(variables), "booleans": booleans, "constraints": len(model_proto.constraints),
            "intervals": intervals}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=6.0, help="wall-clock limit of each solve")
    ap.add_argument("--only")
    args = ap.parse_args()
    seen: dict = {}
    solve = cp_model.CpSolver.Solve

    def measured_solve(self, model, callback=None):  # the CPU seconds of Solve alone, and the model's size
        seen.update(features(model.Proto()))
        c0 = time.process_time()
        try:
            return solve(self, model, callback)
        finally:
            seen["cpu"] = time.process_time() - c0

    cp_model.CpSolver.Solve = measured_solve
    try:
        print("case,tasks,variables,booleans,constraints,intervals,status,wall,cpu,search_start,det,rate", flush=True)
        for label, p in problems(args.only):
            budget = simulate(p, Schedule.original(p)).peak_memory
            p = p.with_budget(budget)
            hint = best_heuristic(p, memory_budget=budget)
            logs: list[str] = []
            r = cpsat.solve_cpsat(p, time_limit=args.seconds, memory_budget=budget, hint=hint, deterministic=False,
                                  workers=1, log_progress=logs.append)
            started = next((float(re.search(r"at ([0-9.]+)s", line).group(1)) for line in logs
                            if "Starting search" in line), float("nan"))
            det = r.stats["deterministic_time"]
            print(f"{label},{p.num_tasks},{seen['variables']},{seen['booleans']},{seen['constraints']},{seen['intervals']},"
                  f"{r.status.value},{r.stats['solver_wall_time']:.2f},{seen['cpu']:.2f},{started:.2f},{det:.4f},"
                  f"{det / seen['cpu']:.4f}", flush=True)
    finally:
        cp_model.CpSolver.Solve = solve


if __name__ == "__main__":
    sys.exit(main())
