"""The exact prefix search (solvers/prefixes.py) on the graphs it can finish: their optima, what it costs,
and how far `solve_cpsat` at a time limit stays above them.

    .venv/bin/python experiments/prefix_search.py --time-limit 10

Per graph (budget 1.0: the larger of the original order's peak and the memory bound, one compute stream):
the best lower bound (`lower_bounds`), the best heuristic, `solve_cpsat` at the limit (as `optimize`
calls it, its prefix search in the time the windows leave included), and the search run to its end from
the heuristic's makespan (no limit): the optimum, its expansions and seconds. The search's order is
re-simulated and validated; a CP-SAT result below it, or a proof that disagrees, fails the run.
"""

from __future__ import annotations

import argparse
import sys
import time

from solvercast import Schedule, extract_problem, lower_bounds, simulate
from solvercast.heuristics import best_heuristic
from solvercast.models import build
from solvercast.ir.simulate import validate
from solvercast.solvers.cpsat import solve_cpsat
from solvercast.solvers.prefixes import search_prefixes
from solvercast.solvers.result import SolveStatus

sys.path.insert(0, "tests")
from reorder_shapes import SHAPES  # noqa: E402

GRAPHS = [(name, None) for name in sorted(SHAPES)] + [
    ("fsdp_layers", {"layers": 2}), ("fsdp_tp", {"layers": 1}), ("simple_fsdp", {"layers": 1})]


def problem_of(name: str, params: dict | None):
    p = SHAPES[name]() if params is None else extract_problem(build(name, **params))
    budget = max(simulate(p, Schedule.original(p)).peak_memory, lower_bounds(p).memory)
    return p.with_budget(budget)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--time-limit", type=float, default=10.0, help="solve_cpsat's limit, seconds")
    parser.add_argument("--only", default="", help="comma-separated graph names (default: all)")
    args = parser.parse_args()
    only = set(filter(None, args.only.split(",")))
    print(f"# prefix search, budget 1.0, solve_cpsat at {args.time_limit:g} s\n")
    print("| graph | tasks (timed) | bound | heuristic | cpsat (status, s) | optimum | search s | expansions "
          "| cpsat above optimum |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, params in GRAPHS:
        label = name if params is None else f"{name} {params['layers']}"
        if only and name not in only:
            continue
        p = problem_of(name, params)
        timed = sum(1 for task in p.tasks if task.role.value != "free")
        bound = lower_bounds(p).makespan
        hint = best_heuristic(p, p.machine.memory_budget)
        hint_ms = simulate(p, hint).makespan
        t0 = time.perf_counter()
        cp = solve_cpsat(p, time_limit=args.time_limit, hint=hint)
        cp_s = time.perf_counter() - t0
        found = search_prefixes(p, hint_ms + 1)
        assert found.complete and found.order is not None, label
        sim = validate(p, Schedule(order=found.order, streams=found.streams))
        assert sim.makespan == found.makespan, label
        assert cp.makespan >= found.makespan, f"{label}: CP-SAT below the optimum"
        assert cp.status != SolveStatus.OPTIMAL or cp.makespan == found.makespan, f"{label}: a wrong proof"
        above = (cp.makespan - found.makespan) / found.makespan * 100
        print(f"| {label} | {p.num_tasks} ({timed}) | {bound / 1e3:.2f} | {hint_ms / 1e3:.2f} | "
              f"{cp.makespan / 1e3:.2f} ({cp.status.value}, {cp_s:.1f}) | {found.makespan / 1e3:.2f} | "
              f"{found.seconds:.1f} | {found.expansions} | {above:.2f}% |", flush=True)


if __name__ == "__main__":
    main()
