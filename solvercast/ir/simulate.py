"""The single judge of a schedule: replay it under the execution semantics.

`simulate` replays the host program order with the execution engine
(`solvercast.ir.engine`, DESIGN.md "Execution semantics"): the engine's `replay`
places every task, `memory_profile` counts memory over program steps and,
with several compute streams, `memory_over_time` over time. The rules live
there alone; this module turns them into a `SimResult`. Each rule, with the CUDA/NCCL behaviour it
stands for and whether it is exact or conservative: docs/execution_rules.md.

`validate` raises `InvalidScheduleError` naming the first broken rule.
"""

from __future__ import annotations

from dataclasses import dataclass

from solvercast.ir.engine import MemoryProfile, memory_over_time, memory_profile, replay, several_streams_peak
from solvercast.errors import InvalidScheduleError
from solvercast.ir.problem import Problem, Role, format_bytes
from solvercast.ir.schedule import Schedule

__all__ = ["MemoryProfile", "SimResult", "idle_points", "memory_over_time", "memory_profile", "simulate", "validate"]


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


def simulate(problem: Problem, schedule: Schedule) -> SimResult:
    """Replay ``schedule`` and return its timing and memory.

    Assumes the schedule is structurally sound (a permutation of the tasks
    whose streams exist); `validate` checks that. Dependencies that the order
    violates are not detected here: times are then meaningless.
    """
    machine = problem.machine
    streams = schedule.stream_list(problem)
    order = schedule.order
    if len(order) != problem.num_tasks:
        raise InvalidScheduleError(f"schedule orders {len(order)} tasks, the problem has {problem.num_tasks}")
    timeline = replay(problem, order, streams)
    start, end = timeline.start, timeline.end
    busy = [0] * machine.num_streams
    for t, task in enumerate(problem.tasks):
        if task.role != Role.FREE:
            busy[streams[t]] += task.duration

    makespan = max(end, default=0)
    compute_busy = max((busy[c] for c in machine.compute_stream_ids), default=0)
    mem = memory_profile(problem, order)
    peak = several_streams_peak(problem, mem.peak, start, end) if machine.compute_streams > 1 else mem.peak
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
        launch=timeline.launch,
    )


def validate(problem: Problem, schedule: Schedule, memory_budget: int | None = None) -> SimResult:
    """Check every rule of the execution semantics; return the simulation.

    Raises `InvalidScheduleError` for: an order that is not a permutation of
    the tasks or not topological, a task on a stream its role forbids, a
    collective order changed that `preserve_collective_order` keeps (`Problem.comm_chains`), or a
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
    for chain in problem.comm_chains:
        issued = sorted(chain, key=pos.__getitem__)
        if issued != list(chain):
            first = next(i for i, (a, b) in enumerate(zip(issued, chain)) if a != b)
            scope = ("in its process group, " if problem.collective_order == "group" else "")
            raise InvalidScheduleError(
                f"collective order changed: {problem.tasks[issued[first]].name!r} is issued before "
                f"{problem.tasks[chain[first]].name!r} {scope}(preserve_collective_order is "
                f"{problem.collective_order!r})")
    result = simulate(problem, schedule)
    budget = memory_budget if memory_budget is not None else problem.machine.memory_budget
    if budget is not None and result.peak_memory > budget:
        step = result.memory.peak_step
        where = f" at {problem.tasks[order[step]].name!r}" if step >= 0 else ""
        raise InvalidScheduleError(
            f"peak memory {format_bytes(result.peak_memory)} ({result.peak_memory} B){where} exceeds the budget "
            f"{format_bytes(budget)} ({budget} B)")
    return result


def idle_points(problem: Problem, schedule: Schedule, sim: SimResult) -> list[tuple[int, int]]:
    """(idle time, program position) before each task the default stream waited for, largest first."""
    out = []
    free = 0
    for pos, t in enumerate(schedule.order):
        if problem.tasks[t].role == Role.FREE or sim.streams[t] != 0:
            continue
        if sim.start[t] > free:
            out.append((sim.start[t] - free, pos))
        free = max(free, sim.end[t])
    return sorted(out, key=lambda x: (-x[0], x[1]))
