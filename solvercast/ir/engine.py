"""The execution engine: the rules of DESIGN.md's "Execution semantics", once.

Every part of solvercast that needs to know when a task runs or how much memory is resident asks
this module: `simulate` replays a finished schedule with a `Timeline`; the list-scheduling
heuristics build schedules with the same `Timeline` and the incremental memory trackers
(`StepMemory` in program order, `TimeMemory` over time). The rules:

* Placement (`Timeline`): tasks are placed in program order, each at the earliest time the rules
  allow (a serial schedule generation). Each stream runs its tasks in program order; an input
  produced on another stream is ready ``sync_overhead`` after its producer ends; views take no
  stream and no time, passing readiness on.
* Launches: an asynchronous collective is a zero-time point on the default stream, which first
  waits for the collective's inputs; the comm stream starts it ``sync_overhead`` after that point.
* Occupancy: compute tasks on several compute streams never exceed a total occupancy of 1
  (`earliest_fit`).
* Memory over program steps (`memory_profile`, `StepMemory`): a task's fresh buffers are
  allocated when it is issued; a buffer is freed at the step of the last of its holders
  (`Problem.buffer_holders`); outputs and non-freeable inputs never are.
* Memory over time (`memory_over_time`, `TimeMemory`): a buffer lives from its producer's start
  to the end of its last holder (at least one time unit). With several compute streams the peak is
  the larger of the two (`several_streams_peak`).
"""

from __future__ import annotations

import bisect
import itertools
import math
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from solvercast.ir.problem import Problem, Role
from solvercast.ir.schedule import Schedule

OCCUPANCY_SLACK = 1e-9  # float tolerance when summing occupancies


# ---- memory over program steps ------------------------------------------------------------


@dataclass(frozen=True)
class MemoryProfile:
    peak: int
    during_step: tuple[int, ...]  # bytes resident while step k runs: its outputs and last-used inputs coexist
    after_step: tuple[int, ...]  # bytes resident after step k's frees (the memory timeline)
    peak_step: int  # program step at which the peak is reached (-1: before any step)


@dataclass(frozen=True)
class _ReleaseArrays:
    """`Problem.allocated_bytes` and `Problem.releasable` as numpy arrays, for the whole-order memory
    counts (`memory_profile`, `last_holders`): the heuristics count one order's memory a few dozen times
    per call, and a Python loop over every buffer's holders was the larger part of each count."""

    alloc: np.ndarray  # bytes each task allocates
    size: np.ndarray  # bytes of each releasable buffer
    holders: np.ndarray  # the holders of every releasable buffer, one after the other
    starts: np.ndarray  # where each buffer's holders begin in ``holders`` (none is empty)


_PER_PROBLEM: dict[tuple[int, str], object] = {}  # by (id(problem), what); an entry goes with its problem


def per_problem(problem: Problem, what: str, build):
    """``build(problem)``, computed once per problem and ``what`` (`Problem` is frozen, so it cannot go
    stale; the entry goes when the problem does): the tables every pass over a problem reads."""
    key = (id(problem), what)
    value = _PER_PROBLEM.get(key)
    if value is None:
        value = _PER_PROBLEM[key] = build(problem)
        weakref.finalize(problem, _PER_PROBLEM.pop, key, None)
    return value


def _build_release_arrays(problem: Problem) -> _ReleaseArrays:
    releasable = problem.releasable
    counts = np.fromiter((len(h) for _, h in releasable), dtype=np.int64, count=len(releasable))
    return _ReleaseArrays(
        alloc=np.array(problem.allocated_bytes, dtype=np.int64),
        size=np.fromiter((size for size, _ in releasable), dtype=np.int64, count=len(releasable)),
        holders=np.fromiter(itertools.chain.from_iterable(h for _, h in releasable), dtype=np.int64,
                            count=int(counts.sum())),
        starts=np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64) if len(counts) else counts)


def _release_arrays(problem: Problem) -> _ReleaseArrays:
    return per_problem(problem, "release arrays", _build_release_arrays)


def _positions(problem: Problem, order: Sequence[int]) -> np.ndarray:
    """Step of every task in ``order`` (0 for a task it leaves out)."""
    pos = np.zeros(problem.num_tasks, dtype=np.int64)
    pos[np.asarray(order, dtype=np.int64)] = np.arange(len(order), dtype=np.int64)
    return pos


def _last_steps(arrays: _ReleaseArrays, pos: np.ndarray) -> np.ndarray:
    """Per releasable buffer, the step of its last holder."""
    if not len(arrays.size):
        return arrays.size
    return np.maximum.reduceat(pos[arrays.holders], arrays.starts)


def last_holders(problem: Problem, order: Sequence[int]) -> list[int]:
    """Per releasable buffer (`Problem.releasable`), its holder issued last in ``order``: the step that
    frees it."""
    arrays = _release_arrays(problem)
    if not len(arrays.size):
        return []
    order_arr = np.asarray(order, dtype=np.int64)
    return order_arr[_last_steps(arrays, _positions(problem, order))].tolist()


def memory_profile(problem: Problem, order: tuple[int, ...] | list[int]) -> MemoryProfile:
    """Resident bytes at each program step of ``order``.

    A buffer is allocated when its producer is issued and freed after the last
    task in program order that uses it (or an alias of it), never before the
    wait of a collective that touches it. Graph inputs stay resident unless
    declared freeable; graph outputs stay until the end. Within one step the
    new outputs are counted before the step's frees, as PyTorch's FX memory
    estimator does.
    """
    n = len(order)
    resident = problem.initial_resident_bytes
    if n == 0:
        return MemoryProfile(peak=resident, during_step=(), after_step=(), peak_step=-1)
    arrays = _release_arrays(problem)
    pos = _positions(problem, order)
    alloc_at = np.zeros(n, dtype=np.int64)
    np.add.at(alloc_at, pos, arrays.alloc)
    free_at = np.zeros(n, dtype=np.int64)
    np.add.at(free_at, _last_steps(arrays, pos), arrays.size)
    after = resident + np.cumsum(alloc_at - free_at)
    during = after + free_at
    k = int(np.argmax(during))
    peak, peak_step = (int(during[k]), k) if during[k] > resident else (resident, -1)
    return MemoryProfile(peak=peak, during_step=tuple(during.tolist()), after_step=tuple(after.tolist()),
                         peak_step=peak_step)


class StepMemory:
    """Program-order memory of a list schedule being built, with the rules of
    `memory_profile`: a task's fresh buffers are allocated when it
    is issued; a buffer is freed at the step of the last of its holders
    (its effective users and its producer) to be issued; outputs and
    non-freeable inputs never are. ``pot_free[t]``: bytes issuing ``t``
    would free now (buffers whose only unissued holder is ``t``)."""

    def __init__(self, problem: Problem):
        # counts, not sets of holders: a pass of a list heuristic builds one of these (9 per nondelay call)
        touches, counts, sums, alone = problem.release_counts
        self.alloc = problem.allocated_bytes
        self.touches = touches
        self.size = [size for size, _ in problem.releasable]
        self.left = list(counts)  # holders not issued yet, per buffer
        self.left_sum = list(sums)  # the sum of their ids: the last one's id once one is left
        self.pot_free = list(alone)
        self.cur = self.peak = problem.initial_resident_bytes

    def issue(self, t: int) -> list[int]:
        """Issue ``t``; returns the tasks whose ``pot_free`` grew."""
        during = self.cur + self.alloc[t]
        if during > self.peak:
            self.peak = during
        self.cur = during - self.pot_free[t]
        grew = []
        left, left_sum = self.left, self.left_sum
        for k in self.touches[t]:
            left[k] -= 1
            left_sum[k] -= t
            if left[k] == 1:
                u = left_sum[k]
                self.pot_free[u] += self.size[k]
                grew.append(u)
        return grew


# ---- memory over time ------------------------------------------------------------------------


def time_lifetimes(problem: Problem) -> list[tuple[int, int | None, frozenset[int], bool]]:
    """(bytes, producer, holders, freed) of every buffer whose residency changes during the step,
    by the time rule: a produced buffer lives from its producer's start; one that is freed
    (`Problem.is_freed`, the rule memory over program steps uses too) dies at `time_of_free`.
    Non-freeable inputs (resident throughout) and freeable inputs nobody reads (never resident) are
    left out, and so are freeable inputs that are outputs (resident throughout). Computed once per
    problem: do not change the list."""
    return per_problem(problem, "time lifetimes", _build_time_lifetimes)


def _build_time_lifetimes(problem: Problem) -> list[tuple[int, int | None, frozenset[int], bool]]:
    out = []
    for b, buf in enumerate(problem.buffers):
        if buf.is_input:
            if problem.is_freed(b):  # resident from the start until its last reader ends
                out.append((buf.size, None, problem.buffer_holders[b], True))
        else:
            out.append((buf.size, buf.producer, problem.buffer_holders[b], problem.is_freed(b)))
    return out


def time_of_free(producer: int | None, holders, start, end) -> int:
    """When a buffer is freed in time: at the end of the last of its holders, and at least one time
    unit after its producer starts (a zero-time producer's buffer still exists for an instant)."""
    free = max((end[h] for h in holders), default=0)
    if producer is not None and start[producer] + 1 > free:
        free = start[producer] + 1
    return free


@dataclass(frozen=True)
class _LifetimeArrays:
    """`time_lifetimes` as numpy arrays (`memory_over_time` runs once per simulation with several
    compute streams)."""

    born_size: np.ndarray  # bytes of every produced buffer
    born_at: np.ndarray  # its producer
    freed_size: np.ndarray  # bytes of every freed buffer
    freed_producer: np.ndarray  # its producer, -1 for an input
    holders: np.ndarray  # the holders of every freed buffer, one after the other
    held: np.ndarray  # the freed buffers with holders (without, the last holder "ends" at 0)
    starts: np.ndarray  # where each of those buffers' holders begin in ``holders``


def _build_lifetime_arrays(problem: Problem) -> _LifetimeArrays:
    lifetimes = time_lifetimes(problem)
    born = [(size, producer) for size, producer, _, _ in lifetimes if producer is not None]
    freed = [(size, -1 if producer is None else producer, holders) for size, producer, holders, f in lifetimes if f]
    counts = np.array([len(h) for _, _, h in freed], dtype=np.int64)
    held = counts > 0
    starts = (np.cumsum(counts) - counts)[held]
    return _LifetimeArrays(
        born_size=np.array([size for size, _ in born], dtype=np.int64),
        born_at=np.array([producer for _, producer in born], dtype=np.int64),
        freed_size=np.array([size for size, _, _ in freed], dtype=np.int64),
        freed_producer=np.array([producer for _, producer, _ in freed], dtype=np.int64),
        holders=np.fromiter(itertools.chain.from_iterable(h for _, _, h in freed), dtype=np.int64,
                            count=int(counts.sum())),
        held=held, starts=starts)


def _time_events(problem: Problem, start, end) -> tuple[np.ndarray, np.ndarray]:
    """Every change of resident bytes over time, (times, resident from then on), sorted as
    `memory_over_time` lists them."""
    arrays = per_problem(problem, "lifetime arrays", _build_lifetime_arrays)
    start_arr = np.asarray(start, dtype=np.int64)
    end_arr = np.asarray(end, dtype=np.int64)
    if len(arrays.freed_size):
        free_at = np.zeros(len(arrays.freed_size), dtype=np.int64)
        if len(arrays.holders):
            free_at[arrays.held] = np.maximum.reduceat(end_arr[arrays.holders], arrays.starts)
        produced = arrays.freed_producer >= 0
        free_at[produced] = np.maximum(free_at[produced], start_arr[arrays.freed_producer[produced]] + 1)
    else:
        free_at = arrays.freed_size
    times = np.concatenate((start_arr[arrays.born_at], free_at))
    deltas = np.concatenate((arrays.born_size, -arrays.freed_size))
    order = np.lexsort((deltas, times))  # by time, and at equal times frees (negative) first
    return times[order], problem.initial_resident_bytes + np.cumsum(deltas[order])


def memory_over_time(problem: Problem, start, end) -> list[tuple[int, int]]:
    """(time, resident bytes from then on) at every change, for tasks placed at ``start``/``end``:
    the memory rule with several compute streams, where the host order and the device timeline
    differ (`time_lifetimes`, `time_of_free`). At equal times frees come first."""
    times, resident = _time_events(problem, start, end)
    return [(0, problem.initial_resident_bytes)] + list(zip(times.tolist(), resident.tolist()))


def time_peak(problem: Problem, start, end) -> int:
    """The most bytes resident at any time (`memory_over_time`)."""
    _, resident = _time_events(problem, start, end)
    initial = problem.initial_resident_bytes
    return max(initial, int(resident.max())) if len(resident) else initial


class _Curve:
    """Memory changes over time, (time, +/- bytes) kept sorted (frees first at a time) in blocks, each
    with its sum and its highest running sum: the most resident from a time on costs a walk over the
    later blocks plus one block, O(changes / BLOCK + BLOCK) instead of O(changes)."""

    BLOCK = 16  # 10,000-task synthetic graphs, two streams: nondelay fastest with 16 or 32 (64 measured too)

    def __init__(self, base: int):
        self.total = base  # resident once every change has happened
        self.blocks: list[list[tuple[int, int]]] = [[]]
        self.sums = [0]
        self.highs = [0]  # highest running sum within the block, from its start (0 if never above)

    def _summarize(self, i: int) -> None:
        running = list(itertools.accumulate(d for _, d in self.blocks[i]))
        if running:
            self.sums[i], self.highs[i] = running[-1], max(0, max(running))
        else:
            self.sums[i], self.highs[i] = 0, 0

    def add(self, time: int, delta: int) -> None:
        blocks = self.blocks
        i = len(blocks) - 1
        while i > 0 and (time, delta) < blocks[i][0]:
            i -= 1  # changes come mostly near the end of the curve: walk back from there
        block = blocks[i]
        at = bisect.bisect_right(block, (time, delta))
        block.insert(at, (time, delta))
        self.total += delta
        if len(block) > 2 * self.BLOCK:
            half = len(block) // 2
            blocks[i:i + 1] = [block[:half], block[half:]]
            self.sums[i:i + 1] = [0, 0]
            self.highs[i:i + 1] = [0, 0]
            self._summarize(i + 1)
            self._summarize(i)
        elif at == len(block) - 1:  # appended: the running sums before it stand, one more after them
            self.sums[i] += delta
            if self.sums[i] > self.highs[i]:
                self.highs[i] = self.sums[i]
        else:
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
    streams is built, by the rule of `memory_over_time`: a buffer lives
    from its producer's start to `time_of_free`; until its last holder is
    placed it lives on. ``timeline`` gives the times of the placed tasks;
    `place` must follow each ``timeline.place``. Placing only tasks that fit
    from their start on (`peak_from`) keeps the whole curve within the budget,
    since frees placed later only lower it."""

    def __init__(self, problem: Problem, timeline: "Timeline"):
        n = problem.num_tasks
        self.timeline = timeline
        self.curve = _Curve(problem.initial_resident_bytes)
        self.produced: list[list[int]] = [[] for _ in range(n)]
        self.touches: list[list[int]] = [[] for _ in range(n)]
        self.remaining: list[set[int]] = []
        self.buffers: list[tuple[int, int | None, frozenset[int]]] = []  # (size, producer, holders)
        for size, producer, holders, freed in time_lifetimes(problem):
            if producer is not None:
                self.produced[producer].append(size)
            if not freed:
                continue
            for h in holders:
                self.touches[h].append(len(self.buffers))
            self.remaining.append(set(holders))
            self.buffers.append((size, producer, holders))

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
                size, producer, holders = self.buffers[k]
                self.curve.add(time_of_free(producer, holders, start, end), -size)


# ---- placement: streams, syncs, launches, occupancy ----------------------------------------


def earliest_fit(active: list[tuple[int, int, float]], est: int, duration: int, occupancy: float) -> int:
    """Earliest t >= est at which a task of this occupancy fits under total 1 for [t, t + duration):
    the first of est and the ends of active intervals after it that fits. The load is piecewise
    constant between interval bounds, so one sorted sweep finds it; a candidate blocked by a segment
    hands over to the first candidate at or after that segment's end (any earlier one overlaps it too)."""
    # first try est itself, against the few intervals its window meets: when all of them at once leave
    # room, it fits (a sum of non-negative loads only grows with more of them: the check below agrees)
    window_end = est + duration
    if sum(o for s, e, o in active if e > est and s < window_end) + occupancy <= 1.0 + OCCUPANCY_SLACK:
        return est
    active = [iv for iv in active if iv[1] > est]  # the others end before any window can begin
    meets = [iv for iv in active if iv[0] < window_end]
    if all(sum(o for s, e, o in meets if s <= p < e) + occupancy <= 1.0 + OCCUPANCY_SLACK
           for p in [est] + [s for s, _, _ in meets if s > est]):
        return est
    change: dict[int, float] = {}
    for s, e, o in active:
        change[s] = change.get(s, 0.0) + o
        change[e] = change.get(e, 0.0) - o
    bounds = sorted(change)
    loads = list(itertools.accumulate(change[x] for x in bounds))  # load on [bounds[j], bounds[j + 1])
    candidates = sorted({est} | {e for _, e, _ in active})
    k = 0
    while True:
        t = candidates[k]
        j = max(0, bisect.bisect_right(bounds, t) - 1)  # the segment holding t, or the first one
        blocked_until = None
        while j + 1 < len(bounds) and bounds[j] < t + duration:  # the last segment is empty
            if loads[j] + occupancy > 1.0 + OCCUPANCY_SLACK:
                blocked_until = bounds[j + 1]
                break
            j += 1
        if blocked_until is None:
            return t
        k = bisect.bisect_left(candidates, blocked_until, k + 1)


_RUNS, _VIEW, _LAUNCHED = 0, 1, 2  # how a task is timed: on its stream, as a view, or as a launched collective


def _timing_kinds(problem: Problem) -> list[int]:
    wait_of = problem.wait_of
    return [_VIEW if task.role == Role.FREE else _LAUNCHED if task.role == Role.COMM and t in wait_of else _RUNS
            for t, task in enumerate(problem.tasks)]


class Timeline:
    """Placement in program order: the timing rules, incrementally.

    Tasks must be placed in a program order (all dependencies first).
    `start_on` answers "when would task t start on stream s if issued now"
    without changing anything, so list schedulers can compare streams;
    `place` commits. Each stream runs its tasks in program order; an input
    from another stream is ready ``sync_overhead`` after its producer ends;
    an asynchronous collective is launched from the default stream (which
    first waits for the collective's inputs) and starts ``sync_overhead``
    after that launch point (``launch``); compute tasks on several compute
    streams never exceed a total occupancy of 1 (placed at the earliest
    fitting time, `earliest_fit`). `simulate` is `replay` plus the memory rules.
    """

    def __init__(self, problem: Problem, streams: Sequence[int] | None = None):
        """``streams``: the stream of every task, when the whole schedule is known
        in advance (replaying a finished schedule). Then compute intervals are
        forgotten as soon as no stream that still has work could overlap them
        (exact, and linear time when a compute stream stays idle); otherwise
        once they end before every compute stream's free time."""
        machine = problem.machine
        n = problem.num_tasks
        self.problem = problem
        self._pending: list[int] | None = None  # compute tasks with a duration still to place, per stream
        if streams is not None and machine.compute_streams > 1:
            self._pending = [0] * machine.compute_streams
            for t, task in enumerate(problem.tasks):
                if task.role != Role.FREE and task.duration and machine.is_compute_stream(streams[t]):
                    self._pending[streams[t]] += 1
        self.sync = machine.sync_overhead
        self.compute_streams = machine.compute_streams
        self.share_gpu = machine.compute_streams > 1
        self.start = [0] * n
        self.end = [0] * n
        self.stream = list(problem.default_streams)
        self.stream_free = [0] * machine.num_streams
        self.launch: dict[int, int] = {}  # asynchronous collective -> its launch point on the default stream
        self.active: list[tuple[int, int, float]] = []
        self._tasks = problem.tasks
        self._sync_preds = problem.sync_preds
        self._kinds = per_problem(problem, "timing kinds", _timing_kinds)

    def _start(self, t: int, s: int, commit: bool = False) -> int:
        end = self.end
        kind = self._kinds[t]
        if kind == _VIEW:
            return max((end[p] for p in self._sync_preds[t]), default=0)
        sync = self.sync
        stream = self.stream
        ready = 0
        for p in self._sync_preds[t]:
            r = end[p] + (sync if stream[p] != s else 0)
            if r > ready:
                ready = r
        if kind == _LAUNCHED:
            # launched from the default stream as a zero-time point there: the default stream
            # first waits for the collective's inputs, then the comm stream waits for it
            launch = self.launch_time(t)
            if commit:
                self.stream_free[0] = self.launch[t] = launch
            ready = launch + sync
        est = ready if ready > self.stream_free[s] else self.stream_free[s]
        if not self.share_gpu:
            return est
        task = self._tasks[t]
        if s < self.compute_streams and task.duration:
            if not commit:  # est is past the floor below: `earliest_fit` drops what ends before it anyway
                return earliest_fit(self.active, est, task.duration, task.occupancy)
            if self._pending is None:
                floor = min(self.stream_free[: self.compute_streams])
            else:
                floor = min(f for f, k in zip(self.stream_free, self._pending) if k)
                self._pending[s] -= 1
            active = [iv for iv in self.active if iv[1] > floor]
            est = earliest_fit(active, est, task.duration, task.occupancy)
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

    #: ``start_on(t, s)``: start time of ``t`` if it were issued now on stream ``s`` (nothing changes); the
    #: list schedulers ask it for every candidate, so it is `_start` itself, not a call around it
    start_on = _start

    def place(self, t: int, s: int) -> int:
        """Issue ``t`` on stream ``s`` now; returns its end time."""
        st = self._start(t, s, True)
        self.start[t] = st
        self.end[t] = end = st + self._tasks[t].duration
        self.stream[t] = s
        if self._kinds[t] != _VIEW:
            self.stream_free[s] = end
        return end


def replay(problem: Problem, order: Sequence[int], streams: Sequence[int]) -> Timeline:
    """The timeline of a finished schedule: every task of ``order`` placed on its stream."""
    timeline = Timeline(problem, streams)
    if timeline.share_gpu:
        for t in order:
            timeline.place(t, streams[t])
        return timeline
    # one compute stream, so no occupancy rule: `place`'s rules inlined (every simulation runs this loop)
    start, end, stream, free, launches = (timeline.start, timeline.end, timeline.stream, timeline.stream_free,
                                          timeline.launch)
    kinds, sync_preds, sync = timeline._kinds, timeline._sync_preds, timeline.sync
    durations = per_problem(problem, "durations", lambda p: [task.duration for task in p.tasks])
    for t in order:
        s = streams[t]
        kind = kinds[t]
        if kind == _VIEW:
            ready = max((end[p] for p in sync_preds[t]), default=0)
            start[t], end[t], stream[t] = ready, ready + durations[t], s
            continue
        if kind == _LAUNCHED:  # its launch point on the default stream waits for its inputs
            ready = free[0]
            for p in sync_preds[t]:
                r = end[p] + (sync if stream[p] != 0 else 0)
                if r > ready:
                    ready = r
            free[0] = launches[t] = ready
            ready += sync
        else:
            ready = 0
            for p in sync_preds[t]:
                r = end[p] + (sync if stream[p] != s else 0)
                if r > ready:
                    ready = r
        if free[s] > ready:
            ready = free[s]
        start[t], end[t], stream[t] = ready, ready + durations[t], s
        free[s] = end[t]
    return timeline


def several_streams_peak(problem: Problem, step_peak: int, start, end) -> int:
    """The peak with several compute streams: the larger of the program-step peak and the time peak.
    The caching allocator holds a buffer from its producer's issue until its last holder's issue (the
    host's program order, which is what the lowered module holds, stream tokens holding nothing), and
    a buffer another stream reads until that stream is done with it (time): neither view alone bounds
    what the device holds (lowered modules over their budget with 2 streams: experiments/results/fuzz.md)."""
    return max(step_peak, time_peak(problem, start, end))


def simulated_peak(problem: Problem, schedule: Schedule) -> int:
    """``simulate(problem, schedule).peak_memory``, computing only the memory: the program-step
    peak with one compute stream, else `several_streams_peak` of the schedule's `replay`."""
    step_peak = memory_profile(problem, schedule.order).peak
    if problem.machine.compute_streams == 1:
        return step_peak
    timeline = replay(problem, schedule.order, schedule.stream_list(problem))
    return several_streams_peak(problem, step_peak, timeline.start, timeline.end)
