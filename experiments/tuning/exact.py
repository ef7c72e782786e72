"""The exact methods beside CP-SAT on the graphs whose budget binds: the prefix search's optima
(solvers/prefixes.py) and the cut bounds (solvers/cuts.py), against `lower_bounds` and `solve_cpsat`.

    python -m experiments.tuning.exact prefixes --time-limit 10     # results/prefix_search.md
    python -m experiments.tuning.exact cuts --time-limit 10 --expansions 600000   # results/cut_bounds.md

``prefixes``: Per graph (budget 1.0: the larger of the original order's peak and the memory bound, one compute stream):
the best lower bound (`lower_bounds`), the best heuristic, `solve_cpsat` at the limit (as `optimize`
calls it, its prefix search in the time the windows leave included), and the search run to its end from
the heuristic's makespan (no limit): the optimum, its expansions and seconds. The search's order is
re-simulated and validated; a CP-SAT result below it, or a proof that disagrees, fails the run.

``cuts``: Per graph (budget 1.0: the larger of the original order's peak and the memory bound): `lower_bounds`, the
schedule of `solve_cpsat` at the limit (deterministic; its own bound and status, cut bounds in the time it
left included), then the cut walk alone with a counted budget and no clock, below that schedule's makespan:
the best bound, the cut it came from, whether it proves the schedule optimal, expansions and seconds. The
gaps are the schedule's over `lower_bounds` and over the cut bound.
"""

from __future__ import annotations

import time

from experiments.common import below_commands, command_line, names, print_table_head
from experiments.tuning.cases import SHAPES
from solvercast import Schedule, extract_problem, lower_bounds, simulate
from solvercast.heuristics import best_heuristic
from solvercast.ir.simulate import validate
from solvercast.models import build
from solvercast.pipeline.portfolio import solve_cpsat
from solvercast.solvers.cuts import cut_bound
from solvercast.solvers.prefixes import search_prefixes
from solvercast.solvers.result import SolveStatus


# ---------------------------------------------------------------- prefixes


PREFIX_GRAPHS = [(name, None) for name in sorted(SHAPES)] + [
    ("fsdp_layers", {"layers": 2}), ("fsdp_tp", {"layers": 1}), ("simple_fsdp", {"layers": 1})]


def problem_of(name: str, params: dict | None):
    p = SHAPES[name]() if params is None else extract_problem(build(name, **params))
    budget = max(simulate(p, Schedule.original(p)).peak_memory, lower_bounds(p).memory)
    return p.with_budget(budget)

def cmd_prefixes(args) -> None:
    only = names(args.only)
    print_table_head(f"# prefix search, budget 1.0, solve_cpsat at {args.time_limit:g} s",
                     ["graph", "tasks (timed)", "bound", "heuristic", "cpsat (status, s)", "optimum", "search s",
                      "expansions", "cpsat above optimum"])
    for name, params in PREFIX_GRAPHS:
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



# ---------------------------------------------------------------- cuts


CUT_GRAPHS = [("fsdp_tp", 1), ("simple_fsdp", 1), ("fsdp_layers", 2), ("fsdp_tp", 2), ("simple_fsdp", 2),
              ("fsdp_layers", 4)]


def cmd_cuts(args) -> None:
    only = names(args.only)
    print_table_head(f"# cut bounds, budget 1.0, solve_cpsat at {args.time_limit:g} s, walk of {args.expansions} "
                     "expansions", ["graph", "tasks", "lower_bounds us", "solve_cpsat us (status, bound, wall s)",
                                    "cut bound us (cut)", "proven", "expansions", "s", "gap over lower_bounds",
                                    "gap over the cut bound"])
    for name, layers in CUT_GRAPHS:
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


def main(argv=None) -> int:
    """What do the exact prefix search and the cut bounds prove, at what cost, and how far does CP-SAT stay from them?
    Markdown tables to stdout (results: experiments/results/prefix_search.md, cut_bounds.md)."""
    ap = command_line("experiments.tuning.exact", main.__doc__, below_commands(__doc__))
    sub = ap.add_subparsers(dest="cmd", required=True)
    pr = sub.add_parser("prefixes", help="the prefix search's optima against solve_cpsat")
    pr.add_argument("--time-limit", type=float, default=10.0, help="solve_cpsat's limit, seconds")
    pr.add_argument("--only", default="", help="comma-separated graph names (default: all)")
    cu = sub.add_parser("cuts", help="cut bounds against lower_bounds and solve_cpsat's schedules")
    cu.add_argument("--time-limit", type=float, default=10.0, help="solve_cpsat's limit, seconds")
    cu.add_argument("--expansions", type=int, default=600_000, help="the cut walk's counted budget")
    cu.add_argument("--only", default="", help="comma-separated name:layers (default: all)")
    args = ap.parse_args(argv)
    (cmd_prefixes if args.cmd == "prefixes" else cmd_cuts)(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
