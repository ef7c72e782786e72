"""Does the solver phase of `optimize` end by its wall deadline (issue 16, item 1)?

Synthetic graphs, budget 1.0, `optimize(..., time_limit=T)`: per case, when `solve_cpsat` was entered, when
CP-SAT's Solve was called (the model built), the solver's deadline (`optimize` passes one: the time plan's
end of the solver phase), when Solve returned and when `solve_cpsat` returned, all in seconds from the
call's start, and how late the solver phase ended as a share of its length (entry to deadline). Wall
seconds: the 2 cores are shared with other jobs, say the load next to the figures.

    .venv/bin/python experiments/cpsat_deadline.py --time-limit 10
"""

import argparse
import time

import solvercast.solvers.cpsat as cpsat
from solvercast import optimize
from solvercast.models import build


def timed_optimize(gm, time_limit: float, streams: int) -> dict:
    marks: dict = {}
    solve, solve_cpsat = cpsat.cp_model.CpSolver.Solve, cpsat.solve_cpsat

    def timed_solve(self, model, callback=None):
        marks["solve_call"] = time.perf_counter()
        try:
            return solve(self, model, callback)
        finally:
            marks["solve_return"] = time.perf_counter()
            marks["deterministic_time"] = self.deterministic_time

    def timed_solve_cpsat(*args, **kwargs):
        marks["enter"], marks["deadline"] = time.perf_counter(), kwargs.get("deadline")
        try:
            return solve_cpsat(*args, **kwargs)
        finally:
            marks["exit"] = time.perf_counter()

    cpsat.cp_model.CpSolver.Solve, cpsat.solve_cpsat = timed_solve, timed_solve_cpsat
    try:
        t0 = time.perf_counter()
        res = optimize(gm, time_limit=time_limit, compute_streams=streams)
        marks["total"] = time.perf_counter()
    finally:
        cpsat.cp_model.CpSolver.Solve, cpsat.solve_cpsat = solve, solve_cpsat
    out = {k: v - t0 for k, v in marks.items() if k not in ("deterministic_time",)}
    out["deterministic_time"] = marks.get("deterministic_time", 0.0)
    out["status"] = res.report.solver_status
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--tasks", default="1000,3000")
    ap.add_argument("--streams", default="1,2")
    args = ap.parse_args()
    print("| tasks | streams | solver entered | Solve called | deadline | Solve returned | solver returned | late "
          "(share of the phase) | total | det. time | status |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for n in map(int, args.tasks.split(",")):
        gm = build("synthetic", tasks=n, seed=1)
        for streams in map(int, args.streams.split(",")):
            m = timed_optimize(gm, args.time_limit, streams)
            phase = m["deadline"] - m["enter"]
            late = m["exit"] - m["deadline"]
            print(f"| {n} | {streams} | {m['enter']:.2f} | {m['solve_call']:.2f} | {m['deadline']:.2f} | "
                  f"{m['solve_return']:.2f} | {m['exit']:.2f} | {late:+.2f} s ({late / phase:+.1%}) | {m['total']:.2f} | "
                  f"{m['deterministic_time']:.3f} | {m['status']} |", flush=True)


if __name__ == "__main__":
    main()
