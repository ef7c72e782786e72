"""The single judge of a schedule: replay it under the execution semantics.

`simulate` replays the host program order (DESIGN.md, "Execution semantics"):
each stream runs its tasks in program order; a dependency produced on another
stream costs `sync_overhead`; an asynchronous collective waits for the work
enqueued before it on the default compute stream and for its inputs to
reach that stream; compute tasks on different
streams never exceed a total occupancy of 1 (each task is placed at the
earliest time that fits, in program order: a serial schedule generation).
Memory follows the caching allocator as the host sees it (see `memory_profile`).

`validate` raises `InvalidScheduleError` naming the first broken rule.
"""

from __future__ import annotations

import bisect
import itertools

from dataclasses import dataclass

from solvercast.errors import InvalidScheduleError
from solvercast.problem import Problem, Role, format_bytes
from solvercast.schedule import Schedule

_OCCUPANCY_SLACK = 1e-9  # float tolerance when summing occupancies


@dataclass(frozen=True)
class MemoryProfile:
    peak: int
    during_step: tuple[int, ...]  # bytes resident while step k runs: its outputs and last-used inputs coexist
    after_step: tuple[int, ...]  # bytes resident after step k's frees (the memory timeline)
    peak_step: int  # program step at which the peak is reached (-1: before any step)


@dataclass(frozen=True)
class SimResult:
    makespan: int
    exposed_comm: int
    peak_memory: int
    start: tuple[int, ...]
    end: tuple[int, ...]
    streams: tuple[int, ...]
    order: tuple[int, ...]
    busy: dict[int, int]  # stream -> total busy time
    memory: MemoryProfile
    launch: dict[int, int]  # asynchronous collective -> its launch point on the default stream

    @property
    def memory_timeline(self) -> tuple[int, ...]:
        """Bytes resident after each program step."""
        return self.memory.after_step


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
    pos = [0] * problem.num_tasks
    for i, t in enumerate(order):
        pos[t] = i
    alloc_at = [0] * n
    free_at = [0] * n
    for t, size in enumerate(problem.allocated_bytes):
        alloc_at[pos[t]] += size
    for size, holders in problem.releasable:
        free_at[max(pos[h] for h in holders)] += size
    resident = problem.initial_resident_bytes
    during = []
    after = []
    peak, peak_step = resident, -1
    for k in range(n):
        resident += alloc_at[k]
        during.append(resident)
        if resident > peak:
            peak, peak_step = resident, k
        resident -= free_at[k]
        after.append(resident)
    return MemoryProfile(peak=peak, during_step=tuple(during), after_step=tuple(after), peak_step=peak_step)


def memory_over_time(problem: Problem, start, end) -> list[tuple[int, int]]:
    """(time, resident bytes from then on) at every change, when buffers live
    from their producer's start to their last user's end: the memory rule with
    several compute streams, where the host order and the device timeline differ."""
    events: list[tuple[int, int]] = []
    resident = problem.initial_resident_bytes
    for b, buf in enumerate(problem.buffers):
        users = problem.buffer_users[b]
        if buf.is_input:
            if buf.freeable and users:  # resident from the start until its last reader ends
                events.append((max(end[u] for u in users), -buf.size))
            continue
        born = start[buf.producer]
        events.append((born, buf.size))
        if not buf.is_output:
            events.append((max([born + 1, end[buf.producer]] + [end[u] for u in users]), -buf.size))
    events.sort()  # at equal times frees (negative) come first
    curve = [(0, resident)]
    for time, delta in events:
        resident += delta
        curve.append((time, resident))
    return curve


def _time_peak(problem: Problem, start, end) -> int:
    return max(resident for _, resident in memory_over_time(problem, start, end))


def _earliest_fit(active: list[tuple[int, int, float]], est: int, duration: int, occupancy: float) -> int:
    """Earliest t >= est at which a task of this occupancy fits under total 1 for [t, t + duration):
    the first of est and the ends of active intervals after it that fits. The load is piecewise
    constant between interval bounds, so one sorted sweep finds it; a candidate blocked by a segment
    hands over to the first candidate at or after that segment's end (any earlier one overlaps it too)."""
    active = [iv for iv in active if iv[1] > est]  # the others end before any window can begin
    # first try est itself, against the few intervals its window meets
    meets = [iv for iv in active if iv[0] < est + duration]
    if all(sum(o for s, e, o in meets if s <= p < e) + occupancy <= 1.0 + _OCCUPANCY_SLACK
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
            if loads[j] + occupancy > 1.0 + _OCCUPANCY_SLACK:
                blocked_until = bounds[j + 1]
                break
            j += 1
        if blocked_until is None:
            return t
        k = bisect.bisect_left(candidates, blocked_until, k + 1)


def simulate(problem: Problem, schedule: Schedule) -> SimResult:
    """Replay ``schedule`` and return its timing and memory.

    Assumes the schedule is structurally sound (a permutation of the tasks
    whose streams exist); `validate` checks that. Dependencies that the order
    violates are not detected here: times are then meaningless.
    """
    tasks = problem.tasks
    machine = problem.machine
    sync = machine.sync_overhead
    streams = schedule.stream_list(problem)
    order = schedule.order
    if len(order) != problem.num_tasks:
        raise InvalidScheduleError(f"schedule orders {len(order)} tasks, the problem has {problem.num_tasks}")

    start = [0] * problem.num_tasks
    end = [0] * problem.num_tasks
    stream_free = [0] * machine.num_streams
    busy = [0] * machine.num_streams
    launch_at: dict[int, int] = {}
    share_gpu = machine.compute_streams > 1
    active: list[tuple[int, int, float]] = []  # compute intervals that may still overlap new work
    # compute tasks still to come per stream: a stream with none left no longer holds back pruning
    to_come = [0] * machine.num_streams
    if share_gpu:
        for t in order:
            if tasks[t].duration and tasks[t].role != Role.FREE:
                to_come[streams[t]] += 1

    for t in order:
        task = tasks[t]
        s = streams[t]
        ready = 0
        for p in problem.sync_preds[t]:
            r = end[p] + (sync if streams[p] != s else 0)
            if r > ready:
                ready = r
        if task.role == Role.FREE:  # no stream, no time: just passes readiness on
            start[t] = end[t] = max((end[p] for p in problem.sync_preds[t]), default=0)
            continue
        if task.role == Role.COMM and t in problem.wait_of:
            # Launched from the default stream, as a zero-time point there: the
            # default stream first waits for the collective's inputs (as for any
            # task on it), then the comm stream waits for the default stream.
            launch = stream_free[0]
            for p in problem.sync_preds[t]:
                launch = max(launch, end[p] + (sync if streams[p] != 0 else 0))
            stream_free[0] = launch_at[t] = launch
            ready = launch + sync
        est = max(ready, stream_free[s])
        if share_gpu and machine.is_compute_stream(s) and task.duration:
            to_come[s] -= 1
            # every later compute task starts after its own stream's free time
            floor = min((stream_free[c] for c in machine.compute_stream_ids if to_come[c] or c == s),
                        default=0)
            active = [iv for iv in active if iv[1] > floor]
            est = _earliest_fit(active, est, task.duration, task.occupancy)
            active.append((est, est + task.duration, task.occupancy))
        start[t] = est
        end[t] = est + task.duration
        stream_free[s] = end[t]
        busy[s] += task.duration

    makespan = max(end, default=0)
    compute_busy = max((busy[c] for c in machine.compute_stream_ids), default=0)
    mem = memory_profile(problem, order)
    # DESIGN: with one compute stream the host's program order is the timeline;
    # with several, buffers live from their producer's start to their last user's end.
    peak = _time_peak(problem, start, end) if share_gpu else mem.peak
    return SimResult(
        makespan=makespan,
        exposed_comm=makespan - compute_busy,
        peak_memory=peak,
        start=tuple(start),
        end=tuple(end),
        streams=tuple(streams),
        order=order,
        busy={s: busy[s] for s in range(machine.num_streams)},
        memory=mem,
        launch=launch_at,
    )


def validate(problem: Problem, schedule: Schedule, memory_budget: int | None = None) -> SimResult:
    """Check every rule of the execution semantics; return the simulation.

    Raises `InvalidScheduleError` for: an order that is not a permutation of
    the tasks or not topological, a task on a stream its role forbids, a
    collective order changed while `preserve_collective_order` holds, or a
    peak over the budget (``memory_budget`` if given, else the machine's).
    """
    n = problem.num_tasks
    order = schedule.order
    if sorted(order) != list(range(n)):
        missing = sorted(set(range(n)) - set(order))
        dup = sorted({t for t in order if order.count(t) > 1}) if len(set(order)) != len(order) else []
        raise InvalidScheduleError(
            f"order must list each of the {n} tasks once (missing {missing[:5]}, repeated {dup[:5]}, got {len(order)} entries)")
    pos = schedule.positions()
    for u, v in problem.edges:
        if pos[u] > pos[v]:
            raise InvalidScheduleError(
                f"order is not topological: {problem.tasks[v].name!r} is issued before its input {problem.tasks[u].name!r}")
    for t, s in schedule.streams.items():
        if not 0 <= t < n:
            raise InvalidScheduleError(f"streams names task {t} outside 0..{n - 1}")
        if s not in problem.allowed_streams(t):
            raise InvalidScheduleError(
                f"task {problem.tasks[t].name!r} ({problem.tasks[t].role.value}) may not run on stream {s}; "
                f"allowed: {list(problem.allowed_streams(t))}")
    if problem.preserve_collective_order:
        issued = sorted(problem.comm_tasks, key=pos.__getitem__)
        if issued != list(problem.comm_tasks):
            first = next(i for i, (a, b) in enumerate(zip(issued, problem.comm_tasks)) if a != b)
            raise InvalidScheduleError(
                f"collective order changed: {problem.tasks[issued[first]].name!r} is issued before "
                f"{problem.tasks[problem.comm_tasks[first]].name!r} (preserve_collective_order is on)")
    result = simulate(problem, schedule)
    budget = memory_budget if memory_budget is not None else problem.machine.memory_budget
    if budget is not None and result.peak_memory > budget:
        step = result.memory.peak_step
        where = f" at {problem.tasks[order[step]].name!r}" if step >= 0 else ""
        raise InvalidScheduleError(
            f"peak memory {format_bytes(result.peak_memory)} ({result.peak_memory} B){where} exceeds the budget "
            f"{format_bytes(budget)} ({budget} B)")
    return result
