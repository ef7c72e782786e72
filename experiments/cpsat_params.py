"""CP-SAT search settings on the whole-graph model under a binding budget, compared in deterministic time
(issue 16; results/cpsat_params.md).

    .venv/bin/python experiments/cpsat_params.py --settings today,lb_search --mult 1,2 --seeds 0 \
        --out experiments/results/cpsat_params.jsonl

Each row (zoo graph, budget 1.0 x its original peak, warm start `best_heuristic`) is solved by `solve_model`
(the whole-graph model of `solve_cpsat`, no windows after it) at a fixed deterministic limit: ``mult`` x the
limit a 10 s solve gives its model (`deterministic_limit(10 * WHOLE_MODEL_SHARE, model)`), with a wall cap of
``--wall`` s that should never end a run (``wall_ended`` says when it did). A setting is a set of CP-SAT
parameters applied after today's (`bound_presolve`), and optionally a decision strategy added to the model.
Each run records: the simulated makespan of the answer, CP-SAT's bound, the status, the deterministic time at
the end and, estimated from the wall clock at the solve's average rate (OR-Tools 9.15's callback does not
report it with one worker), at the first solution better than the warm start and at the last improvement, with
the branch count (exact) at the first. ``--log DIR`` writes
CP-SAT's search log of every run there.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from ortools.sat.python import cp_model, cp_model_helper

from solvercast import Schedule, extract_problem, lower_bounds, simulate
from solvercast.heuristics import best_heuristic
from solvercast.models import build
from solvercast.solvers import cpsat
from solvercast.solvers.cpsat_model import CpsatModel

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
    "polarity_false": ({"initial_polarity": cp_model_helper.SatParameters.POLARITY_FALSE}, None),
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

    def fixed_limit(seconds, model):
        units_given["units"] = limit(10.0 * cpsat.WHOLE_MODEL_SHARE, model) * mult
        return units_given["units"]

    def presolve_then_setting(params, units):
        presolve(params, units)
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
    as experiments/cpsat_polish.py does: so that on the shared cores no part is ended by the clock."""
    from solvercast.solvers import large

    params_set, hook = SETTINGS[setting]
    limit, presolve, add_hint = cpsat.deterministic_limit, cpsat.bound_presolve, CpsatModel.add_hint
    overhead, per_window = large.WINDOW_OVERHEAD_SECONDS, cpsat.POLISH_SECONDS_PER_WINDOW
    whole = {}

    def presolve_then_setting(params, units):
        presolve(params, units)
        if whole["now"]:
            _apply(params, params_set)

    def hint_then_hook(model, schedule, sim):
        add_hint(model, schedule, sim)
        whole["now"] = not model.scope.windowed
        if hook is not None and whole["now"]:
            hook(model)

    cpsat.deterministic_limit = lambda seconds, model: limit(seconds / slack, model)
    cpsat.bound_presolve, CpsatModel.add_hint = presolve_then_setting, hint_then_hook
    large.WINDOW_OVERHEAD_SECONDS, cpsat.POLISH_SECONDS_PER_WINDOW = overhead * slack, per_window * slack
    try:
        t0 = time.perf_counter()
        res = cpsat.solve_cpsat(problem, time_limit=10.0 * slack, memory_budget=budget, hint=hint, seed=seed)
        seconds = time.perf_counter() - t0
    finally:
        cpsat.deterministic_limit, cpsat.bound_presolve, CpsatModel.add_hint = limit, presolve, add_hint
        large.WINDOW_OVERHEAD_SECONDS, cpsat.POLISH_SECONDS_PER_WINDOW = overhead, per_window
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--settings", default="today")
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--mult", default="1,2")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--wall", type=float, default=300.0)
    ap.add_argument("--out", default=None)
    ap.add_argument("--log", default=None, help="a folder for CP-SAT's logs")
    ap.add_argument("--polish", type=float, default=None, metavar="SLACK",
                    help="run solve_cpsat whole (model, then windows) as a 10 s call, the wall clock SLACK x longer")
    ap.add_argument("--table", default=None, help="print the runs recorded in this file as a table, and stop")
    args = ap.parse_args()
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


if __name__ == "__main__":
    main()
