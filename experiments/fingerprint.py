"""Behaviour fingerprint: every deterministic answer solvercast gives on the quick sweep's graphs.

    .venv/bin/python experiments/fingerprint.py --out before.json
    .venv/bin/python experiments/fingerprint.py --out after.json --compare before.json

For each graph of `experiments/configs/quick.json` (its models and synthetic graphs), 1 and 2 compute
streams and budgets 0.9 / 1.0 / none, it records a digest of the extracted `Problem` (tasks, edges,
buffers), `lower_bounds`, the original order's simulation, every heuristic of `run_heuristics`
(its reported method, a digest of its order and streams, makespan, peak), `best_heuristic`, a digest
of the lowered module's code for the best schedule, and `optimize` with the single-heuristic methods.
Only public names are used, so the same file runs on any version: a restructuring that keeps
behaviour gives an identical JSON (``--compare`` prints every difference and exits 1 on any).
Nothing here is timed, and no solver runs: CP-SAT's answers are compared in the quick sweep.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


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


def fingerprint(config_path: Path, say=print) -> dict:
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default=str(HERE / "configs" / "quick.json"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--compare", help="an earlier fingerprint: print every difference, exit 1 on any")
    args = ap.parse_args(argv)
    fp = fingerprint(Path(args.config), say=lambda m: print(m, file=sys.stderr, flush=True))
    Path(args.out).write_text(json.dumps(fp, indent=1, sort_keys=True))
    if args.compare:
        diffs = compare(json.loads(Path(args.compare).read_text()), fp)
        print("\n".join(diffs) if diffs else "identical", flush=True)
        print(f"{len(fp)} entries compared, {len(diffs)} differences")
        return 1 if diffs else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
