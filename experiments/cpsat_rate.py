"""CP-SAT deterministic time per second, one worker, on searches that do not finish (for
solvers/cpsat.py DETERMINISTIC_UNITS_PER_SECOND): per case the status, wall and process CPU seconds,
when the search started (after presolve) and the deterministic time.

    .venv/bin/python experiments/cpsat_rate.py 8
"""
import sys, time, re
from solvercast import Schedule, simulate, extract_problem
from solvercast.models import build
from solvercast.heuristics import best_heuristic
from solvercast.solvers.cpsat import solve_cpsat
from solvercast.testing import random_problem
T = float(sys.argv[1]) if len(sys.argv) > 1 else 8.0
def cases():
    for layers in (2, 4, 6, 8):
        yield f"fsdp{layers}", extract_problem(build("fsdp_layers", layers=layers))
    yield "synthetic300", extract_problem(build("synthetic", tasks=300, seed=2))
    yield "synthetic150", extract_problem(build("synthetic", tasks=150, seed=1))
    for seed in (1, 4):
        yield f"random200_{seed}", random_problem(seed, 200, sync_overhead=4, comm_fraction=0.3)
for name, p in cases():
    budget = simulate(p, Schedule.original(p)).peak_memory
    p = p.with_budget(budget)
    hint = best_heuristic(p, memory_budget=budget)
    logs = []
    c0 = time.process_time()
    r = solve_cpsat(p, time_limit=T, memory_budget=budget, hint=hint, deterministic=False, workers=1, log_progress=logs.append)
    cpu = time.process_time() - c0
    started = next((float(re.search(r"at ([0-9.]+)s", l).group(1)) for l in logs if "Starting search" in l), None)
    det = r.stats["deterministic_time"]; wall = r.stats["solver_wall_time"]
    rate = det / (wall - started) if started is not None and wall > started + 0.05 else float("nan")
    print(f"{name:14s} det/cpu={det / cpu:.3f} n={p.num_tasks} cons={r.stats['constraints']} {r.status.value:10s} wall={wall:.2f} cpu={cpu:.2f} presolve={started} det={det:.3f} search_rate={rate:.3f}", flush=True)
