"""Pieces every solver formulation shares."""

from __future__ import annotations

import dataclasses
import heapq

from solvercast.problem import Problem


def scale_problem(problem: Problem, factor: int) -> Problem:
    """Durations and sync divided by ``factor``, rounded up: any schedule of the
    scaled problem, scaled back, is a feasible timing of the real one."""
    if factor == 1:
        return problem
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
