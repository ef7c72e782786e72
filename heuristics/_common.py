"""Shared machinery of the heuristics: budget resolution, an incremental
replay of the execution semantics, a ready set indexed by a static priority,
and program-order memory bookkeeping for list scheduling.

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

import bisect
import heapq
import math
from collections.abc import Iterable, Sequence

from solvercast.budget import resolve_budget
from solvercast.problem import Problem, Role
from solvercast.schedule import Schedule
from solvercast.simulate import _earliest_fit, _time_peak, memory_profile

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
    """The budget a heuristic must hold, by `solvercast.budget.resolve_budget` (None: the machine's
    budget, which may be None: unconstrained; a float: a ratio of the original order's peak)."""
    return resolve_budget(memory_budget, lambda: simulated_peak(problem, Schedule.original(problem)),
                          default=problem.machine.memory_budget)


def comm_chain(problem: Problem) -> dict[int, int]:
    """Collective -> next collective in original order, when that order must be kept
    (an extra precedence for every list scheduler); empty otherwise."""
    if not problem.preserve_collective_order:
        return {}
    comms = problem.comm_tasks
    return {a: b for a, b in zip(comms, comms[1:])}


def compute_work(problem: Problem, streams: Sequence[int]) -> list[int]:
    """Time each task keeps its compute stream busy (0 on a comm stream, views, waits)."""
    machine = problem.machine
    return [task.duration if task.role != Role.FREE and machine.is_compute_stream(streams[t]) else 0
            for t, task in enumerate(problem.tasks)]


def best_by_peak(candidates: Iterable[tuple[int, int, Schedule]]) -> Schedule:
    """The lowest-peak candidate ``(peak, rank, schedule)``, earlier rank on ties, marked over budget."""
    return mark_over_budget(min(candidates, key=lambda c: (c[0], c[1]))[2])


# ---- timing: the simulator's rules, one task at a time -------------------------------------------


class Timeline:
    """Replays the execution semantics incrementally, exactly as `simulate` does.

    Tasks must be placed in a program order (all dependencies first).
    `start_on` answers "when would task t start on stream s if issued now"
    without changing anything, so list schedulers can compare streams;
    `place` commits. The rules are `simulate`'s: each stream runs its tasks
    in program order; an input from another stream is ready ``sync_overhead``
    after its producer ends; an asynchronous collective is launched from the
    default stream (which first waits for the collective's inputs) and starts
    ``sync_overhead`` after that launch point; compute
    tasks on several compute streams never exceed a total occupancy of 1
    (placed at the earliest fitting time, `simulate._earliest_fit`).
    A test replays random schedules and compares with `simulate`.
    """

    def __init__(self, problem: Problem, streams: Sequence[int] | None = None):
        """``streams``: the stream of every task, when the whole schedule is known
        in advance (replaying a finished schedule). Then compute intervals are
        forgotten as soon as no stream that still has work could overlap them
        (exact, and linear time when a compute stream stays idle); otherwise
        as `simulate` forgets them."""
        machine = problem.machine
        n = problem.num_tasks
        self.problem = problem
        self._pending: list[int] | None = None  # compute tasks with a duration still to place, per stream
        if streams is not None:
            self._pending = [0] * machine.compute_streams
            for t, task in enumerate(problem.tasks):
                if task.role != Role.FREE and task.duration and machine.is_compute_stream(streams[t]):
                    self._pending[streams[t]] += 1
        self.sync = machine.sync_overhead
        self.compute_streams = machine.compute_streams
        self.share_gpu = machine.compute_streams > 1
        self.start = [0] * n
        self.end = [0] * n
        self.stream = [problem.default_stream(t) for t in range(n)]
        self.stream_free = [0] * machine.num_streams
        self.active: list[tuple[int, int, float]] = []
        self._tasks = problem.tasks
        self._sync_preds = problem.sync_preds
        self._async = problem.wait_of

    def _start(self, t: int, s: int, commit: bool) -> int:
        task = self._tasks[t]
        end = self.end
        if task.role == Role.FREE:
            return max((end[p] for p in self._sync_preds[t]), default=0)
        sync = self.sync
        stream = self.stream
        ready = 0
        for p in self._sync_preds[t]:
            r = end[p] + (sync if stream[p] != s else 0)
            if r > ready:
                ready = r
        if task.role == Role.COMM and t in self._async:
            # launched from the default stream as a zero-time point there: the default stream
            # first waits for the collective's inputs, then the comm stream waits for it
            launch = self.launch_time(t)
            if commit:
                self.stream_free[0] = launch
            ready = launch + sync
        est = ready if ready > self.stream_free[s] else self.stream_free[s]
        if self.share_gpu and s < self.compute_streams and task.duration:
            if self._pending is None:
                floor = min(self.stream_free[: self.compute_streams])
            else:
                floor = min(f for f, k in zip(self.stream_free, self._pending) if k)
                if commit:
                    self._pending[s] -= 1
            active = [iv for iv in self.active if iv[1] > floor]
            est = _earliest_fit(active, est, task.duration, task.occupancy)
            if commit:
                active.append((est, est + task.duration, task.occupancy))
                self.active = active
        return est

    def launch_time(self, c: int) -> int:
        """When asynchronous collective ``c``'s launch point would sit on the default stream if issued now."""
        launch = self.stream_free[0]
        for p in self._sync_preds[c]:
            r = self.end[p] + (self.sync if self.stream[p] != 0 else 0)
            if r > launch:
                launch = r
        return launch

    def start_on(self, t: int, s: int) -> int:
        """Start time of ``t`` if it were issued now on stream ``s`` (nothing changes)."""
        return self._start(t, s, False)

    def place(self, t: int, s: int) -> int:
        """Issue ``t`` on stream ``s`` now; returns its end time."""
        st = self._start(t, s, True)
        task = self._tasks[t]
        self.start[t] = st
        self.end[t] = st + task.duration
        self.stream[t] = s
        if task.role != Role.FREE:
            self.stream_free[s] = self.end[t]
        return self.end[t]


def simulated_peak(problem: Problem, schedule: Schedule) -> int:
    """``simulate(problem, schedule).peak_memory``, without simulate's quadratic
    cost when a compute stream stays idle (a `Timeline` replay that knows
    every task's stream, then simulate's own time-based peak)."""
    if problem.machine.compute_streams == 1:
        return memory_profile(problem, schedule.order).peak
    streams = schedule.stream_list(problem)
    timeline = Timeline(problem, streams)
    for t in schedule.order:
        timeline.place(t, streams[t])
    return _time_peak(problem, timeline.start, timeline.end)


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


class _ListMemory:
    """Program-order memory of a list schedule being built, with the rules of
    `simulate.memory_profile`: a task's fresh buffers are allocated when it
    is issued; a buffer is freed at the step of the last of its holders
    (its effective users and its producer) to be issued; outputs and
    non-freeable inputs never are. ``pot_free[t]``: bytes issuing ``t``
    would free now (buffers whose only unissued holder is ``t``)."""

    def __init__(self, problem: Problem):
        n = problem.num_tasks
        self.alloc = list(problem.allocated_bytes)
        self.pot_free = [0] * n
        self.touches: list[list[int]] = [[] for _ in range(n)]
        self.remaining: list[set[int]] = []
        self.size: list[int] = []
        for k, (size, holders) in enumerate(problem.releasable):
            self.size.append(size)
            self.remaining.append(set(holders))
            for h in holders:
                self.touches[h].append(k)
            if len(holders) == 1:
                self.pot_free[next(iter(holders))] += size
        self.cur = self.peak = problem.initial_resident_bytes

    def issue(self, t: int) -> list[int]:
        """Issue ``t``; returns the tasks whose ``pot_free`` grew."""
        during = self.cur + self.alloc[t]
        if during > self.peak:
            self.peak = during
        self.cur = during - self.pot_free[t]
        grew = []
        for k in self.touches[t]:
            rem = self.remaining[k]
            rem.discard(t)
            if len(rem) == 1:
                u = next(iter(rem))
                self.pot_free[u] += self.size[k]
                grew.append(u)
        return grew


class _Curve:
    """Memory changes over time, (time, +/- bytes) kept sorted (frees first at a time) in blocks, each
    with its sum and its highest running sum: the most resident from a time on costs a walk over the
    later blocks plus one block, O(changes / BLOCK + BLOCK) instead of O(changes)."""

    BLOCK = 64

    def __init__(self, base: int):
        self.total = base  # resident once every change has happened
        self.blocks: list[list[tuple[int, int]]] = [[]]
        self.sums = [0]
        self.highs = [0]  # highest running sum within the block, from its start (0 if never above)

    def _summarize(self, i: int) -> None:
        running = high = 0
        for _, d in self.blocks[i]:
            running += d
            if running > high:
                high = running
        self.sums[i], self.highs[i] = running, high

    def add(self, time: int, delta: int) -> None:
        blocks = self.blocks
        i = len(blocks) - 1
        while i > 0 and (time, delta) < blocks[i][0]:
            i -= 1  # changes come mostly near the end of the curve: walk back from there
        bisect.insort(blocks[i], (time, delta))
        self.total += delta
        if len(blocks[i]) > 2 * self.BLOCK:
            half = len(blocks[i]) // 2
            blocks[i:i + 1] = [blocks[i][:half], blocks[i][half:]]
            self.sums[i:i + 1] = [0, 0]
            self.highs[i:i + 1] = [0, 0]
            self._summarize(i + 1)
        self._summarize(i)

    def peak_from(self, time: int) -> int:
        """The most bytes resident at any time from ``time`` on."""
        blocks = self.blocks
        i = len(blocks) - 1
        after = 0  # sum of the changes after ``time``
        while i > 0 and blocks[i][0][0] > time:
            after += self.sums[i]
            i -= 1
        block = blocks[i]
        cut = bisect.bisect_right(block, (time, math.inf))
        partial = block[cut:]
        after += sum(d for _, d in partial)
        running = peak = self.total - after
        for _, d in partial:
            running += d
            if running > peak:
                peak = running
        for j in range(i + 1, len(blocks)):
            if running + self.highs[j] > peak:
                peak = running + self.highs[j]
            running += self.sums[j]
        return peak


class TimeMemory:
    """Resident bytes over time while a list schedule with several compute
    streams is built, by the rule of `simulate.memory_over_time`: a buffer lives
    from its producer's start to the end of the last of its holders (at least
    one time unit); until its last holder is placed it lives on. ``timeline``
    gives the times of the placed tasks; `place` must follow each
    ``timeline.place``. Placing only tasks that fit from their start on
    (`peak_from`) keeps the whole curve within the budget, since frees placed
    later only lower it."""

    def __init__(self, problem: Problem, timeline: Timeline):
        n = problem.num_tasks
        self.timeline = timeline
        self.curve = _Curve(problem.initial_resident_bytes)
        self.produced: list[list[int]] = [[] for _ in range(n)]
        self.touches: list[list[int]] = [[] for _ in range(n)]
        self.remaining: list[set[int]] = []
        self.buffers: list[tuple[int, int | None, tuple[int, ...]]] = []  # (size, producer, holders)
        for b, buf in enumerate(problem.buffers):  # the cases of `memory_over_time`, in its order
            users = problem.buffer_users[b]
            if buf.is_input:
                if not (buf.freeable and users):
                    continue  # resident throughout (or never)
            else:
                self.produced[buf.producer].append(buf.size)
                if buf.is_output:
                    continue
            holders = tuple(users) + ((buf.producer,) if buf.producer is not None else ())
            for h in holders:
                self.touches[h].append(len(self.buffers))
            self.remaining.append(set(holders))
            self.buffers.append((buf.size, buf.producer, tuple(users)))

    def peak_from(self, time: int) -> int:
        """The most bytes resident at any time from ``time`` on (buffers still open count to the end)."""
        return self.curve.peak_from(time)

    def place(self, t: int) -> None:
        start, end = self.timeline.start, self.timeline.end
        for size in self.produced[t]:
            self.curve.add(start[t], size)
        for k in self.touches[t]:
            rem = self.remaining[k]
            rem.discard(t)
            if not rem:
                size, producer, users = self.buffers[k]
                free = max((end[u] for u in users), default=0)
                if producer is not None:
                    free = max(free, start[producer] + 1, end[producer])
                self.curve.add(free, -size)


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
    """

    def __init__(self, problem: Problem, priority: Sequence[int], budget: int | None = None, fill=None):
        n = problem.num_tasks
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
        self.memory = _ListMemory(problem) if budget is not None else None
        self.over_budget = False
        self.tree = _MinTree(n)
        self.fill = fill
        self.fill_tree = _MinTree(n) if fill is not None else None
        self.is_ready = [False] * n
        self._heap: list[tuple[int, int, int]] = []  # (-(net free), priority pos, task), lazily invalidated
        self.order: list[int] = []
        for t in range(n):
            if self.indeg[t] == 0:
                self._make_ready(t)

    def __bool__(self) -> bool:
        return len(self.order) < len(self.pos)

    def _key(self, t: int) -> int:
        return self.memory.alloc[t] if self.memory is not None else 0

    def _push_net(self, t: int) -> None:
        mem = self.memory
        heapq.heappush(self._heap, (mem.alloc[t] - mem.pot_free[t], self.pos[t], t))

    def _make_ready(self, t: int) -> None:
        self.is_ready[t] = True
        key = self._key(t)
        self.tree.set(self.pos[t], key)
        if self.fill_tree is not None and self.fill(t):
            self.fill_tree.set(self.pos[t], key)
        if self.memory is not None:
            self._push_net(t)

    def pick(self, fill: bool = False) -> int:
        """Best ready task (see class doc), or -1 when there is none."""
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
        self.tree.set(self.pos[t], INF)
        if self.fill_tree is not None:
            self.fill_tree.set(self.pos[t], INF)
        if self.memory is not None:
            for u in self.memory.issue(t):
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
