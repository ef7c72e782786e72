"""Lower bounds on makespan and peak memory, and start-time windows.

Every report states the gap to the best of these bounds; solvers use the
windows to narrow their start domains.
"""

from __future__ import annotations

from dataclasses import dataclass

from solvercast.problem import Problem, Role


@dataclass(frozen=True)
class Bounds:
    critical_path: int  # longest dependency chain, with the syncs no stream choice can avoid
    compute: int  # compute work spread over the compute streams, and its occupancy area
    comm: int  # asynchronous collective work spread over the comm streams
    memory: int  # bytes that must coexist at some program step in any order

    @property
    def makespan(self) -> int:
        return max(self.critical_path, self.compute, self.comm)

    def to_dict(self) -> dict:
        return {"critical_path": self.critical_path, "compute": self.compute, "comm": self.comm,
                "makespan": self.makespan, "memory": self.memory}


def _stream_kinds(problem: Problem, t: int) -> frozenset[str]:
    if problem.tasks[t].role != Role.COMM:
        return frozenset(("compute",))
    return frozenset(("comm",)) if problem.is_async_comm(t) else frozenset(("compute", "comm"))


def _forced_sync(problem: Problem, p: int, t: int) -> int:
    """Sync cost on edge p -> t that every stream assignment pays: the two
    tasks can never share a stream."""
    if _stream_kinds(problem, p).isdisjoint(_stream_kinds(problem, t)):
        return problem.machine.sync_overhead
    return 0


def earliest_starts(problem: Problem) -> list[int]:
    """Earliest start of every task over all schedules (dependencies only)."""
    est = [0] * problem.num_tasks
    for t, task in enumerate(problem.tasks):
        est[t] = max((est[p] + problem.tasks[p].duration + _forced_sync(problem, p, t)
                      for p in problem.sync_preds[t]), default=0)
    return est


def latest_starts(problem: Problem, horizon: int) -> list[int]:
    """Latest start of every task such that all its successors can still end by ``horizon``."""
    n = problem.num_tasks
    lst = [horizon - task.duration for task in problem.tasks]
    # sync_preds skips FREE tasks, so walk the reverse of that relation
    sync_succs: list[list[int]] = [[] for _ in range(n)]
    for t in range(n):
        for p in problem.sync_preds[t]:
            sync_succs[p].append(t)
    for t in range(n - 1, -1, -1):
        duration = problem.tasks[t].duration
        for s in sync_succs[t]:
            lst[t] = min(lst[t], lst[s] - duration - _forced_sync(problem, t, s))
    return lst


def lower_bounds(problem: Problem) -> Bounds:
    """Bounds that hold for every valid schedule of ``problem``."""
    machine = problem.machine
    est = earliest_starts(problem)
    critical = max((est[t] + task.duration for t, task in enumerate(problem.tasks)), default=0)

    compute_like = [t for t, task in enumerate(problem.tasks)
                    if task.role == Role.COMPUTE]
    work = sum(problem.tasks[t].duration for t in compute_like)
    area = sum(problem.tasks[t].duration * problem.tasks[t].occupancy for t in compute_like)
    compute = max(-(-work // machine.compute_streams), int(area))
    comm_work = sum(problem.tasks[c].duration for c in problem.wait_of)
    comm = -(-comm_work // machine.comm_streams)

    # memory: at each task's step, everything it touches is resident, besides the inputs that always are
    resident = problem.resident_bytes
    touched = [0] * problem.num_tasks
    outputs = 0
    for b, buf in enumerate(problem.buffers):
        if buf.is_input and not buf.freeable:
            continue
        for t in set(problem.buffer_users[b]) | ({buf.producer} if buf.producer is not None else set()):
            touched[t] += buf.size
        if buf.is_output:
            outputs += buf.size
    memory = resident + max([outputs] + touched)
    return Bounds(critical_path=critical, compute=compute, comm=comm, memory=memory)
