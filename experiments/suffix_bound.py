"""A memory-aware lower bound tried for issue 16 and not shipped: cut the program at a collective's launch and
solve what comes after exactly. Results: results/cpsat_budgets.md, seventh session.

    .venv/bin/python experiments/suffix_bound.py --model simple_fsdp --seconds 10          # every cut
    .venv/bin/python experiments/suffix_bound.py --model fsdp_tp --seconds 10 --cuts 25,26,27
    .venv/bin/python experiments/suffix_bound.py --check 200                               # vs brute force

The relaxation, for an asynchronous collective c of a kept collective order and one compute stream: every task
that must be issued before c's launch point (A: the ancestors of c and of the comm tasks before it) takes no
time, and one first task (the prefix) takes their compute work instead; the collectives before c become
zero-time compute tasks, their waits too (what they hold is held until them). A task of A is kept only where
it produces a buffer that a task after the cut holds, or an output, and it must be issued before c; what A
alone holds is left out. Any schedule of the problem, restricted to these tasks, is a schedule of the
relaxation with no larger makespan (c's launch point comes after all the compute issued before it, at least
the prefix's work plus that of the tasks after the cut issued before c; from there every task starts no
later, with fewer tasks and dependencies) and no larger memory at any step, so the relaxation's optimum,
or any lower bound CP-SAT proves for it, bounds the problem. ``--check`` compares the two optima by brute
force on tiny random programs with binding budgets.
"""

import argparse
import random
import sys
import time
from pathlib import Path

import numpy as np

from solvercast import Schedule, extract_problem, lower_bounds, simulate
from solvercast.ir.bounds import _closures
from solvercast.heuristics import best_heuristic
from solvercast.models import build
from solvercast.ir.problem import Buffer, Problem, Role, Task
from solvercast.solvers.cpsat import solve_model


def suffix_problem(problem: Problem, c: int) -> Problem:
    """The relaxation of ``problem`` cut at asynchronous collective ``c``'s launch point (module docstring)."""
    n = problem.num_tasks
    anc, _ = _closures(problem)
    comm = list(problem.comm_tasks)
    k = comm.index(c)
    before = np.zeros(n, dtype=bool)
    for q in comm[:k + 1]:
        before |= anc[q]
    before[c] = False
    earlier = set(comm[:k]) | {problem.wait_of[q] for q in comm[:k] if q in problem.wait_of}
    work = sum(task.duration for t, task in enumerate(problem.tasks) if before[t] and task.role == Role.COMPUTE)
    after = {t for t in range(n) if not before[t]}
    producers = {buf.producer for b, buf in enumerate(problem.buffers)
                 if buf.producer is not None and before[buf.producer] and buf.size
                 and (buf.is_output or problem.buffer_holders[b] & after)}
    kept = sorted(after | producers)
    new = {t: i + 1 for i, t in enumerate(kept)}
    tasks = [Task("prefix", Role.COMPUTE, duration=work, movable=False)]
    for t in kept:
        task = problem.tasks[t]
        if t in producers or (t in earlier and task.role != Role.FREE):
            task = Task(task.name, Role.COMPUTE, duration=0, op=task.op)
        elif task.role == Role.WAIT:
            task = Task(task.name, Role.WAIT, waits_for=new[task.waits_for], op=task.op)
        tasks.append(task)
    edges = [(0, new[t]) for t in kept] + [(new[u], new[v]) for u, v in problem.edges if u in new and v in new]
    edges += [(new[t], new[c]) for t in producers]
    buffers = []
    for b, buf in enumerate(problem.buffers):
        # holders as users: the waits of the earlier collectives, now compute, keep what they held
        users = tuple(new[u] for u in problem.buffer_users[b] if u in new)
        if buf.producer is None:
            buffers.append(Buffer(buf.name, buf.size, None, users, freeable=buf.freeable))
        elif buf.producer in new:
            buffers.append(Buffer(buf.name, buf.size, new[buf.producer], users, is_output=buf.is_output))
    return Problem(tuple(tasks), tuple(edges), tuple(buffers), problem.machine, problem.preserve_collective_order,
                   f"{problem.name}|{problem.tasks[c].name}")


def check(count: int) -> None:
    """The relaxation's optimum never exceeds the problem's (brute force, tiny random programs)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from oracle import brute_force

    from solvercast.testing import random_problem

    compared = above = 0
    for seed in range(count):
        rng = random.Random(seed)
        p = random_problem(seed, num_tasks=7, sync_overhead=rng.choice([0, 5]), comm_fraction=0.3)
        if not p.async_chain:
            continue
        peak = simulate(p, Schedule.original(p)).peak_memory
        for budget in (None, (peak + lower_bounds(p).memory) // 2):
            q = p.with_budget(budget)
            optimum, _ = brute_force(q)
            if optimum is None:
                continue
            for c in q.async_chain:
                relaxed, _ = brute_force(suffix_problem(q, c))
                assert relaxed is not None and relaxed <= optimum, (seed, budget, c, relaxed, optimum)
                compared += 1
                above += relaxed > lower_bounds(q).makespan
    print(f"{compared} cuts of tiny programs: the relaxation never above the optimum; above lower_bounds in {above}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="simple_fsdp")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=10.0, help="CP-SAT per cut (wall clock, 2 workers)")
    ap.add_argument("--cuts", default="", help="indices into the collective chain (default: all)")
    ap.add_argument("--check", type=int, default=0, help="brute-force this many random seeds instead")
    args = ap.parse_args()
    if args.check:
        check(args.check)
        return
    p = extract_problem(build(args.model, layers=args.layers))
    budget = max(simulate(p, Schedule.original(p)).peak_memory, lower_bounds(p).memory)
    p = p.with_budget(budget)
    work = sum(task.duration for task in p.tasks if task.role == Role.COMPUTE)
    print(f"{args.model} {args.layers} layers: budget {budget} B, compute work {work} ns, "
          f"lower_bounds {lower_bounds(p).makespan} ns")
    chain = list(p.async_chain)
    picks = [chain[int(i)] for i in args.cuts.split(",")] if args.cuts else chain
    print("| cut at | tasks | prefix ns | heuristic ns | CP-SAT ns | status | bound ns | s |")
    print("|---|---|---|---|---|---|---|---|")
    for c in picks:
        t0 = time.perf_counter()
        sub = suffix_problem(p, c)
        hint = best_heuristic(sub, memory_budget=budget)
        res = solve_model(sub, args.seconds, budget, hint, deterministic=False, workers=2)
        bound = max(res.bound or 0, lower_bounds(sub).makespan)
        print(f"| {p.tasks[c].name} | {sub.num_tasks} | {sub.tasks[0].duration} | {simulate(sub, hint).makespan} | "
              f"{res.makespan} | {res.status.value} | {bound} | {time.perf_counter() - t0:.1f} |", flush=True)


if __name__ == "__main__":
    main()
