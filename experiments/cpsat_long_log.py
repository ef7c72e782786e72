"""One long CP-SAT run on a zoo graph with the search log, and where the compute stream idles in its answer:
is a gap the schedule (the search) or the bound? (issue 16; results/cpsat_budgets.md, 2026-11-23 evening)

    .venv/bin/python experiments/cpsat_long_log.py fsdp_tp --layers 2 --budget none --time-limit 120
    .venv/bin/python experiments/cpsat_long_log.py fsdp_tp --layers 2 --budget 1.0 --time-limit 150

Wall-clock limit and 2 workers (not what `optimize` runs): CP-SAT's log goes to stdout, then the result and
every idle gap of the compute stream over 0.2 us (before which task, which collective it waits for, the
bytes resident at that step).
"""

import argparse

from solvercast import Schedule, extract_problem, lower_bounds, simulate
from solvercast.ir.engine import memory_profile
from solvercast.heuristics import best_heuristic
from solvercast.models import build
from solvercast.ir.problem import Role
from solvercast.solvers.cpsat import solve_cpsat


def idle_gaps(problem, schedule, sim, least: int = 200):
    """(program step, idle ns, task) for each gap of the compute stream longer than ``least`` ns."""
    clock, out = 0, []
    for step, t in enumerate(schedule.order):
        if problem.tasks[t].role not in (Role.COMPUTE, Role.WAIT):
            continue
        if sim.start[t] - clock > least:
            out.append((step, sim.start[t] - clock, t))
        clock = max(clock, sim.end[t])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--budget", default="1.0", help="ratio of the original order's peak, or none")
    ap.add_argument("--time-limit", type=float, default=120.0)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    p = extract_problem(build(args.model, layers=args.layers))
    original = simulate(p, Schedule.original(p))
    budget = None if args.budget == "none" else max(int(float(args.budget) * original.peak_memory),
                                                    lower_bounds(p).memory)
    p = p.with_budget(budget)
    hint = best_heuristic(p, memory_budget=budget)
    print(f"original {original.makespan} ns, peak {original.peak_memory} B; budget {budget}; heuristic "
          f"{hint.method} {simulate(p, hint).makespan} ns; {lower_bounds(p)}", flush=True)
    res = solve_cpsat(p, time_limit=args.time_limit, memory_budget=budget, hint=hint, deterministic=False,
                      workers=args.workers, log_progress=True, progress=lambda s: print(s, flush=True))
    print(f"RESULT {res.status.value} {res.makespan} ns, CP-SAT bound {res.bound}, {res.stats}", flush=True)
    sim = simulate(p, res.schedule)
    during = memory_profile(p, res.schedule.order).during_step
    gaps = idle_gaps(p, res.schedule, sim)
    for step, idle, t in gaps:
        task = p.tasks[t]
        waits = (f" (waits for {p.tasks[task.waits_for].name}, group {p.tasks[task.waits_for].group})"
                 if task.role == Role.WAIT else "")
        print(f"step {step}: idle {idle / 1e3:.2f} us before {task.name}{waits}, {during[step]} B resident")
    print(f"idle in gaps over 0.2 us: {sum(g[1] for g in gaps) / 1e3:.1f} us in {len(gaps)} gaps")


if __name__ == "__main__":
    main()
