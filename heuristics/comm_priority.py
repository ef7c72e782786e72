"""Comm-priority list scheduling (the score-based scheduler of Inductor's comms passes).

Every task gets a score, lower first:

* ``score_0`` (``raise_comms``): the index, in collective order, of the first
  collective the task is needed for (the collective itself included), or
  "never" — so collectives are launched as early as their inputs allow;
* ``score_1`` (``sink_waits``): 1 for waits, 0 otherwise — so waits are
  deferred until something needs them;
* ``score_2``: the original task id (stability).

The ready task with the lowest score is issued next. With ``overlap``, after
each asynchronous collective is launched, ready compute tasks (not
collectives, not waits; lowest score first, i.e. needed soonest) are issued
until their summed durations cover the collective's duration
(``reorder_compute_for_overlap``). The flags give the three classic passes:
``raise_comms`` only, ``sink_waits`` only, and all three (the default).
Every task stays on its default stream.
"""

from __future__ import annotations

import sys

from solvercast.ir.problem import Problem, Role
from solvercast.ir.schedule import Schedule

from ._common import ReadySet, best_by_peak, budget_bytes, peak_of, renamed
from .iterative_swap import iterative_swap
from .work import charge


def comm_scores(problem: Problem, raise_comms: bool = True, sink_waits: bool = True) -> list[tuple[int, int, int]]:
    """(score_0, score_1, task id) of every task (see the module doc)."""
    n = problem.num_tasks
    never = sys.maxsize
    score0 = [never] * n
    if raise_comms:
        comm_index = {c: i for i, c in enumerate(problem.comm_tasks)}
        for t in range(n - 1, -1, -1):
            best = comm_index.get(t, never)
            for s in problem.succs[t]:
                if score0[s] < best:
                    best = score0[s]
            score0[t] = best
    waits = sink_waits
    return [(score0[t], 1 if waits and task.role == Role.WAIT else 0, t) for t, task in enumerate(problem.tasks)]


def _name(raise_comms: bool, sink_waits: bool, overlap: bool) -> str:
    flags = (raise_comms, sink_waits, overlap)
    if all(flags):
        return "comm_priority"
    if flags == (True, False, False):
        return "raise_comms"
    if flags == (False, True, False):
        return "sink_waits"
    on = [name for name, flag in zip(("raise_comms", "sink_waits", "overlap"), flags) if flag]
    return f"comm_priority({','.join(on)})"


def _comm_pass(problem: Problem, priority, overlap: bool, budget: int | None, method: str) -> Schedule:
    charge(problem, "comm_pass")
    tasks = problem.tasks
    fill = (lambda t: tasks[t].role in (Role.COMPUTE, Role.FREE)) if overlap else None
    ready = ReadySet(problem, priority, budget, fill=fill)
    wait_of = problem.wait_of
    while ready:
        t = ready.pick()
        ready.issue(t)
        if overlap and t in wait_of:
            remaining = tasks[t].duration
            while remaining > 0:
                c = ready.pick(fill=True)
                if c < 0:
                    break
                ready.issue(c)
                remaining -= tasks[c].duration
    return Schedule(order=tuple(ready.order), method=method)


def comm_priority_schedule(problem: Problem, raise_comms: bool = True, sink_waits: bool = True,
                           overlap: bool = True, *, memory_budget: int | float | None = None) -> Schedule:
    """Comm-priority order on default streams; ``method`` is "comm_priority"
    (all flags), "raise_comms", "sink_waits", or "comm_priority(<flags>)".

    The pass itself ignores memory, as the reference does. If its peak
    exceeds the budget (``memory_budget``: bytes, a float ratio of the original
    peak, or None for the machine's), it is redone memory-aware (a ready task
    that would push resident memory over the budget is passed over while
    another fits; ``method + "[memory]"``), and if that fails too the
    original order is improved by `iterative_swap` under the budget
    (``method + "[swap]"``). So the budget holds whenever the original order
    holds it; otherwise the lowest-peak attempt is returned with ``method``
    ending in ``"!over-budget"``.
    """
    budget = budget_bytes(problem, memory_budget)
    name = _name(raise_comms, sink_waits, overlap)
    scores = comm_scores(problem, raise_comms, sink_waits)
    priority = sorted(range(problem.num_tasks), key=scores.__getitem__)
    schedule = _comm_pass(problem, priority, overlap, None, name)
    if budget is None:
        return schedule
    peak = peak_of(problem, schedule)
    if peak <= budget:
        return schedule
    tried = [(peak, 0, schedule)]
    aware = _comm_pass(problem, priority, overlap, budget, name + "[memory]")
    peak = peak_of(problem, aware)
    if peak <= budget:
        return aware
    tried.append((peak, 1, aware))
    swapped = renamed(iterative_swap(problem, Schedule.original(problem), budget), name + "[swap]")
    peak = peak_of(problem, swapped)
    if peak <= budget:
        return swapped
    tried.append((peak, 2, swapped))
    return best_by_peak(tried)
