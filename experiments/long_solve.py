"""How far is the heuristic from the optimum? A long, wide monolithic CP-SAT run as a reference.

    python experiments/long_solve.py --tasks 1000 --workers 16 --time-limit 300

Not a measure of what `optimize` does on 2 cores: it spends many workers and minutes on one graph, to
learn where the best schedule under the budget lies (issue 7's targets are gaps to a bound that
ignores memory; if even this run stays far from that bound, the bound is the weak side).
"""

import argparse
import time

from solvercast import Schedule, extract_problem, lower_bounds, simulate
from solvercast.heuristics import best_heuristic
from solvercast.models import build
from solvercast.solvers.cpsat import solve_cpsat


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="synthetic")
    ap.add_argument("--tasks", type=int, default=1000, help="synthetic: tasks; fsdp_layers: layers")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--budget", type=float, default=1.0)
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--time-limit", type=float, default=300.0)
    args = ap.parse_args()
    if args.model == "synthetic":
        gm = build("synthetic", tasks=args.tasks, seed=args.seed)
    else:
        gm = build(args.model, layers=args.tasks)
    problem = extract_problem(gm)
    original = simulate(problem, Schedule.original(problem))
    problem = problem.with_budget(int(args.budget * original.peak_memory))
    bound = lower_bounds(problem).makespan
    hint = best_heuristic(problem)
    h = simulate(problem, hint).makespan
    t0 = time.perf_counter()

    def say(msg):
        print(f"[{time.perf_counter() - t0:7.1f} s] {msg}", flush=True)

    print(f"{args.model} {args.tasks} seed {args.seed}: {problem.num_tasks} tasks, bound {bound}, "
          f"heuristic {h} ({(h - bound) / bound:.2%} above)", flush=True)
    res = solve_cpsat(problem, time_limit=args.time_limit, hint=hint, deterministic=False, workers=args.workers,
                      progress=say)
    m = res.simulated.makespan
    print(f"status {res.status.value}: makespan {m} ({(m - bound) / bound:.2%} above the bound, "
          f"{(m - h) / h:+.2%} vs heuristic); CP-SAT bound {res.bound}; wall {res.wall_time:.0f} s")


if __name__ == "__main__":
    main()
