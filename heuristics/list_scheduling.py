"""Greedy list scheduling by upward rank with earliest-finish stream choice (HEFT family).

The ready task (all predecessors issued; with ``preserve_collective_order``
also the previous collective) with the highest upward rank is issued next
(ties: lower task id); it goes to the allowed stream on which it would finish
first (ties: the stream left idle for the shortest gap before it, then the
default stream, then the lower stream id), with the simulator's rules for
readiness across streams, the launch rule of asynchronous collectives and the
occupancy rule (`_common.Timeline`), so the times it predicts are the times
`simulate` reports. Views take no stream.

Memory: with a budget, a ready task whose allocation would push resident
memory (program order, as `memory_profile` counts it) over the budget is
passed over while another ready task fits; when none fits, the one that frees
the most bytes is issued and the pass is marked as having failed the budget.
"""

from __future__ import annotations

from solvercast.problem import Problem, Role
from solvercast.schedule import Schedule

from ._common import (ReadySet, Timeline, best_by_peak, comm_chain, renamed, resolve_budget,
                      simulated_peak)


def upward_ranks(problem: Problem) -> list[int]:
    """rank(t) = duration(t) + max over successors s of (rank(s) + sync), where
    the sync is counted only on edges whose two ends may run on different
    streams and that do not end in a view (views pass the sync on to their
    consumers). Successors include the next collective when the collective
    order is preserved."""
    n = problem.num_tasks
    sync = problem.machine.sync_overhead
    tasks = problem.tasks
    allowed = [tuple(problem.allowed_streams(t)) for t in range(n)]
    chain = comm_chain(problem)
    rank = [0] * n
    for t in range(n - 1, -1, -1):
        best = 0
        succ = problem.succs[t]
        if t in chain:
            succ = succ + (chain[t],)
        for s in succ:
            r = rank[s]
            if sync and tasks[s].role != Role.FREE and not (len(allowed[t]) == 1 and allowed[t] == allowed[s]):
                r += sync
            if r > best:
                best = r
        rank[t] = tasks[t].duration + best
    return rank


def _list_pass(problem: Problem, priority, budget: int | None, method: str) -> tuple[Schedule, bool]:
    """One greedy pass with a fixed priority; returns the schedule and whether
    the greedy had to break the budget."""
    ready = ReadySet(problem, priority, budget)
    timeline = Timeline(problem)
    streams: dict[int, int] = {}
    tasks = problem.tasks
    while ready:
        t = ready.pick()
        ready.issue(t)
        if tasks[t].role == Role.FREE:
            timeline.place(t, problem.default_stream(t))
            continue
        default = problem.default_stream(t)
        best_s, best_key = default, None
        for s in problem.allowed_streams(t):
            # earliest finish; ties: the stream left idle for the shortest gap (a wait blocks its
            # stream until the collective ends), then the default stream, then the lower id
            start = timeline.start_on(t, s)
            key = (start + tasks[t].duration, start - timeline.stream_free[s], s != default, s)
            if best_key is None or key < best_key:
                best_s, best_key = s, key
        timeline.place(t, best_s)
        streams[t] = best_s
    over = ready.over_budget or (ready.memory is not None and ready.memory.peak > budget)
    return Schedule(order=tuple(ready.order), streams=streams, method=method), over


def list_schedule(problem: Problem, memory_budget: int | float | None = None) -> Schedule:
    """Upward-rank list schedule with a stream per task (every non-view task
    gets an explicit stream in ``Schedule.streams``); ``method`` is "list".

    ``memory_budget``: bytes, a float ratio of the original order's peak, or
    None for the machine's budget (None there too: unconstrained).

    On failure to hold the budget the greedy falls back, in turn, to the same
    pass with original-order priority ("list[original-priority]": the original
    order, streams still chosen by earliest finish) and to the original order
    on default streams ("list[original]"); the first within budget is
    returned, so the budget holds whenever the original order holds it. If
    none does, the lowest-peak one is returned with ``method`` ending in
    ``"!over-budget"`` (see `held_budget`).
    """
    budget = resolve_budget(problem, memory_budget)
    ranks = upward_ranks(problem)
    priority = sorted(range(problem.num_tasks), key=lambda t: (-ranks[t], t))
    schedule, over = _list_pass(problem, priority, budget, "list")
    if budget is None:
        return schedule
    if not over and problem.machine.compute_streams == 1:
        return schedule  # one compute stream: the program-order peak the greedy held is the simulated peak
    tried = []
    peak = simulated_peak(problem, schedule)
    if peak <= budget:
        return schedule
    tried.append((peak, 0, schedule))
    fallback, _ = _list_pass(problem, range(problem.num_tasks), budget, "list[original-priority]")
    peak = simulated_peak(problem, fallback)
    if peak <= budget:
        return fallback
    tried.append((peak, 1, fallback))
    original = renamed(Schedule.original(problem), "list[original]")
    peak = simulated_peak(problem, original)
    if peak <= budget:
        return original
    tried.append((peak, 2, original))
    return best_by_peak(tried)
