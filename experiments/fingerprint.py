"""Fingerprints of solvercast's answers, to show that a change of the code keeps its behaviour.

    python -m experiments.fingerprint behaviour --out before.json
    python -m experiments.fingerprint behaviour --out after.json --compare before.json
    python -m experiments.fingerprint solvers --out after.json --compare before.json
    python -m experiments.fingerprint heuristics --out after.json --compare before.json
    python -m experiments.fingerprint all --out-dir DIR [--compare-dir BASE_DIR]

Record a base on the code before a change (a checkout of it first on PYTHONPATH), then compare after it.
Each part writes its JSON (``--out``) and, with ``--compare BASE``, prints every difference and exits 1
on any. Nothing is timed; only the answers are recorded.

``behaviour``: for each graph of `experiments/configs/quick.json` (its models and synthetic graphs), 1 and 2
compute streams and budgets 0.9 / 1.0 / none, a digest of the extracted `Problem` (tasks, edges, buffers),
`lower_bounds`, the original order's simulation, every heuristic of `run_heuristics` (its reported method, a
digest of its order and streams, makespan, peak), `best_heuristic`, a digest of the lowered module's code for
the best schedule, and `optimize` with the single-heuristic methods. No solver runs.

``solvers``: CP-SAT's and the MILP's answers on problems small enough that every solve ends on a
deterministic limit or a proof: `solve_cpsat(..., deterministic=True, workers=1)` on random problems (seeds
0-9, 8-14 tasks, with and without a binding budget, 1 and 2 compute streams), on `tp_mlp` and `fsdp_layers`
(2 layers), placement and windowed models (solvers/large.py), and `solve_milp` on problems of at most 10
tasks. Each entry is the status, the solver's objective and bound, the size of the model (variables,
constraints: a changed model shows here even when the answer does not), and the returned schedule's
simulated makespan and peak with a digest of its order and streams. ``stopped_by_wall_clock`` is recorded:
an entry the wall clock ended may differ between runs on a busy machine (the output names them).

``heuristics``: for each graph (zoo models at a few sizes, synthetic graphs of 300 / 1,000 / 3,000 tasks, a
random problem), 1 and 2 compute streams and memory budget 1.0 x original peak or none, every heuristic's
schedule (program order, streams, method name), each of them polished by `iterative_swap`,
`best_heuristic`'s choice, and the work each counted (`heuristics.work`), as a SHA-256 per schedule, and of
each heuristic's schedule also `simulate`'s account of it (times, launches, memory per step). Work counts
that differ are reported but do not fail the comparison (they change when `PASS_COST_US` is re-fitted).
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path

from experiments.common import below_commands, command_line, zoo_graphs

HERE = Path(__file__).resolve().parent

#: seconds given to `solve_cpsat` (``solvers``); deterministic, so the search ends at 0.1 x this in CP-SAT's own time
CPSAT_LIMIT = 8.0


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


# ---------------------------------------------------------------- behaviour (no solver)


def _problem_digest(p) -> str:
    return _digest({
        "tasks": [(t.name, t.role.value, t.duration, round(t.occupancy, 9), t.waits_for, t.op, t.movable)
                  for t in p.tasks],
        "edges": list(p.edges),
        "buffers": [(b.name, b.size, b.producer, list(b.users), b.is_output, b.freeable) for b in p.buffers],
        "machine": [p.machine.compute_streams, p.machine.comm_streams, p.machine.sync_overhead],
    })


def _sched(p, schedule, sim) -> dict:
    return {"method": schedule.method, "order": _digest(list(schedule.order)),
            "streams": _digest(sorted(schedule.stream_list(p))) + _digest(schedule.stream_list(p)),
            "makespan": sim.makespan, "peak": sim.peak_memory, "exposed": sim.exposed_comm}


def graphs(config: dict) -> list[tuple[str, dict]]:
    out = [(m["model"], dict(m.get("params", {}))) for m in config.get("models", [])]
    syn = config.get("synthetic") or {}
    for n in syn.get("tasks", []):
        for s in config.get("seeds", [0]):
            out.append(("synthetic", {**syn.get("params", {}), "tasks": n, "seed": s}))
    return out


def behaviour(config_path: Path, say=print) -> dict:
    from solvercast import Schedule, extract_problem, lower, lower_bounds, optimize, simulate
    from solvercast.heuristics import best_heuristic, run_heuristics
    from solvercast.models import build

    config = json.loads(config_path.read_text())
    result: dict = {}
    for model, params in graphs(config):
        gm = build(model, **params)
        for streams in (1, 2):
            p0 = extract_problem(gm, compute_streams=streams)
            base = simulate(p0, Schedule.original(p0))
            key0 = f"{model} {json.dumps(params, sort_keys=True)} streams={streams}"
            result[key0 + " problem"] = {"digest": _problem_digest(p0), "original": _sched(p0, Schedule.original(p0), base)}
            for ratio in (0.9, 1.0, None):
                key = f"{key0} budget={ratio}"
                budget = None if ratio is None else int(ratio * base.peak_memory)
                p = p0.with_budget(budget)
                entry: dict = {"bounds": lower_bounds(p).to_dict()}
                for name, (s, sim) in run_heuristics(p).items():
                    entry[name] = _sched(p, s, sim)
                try:
                    best = best_heuristic(p)
                    entry["best"] = _sched(p, best, simulate(p, best))
                    entry["lowered"] = _digest(lower(gm, p, best).code)
                except Exception as e:  # noqa: BLE001 - an infeasible budget is part of the behaviour
                    entry["best"] = f"{type(e).__name__}: {e}"
                arg = float("inf") if ratio is None else ratio
                for method in ("original", "list", "nondelay", "comm_priority", "heuristic"):
                    try:
                        res = optimize(gm, time_limit=30, memory_budget=arg, compute_streams=streams, method=method)
                        entry[f"optimize:{method}"] = {
                            **_sched(res.problem, res.schedule, res.optimized), "used": res.report.method,
                            "fallback": res.report.fallback, "code": _digest(res.gm.code)}
                    except Exception as e:  # noqa: BLE001
                        entry[f"optimize:{method}"] = f"{type(e).__name__}: {e}"
                result[key] = entry
                say(f"{key}: best {entry['best'] if isinstance(entry['best'], str) else entry['best']['makespan']}")
    return result


def compare(a: dict, b: dict, path: str = "") -> list[str]:
    diffs = []
    for k in sorted(set(a) | set(b)):
        where = f"{path}/{k}" if path else k
        if k not in a or k not in b:
            diffs.append(f"{where}: only in {'after' if k not in a else 'before'}")
        elif isinstance(a[k], dict) and isinstance(b[k], dict):
            diffs += compare(a[k], b[k], where)
        elif a[k] != b[k]:
            diffs.append(f"{where}: {a[k]!r} -> {b[k]!r}")
    return diffs


# ---------------------------------------------------------------- solvers


def _entry(p, res) -> dict:
    from solvercast import simulate

    out = {"status": res.status.value, "raw": res.solver_status, "objective": res.objective, "bound": res.bound,
           "message": res.message}
    for key in ("variables", "constraints", "stopped_by_wall_clock", "scale", "earlier_solution"):
        if key in res.stats:
            out[key] = res.stats[key]
    if res.schedule is not None:
        sim = simulate(p, res.schedule)
        out.update(makespan=sim.makespan, peak=sim.peak_memory, method=res.schedule.method,
                   order=_digest(list(res.schedule.order)), streams=_digest(res.schedule.stream_list(p)))
    return out


def _run(fn) -> dict:
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - a proven infeasible budget is part of the behaviour
        return {"error": f"{type(e).__name__}: {e}"}


def solver_cases():
    """(name, problem, budget) for the monolithic solves."""
    from solvercast import Schedule, extract_problem, lower_bounds, simulate
    from solvercast.models import build
    from solvercast.testing import random_problem

    for seed in range(10):
        n = 8 + seed % 7
        for streams in (1, 2):
            p = random_problem(seed, n, compute_streams=streams, sync_overhead=(seed % 3) * 4)
            peak = simulate(p, Schedule.original(p)).peak_memory
            binding = (lower_bounds(p).memory + peak) // 2
            for label, budget in (("none", None), ("original", peak), ("binding", binding)):
                yield f"random seed={seed} n={n} streams={streams} budget={label}", p, budget
    for model in ("tp_mlp", "fsdp_layers"):
        for streams in (1, 2):
            p = extract_problem(build(model, layers=2), compute_streams=streams)
            peak = simulate(p, Schedule.original(p)).peak_memory
            for label, budget in (("none", None), ("original", peak)):
                yield f"{model} layers=2 streams={streams} budget={label}", p, budget


def solvers(say=print) -> dict:
    from solvercast import InfeasibleBudgetError, Schedule, lower_bounds, simulate
    from solvercast.heuristics import best_heuristic
    from solvercast.pipeline.portfolio import solve_cpsat
    from solvercast.solvers.large import solve_placement, solve_windows
    from solvercast.solvers.milp import solve_milp
    from solvercast.testing import random_problem

    def hint_for(p, budget):
        try:
            return best_heuristic(p, memory_budget=budget)
        except InfeasibleBudgetError:
            return None

    out: dict = {}
    for name, p, budget in solver_cases():
        hint = hint_for(p, budget)
        out[f"cpsat {name} hint"] = _run(lambda: _entry(p, solve_cpsat(
            p, time_limit=CPSAT_LIMIT, memory_budget=budget, hint=hint, deterministic=True, workers=1)))
        if name.startswith("random"):  # a cold start on the model graphs may end on the wall clock
            out[f"cpsat {name} cold"] = _run(lambda: _entry(p, solve_cpsat(
                p, time_limit=CPSAT_LIMIT, memory_budget=budget, deterministic=True, workers=1)))
        say(f"{name}: {out[f'cpsat {name} hint'].get('makespan')}")
    for seed in range(4):  # reduced models: placement, one window, windowed search
        for streams in (1, 2):
            p = random_problem(seed, 40, compute_streams=streams, sync_overhead=3, comm_fraction=0.25)
            budget = simulate(p, Schedule.original(p)).peak_memory
            hint = best_heuristic(p, budget)
            key = f"seed={seed} n=40 streams={streams}"
            out[f"placement {key}"] = _run(lambda: _entry(p, solve_placement(
                p, hint, CPSAT_LIMIT, budget, deterministic=True, workers=1)))
            out[f"window {key}"] = _run(lambda: _entry(p, solve_cpsat(
                p, time_limit=CPSAT_LIMIT, memory_budget=budget, hint=hint, window=(5 + seed, 25 + seed),
                left_shift=True, deterministic=True, workers=1)))
            say(f"reduced {key}")
        p = random_problem(seed, 7, sync_overhead=(seed % 2) * 4)
        budget = simulate(p, Schedule.original(p)).peak_memory
        res = solve_windows(p, Schedule.original(p), time_limit=60, memory_budget=budget, window=p.num_tasks,
                            per_window=CPSAT_LIMIT)
        out[f"windows seed={seed} n=7"] = _entry(p, res)
    for seed in range(10):
        n = 6 + seed % 5
        for streams, label in ((1, "none"), (1, "binding"), (2, "none")):
            p = random_problem(seed, n, compute_streams=streams, sync_overhead=(seed % 3) * 4)
            peak = simulate(p, Schedule.original(p)).peak_memory
            budget = None if label == "none" else (lower_bounds(p).memory + peak) // 2
            hint = hint_for(p, budget)
            for solver in ("highs", "cbc"):
                key = f"milp {solver} seed={seed} n={n} streams={streams} budget={label}"
                out[key] = _run(lambda: _entry(p, solve_milp(p, time_limit=60, memory_budget=budget, hint=hint,
                                                             solver=solver)))
            say(f"milp seed={seed} streams={streams} budget={label}")
    return out


# ---------------------------------------------------------------- heuristics


HEURISTIC_GRAPHS = zoo_graphs("tp_mlp layers=4; tp_block layers=2; sp_block layers=4; fsdp_layers layers=4; "
                              "fsdp_layers layers=16; moe_block layers=2; synthetic tasks=300 seed=1; "
                              "synthetic tasks=1000 seed=1; synthetic tasks=3000 seed=2")
HEURISTIC_RANDOM = [(0, 1000, 5)]  # random_problem(seed, tasks, sync_overhead=...)


def schedule_digest(schedule) -> str:
    data = json.dumps([list(schedule.order), sorted(schedule.streams.items()), schedule.method])
    return hashlib.sha256(data.encode()).hexdigest()[:16]


def simulated(problem, schedule) -> str:
    """The simulation of ``schedule`` (times, streams, launches, memory), fingerprinted: the engine must
    judge every schedule as before too."""
    from solvercast import simulate

    r = simulate(problem, schedule)
    data = json.dumps([r.makespan, r.exposed_comm, r.peak_memory, r.start, r.end, r.streams, sorted(r.launch.items()),
                       r.memory.during_step, r.memory.after_step, r.memory.peak_step, sorted(r.busy.items())])
    return hashlib.sha256(data.encode()).hexdigest()[:16]


def counted(fn):
    from solvercast.heuristics.work import WorkBudget, work_budget

    meter = WorkBudget(limit=None)
    with work_budget(meter):
        schedule = fn()
    return schedule, meter.spent


def record_problem(problem, ratio) -> dict[str, str]:
    from solvercast.heuristics import best_heuristic, iterative_swap
    from solvercast.heuristics._common import budget_bytes, renamed
    from solvercast.pipeline.methods import Kind, schedule_methods

    budget = budget_bytes(problem, ratio) if ratio is not None else None
    problem = problem.with_budget(budget)
    out = {}
    for m in schedule_methods():
        schedule, work = counted(lambda m=m: m.run(problem, memory_budget=budget))
        out[m.name] = schedule_digest(schedule)
        out[m.name + " simulated"] = simulated(problem, schedule)
        out[m.name + " work"] = f"{work:.6g}"
        if m.kind == Kind.ORIGINAL or m.name in ("list", "nondelay", "comm_priority"):
            swapped, work = counted(lambda s=schedule, m=m: iterative_swap(problem, renamed(s, m.name), budget))
            out[m.name + "+swap"] = schedule_digest(swapped)
            out[m.name + "+swap work"] = f"{work:.6g}"
    best, work = counted(lambda: best_heuristic(problem, budget))
    out["best_heuristic"] = schedule_digest(best)
    out["best_heuristic work"] = f"{work:.6g}"
    return out


def heuristic_problems():
    from solvercast import extract_problem
    from solvercast.models import build
    from solvercast.testing import random_problem

    for model, params in HEURISTIC_GRAPHS:
        gm = build(model, **params)
        for streams in (1, 2):
            yield f"{model} {json.dumps(params, sort_keys=True)} streams={streams}", extract_problem(
                gm, compute_streams=streams)
    for seed, tasks, sync in HEURISTIC_RANDOM:
        for streams in (1, 2):
            yield (f"random_problem seed={seed} tasks={tasks} sync={sync} streams={streams}",
                   random_problem(seed, tasks, compute_streams=streams, sync_overhead=sync))


def compare_heuristics(then: dict, now: dict) -> int:
    """Print every difference between two ``heuristics`` fingerprints; the number of schedules and
    simulations that differ (work counts are reported, not counted)."""
    schedules = differ = works = 0
    for key in sorted(set(then) | set(now)):
        a, b = then.get(key, {}), now.get(key, {})
        for what in sorted(set(a) | set(b)):
            is_work = what.endswith(" work")  # the work counts may change when PASS_COST_US is re-fitted
            schedules += not is_work  # a schedule's or a simulation's fingerprint
            if a.get(what) != b.get(what):
                if is_work:
                    works += 1
                else:
                    differ += 1
                print(f"DIFFERENT {key} / {what}: {a.get(what)} -> {b.get(what)}")
    print(f"{schedules} fingerprints (schedules and simulations) compared over {len(now)} cases: {differ} differ; "
          f"{works} work counts differ")
    return differ


def heuristics(say=print) -> dict:
    start = time.perf_counter()
    now = {}
    for name, problem in heuristic_problems():
        for ratio in (1.0, None):
            key = f"{name} budget={ratio}"
            now[key] = record_problem(problem, ratio)
            say(f"{key}: {problem.num_tasks} tasks, {time.perf_counter() - start:.1f} s")
    return now


# ---------------------------------------------------------------- command line


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_part(part: str, out: Path, base: Path | None, config: Path) -> int:
    """Record one part into ``out``; with ``base``, compare and return 1 on any difference."""
    if part == "behaviour":
        fp = behaviour(config, say=_say)
    elif part == "solvers":
        fp = solvers(say=_say)
    else:
        fp = heuristics(say=_say)
    out.write_text(json.dumps(fp, indent=1, sort_keys=True))
    if part == "solvers":
        wall = sorted(k for k, v in fp.items() if v.get("stopped_by_wall_clock"))
        if wall:
            print(f"{len(wall)} solves ended on the wall clock (may differ between runs): {wall}")
    if base is None:
        return 0
    then = json.loads(base.read_text())
    if part == "heuristics":
        return int(bool(compare_heuristics(then, fp)))
    diffs = compare(then, fp)
    if part == "solvers":
        print(f"{'; '.join(diffs) or 'identical'}\n{len(fp)} entries compared, {len(diffs)} differences", flush=True)
    else:
        print("\n".join(diffs) if diffs else "identical", flush=True)
        print(f"{len(fp)} entries compared, {len(diffs)} differences")
    return int(bool(diffs))


PARTS = ("behaviour", "solvers", "heuristics")
FILES = {"behaviour": "fp.json", "solvers": "sfp.json", "heuristics": "hid.json"}


def main(argv=None) -> int:
    """Does a change keep solvercast's answers? Records fingerprints of them (JSON) and compares them with a base
    recorded before the change; writes only the files named by --out."""
    ap = command_line("experiments.fingerprint", main.__doc__, below_commands(__doc__))
    sub = ap.add_subparsers(dest="part", required=True)
    for part, help_ in (("behaviour", "extraction, bounds, heuristics, lowering, optimize without a solver"),
                        ("solvers", "CP-SAT and the MILP on small problems (deterministic limits)"),
                        ("heuristics", "every heuristic's schedule, its simulation and its counted work")):
        p = sub.add_parser(part, help=help_)
        p.add_argument("--out", required=True, help="the JSON to write")
        p.add_argument("--compare", help="an earlier fingerprint of this part: print every difference, exit 1 on any")
        if part == "behaviour":
            p.add_argument("--config", default=str(HERE / "configs" / "quick.json"))
    every = sub.add_parser("all", help="the three parts, into --out-dir (fp.json, sfp.json, hid.json)")
    every.add_argument("--out-dir", required=True)
    every.add_argument("--compare-dir", help="a folder of earlier fingerprints (fp_base.json, sfp_base.json, "
                                             "hid_base.json, or the same names as --out-dir's)")
    every.add_argument("--config", default=str(HERE / "configs" / "quick.json"))
    args = ap.parse_args(argv)
    if args.part != "all":
        return run_part(args.part, Path(args.out), Path(args.compare) if args.compare else None,
                        Path(getattr(args, "config", HERE / "configs" / "quick.json")))
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    status = 0
    for part in PARTS:
        base = None
        if args.compare_dir:
            name = FILES[part]
            base = Path(args.compare_dir) / name.replace(".json", "_base.json")
            base = base if base.exists() else Path(args.compare_dir) / name
        print(f"== {part}", flush=True)
        status |= run_part(part, out_dir / FILES[part], base, Path(args.config))
    return status


if __name__ == "__main__":
    sys.exit(main())
