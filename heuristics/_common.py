"""Shared machinery of the heuristics: the budget a heuristic holds, the
collective chain, and a ready set indexed by a static priority. The timing
and memory rules the heuristics build schedules with are the execution
engine's (`solvercast.ir.engine`: `Timeline`, `StepMemory`, `TimeMemory`).

Conventions every heuristic follows:

* A heuristic always returns a `Schedule` that `validate` accepts
  structurally (topological order, allowed streams, collective order kept
  when ``preserve_collective_order``).
* Memory: a heuristic given a budget returns a schedule within it whenever
  the original order (for `iterative_swap`: its input schedule) is within it.
  When it cannot hold the budget, ``Schedule.method`` ends with
  `OVER_BUDGET` (``"!over-budget"``); `held_budget` tests for it.
* Ties are always broken by original task id, so results are reproducible.
* Memory is tracked in program order, as `memory_profile` counts it. With one
  compute stream that is the simulated peak; with several, `simulate` counts
  buffers over time instead, so the program-order count only guides the
  greedy choices and every result is checked with `simulated_peak`
  (`nondelay_schedule` also tracks memory over time, `TimeMemory`, and places
  only what fits there).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence

import numpy as np

from solvercast.ir.budget import resolve_budget
from solvercast.ir.engine import StepMemory, per_problem, simulated_peak
from solvercast.ir.problem import Problem, Role
from solvercast.ir.schedule import Schedule

from .work import charge

INF = math.inf
_FINITE = 1e300  # above every key a _MinTree holds
OVER_BUDGET = "!over-budget"


def held_budget(schedule: Schedule) -> bool:
    """False when the heuristic that made ``schedule`` could not hold its memory budget."""
    return not schedule.method.endswith(OVER_BUDGET)


def mark_over_budget(schedule: Schedule) -> Schedule:
    if schedule.method.endswith(OVER_BUDGET):
        return schedule
    return Schedule(order=schedule.order, streams=schedule.streams, method=schedule.method + OVER_BUDGET)


def renamed(schedule: Schedule, method: str) -> Schedule:
    return Schedule(order=schedule.order, streams=schedule.streams, method=method)


def budget_bytes(problem: Problem, memory_budget: int | float | None) -> int | None:
    """The budget a heuristic must hold, by `solvercast.ir.budget.resolve_budget` (None: the machine's
    budget, which may be None: unconstrained; a float: a ratio of the original order's peak)."""
    return resolve_budget(memory_budget, lambda: simulated_peak(problem, Schedule.original(problem)),
                          default=problem.machine.memory_budget)


def comm_chain(problem: Problem) -> dict[int, int]:
    """Collective -> the next collective whose original order it keeps (`Problem.comm_order_pairs`: the
    next one, or the next of its process group, or none): an extra precedence for every list scheduler."""
    return dict(problem.comm_order_pairs)


def compute_work(problem: Problem, schedule: Schedule) -> list[int]:
    """Time each task keeps its compute stream busy under ``schedule`` (0 on a comm stream, views, waits)."""
    durations = per_problem(problem, "stream work", lambda p: np.array(
        [task.duration if task.role != Role.FREE else 0 for task in p.tasks], dtype=np.int64))
    streams = np.array(schedule.stream_list(problem), dtype=np.int64)
    on_compute = (streams >= 0) & (streams < problem.machine.compute_streams)
    return np.where(on_compute, durations, 0).tolist()


def peak_of(problem: Problem, schedule: Schedule) -> int:
    """`simulated_peak`, counted against the current work budget (`heuristics.work`)."""
    charge(problem, "simulate")
    return simulated_peak(problem, schedule)


def best_by_peak(candidates: Iterable[tuple[int, int, Schedule]]) -> Schedule:
    """The lowest-peak candidate ``(peak, rank, schedule)``, earlier rank on ties, marked over budget."""
    return mark_over_budget(min(candidates, key=lambda c: (c[0], c[1]))[2])


# ---- a ready set indexed by a static priority ------------------------------------------------------


class _MinTree:
    """Segment tree over priority positions: each present leaf holds a key
    (the task's allocation); `leftmost(thr)` finds the best-priority present
    leaf whose key is <= thr in O(log n)."""

    __slots__ = ("size", "val")

    def __init__(self, n: int):
        size = 1
        while size < max(n, 1):
            size *= 2
        self.size = size
        self.val = [INF] * (2 * size)

    def set(self, i: int, v: float) -> None:
        val = self.val
        i += self.size
        val[i] = v
        i >>= 1
        while i:
            a, b = val[2 * i], val[2 * i + 1]
            nv = a if a < b else b
            if val[i] == nv:
                break
            val[i] = nv
            i >>= 1

    def empty(self) -> bool:
        return self.val[1] == INF

    def leftmost(self, thr: float) -> int:
        val = self.val
        if thr > _FINITE:
            thr = _FINITE  # absent leaves hold INF, present ones a finite key
        if val[1] > thr:
            return -1
        i = 1
        size = self.size
        while i < size:
            i = 2 * i if val[2 * i] <= thr else 2 * i + 1
        return i - size


class ReadySet:
    """Greedy list-scheduling state shared by `list_schedule` and
    `comm_priority_schedule`.

    ``priority``: every task, best first (a static order). A task is ready
    once all its predecessors are issued and, when the collective order is
    preserved, the previous collective too. `pick` returns the best ready
    task; with a memory budget, the best one whose allocation keeps resident
    memory within it, or, when none does, the one that frees the most bytes
    (net of what it allocates; ties by priority) and marks ``over_budget``.
    ``fill``: an optional predicate for a second, filtered view of the ready
    tasks (`pick(fill=True)`, which never forces a task over the budget).
    ``picks=False``: the caller chooses among the ready tasks itself (`nondelay_schedule`) and never
    calls `pick`, so the priority index and the net-free heap are not kept (they cost most of an issue).

    Without a budget the best ready task is simply the one first in priority: a heap of priority
    positions (lazily cleared of issued tasks) finds it, in C; with one, a `_MinTree` over the
    positions finds the first whose allocation fits.
    """

    def __init__(self, problem: Problem, priority: Sequence[int], budget: int | None = None, fill=None,
                 picks: bool = True):
        n = self._n = problem.num_tasks
        self.problem = problem
        self.priority = list(priority)
        self.pos = [0] * n
        for i, t in enumerate(self.priority):
            self.pos[t] = i
        self.succs = problem.succs
        self.chain = comm_chain(problem)
        self.indeg = [len(p) for p in problem.preds]
        for b in self.chain.values():
            self.indeg[b] += 1
        self.budget = budget
        self.memory = StepMemory(problem) if budget is not None else None
        self.over_budget = False
        self.picks = picks
        indexed = picks and self.memory is not None
        self.tree = _MinTree(n) if indexed else None
        self.fill = fill
        self.fill_tree = _MinTree(n) if fill is not None and indexed else None
        # without a budget: ready (and, for `fill`, fill-eligible) priority positions, issued ones left in
        self._first: list[int] | None = [] if picks and self.memory is None else None
        self._fill_first: list[int] | None = [] if fill is not None and self._first is not None else None
        self.is_ready = [False] * n
        self._heap: list[tuple[int, int, int]] = []  # (-(net free), priority pos, task), lazily invalidated
        self.order: list[int] = []
        for t in range(n):
            if self.indeg[t] == 0:
                self._make_ready(t)

    def __bool__(self) -> bool:
        return len(self.order) < self._n

    def _key(self, t: int) -> int:
        return self.memory.alloc[t] if self.memory is not None else 0

    def _push_net(self, t: int) -> None:
        mem = self.memory
        heapq.heappush(self._heap, (mem.alloc[t] - mem.pot_free[t], self.pos[t], t))

    def _make_ready(self, t: int) -> None:
        self.is_ready[t] = True
        if self._first is not None:
            heapq.heappush(self._first, self.pos[t])
            if self._fill_first is not None and self.fill(t):
                heapq.heappush(self._fill_first, self.pos[t])
            return
        if not self.picks:
            return
        key = self._key(t)
        self.tree.set(self.pos[t], key)
        if self.fill_tree is not None and self.fill(t):
            self.fill_tree.set(self.pos[t], key)
        if self.memory is not None:
            self._push_net(t)

    def pick(self, fill: bool = False) -> int:
        """Best ready task (see class doc), or -1 when there is none."""
        if self._first is not None:
            heap, priority, is_ready = self._fill_first if fill else self._first, self.priority, self.is_ready
            while heap:
                t = priority[heap[0]]
                if is_ready[t]:
                    return t
                heapq.heappop(heap)
            return -1
        thr = INF if self.memory is None else self.budget - self.memory.cur
        tree = self.fill_tree if fill else self.tree
        i = tree.leftmost(thr)
        if i >= 0:
            return self.priority[i]
        if fill or tree.empty():
            return -1
        self.over_budget = True
        heap, mem = self._heap, self.memory
        while True:
            neg, _, t = heap[0]
            if self.is_ready[t] and neg == mem.alloc[t] - mem.pot_free[t]:
                return t
            heapq.heappop(heap)

    def issue(self, t: int) -> None:
        if not self.is_ready[t]:
            raise AssertionError(f"task {t} issued before it is ready")
        self.is_ready[t] = False
        self.order.append(t)
        if self.tree is not None:
            self.tree.set(self.pos[t], INF)
            if self.fill_tree is not None:
                self.fill_tree.set(self.pos[t], INF)
        if self.memory is not None:
            grew = self.memory.issue(t)
            if self.picks:
                for u in grew:
                    if self.is_ready[u]:
                        self._push_net(u)
        indeg = self.indeg
        for s in self.succs[t]:
            indeg[s] -= 1
            if indeg[s] == 0:
                self._make_ready(s)
        nxt = self.chain.get(t)
        if nxt is not None:
            indeg[nxt] -= 1
            if indeg[nxt] == 0:
                self._make_ready(nxt)
