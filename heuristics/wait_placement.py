"""Timely waits: each wait moves up to where its collective is already done.

Sinking waits as far as possible (``sink_waits``) hides collectives, but a
wait also frees what its collective held: its input until the wait, in the
memory model of `simulate.memory_profile`. A wait left long after its
collective finished holds that memory for nothing, and under a budget that is
memory another collective's early launch needs (FSDP: every reduce-scatter's
gradient held to the end of the step leaves no room to prefetch the next
layer's all-gather).

`timely_waits` moves each wait of an asynchronous collective to the first
place in program order where the default stream is already past the
collective's end (plus the sync), never later than it was. There the wait
blocks nothing, so no start time changes: the makespan is the same, and
memory can only fall. Waits that block where they are stay.
"""

from __future__ import annotations

from solvercast.problem import Problem, Role
from solvercast.schedule import Schedule
from solvercast.simulate import simulate


def timely_waits(problem: Problem, schedule: Schedule) -> Schedule:
    """``schedule`` with every non-blocking wait moved up to where its collective is done (see the
    module doc). ``method`` gets ``"+timely"`` when anything moved."""
    sim = simulate(problem, schedule)
    order = list(schedule.order)
    sync = problem.machine.sync_overhead
    # free[p]: when the default stream is done with everything before position p
    free = [0] * (len(order) + 1)
    clock = 0
    for p, t in enumerate(order):
        free[p] = clock
        if t in sim.launch:
            clock = max(clock, sim.launch[t])
        elif problem.tasks[t].role != Role.FREE and sim.streams[t] == 0:
            clock = max(clock, sim.end[t])
    free[len(order)] = clock
    pos = {t: p for p, t in enumerate(order)}
    target: dict[int, int] = {}  # wait -> the position it moves in front of
    for c, w in problem.wait_of.items():
        ready = sim.end[c] + (sync if sim.streams[c] != 0 else 0)
        lo, hi = pos[c] + 1, pos[w]
        if free[hi] < ready:
            continue  # it blocks where it is, and would anywhere earlier
        while lo < hi:  # free only grows along the order: the first position already past `ready`
            mid = (lo + hi) // 2
            if free[mid] >= ready:
                hi = mid
            else:
                lo = mid + 1
        if lo < pos[w]:
            target[w] = lo
    if not target:
        return schedule
    ahead: dict[int, list[int]] = {}
    for w, p in target.items():
        ahead.setdefault(p, []).append(w)
    new_order = []
    for p, t in enumerate(order):
        new_order.extend(sorted(ahead.get(p, ()), key=pos.__getitem__))
        if t not in target:
            new_order.append(t)
    return Schedule(order=tuple(new_order), streams=schedule.streams, method=schedule.method + "+timely")
