"""Iterative adjacent swaps under a memory budget (Inductor's
``reorder_communication_preserving_peak_memory`` and ``sink_waits_iterative``).

Two passes over a doubly linked program order:

1. *Raise collectives*, left to right: each asynchronous collective moves one
   step earlier at a time, past the task just before it.
2. *Sink waits*, right to left: each wait moves one step later at a time,
   past the task just after it.

Grouping (as the reference does): a moving collective forms a group with the
tasks it depends on that sit right before it, and a moving wait with the
tasks right after it that depend on it, when those tasks are compute or views
(at most ``max_group`` tasks); the group then moves as a block. A dependency
on a task that cannot be grouped (a wait for a collective being raised, a
collective) stops the move.

A move stops at: a dependency that cannot be grouped; another collective
when raising and the two keep their order (`Problem.comm_chains`: every
collective, or those of one process group; sinking a wait past a later
collective never changes the collective order, so that is allowed);
the collective being hidden (the compute-stream work between it and its wait
covers its duration); the memory limit; the start / end of the order; the
total move cap (``max_moves``, default 2 x the number of tasks).

Memory is tracked incrementally per swap (resident bytes before each step,
allocations, and frees that move between the swapped tasks when the last
use of a buffer changes hands), exactly as `solvercast.ir.engine.memory_profile` counts
it; ``on_swap`` lets a test compare with a full recomputation after every
swap.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence

from solvercast.ir.engine import last_holders
from solvercast.ir.problem import Problem, Role
from solvercast.ir.schedule import Schedule

from ._common import OVER_BUDGET, budget_bytes, compute_work, mark_over_budget, peak_of
from .work import charge


class LinkedOrder:
    """A program order as a doubly linked list of task ids (-1: none)."""

    def __init__(self, order: Sequence[int], n: int):
        self.prev = [-1] * n
        self.next = [-1] * n
        for a, b in zip(order, order[1:]):
            self.next[a] = b
            self.prev[b] = a
        self.head = order[0] if n else -1
        self.tail = order[-1] if n else -1

    def order(self) -> list[int]:
        out = []
        t = self.head
        while t >= 0:
            out.append(t)
            t = self.next[t]
        return out

    def _link(self, u: int, v: int) -> None:
        if u >= 0:
            self.next[u] = v
        else:
            self.head = v
        if v >= 0:
            self.prev[v] = u
        else:
            self.tail = u

    def move_after(self, x: int, anchor: int) -> None:
        """Take ``x`` out and put it right after ``anchor``."""
        self._link(self.prev[x], self.next[x])
        self._link(x, self.next[anchor])
        self._link(anchor, x)

    def move_before(self, x: int, anchor: int) -> None:
        """Take ``x`` out and put it right before ``anchor``."""
        self._link(self.prev[x], self.next[x])
        self._link(self.prev[anchor], x)
        self._link(x, anchor)


def _group_steps(p: int, group: list[int], alloc, free, moved: dict[int, int], sign: int,
                 limit: int) -> tuple[list[int], int] | None:
    """Resident bytes before each task of ``group`` run from ``p`` on, and after the last, with ``moved``
    bytes of freeing added (``sign`` 1) or taken (-1) per task; None when a step exceeds ``limit``."""
    new_pre = []
    for g in group:
        during = p + alloc[g]
        if during > limit:
            return None
        new_pre.append(p)
        p = during - free[g] + sign * moved.get(g, 0)
    return new_pre, p


def _work_until(x: int, stop: int, link, work, enough: int) -> int:
    """Compute work from ``x`` on, following ``link`` (next or previous), until ``stop``, the order's end
    (-1) or ``enough``."""
    comp = 0
    while x >= 0 and x != stop and comp < enough:
        comp += work[x]
        x = link[x]
    return comp


class SwapState(LinkedOrder):
    """A program order (`LinkedOrder`) plus its memory, kept up to date per swap.

    Per task: ``alloc`` (bytes it allocates, fixed), ``free`` (bytes freed
    after its step: buffers whose last holder it currently is), ``pre``
    (resident bytes before its step). Resident while step t runs is
    ``pre[t] + alloc[t]``, after it ``pre[t] + alloc[t] - free[t]``.
    """

    def __init__(self, problem: Problem, order: Sequence[int]):
        n = problem.num_tasks
        super().__init__(order, n)
        self.alloc = list(problem.allocated_bytes)
        self.free = [0] * n
        self.pre = [0] * n
        touches, _, _, _ = problem.release_counts
        self.bufs_of = touches  # freeable buffers each task holds (read only)
        self.holders: list[frozenset[int]] = [holders for _, holders in problem.releasable]
        self.size: list[int] = [size for size, _ in problem.releasable]
        self.last: list[int] = last_holders(problem, order)
        free = self.free
        for last, size in zip(self.last, self.size):
            free[last] += size
        self.resident = resident = problem.initial_resident_bytes
        cur = resident
        for t in order:
            self.pre[t] = cur
            cur += self.alloc[t] - self.free[t]

    # ---- reading the state (tests and the final result) ---------------------------------------
    def during(self) -> list[int]:
        """Resident bytes while each program step runs (`MemoryProfile.during_step`)."""
        return [self.pre[t] + self.alloc[t] for t in self.order()]

    def after(self) -> list[int]:
        """Resident bytes after each step's frees (`MemoryProfile.after_step`)."""
        return [self.pre[t] + self.alloc[t] - self.free[t] for t in self.order()]

    def peak(self) -> int:
        # every task is one step: the highest of ``during`` needs no walk along the order
        return max(self.resident, max(map(operator.add, self.pre, self.alloc), default=self.resident))

    # ---- the two swaps, each checked against the limit before it is made ------------------------
    def try_raise(self, y: int, group: list[int], gset: set[int], limit: int) -> bool:
        """``y group...`` -> ``group... y`` if no affected step exceeds ``limit``.

        Buffers ``y`` holds whose last holder was in the group now end at ``y``."""
        last, size, alloc, free, pre = self.last, self.size, self.alloc, self.free, self.pre
        moved: dict[int, int] = {}
        changed = []
        for k in self.bufs_of[y]:
            holder = last[k]
            if holder in gset:
                moved[holder] = moved.get(holder, 0) + size[k]
                changed.append(k)
        steps = _group_steps(pre[y], group, alloc, free, moved, 1, limit)
        if steps is None:
            return False
        new_pre, p = steps
        if p + alloc[y] > limit:
            return False
        for g, value in zip(group, new_pre):
            pre[g] = value
            if g in moved:
                free[g] -= moved[g]
        pre[y] = p
        free[y] += sum(moved.values())
        for k in changed:
            last[k] = y
        self.move_after(y, group[-1])
        return True

    def try_sink(self, group: list[int], z: int, limit: int) -> bool:
        """``group... z`` -> ``z group...`` if no affected step exceeds ``limit``.

        Buffers whose last holder was ``z`` and that a group task holds now end
        at the last such group task."""
        last, size, alloc, free, pre = self.last, self.size, self.alloc, self.free, self.pre
        moved: dict[int, int] = {}
        changed = []
        for k in self.bufs_of[z]:
            if last[k] != z:
                continue
            holders = self.holders[k]
            for g in reversed(group):
                if g in holders:
                    moved[g] = moved.get(g, 0) + size[k]
                    changed.append((k, g))
                    break
        total = sum(moved.values())
        pz = pre[group[0]]
        if pz + alloc[z] > limit:
            return False
        steps = _group_steps(pz + alloc[z] - free[z] + total, group, alloc, free, moved, -1, limit)
        if steps is None:
            return False
        new_pre, p = steps
        pre[z] = pz
        free[z] -= total
        for g, value in zip(group, new_pre):
            pre[g] = value
            free[g] += moved.get(g, 0)
        for k, g in changed:
            last[k] = g
        self.move_before(z, group[0])
        return True


def _replay(order: Sequence[int], moves: Sequence[tuple[int, int, bool]], count: int, n: int) -> list[int]:
    """The order after the first ``count`` recorded moves (x, anchor, after?)."""
    links = LinkedOrder(order, n)
    for x, anchor, after in moves[:count]:
        if after:
            links.move_after(x, anchor)
        else:
            links.move_before(x, anchor)
    return links.order()


def iterative_swap(problem: Problem, schedule: Schedule, memory_budget: int | float | None = None, *,
                   raise_comms: bool = True, sink_waits: bool = True, max_moves: int | None = None,
                   max_group: int = 64, on_swap: Callable[[SwapState], None] | None = None) -> Schedule:
    """Improve ``schedule`` by raising collectives and sinking waits one adjacent step at a time.

    ``raise_comms`` / ``sink_waits`` run either pass alone. Streams are kept
    from ``schedule``; ``method`` is ``schedule.method + "+swap"``. Memory limit: ``memory_budget`` (bytes, a float ratio of the
    original order's peak, or None for the machine's budget); with no budget
    at all, the input's own peak (the reference's "preserving peak memory").
    A schedule whose peak is over the budget to begin with is never made
    worse (its peak is the limit). When the input is within the budget the
    result is too; otherwise ``method`` ends in ``"!over-budget"``.

    ``on_swap(state)`` is called after every swap (debugging and tests:
    ``state.order()``, ``state.during()``, ``state.after()``, ``state.peak()``
    are the incrementally tracked values).

    With several compute streams the simulated peak is counted over time,
    which the program-order tracking only approximates: if the result's
    simulated peak exceeds both the budget and the input's, a prefix of the
    moves that keeps it (found by bisection; the empty prefix is the input)
    is used instead.
    """
    n = problem.num_tasks
    charge(problem, "swap")
    budget = budget_bytes(problem, memory_budget)
    method = f"{schedule.method.removesuffix(OVER_BUDGET) or 'schedule'}+swap"
    if n == 0:
        return Schedule(order=(), streams=schedule.streams, method=method)
    tasks = problem.tasks
    work = compute_work(problem, schedule)
    state = SwapState(problem, schedule.order)
    input_peak = state.peak()
    limit = input_peak if budget is None else max(budget, input_peak)
    cap = 2 * n if max_moves is None else max_moves
    chain_of = {c: k for k, chain in enumerate(problem.comm_chains) for c in chain}
    wait_of = problem.wait_of
    succs, preds = problem.succs, problem.preds
    groupable = (Role.COMPUTE, Role.FREE)
    moves: list[tuple[int, int, bool]] = []
    prev, nxt = state.prev, state.next

    def raise_collective(c: int) -> None:
        w, comm = wait_of[c], tasks[c].duration
        comp = _work_until(nxt[c], w, nxt, work, comm)
        group, gset = [c], {c}
        while len(moves) < cap and comp < comm:
            y = prev[group[0]]
            if y < 0 or (tasks[y].role == Role.COMM and chain_of.get(y, -1) == chain_of.get(c, -2)):
                return
            if any(s in gset for s in succs[y]):
                if tasks[y].role in groupable and len(group) < max_group:
                    group.insert(0, y)
                    gset.add(y)
                    continue
                return
            if not state.try_raise(y, group, gset, limit):
                return
            moves.append((y, group[-1], True))
            comp += work[y]
            if on_swap is not None:
                on_swap(state)

    def sink_wait(w: int) -> None:
        c = tasks[w].waits_for
        comm = tasks[c].duration
        comp = _work_until(prev[w], c, prev, work, comm)
        group, gset = [w], {w}
        while len(moves) < cap and comp < comm:
            z = nxt[group[-1]]
            if z < 0:
                return
            if any(p in gset for p in preds[z]):
                if tasks[z].role in groupable and len(group) < max_group:
                    group.append(z)
                    gset.add(z)
                    continue
                return
            # the group holds no collective, so passing one keeps the collective order
            if not state.try_sink(group, z, limit):
                return
            moves.append((z, group[0], False))
            comp += work[z]
            if on_swap is not None:
                on_swap(state)

    t = state.head if raise_comms else -1
    while t >= 0 and len(moves) < cap:
        after = nxt[t]
        if t in wait_of:
            raise_collective(t)
        t = after
    t = state.tail if sink_waits else -1
    while t >= 0 and len(moves) < cap:
        before = prev[t]
        if tasks[t].role == Role.WAIT:
            sink_wait(t)
        t = before

    order = state.order()
    result = Schedule(order=tuple(order), streams=schedule.streams, method=method)
    if problem.machine.compute_streams == 1:
        peak = state.peak()
    else:
        peak = peak_of(problem, result)
        allowed = max(budget or 0, peak_of(problem, schedule))
        if peak > allowed and moves:
            lo, hi = 0, len(moves)  # prefix lo keeps the limit (0: the input), hi does not
            while hi - lo > 1:
                mid = (lo + hi) // 2
                trial = Schedule(order=tuple(_replay(schedule.order, moves, mid, n)), streams=schedule.streams)
                if peak_of(problem, trial) <= allowed:
                    lo = mid
                else:
                    hi = mid
            result = Schedule(order=tuple(_replay(schedule.order, moves, lo, n)), streams=schedule.streams,
                              method=method)
            peak = peak_of(problem, result)
    if budget is not None and peak > budget:
        result = mark_over_budget(result)
    return result
