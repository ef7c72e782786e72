"""Do the heuristics still return the same schedules? Fingerprints of every method's schedule.

Speeding the heuristics up must not change what they compute. For each graph (zoo models at a few sizes,
synthetic graphs of 300 / 1,000 / 3,000 tasks, a random problem), 1 and 2 compute streams and memory budget
1.0 x original peak or none, this records every heuristic's schedule (program order, streams, method name),
each of them polished by `iterative_swap`, `best_heuristic`'s choice, and the work each counted
(`heuristics.work`), as a SHA-256 per schedule, and of each heuristic's schedule also `simulate`'s
account of it (times, launches, memory per step). ``--record`` writes them; ``--check`` recomputes them and
lists every difference (exit status 1 if any).

    # on the base commit's code (a checkout of it first on PYTHONPATH, run from outside the worktree):
    .venv/bin/python experiments/heuristic_identity.py --record experiments/results/heuristic_identity_base.json
    .venv/bin/python experiments/heuristic_identity.py --check experiments/results/heuristic_identity_base.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time

from solvercast import extract_problem, simulate
from solvercast.heuristics import best_heuristic, iterative_swap
from solvercast.heuristics._common import budget_bytes, renamed
from solvercast.heuristics.work import WorkBudget, work_budget
from solvercast.pipeline.methods import Kind, schedule_methods
from solvercast.models import build
from solvercast.testing import random_problem

GRAPHS = [
    ("tp_mlp", {"layers": 4}),
    ("tp_block", {"layers": 2}),
    ("sp_block", {"layers": 4}),
    ("fsdp_layers", {"layers": 4}),
    ("fsdp_layers", {"layers": 16}),
    ("moe_block", {"layers": 2}),
    ("synthetic", {"tasks": 300, "seed": 1}),
    ("synthetic", {"tasks": 1000, "seed": 1}),
    ("synthetic", {"tasks": 3000, "seed": 2}),
]
RANDOM = [(0, 1000, 5)]  # random_problem(seed, tasks, sync_overhead=...)


def fingerprint(schedule) -> str:
    data = json.dumps([list(schedule.order), sorted(schedule.streams.items()), schedule.method])
    return hashlib.sha256(data.encode()).hexdigest()[:16]


def simulated(problem, schedule) -> str:
    """The simulation of ``schedule`` (times, streams, launches, memory), fingerprinted: the engine must
    judge every schedule as before too."""
    r = simulate(problem, schedule)
    data = json.dumps([r.makespan, r.exposed_comm, r.peak_memory, r.start, r.end, r.streams, sorted(r.launch.items()),
                       r.memory.during_step, r.memory.after_step, r.memory.peak_step, sorted(r.busy.items())])
    return hashlib.sha256(data.encode()).hexdigest()[:16]


def counted(fn):
    meter = WorkBudget(limit=None)
    with work_budget(meter):
        schedule = fn()
    return schedule, meter.spent


def record_problem(problem, ratio) -> dict[str, str]:
    budget = budget_bytes(problem, ratio) if ratio is not None else None
    problem = problem.with_budget(budget)
    out = {}
    for m in schedule_methods():
        schedule, work = counted(lambda m=m: m.run(problem, memory_budget=budget))
        out[m.name] = fingerprint(schedule)
        out[m.name + " simulated"] = simulated(problem, schedule)
        out[m.name + " work"] = f"{work:.6g}"
        if m.kind == Kind.ORIGINAL or m.name in ("list", "nondelay", "comm_priority"):
            swapped, work = counted(lambda s=schedule, m=m: iterative_swap(problem, renamed(s, m.name), budget))
            out[m.name + "+swap"] = fingerprint(swapped)
            out[m.name + "+swap work"] = f"{work:.6g}"
    best, work = counted(lambda: best_heuristic(problem, budget))
    out["best_heuristic"] = fingerprint(best)
    out["best_heuristic work"] = f"{work:.6g}"
    return out


def problems():
    for model, params in GRAPHS:
        gm = build(model, **params)
        for streams in (1, 2):
            yield f"{model} {json.dumps(params, sort_keys=True)} streams={streams}", extract_problem(
                gm, compute_streams=streams)
    for seed, tasks, sync in RANDOM:
        for streams in (1, 2):
            yield (f"random_problem seed={seed} tasks={tasks} sync={sync} streams={streams}",
                   random_problem(seed, tasks, compute_streams=streams, sync_overhead=sync))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--record", metavar="JSON")
    mode.add_argument("--check", metavar="JSON")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    now = {}
    for name, problem in problems():
        for ratio in (1.0, None):
            key = f"{name} budget={ratio}"
            now[key] = record_problem(problem, ratio)
            print(f"{key}: {problem.num_tasks} tasks, {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    if args.record:
        with open(args.record, "w") as f:
            json.dump(now, f, indent=1, sort_keys=True)
        return 0
    with open(args.check) as f:
        then = json.load(f)
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
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
