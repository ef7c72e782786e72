"""Pieces every solver formulation shares."""

from __future__ import annotations

import dataclasses
import heapq

from solvercast.ir.engine import per_problem
from solvercast.ir.problem import Problem, Role


def scale_problem(problem: Problem, factor: int) -> Problem:
    """Durations and sync divided by ``factor``, rounded up: any schedule of the
    scaled problem, scaled back, is a feasible timing of the real one. Built once per problem and factor:
    the windows of a large-neighbourhood search each scale the same problem, and a new Problem would rebuild
    every table derived from it (0.36 s of a 1.5-2 s window on an 8,000-task graph)."""
    if factor == 1:
        return problem
    return per_problem(problem, f"scaled by {factor}", lambda p: _scaled(p, factor))


def _scaled(problem: Problem, factor: int) -> Problem:
    tasks = tuple(dataclasses.replace(t, duration=-(-t.duration // factor)) for t in problem.tasks)
    machine = dataclasses.replace(problem.machine, sync_overhead=-(-problem.machine.sync_overhead // factor))
    return dataclasses.replace(problem, tasks=tasks, machine=machine)


def topological_by_key(problem: Problem, key: dict) -> list[int]:
    """Task ids sorted by ``key``, but never a task before its predecessors (guards ties)."""
    indeg = [len(ps) for ps in problem.preds]
    heap = [(key[t], t) for t in range(problem.num_tasks) if indeg[t] == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        _, t = heapq.heappop(heap)
        order.append(t)
        for s in problem.succs[t]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(heap, (key[s], s))
    return order


def start_time_keys(problem: Problem, timed, start, launch, skip=frozenset(), rounding=None, rank=None) -> dict:
    """Sort keys that turn a solver's start times into a program order (for `topological_by_key`).

    A task with a launch point (an asynchronous collective) sorts at its launch, a task that takes time
    after the zero-length points (launches, waits) of its instant, ties by ``rank`` (a position per task in
    a topological order; the ids by default); a view (FREE, not in ``timed`` nor in ``skip``) when its
    inputs are ready. ``rounding`` is applied to every time (the MILP's are floats). Serial schedule
    generation on a list sorted by start never starts a task later, which is why several compute streams
    read their order off the times (CP-SAT and MILP alike)."""
    r = rounding or (lambda x: x)
    rank = rank or range(problem.num_tasks)
    key = {}
    for t in timed:
        if t in launch:
            key[t] = (r(launch[t]), 0, rank[t])
        else:
            key[t] = (r(start[t]), int(problem.tasks[t].duration > 0), rank[t])
    for t in range(problem.num_tasks):  # views: when their inputs are ready, in topological (rank) order
        if problem.tasks[t].role == Role.FREE and t not in key and t not in skip:
            ready = max((start[q] + problem.tasks[q].duration for q in problem.sync_preds[t]), default=0)
            key[t] = (r(ready), 0, rank[t])
    return key


def shifted_tasks(problem: Problem) -> tuple[int, ...]:
    """The tasks whose starts a window pulls earlier once the makespan is settled (``left_shift``; launch
    points count too): with one compute stream the collectives only, with several every task with a stream.

    One compute stream runs its compute back to back wherever it sits; what shortens the schedule is a
    collective launched sooner. Pulling every compute task earlier as well kept compute that feeds no
    collective ahead of the collectives' inputs (fsdp_layers 2 layers, budget 1.0: windows stayed at the
    heuristic's 134.0 us; with the collectives only they reach the optimum, 129.9 us). With several compute
    streams, how early compute starts is how well it packs onto them."""
    if problem.machine.compute_streams == 1:
        return problem.comm_tasks
    return tuple(t for t, task in enumerate(problem.tasks) if task.role != Role.FREE)


def serial_syncs(problem: Problem, big_m_margin: bool = False) -> int:
    """Two syncs per task (an input from another stream, and its launch), plus one task's more with
    ``big_m_margin``; see `serial_horizon`."""
    return 2 * problem.machine.sync_overhead * (problem.num_tasks + int(big_m_margin))


def serial_horizon(problem: Problem, big_m_margin: bool = False) -> int:
    """An end time no valid schedule exceeds: every task after the previous one, each paying its syncs.

    Two values, one definition: CP-SAT's (``big_m_margin=False``) bounds variable domains and is kept
    tight; the MILP's (``big_m_margin=True``, one more task's syncs) feeds its big-M constants, where a
    margin costs nothing and a value one sync short would cut off schedules. Both are kept exactly as they
    shipped, so that the models (and their answers) stay the same."""
    return sum(t.duration for t in problem.tasks) + serial_syncs(problem, big_m_margin)
