"""CP-SAT's tuning studies: what its answers are worth and what its tuning values (rates, parameters, shares
of the limit, polish windows) buy, each a subcommand writing a table (markdown, CSV or JSON lines) to stdout.

    python -m experiments.tuning.cpsat quality --time-limit 10             # results/cpsat_quality.md
    python -m experiments.tuning.cpsat params --settings today,lb_search --mult 1,2 --seeds 0 \
        --out experiments/results/cpsat_params.jsonl                         # results/cpsat_params.md
    python -m experiments.tuning.cpsat params --table experiments/results/cpsat_params.jsonl
    python -m experiments.tuning.cpsat polish --share 0.75 --cases fsdp_tp:2,fsdp_layers:4,simple_fsdp:2
    python -m experiments.tuning.cpsat rate --seconds 6 > experiments/results/cpsat_rate_run3_quiet.csv
    python -m experiments.tuning.cpsat plan --time-limit 10 --repeat 2      # results/cpsat_budgets.md
    python -m experiments.tuning.cpsat long --tasks 1000 --workers 16 --time-limit 300   # results/long_solve.md

``quality``: CP-SAT under a memory budget on PyTorch's reordering-test shapes (solvercast/testing/shapes.py) and zoo
graphs up to ~300 tasks. Per case: original, best heuristic, CP-SAT (warm-started from it), best bound (max of
CP-SAT's own and lower_bounds), gap, status, wall and CPU seconds of the solve (CPU / time limit: the share of
the limit a solve that does not finish early uses on an idle core), CP-SAT deterministic time. Everything judged
by `simulate`. Wall seconds are noisy on shared cores; deterministic time is not. The time limit is also the
solve's deadline, as in `optimize`; "wall cap" marks a solve that deadline ended.

``params``: CP-SAT search settings on the whole-graph model under a binding budget, compared in deterministic
time. Each row (zoo graph, budget 1.0 x its original peak, warm start `best_heuristic`) is solved by
`solve_model` (the whole-graph model of `solve_cpsat`, no windows after it) at a fixed deterministic limit:
``mult`` x the limit a 10 s solve gives its model (`deterministic_limit(10 * whole_model_share, model)`), with
a wall cap of ``--wall`` s that should never end a run (``wall_ended`` says when it did). A setting is a set
of CP-SAT parameters applied after the shipped ones (`bound_presolve`), and optionally a decision strategy added
to the model. Each run records: the simulated makespan of the answer, CP-SAT's bound, the status, the
deterministic time at the end and, estimated from the wall clock at the solve's average rate (OR-Tools 9.15's
callback does not report it with one worker), at the first solution better than the warm start and at the last
improvement, with the branch count (exact) at the first. ``--log DIR`` writes CP-SAT's search log of every run
there; ``--polish SLACK`` runs `solve_cpsat` whole (model, then windows) instead.

``polish``: whole-graph CP-SAT with windows after the model (`solve_cpsat`'s polish), compared
deterministically: each solve gets the deterministic limits of a ``--time-limit`` solve and ``--slack`` times
that on the wall clock, so that on shared cores no run is ended by the clock and the figures are those of a
quiet machine. ``--share``: `PortfolioTuning.whole_model_share` (``--share 1``: the model alone, no time left for windows);
``--units``: `whole_model_units` (``inf``: the model's share uncapped); ``--window``: `polish_window`.

``rate``: CP-SAT deterministic time per CPU second, one worker, on solves that do not finish (for
solvers/cpsat.py `search_rate` and `deterministic_limit`): per case the model's size (variables, Booleans,
constraints, intervals: all deterministic), the status, CPU seconds of the solving process, when the search
started (after presolve) and the deterministic time. Rate = deterministic time / CPU seconds of the whole Solve
(presolve and loading included, which a deterministic limit must also pay for): CPU, not wall, because shared
cores make wall 1-4x CPU. CSV.

``plan``: how much of its limit a polished CP-SAT solve uses, and whether it gives the same schedule every
run. `solve_cpsat` plans its time in deterministic units (the same on every rank): the whole model's units and
each window's are converted to seconds by predicted rates (solvers/cpsat.py `planned_seconds`, large.py
`seconds_spent` and `WindowTuning.overhead_seconds`). Per case (budget 1.0, the heuristic's warm start, the limit also
the deadline, as `optimize` gives it) and run: the seconds the plan counted for the model and for the windows
against the wall seconds they took, the call's wall seconds as a share of the limit, whether the wall clock
ended any search ("cap": then the schedule may differ between runs), the makespan and a hash of the schedule.

``long``: how far is the heuristic from the optimum? A long, wide monolithic CP-SAT run as a reference. Not a
measure of what `optimize` does on 2 cores: it spends many workers and minutes on one graph, to learn where
the best schedule under the budget lies (if even this run stays far from the bound, the bound is the weak
side).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import re
import time
from pathlib import Path

import ortools
import torch
from ortools.sat.python import cp_model

from experiments.common import below_commands, command_line
from experiments.tuning.cases import cases
from solvercast import InfeasibleBudgetError, Schedule, extract_problem, lower_bounds, simulate
from solvercast.heuristics import best_heuristic
from solvercast.models import build
from solvercast.pipeline import portfolio
from solvercast.pipeline.portfolio import solve_cpsat
from solvercast.pipeline.tuning import DEFAULT_TUNING, PORTFOLIO_TUNING, Tuning
from solvercast.solvers import cpsat, large
from solvercast.solvers.cpsat_model import CpsatModel
from solvercast.testing import random_problem


# ---------------------------------------------------------------- quality


def cmd_quality(args) -> None:
    print(f"# CP-SAT quality, time limit {args.time_limit:g} s, budget {args.budget:g} x original peak\n")
    print(f"Machine: {platform.machine()}, {os.cpu_count()} cores (shared); python {platform.python_version()}, "
          f"torch {torch.__version__}, ortools {ortools.__version__}; "
          f"{'wall-clock, 2 workers' if args.wall_clock else 'deterministic time limit, 1 worker'}.\n")
    print("| case | tasks | original us | heuristic (method) us | CP-SAT us | best bound us | gap | "
          "CP-SAT vs heuristic | status | wall s | CPU s (of the limit) | det. time |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for label, p in cases(args.only):
        orig = simulate(p, Schedule.original(p))
        budget = max(int(args.budget * orig.peak_memory), lower_bounds(p).memory)
        p = p.with_budget(budget)
        try:
            hint = best_heuristic(p, memory_budget=budget)
        except InfeasibleBudgetError as e:
            print(f"| {label} | {p.num_tasks} | {orig.makespan / 1e3:.1f} | "
                  f"no heuristic fits (best peak {e.best_peak / 2**20:.2f} MiB) | | | | | | | | |")
            continue
        h = simulate(p, hint)
        t0, c0 = time.perf_counter(), time.process_time()
        # the limit is also the call's deadline, as `optimize` gives it: a deterministic search may then run
        # slower than planned and still end on its deterministic limit (`solve_model`)
        res = solve_cpsat(p, time_limit=args.time_limit, memory_budget=budget, hint=hint,
                          deterministic=not args.wall_clock, deadline=t0 + args.time_limit)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        best_bound = max(lower_bounds(p).makespan, res.bound or 0)
        gap = (res.makespan - best_bound) / best_bound
        wall_note = " (wall cap)" if res.stats.get("stopped_by_wall_clock") else ""
        print(f"| {label} | {p.num_tasks} | {orig.makespan / 1e3:.1f} | "
              f"{h.makespan / 1e3:.1f} ({hint.method}) | {res.makespan / 1e3:.1f} | {best_bound / 1e3:.2f} | "
              f"{gap:.2%} | {(res.makespan - h.makespan) / h.makespan:+.2%} | {res.status.value} | {wall:.1f}{wall_note} | "
              f"{cpu:.1f} ({cpu / args.time_limit:.0%}) | "
              f"{res.stats.get('deterministic_time', 0):.2f} |", flush=True)


# ---------------------------------------------------------------- polish


def slowed(tuning: Tuning, slack: float) -> Tuning:
    """``tuning`` on a clock ``slack`` x slower: every search rate (and its clip range) divided by it, every
    planned overhead and window's seconds multiplied, so each deterministic limit is that of the call ``slack``
    x shorter while the wall clock gives ``slack`` x more (no part ended by the clock on shared cores)."""
    c = tuning.cpsat
    rates = {kind: (at / slack, per / slack) for kind, (at, per) in c.search_units_per_second.items()}
    low, high = c.search_rate_range
    return dataclasses.replace(
        tuning,
        cpsat=dataclasses.replace(c, search_units_per_second=rates, search_rate_range=(low / slack, high / slack),
                                  overhead_seconds_per_constraint=c.overhead_seconds_per_constraint * slack),
        windows=dataclasses.replace(tuning.windows, overhead_seconds=tuning.windows.overhead_seconds * slack),
        portfolio=dataclasses.replace(tuning.portfolio,
                                      polish_seconds_per_window=tuning.portfolio.polish_seconds_per_window * slack))


def cmd_polish(args) -> None:
    tuning = slowed(dataclasses.replace(DEFAULT_TUNING, portfolio=dataclasses.replace(
        PORTFOLIO_TUNING, whole_model_share=args.share, polish_window=args.window, whole_model_units=args.units)),
        args.slack)
    for case in args.cases.split(","):
        name, layers = case.split(":")
        p = extract_problem(build(name, layers=int(layers)))
        budget = max(simulate(p, Schedule.original(p)).peak_memory, lower_bounds(p).memory)
        p = p.with_budget(budget)
        hint = best_heuristic(p, memory_budget=budget)
        t0 = time.perf_counter()
        r = solve_cpsat(p, time_limit=args.time_limit * args.slack, memory_budget=budget, hint=hint, tuning=tuning)
        print(f"{name} {layers}: T {args.time_limit:g}, share {args.share}, units {args.units:g}, window {args.window}: "
              f"{r.makespan} ns {r.status.value}, bound {max(r.bound or 0, lower_bounds(p).makespan)}, "
              f"polish {r.stats.get('polish')}, ended by the wall clock {r.stats['stopped_by_wall_clock']}, "
              f"wall {time.perf_counter() - t0:.1f} s", flush=True)


# ---------------------------------------------------------------- params


ROWS = ["fsdp_layers:2", "simple_fsdp:2", "fsdp_tp:2", "fsdp_layers:4", "fsdp_layers:8"]


def _positions_in_order(model: CpsatModel) -> None:
    """Branch on program positions, first task first, smallest position first (a list schedule)."""
    vars_ = [v for t, v in sorted(model.ptime.items()) if not isinstance(v, int)]
    model.m.AddDecisionStrategy(vars_, cp_model.CHOOSE_FIRST, cp_model.SELECT_MIN_VALUE)


def _starts_lowest_min(model: CpsatModel) -> None:
    """Branch on start times, the earliest possible start first, at its minimum (schedule generation)."""
    vars_ = [model.start[t] for t in model.timed if not isinstance(model.start[t], int)]
    vars_ += list(model.launch_vars.values())
    model.m.AddDecisionStrategy(vars_, cp_model.CHOOSE_LOWEST_MIN, cp_model.SELECT_MIN_VALUE)


def _starts_in_hint_order(model: CpsatModel) -> None:
    """Branch on start times (launch points included) in the order of their hinted values, each at its
    minimum: the warm start's order, left-shifted, then what conflicts teach."""
    proto = model.m.Proto()
    hinted = dict(zip(proto.solution_hint.vars, proto.solution_hint.values))
    vars_ = [model.start[t] for t in model.timed if not isinstance(model.start[t], int)]
    vars_ += list(model.launch_vars.values())
    vars_.sort(key=lambda v: (hinted[v.Index()], v.Index()))
    model.m.AddDecisionStrategy(vars_, cp_model.CHOOSE_FIRST, cp_model.SELECT_MIN_VALUE)


#: name -> (parameters set after today's, model hook or None)
SETTINGS: dict[str, tuple[dict, object]] = {
    "today": ({}, None),
    "lb_search": ({"use_objective_lb_search": True}, None),
    "shaving": ({"use_objective_shaving_search": True}, None),
    "lb_tree": ({"optimize_with_lb_tree_search": True}, None),
    "lin0": ({"linearization_level": 0}, None),
    "lin2": ({"linearization_level": 2}, None),
    "quick_restart": ({"search_branching": cp_model.PORTFOLIO_WITH_QUICK_RESTART_SEARCH}, None),
    "portfolio": ({"search_branching": cp_model.PORTFOLIO_SEARCH}, None),
    "hint_search": ({"search_branching": cp_model.HINT_SEARCH}, None),
    "pseudo_cost": ({"search_branching": cp_model.PSEUDO_COST_SEARCH}, None),
    "lp_search": ({"search_branching": cp_model.LP_SEARCH}, None),
    "hint_conflicts_1k": ({"hint_conflict_limit": 1000}, None),
    "no_tt_ef": ({"use_timetable_edge_finding_in_cumulative": False}, None),
    "tt_ef": ({"use_timetable_edge_finding_in_cumulative": True}, None),
    "overload": ({"use_overload_checker_in_cumulative": True}, None),
    "hard_prec": ({"use_hard_precedences_in_cumulative": True}, None),
    "no_disj_in_cumul": ({"use_disjunctive_constraint_in_cumulative": False}, None),
    "all_prec": ({"exploit_all_precedences": True}, None),
    "dyn_prec": ({"use_dynamic_precedence_in_disjunctive": True, "use_dynamic_precedence_in_cumulative": True},
                 None),
    "polarity_false": ({"initial_polarity": cp_model.SatParameters.POLARITY_FALSE}, None),
    "no_phase_saving": ({"use_phase_saving": False}, None),
    "positions_fixed": ({"search_branching": cp_model.FIXED_SEARCH}, _positions_in_order),
    "positions_portfolio": ({"search_branching": cp_model.PORTFOLIO_WITH_QUICK_RESTART_SEARCH}, _positions_in_order),
    "starts_fixed": ({"search_branching": cp_model.FIXED_SEARCH}, _starts_lowest_min),
    "starts_portfolio": ({"search_branching": cp_model.PORTFOLIO_WITH_QUICK_RESTART_SEARCH}, _starts_lowest_min),
    "starts_auto": ({}, _starts_lowest_min),
    # CP-SAT's deterministic interleaving of two full subsolvers (its default search and the quick-restart
    # portfolio over the starts strategy), no LNS, no local search
    "interleaved_pair": ({"num_workers": 2, "interleave_search": True, "use_lns": False, "use_feasibility_jump": False,
                          "subsolvers": ["default_lp", "quick_restart"]}, _starts_lowest_min),
    "hint_order_portfolio": ({"search_branching": cp_model.PORTFOLIO_WITH_QUICK_RESTART_SEARCH},
                             _starts_in_hint_order),
    "starts_pf": ({"search_branching": cp_model.PORTFOLIO_SEARCH}, _starts_lowest_min),
}


class _Recorder(cpsat._Solutions):
    """`solve_model`'s callback, which also records (deterministic time, objective) of each solution."""

    seen: list = []

    def on_solution_callback(self) -> None:
        super().on_solution_callback()
        # the callback's DeterministicTime() stays at its presolve value in a one-worker solve (OR-Tools 9.15):
        # the wall time is kept and converted at the solve's own rate (`det_at`), the branch count is exact
        _Recorder.seen.append((self.WallTime(), self.NumBranches(), self.ObjectiveValue()))


def run(problem, budget, hint, setting: str, mult: float, seed: int, wall: float, log: Path | None) -> dict:
    params_set, hook = SETTINGS[setting]
    limit, presolve, add_hint = cpsat.deterministic_limit, cpsat.bound_presolve, CpsatModel.add_hint
    units_given = {}

    def fixed_limit(seconds, model, tuning=cpsat.CPSAT_TUNING):
        units_given["units"] = limit(10.0 * PORTFOLIO_TUNING.whole_model_share, model, tuning) * mult
        return units_given["units"]

    def presolve_then_setting(params, units, tuning=cpsat.CPSAT_TUNING):
        presolve(params, units, tuning)
        _apply(params, params_set)

    def hint_then_hook(model, schedule, sim):
        add_hint(model, schedule, sim)
        if hook is not None:
            hook(model)

    lines: list[str] = []
    cpsat.deterministic_limit, cpsat.bound_presolve, CpsatModel.add_hint = fixed_limit, presolve_then_setting, hint_then_hook
    solutions, cpsat._Solutions = cpsat._Solutions, _Recorder
    _Recorder.seen = []
    try:
        t0 = time.perf_counter()
        res = cpsat.solve_model(problem, time_limit=wall, memory_budget=budget, hint=hint, seed=seed,
                                log_progress=lines.append if log else False)
        seconds = time.perf_counter() - t0
    finally:
        cpsat.deterministic_limit, cpsat.bound_presolve, CpsatModel.add_hint = limit, presolve, add_hint
        cpsat._Solutions = solutions
    if log:
        log.write_text("\n".join(lines))
    factor = res.stats["scale"]
    warm = simulate(problem, hint).makespan
    improving = [(w, b) for w, b, o in _Recorder.seen if o * factor < warm]
    wall_end = res.stats["solver_wall_time"]
    det_at = lambda w: round(w * res.stats["deterministic_time"] / wall_end, 3) if wall_end else None  # noqa: E731
    return {"makespan": res.makespan, "status": res.status.value, "raw": res.solver_status,
            "bound": res.bound, "bound_all": max(res.bound or 0, lower_bounds(problem).makespan),
            "warm": warm, "units": units_given["units"], "det_end": res.stats["deterministic_time"],
            "det_first": det_at(improving[0][0]) if improving else None,
            "det_last": det_at(improving[-1][0]) if improving else None,
            "branches_first": improving[0][1] if improving else None, "branches_end": res.stats["branches"],
            "wall_ended": res.stats["stopped_by_wall_clock"], "seconds": round(seconds, 1),
            "order": hash(tuple(res.schedule.order)) & 0xFFFFFFFF}


def run_with_polish(problem, budget, hint, setting: str, seed: int, slack: float) -> dict:
    """`solve_cpsat` as a 10 s call runs it (the whole model, then windows), with ``setting`` on the whole model
    only (windows keep today's), every deterministic limit that of 10 s and the wall clock ``slack`` x longer,
    as the `polish` study does: so that on the shared cores no part is ended by the clock."""
    params_set, hook = SETTINGS[setting]
    presolve, add_hint = cpsat.bound_presolve, CpsatModel.add_hint
    whole = {}

    def presolve_then_setting(params, units, tuning=cpsat.CPSAT_TUNING):
        presolve(params, units, tuning)
        if whole["now"]:
            _apply(params, params_set)

    def hint_then_hook(model, schedule, sim):
        add_hint(model, schedule, sim)
        whole["now"] = not model.scope.windowed
        if hook is not None and whole["now"]:
            hook(model)

    cpsat.bound_presolve, CpsatModel.add_hint = presolve_then_setting, hint_then_hook
    try:
        t0 = time.perf_counter()
        res = solve_cpsat(problem, time_limit=10.0 * slack, memory_budget=budget, hint=hint, seed=seed,
                          tuning=slowed(DEFAULT_TUNING, slack))
        seconds = time.perf_counter() - t0
    finally:
        cpsat.bound_presolve, CpsatModel.add_hint = presolve, add_hint
    return {"makespan": res.makespan, "status": res.status.value, "raw": res.solver_status, "bound": res.bound,
            "bound_all": max(res.bound or 0, lower_bounds(problem).makespan), "warm": simulate(problem, hint).makespan,
            "units": res.stats["deterministic_limit"], "det_end": res.stats["deterministic_time"],
            "polish": res.stats.get("polish"), "wall_ended": res.stats["stopped_by_wall_clock"],
            "seconds": round(seconds, 1), "order": hash(tuple(res.schedule.order)) & 0xFFFFFFFF}


def _apply(params, values: dict) -> None:
    for key, value in values.items():
        if isinstance(value, list):  # a repeated field
            getattr(params, key).extend(value)
        else:
            setattr(params, key, value)


def table(path: str) -> str:
    """The runs recorded in ``path`` (JSON lines) as a markdown table: one line per row, setting and limit,
    makespans (us) by seed, and how many seeds improved on the warm start or proved their answer."""
    runs: dict[tuple, dict[int, dict]] = {}
    for line in open(path):
        r = json.loads(line)
        runs.setdefault((r["row"], r["setting"], r["mult"]), {})[r["seed"]] = r
    out = ["| row | setting | limit | units | makespan by seed (us) | improved | proved | det. first / last (est.) "
           "| wall-ended |", "|---|---|---|---|---|---|---|---|---|"]
    for (row, setting, mult), by_seed in sorted(runs.items(), key=lambda kv: (ROWS.index(kv[0][0]), str(kv[0][2]))):
        seeds = [by_seed[s] for s in sorted(by_seed)]
        spans = ", ".join(f"{r['makespan'] / 1e3:.1f}" for r in seeds)
        improved = sum(r["makespan"] < r["warm"] for r in seeds)
        proved = sum(r["status"] == "optimal" or r["makespan"] <= r["bound_all"] for r in seeds)
        firsts = [f"{r['det_first']:.1f}/{r['det_last']:.1f}" if r.get("det_first") is not None else "-"
                  for r in seeds]
        label = mult if isinstance(mult, str) else f"x{mult:g}"
        out.append(f"| {row} | {setting} | {label} | {seeds[0]['units']:.2f} | {spans} | {improved}/{len(seeds)} "
                   f"| {proved}/{len(seeds)} | {', '.join(firsts)} | {sum(r['wall_ended'] for r in seeds)} |")
    return "\n".join(out)


def row_problem(row: str):
    """(problem, budget, warm start) of a row "graph:layers": budget 1.0 x the original order's peak."""
    name, layers = row.split(":")
    p = extract_problem(build(name, layers=int(layers)))
    p = p.with_budget(max(simulate(p, Schedule.original(p)).peak_memory, lower_bounds(p).memory))
    return p, p.machine.memory_budget, best_heuristic(p, memory_budget=p.machine.memory_budget)



def cmd_params(args) -> None:
    if args.table:
        print(table(args.table))
        return
    out = open(args.out, "a") if args.out else None
    for row in args.rows.split(","):
        p, budget, hint = row_problem(row)
        name, layers = row.split(":")
        for setting in args.settings.split(","):
            for mult in map(float, args.mult.split(",")):
                for seed in map(int, args.seeds.split(",")):
                    log = None
                    if args.log:
                        Path(args.log).mkdir(parents=True, exist_ok=True)
                        log = Path(args.log) / f"{name}{layers}_{setting}_x{mult:g}_s{seed}.log"
                    if args.polish:
                        r = dict(row=row, setting=setting, mult="polish", seed=seed,
                                 **run_with_polish(p, budget, hint, setting, seed, args.polish))
                    else:
                        r = dict(row=row, setting=setting, mult=mult, seed=seed,
                                 **run(p, budget, hint, setting, mult, seed, args.wall, log))
                    print(json.dumps(r), flush=True)
                    if out:
                        out.write(json.dumps(r) + "\n")
                        out.flush()


# ---------------------------------------------------------------- rate


RATE_CASES = [
    ("fsdp_layers", {"layers": 2}, 1), ("fsdp_layers", {"layers": 3}, 1), ("fsdp_layers", {"layers": 4}, 1),
    ("fsdp_layers", {"layers": 6}, 1), ("fsdp_layers", {"layers": 8}, 1), ("fsdp_layers", {"layers": 4}, 2),
    ("simple_fsdp", {"layers": 2}, 1), ("fsdp_tp", {"layers": 2}, 1), ("sp_block", {"layers": 3}, 2),
    ("moe_block", {"layers": 4}, 2), ("synthetic", {"tasks": 300, "seed": 2}, 1),
    ("synthetic", {"tasks": 300, "seed": 2}, 2), ("synthetic", {"tasks": 1000, "seed": 1}, 1),
    ("synthetic", {"tasks": 1000, "seed": 1}, 2), ("synthetic", {"tasks": 150, "seed": 1}, 2),
    ("fsdp_layers", {"layers": 2}, 2), ("simple_fsdp", {"layers": 2}, 2), ("fsdp_tp", {"layers": 2}, 2),
    ("fsdp_layers", {"layers": 5}, 1), ("synthetic", {"tasks": 200, "seed": 3}, 1),
]


def rate_problems(only):
    for name, params, streams in RATE_CASES:
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



def cmd_rate(args) -> None:
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
        for label, p in rate_problems(args.only):
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


# ---------------------------------------------------------------- plan


PLAN_CASES = [("fsdp_tp", {"layers": 2}), ("simple_fsdp", {"layers": 2}), ("fsdp_layers", {"layers": 8}),
              ("fsdp_layers", {"layers": 4}), ("fsdp_layers", {"layers": 2})]


def timed_polish(problem, hint, budget: int, time_limit: float, seed: int = 0) -> tuple:
    """`solve_cpsat` with the whole model's wall seconds and every window's planned and wall seconds."""
    windows: list[tuple[float, float]] = []
    model_wall: list[float] = []
    solve_window, solve_model = large.solve_model, portfolio.solve_model

    def timed_model(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return solve_model(*args, **kwargs)
        finally:
            model_wall.append(time.perf_counter() - t0)

    def timed_window(*args, **kwargs):
        t0 = time.perf_counter()
        res = solve_window(*args, **kwargs)
        windows.append((large.seconds_spent(res, True) + DEFAULT_TUNING.windows.overhead_seconds,
                        time.perf_counter() - t0))
        return res

    large.solve_model, portfolio.solve_model = timed_window, timed_model
    try:
        t0 = time.perf_counter()
        res = solve_cpsat(problem, time_limit=time_limit, memory_budget=budget, hint=hint, deadline=t0 + time_limit,
                          seed=seed)
        wall = time.perf_counter() - t0
    finally:
        large.solve_model, portfolio.solve_model = solve_window, solve_model
    return res, wall, sum(model_wall), windows



def cmd_plan(args) -> None:
    print(f"# Polished CP-SAT solves: planned against wall seconds, time limit {args.time_limit:g} s, budget 1.0, "
          f"seed {args.seed}\n")
    print("| case | run | model planned s | model wall s | windows | windows planned s | windows wall s | "
          "wall s (of the limit) | cap | makespan us | schedule |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, params in PLAN_CASES:
        label = f"{name} {' '.join(f'{k}={v}' for k, v in params.items())}"
        if args.only and args.only not in label:
            continue
        p = extract_problem(build(name, **params))
        budget = max(simulate(p, Schedule.original(p)).peak_memory, lower_bounds(p).memory)
        p = p.with_budget(budget)
        hint = best_heuristic(p, memory_budget=budget)
        for run_index in range(args.repeat):
            res, wall, model_wall, windows = timed_polish(p, hint, budget, args.time_limit, args.seed)
            model_planned = large.seconds_spent(res, True)  # the stats are the model's, windows or not
            windows_wall = sum(w for _, w in windows)
            streams = sorted(res.schedule.streams.items())
            digest = hashlib.sha1(repr((res.schedule.order, streams)).encode()).hexdigest()[:10]
            windows_planned = sum(planned for planned, _ in windows)
            cap = "cap" if res.stats.get("stopped_by_wall_clock") else ""
            print(f"| {label} | {run_index + 1} | {model_planned:.2f} | {model_wall:.2f} | {len(windows)} | "
                  f"{windows_planned:.2f} | {windows_wall:.2f} | {wall:.2f} ({wall / args.time_limit:.0%}) | {cap} | "
                  f"{res.makespan / 1e3:.1f} ({res.status.value}) | {digest} |", flush=True)


# ---------------------------------------------------------------- long


def cmd_long(args) -> None:
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


# ---------------------------------------------------------------- command line


def main(argv=None) -> int:
    """What do CP-SAT's answers and tuning values give? Studies behind solvers/cpsat.py's rates, parameters, shares and
    polish; each prints its table to stdout (results: experiments/results/cpsat_quality.md, cpsat_params.md,
    cpsat_budgets.md, cpsat_rate_*.csv, long_solve.md)."""
    ap = command_line("experiments.tuning.cpsat", main.__doc__, below_commands(__doc__))
    sub = ap.add_subparsers(dest="cmd", required=True)
    q = sub.add_parser("quality", help="CP-SAT under a budget on the reordering shapes and zoo graphs (markdown)")
    q.add_argument("--time-limit", type=float, default=10.0)
    q.add_argument("--budget", type=float, default=1.0, help="ratio of the original order's peak")
    q.add_argument("--wall-clock", action="store_true", help="wall-clock time limit instead of deterministic time")
    q.add_argument("--only", help="cases whose label contains this")
    pa = sub.add_parser("params", help="CP-SAT parameter settings at fixed deterministic limits (JSON lines)")
    pa.add_argument("--settings", default="today", help="comma-separated names of: " + ", ".join(SETTINGS))
    pa.add_argument("--rows", default=",".join(ROWS))
    pa.add_argument("--mult", default="1,2")
    pa.add_argument("--seeds", default="0")
    pa.add_argument("--wall", type=float, default=300.0)
    pa.add_argument("--out", default=None, help="also append the runs to this JSON-lines file")
    pa.add_argument("--log", default=None, help="a folder for CP-SAT's logs")
    pa.add_argument("--polish", type=float, default=None, metavar="SLACK",
                    help="run solve_cpsat whole (model, then windows) as a 10 s call, the wall clock SLACK x longer")
    pa.add_argument("--table", default=None, help="print the runs recorded in this file as a table, and stop")
    po = sub.add_parser("polish", help="the whole model's share, units and polish window, deterministically")
    po.add_argument("--share", type=float, default=PORTFOLIO_TUNING.whole_model_share)
    po.add_argument("--window", type=int, default=PORTFOLIO_TUNING.polish_window)
    po.add_argument("--time-limit", type=float, default=10.0)
    po.add_argument("--slack", type=float, default=4.0)
    po.add_argument("--units", type=float, default=PORTFOLIO_TUNING.whole_model_units,
                    help="PortfolioTuning.whole_model_units (inf: no cap)")
    po.add_argument("--cases", default="fsdp_tp:2,fsdp_layers:4,fsdp_layers:2,simple_fsdp:2,fsdp_layers:8")
    ra = sub.add_parser("rate", help="deterministic time per CPU second of one worker (CSV)")
    ra.add_argument("--seconds", type=float, default=6.0, help="wall-clock limit of each solve")
    ra.add_argument("--only")
    pl = sub.add_parser("plan", help="planned against wall seconds of polished solves, and their repeatability")
    pl.add_argument("--time-limit", type=float, default=10.0)
    pl.add_argument("--repeat", type=int, default=2, help="runs per case (the schedule hash should not change)")
    pl.add_argument("--only", help="cases whose label contains this")
    pl.add_argument("--seed", type=int, default=0, help="CP-SAT's random seed for the whole model")
    lo = sub.add_parser("long", help="a long, wide CP-SAT run as a reference optimum")
    lo.add_argument("--model", default="synthetic")
    lo.add_argument("--tasks", type=int, default=1000, help="synthetic: tasks; fsdp_layers: layers")
    lo.add_argument("--seed", type=int, default=1)
    lo.add_argument("--budget", type=float, default=1.0)
    lo.add_argument("--workers", type=int, default=16)
    lo.add_argument("--time-limit", type=float, default=300.0)
    args = ap.parse_args(argv)
    {"quality": cmd_quality, "params": cmd_params, "polish": cmd_polish, "rate": cmd_rate, "plan": cmd_plan,
     "long": cmd_long}[args.cmd](args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
