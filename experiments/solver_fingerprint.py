"""Solver fingerprint: CP-SAT's and the MILP's answers on small problems, to show a restructuring keeps them.

    PYTHONPATH=/path/to/old/package .venv/bin/python experiments/solver_fingerprint.py --out before.json
    .venv/bin/python experiments/solver_fingerprint.py --out after.json --compare before.json

`experiments/fingerprint.py` runs no solver; this one does, on problems small enough that every solve
ends on a deterministic limit or a proof: `solve_cpsat(..., deterministic=True, workers=1)` on random
problems (seeds 0-9, 8-14 tasks, with and without a binding budget, 1 and 2 compute streams), on
`tp_mlp` and `fsdp_layers` (2 layers), placement and windowed models (solvers/large.py), and `solve_milp`
on problems of at most 10 tasks. Each entry is the status, the solver's objective and bound, the size of
the model (variables, constraints: a changed model shows here even when the answer does not), and the
returned schedule's simulated makespan and peak with a digest of its order and streams. Only public
names are used, so the same file runs on the code before and after a change. ``stopped_by_wall_clock``
is recorded: an entry the wall clock ended may differ between runs on a busy machine.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fingerprint import compare  # noqa: E402

#: seconds given to `solve_cpsat`; deterministic, so the search ends at 0.1 x this in CP-SAT's own time
CPSAT_LIMIT = 8.0


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


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


def cases():
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


def fingerprint(say=print) -> dict:
    from solvercast import InfeasibleBudgetError, Schedule, simulate
    from solvercast.heuristics import best_heuristic
    from solvercast.solvers.cpsat import solve_cpsat
    from solvercast.solvers.large import solve_placement, solve_windows
    from solvercast.solvers.milp import solve_milp
    from solvercast.testing import random_problem

    def hint_for(p, budget):
        try:
            return best_heuristic(p, memory_budget=budget)
        except InfeasibleBudgetError:
            return None

    out: dict = {}
    for name, p, budget in cases():
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
            from solvercast import lower_bounds

            budget = None if label == "none" else (lower_bounds(p).memory + peak) // 2
            hint = hint_for(p, budget)
            for solver in ("highs", "cbc"):
                key = f"milp {solver} seed={seed} n={n} streams={streams} budget={label}"
                out[key] = _run(lambda: _entry(p, solve_milp(p, time_limit=60, memory_budget=budget, hint=hint,
                                                             solver=solver)))
            say(f"milp seed={seed} streams={streams} budget={label}")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--compare", help="an earlier fingerprint: print every difference, exit 1 on any")
    args = ap.parse_args(argv)
    fp = fingerprint(say=lambda m: print(m, file=sys.stderr, flush=True))
    Path(args.out).write_text(json.dumps(fp, indent=1, sort_keys=True))
    wall = sorted(k for k, v in fp.items() if v.get("stopped_by_wall_clock"))
    if wall:
        print(f"{len(wall)} solves ended on the wall clock (may differ between runs): {wall}")
    if not args.compare:
        return 0
    diffs = compare(json.loads(Path(args.compare).read_text()), fp)  # experiments/fingerprint.py's
    print(f"{'; '.join(diffs) or 'identical'}\n{len(fp)} entries compared, {len(diffs)} differences", flush=True)
    return int(bool(diffs))


if __name__ == "__main__":
    sys.exit(main())
