"""Cut bounds (solvers/cuts.py) on the graphs whose budget binds: what they prove, at what cost, against
`lower_bounds` and the schedules `solve_cpsat` finds.

    .venv/bin/python experiments/cut_bounds.py --time-limit 10 --expansions 600000

Per graph (budget 1.0: the larger of the original order's peak and the memory bound): `lower_bounds`, the
schedule of `solve_cpsat` at the limit (deterministic; its own bound and status, cut bounds in the time it
left included), then the cut walk alone with a counted budget and no clock, below that schedule's makespan:
the best bound, the cut it came from, whether it proves the schedule optimal, expansions and seconds. The
gaps are the schedule's over `lower_bounds` and over the cut bound.
"""

from __future__ import annotations

import argparse
import time

from solvercast import Schedule, extract_problem, lower_bounds, simulate
from solvercast.heuristics import best_heuristic
from solvercast.models import build
from solvercast.solvers.cpsat import solve_cpsat
from solvercast.solvers.cuts import cut_bound

GRAPHS = [("fsdp_tp", 1), ("simple_fsdp", 1), ("fsdp_layers", 2), ("fsdp_tp", 2), ("simple_fsdp", 2),
          ("fsdp_layers", 4)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--time-limit", type=float, default=10.0, help="solve_cpsat's limit, seconds")
    parser.add_argument("--expansions", type=int, default=600_000, help="the cut walk's counted budget")
    parser.add_argument("--only", default="", help="comma-separated name:layers (default: all)")
    args = parser.parse_args()
    only = set(filter(None, args.only.split(",")))
    print(f"# cut bounds, budget 1.0, solve_cpsat at {args.time_limit:g} s, walk of {args.expansions} expansions\n")
    print("| graph | tasks | lower_bounds us | solve_cpsat us (status, bound, wall s) | cut bound us (cut) | proven "
          "| expansions | s | gap over lower_bounds | gap over the cut bound |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, layers in GRAPHS:
        if only and f"{name}:{layers}" not in only:
            continue
        p = extract_problem(build(name, layers=layers))
        p = p.with_budget(max(simulate(p, Schedule.original(p)).peak_memory, lower_bounds(p).memory))
        bound = lower_bounds(p).makespan
        t0 = time.perf_counter()
        res = solve_cpsat(p, time_limit=args.time_limit, hint=best_heuristic(p, p.machine.memory_budget))
        wall = time.perf_counter() - t0
        cut = cut_bound(p, res.makespan, args.expansions)
        assert cut.bound <= res.makespan, name
        print(f"| {name} {layers} | {p.num_tasks} | {bound / 1e3:.2f} | {res.makespan / 1e3:.2f} ({res.status.value}, "
              f"{(res.bound or 0) / 1e3:.2f}, {wall:.1f}) | {cut.bound / 1e3:.2f} ({cut.cut}) | {cut.proven} | "
              f"{cut.expansions} | {cut.seconds:.1f} | {(res.makespan - bound) / bound:.2%} | "
              f"{(res.makespan - max(cut.bound, bound)) / max(cut.bound, bound):.2%} |", flush=True)


if __name__ == "__main__":
    main()
