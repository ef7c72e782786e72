"""Lower bounds on makespan and peak memory, and start-time windows.

Every report states the gap to the best of these bounds; solvers use the
windows to narrow their start domains.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from solvercast.problem import Problem, Role


@dataclass(frozen=True)
class Bounds:
    critical_path: int  # longest dependency chain, with the syncs no stream choice can avoid
    compute: int  # compute work spread over the compute streams, and its occupancy area
    comm: int  # asynchronous collective work spread over the comm streams
    memory: int  # bytes that must coexist at some program step in any order
    # compute (and comm) work sequenced with heads and tails: the critical path and the work bounds
    # together, see `sequencing_bound`
    sequencing: int | None = 0  # None (and windows None): not computed, `lower_bounds(structural=False)`
    # the GPU's idle time between collectives of the fixed order on one comm stream, see `window_bound`
    windows: int | None = 0

    @property
    def makespan(self) -> int:
        return max(self.critical_path, self.compute, self.comm, self.sequencing or 0, self.windows or 0)

    def to_dict(self) -> dict:
        return {"critical_path": self.critical_path, "compute": self.compute, "comm": self.comm,
                "sequencing": self.sequencing, "windows": self.windows, "makespan": self.makespan,
                "memory": self.memory}


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


def lower_bounds(problem: Problem, structural: bool = True) -> Bounds:
    """Bounds that hold for every valid schedule of ``problem``. ``structural=False`` leaves out the
    sequencing and window bounds (None): they cost seconds at tens of thousands of tasks, and `optimize`
    skips them when its time plan has nothing left after the fixed costs."""
    machine = problem.machine
    est = earliest_starts(problem)
    critical = max((est[t] + task.duration for t, task in enumerate(problem.tasks)), default=0)

    compute_like = [t for t, task in enumerate(problem.tasks)
                    if task.role == Role.COMPUTE]
    work = sum(problem.tasks[t].duration for t in compute_like)
    area = sum(problem.tasks[t].duration * problem.tasks[t].occupancy for t in compute_like)
    compute = max(-(-work // machine.compute_streams), int(area))
    comm_work = sum(problem.tasks[c].duration for c in problem.wait_of)
    comm = max([-(-comm_work // machine.comm_streams)]  # and each comm stream runs its own collectives
               + [sum(problem.tasks[c].duration for c in chain) for chain in comm_stream_chains(problem).values()])

    # memory: at each task's step, everything it touches is resident, besides the inputs that always are
    resident = problem.resident_bytes
    touched = [0] * problem.num_tasks
    outputs = 0
    for b, buf in enumerate(problem.buffers):
        if buf.is_input and not buf.freeable:
            continue
        for t in problem.buffer_holders[b]:
            touched[t] += buf.size
        if buf.is_output:
            outputs += buf.size
    memory = resident + max([outputs] + touched)
    return Bounds(critical_path=critical, compute=compute, comm=comm, memory=memory,
                  sequencing=sequencing_bound(problem) if structural else None,
                  windows=window_bound(problem) if structural else None)


def _compute_work(problem: Problem) -> list[int]:
    """Time each task takes of the GPU's compute capacity: its duration on one compute stream, its
    occupancy area with several (they share the GPU); zero for all but compute tasks."""
    single = problem.machine.compute_streams == 1
    return [(task.duration if single else int(task.duration * task.occupancy)) if task.role == Role.COMPUTE else 0
            for task in problem.tasks]


def _reachable_work(problem: Problem, work: list[int], targets: list[int], forward: bool) -> dict[int, int]:
    """For each task in ``targets``, the compute work of all its ancestors (``forward``) or all its
    descendants. Reachability as one bitmask per task (Python ints), summed with numpy: a few
    hundred milliseconds at 10,000 tasks instead of one graph search per target."""
    import numpy as np

    n = problem.num_tasks
    edges = problem.preds if forward else problem.succs
    reach = [0] * n
    for t in (range(n) if forward else range(n - 1, -1, -1)):
        mask = 0
        for q in edges[t]:
            mask |= reach[q] | (1 << q)
        reach[t] = mask
    weights = np.asarray(work, dtype=np.int64)
    nbytes = (n + 7) // 8
    out = {}
    for t in targets:
        bits = np.unpackbits(np.frombuffer(reach[t].to_bytes(nbytes, "little"), dtype=np.uint8),
                             bitorder="little")[:n]
        out[t] = int(bits @ weights)
    return out


def _heads_and_tails(problem: Problem) -> tuple[list[int], list[int]]:
    """For every task, the least time before its start (head) and after its end (tail) in any schedule:
    longest dependency paths with forced syncs, plus, when collectives keep their order on a single
    comm stream, that order (each asynchronous collective starts after the previous one ends). An
    asynchronous collective also waits for all the compute work of its ancestors (the GPU runs it
    before the launch) and leaves all that of its descendants to after its end: with one comm
    stream this is what makes, e.g., an FSDP backward all-gather that must follow the previous
    layer's reduce-scatter arrive late."""
    n = problem.num_tasks
    work = _compute_work(problem)
    sync = problem.machine.sync_overhead
    launched = list(problem.wait_of)
    before = _reachable_work(problem, work, launched, forward=True)
    after = _reachable_work(problem, work, launched, forward=False)
    succs: list[list[tuple[int, int]]] = [[] for _ in range(n)]  # (successor, lag after the end)
    for t in range(n):
        for q in problem.sync_preds[t]:
            succs[q].append((t, _forced_sync(problem, q, t)))
    if problem.preserve_collective_order:  # each comm stream runs its collectives in launch order
        for chain in comm_stream_chains(problem).values():
            for a, b in zip(chain, chain[1:]):
                succs[a].append((b, 0))
    head = [0] * n
    for t in range(n):  # ids are a topological order, and the chain follows ids
        if t in problem.wait_of:  # launched after its ancestors' work, started sync after that
            head[t] = max(head[t], before[t] + sync)
        end = head[t] + problem.tasks[t].duration
        for s, lag in succs[t]:
            head[s] = max(head[s], end + lag)
    tail = [0] * n
    for t in range(n - 1, -1, -1):
        tail[t] = max((lag + problem.tasks[s].duration + tail[s] for s, lag in succs[t]), default=0)
        if t in problem.wait_of:
            tail[t] = max(tail[t], after[t])
    return head, tail


def _preemptive_sequence(jobs: list[tuple[int, int, int]]) -> int:
    """Makespan of the preemptive schedule of (head, work, tail) jobs on one machine that always runs
    the released job with the longest tail (Jackson's rule); it is optimal for the preemptive problem,
    so it bounds every non-preemptive sequence: max over job sets of min head + work + min tail."""
    jobs = sorted(jobs)
    ready: list[list[int]] = []  # [-tail, remaining work]
    clock = best = i = 0
    while i < len(jobs) or ready:
        if not ready:
            clock = max(clock, jobs[i][0])
        while i < len(jobs) and jobs[i][0] <= clock:
            r, work, q = jobs[i]
            heapq.heappush(ready, [-q, work])
            i += 1
        job = heapq.heappop(ready)
        run = job[1] if i == len(jobs) else min(job[1], jobs[i][0] - clock)
        clock += run
        job[1] -= run
        if job[1]:
            heapq.heappush(ready, job)
        else:
            best = max(best, clock - job[0])
    return best


def sequencing_bound(problem: Problem) -> int:
    """A makespan bound from sequencing the GPU's compute work (and each comm stream's collectives) with
    heads and tails.

    Compute work shares the GPU: with one compute stream tasks run one at a time, with several their
    occupancy area fits under 1. Either way, the compute tasks of any set S all run between the least
    head in S and the makespan minus the least tail in S, so that span is at least S's work (area);
    the best such set is found by Jackson's preemptive schedule. On one compute stream this is at least
    both the critical path through any compute task and the total compute work (with several, the
    area counts, so `Bounds.makespan` still takes the others' maximum), and higher when collectives at
    the start or end of the step leave the GPU idle whatever the order."""
    head, tail = _heads_and_tails(problem)
    work = _compute_work(problem)
    compute = [(head[t], work[t], tail[t]) for t in range(problem.num_tasks) if work[t]]
    best = _preemptive_sequence(compute)
    for chain in comm_stream_chains(problem).values():  # one collective at a time on each comm stream
        best = max(best, _preemptive_sequence([(head[c], problem.tasks[c].duration, tail[c]) for c in chain]))
    return best


def comm_stream_chains(problem: Problem) -> dict[int, list[int]]:
    """Comm stream -> the asynchronous collectives it runs (each is pinned to its process group's stream),
    in original order: with `preserve_collective_order`, the order it runs them in."""
    chains: dict[int, list[int]] = {}
    for c in problem.async_chain:
        chains.setdefault(problem.comm_stream(c), []).append(c)
    return chains


def _chain_classes(problem: Problem, chain: list[int]) -> tuple[list[int], list[int]]:
    """For every task, the first collective of ``chain`` it is an ancestor of (``len(chain)``: none) and the
    last it is a descendant of (-1: none)."""
    n, m = problem.num_tasks, len(chain)
    index = {c: k for k, c in enumerate(chain)}
    first_after = [m] * n  # over t and its descendants: the first collective among them
    for t in range(n - 1, -1, -1):
        first_after[t] = min([index.get(t, m)] + [first_after[s] for s in problem.succs[t]])
    last_before = [-1] * n  # over t and its ancestors: the last collective among them
    for t in range(n):
        last_before[t] = max([index.get(t, -1)] + [last_before[q] for q in problem.preds[t]])
    needed_by = [min((first_after[s] for s in problem.succs[t]), default=m) for t in range(n)]
    released_by = [max((last_before[q] for q in problem.preds[t]), default=-1) for t in range(n)]
    return needed_by, released_by


def window_bound(problem: Problem) -> int:
    """A makespan bound from the windows the collectives of a fixed order leave the GPU.

    Valid when asynchronous collectives keep their order (`preserve_collective_order`): each comm stream
    then runs its own collectives (those of the process groups it serves: an asynchronous collective is
    pinned to its group's stream) in launch order, and the bound is the largest over the comm streams
    of `_chain_window_bound` for that stream's chain, the compute stream(s) shared; the other streams'
    collectives are left out, which only relaxes."""
    if not problem.preserve_collective_order:
        return 0
    return max((_chain_window_bound(problem, chain) for chain in comm_stream_chains(problem).values()), default=0)


def _chain_window_bound(problem: Problem, chain: list[int]) -> int:
    """The window bound for ``chain``, collectives that one comm stream runs in this order.

    Relaxation: each compute task keeps only two constraints, it must end before the first
    collective of the chain it feeds is launched (an ancestor: the launch waits for its inputs, then the
    collective starts ``sync`` later) and start ``sync`` after the last one it depends on ends; the GPU runs
    compute work preemptively (with several compute streams, its occupancy area), the comm stream runs the
    chain in order. Preemptive earliest-class-first on the GPU, each collective started as early as its
    class allows, finishes every set of classes as early as any schedule can, so the relaxed makespan
    (the GPU's last work, or the last collective's end plus the sync of its wait) bounds every schedule.
    What it adds to `sequencing_bound`: idle windows sum over the whole chain (the GPU waits on the
    collective it needs while the work that could fill the window is itself waiting on another one)."""
    if not chain:
        return 0
    sync = problem.machine.sync_overhead
    work = _compute_work(problem)
    needed_by, released_by = _chain_classes(problem, chain)
    released_after: list[list[int]] = [[] for _ in range(len(chain) + 1)]  # index r + 1: after collective r
    open_work = [0] * (len(chain) + 1)  # per class: compute work not yet done
    for t in range(problem.num_tasks):
        if work[t]:
            released_after[released_by[t] + 1].append(t)
            open_work[needed_by[t]] += work[t]
    pending: list[tuple[int, int, int]] = []  # (release, class, task): released at a collective's end + sync
    ready: list[list[int]] = []  # [class, task, work left]: the GPU's released, unfinished work
    clock = 0

    def run_gpu(done) -> None:
        """Preemptive, most urgent class first, from ``clock`` until ``done()``."""
        nonlocal clock
        while not done():
            while pending and pending[0][0] <= clock:
                _, k, t = heapq.heappop(pending)
                heapq.heappush(ready, [k, t, work[t]])
            if not ready:
                clock = pending[0][0]  # idle until the next release
                continue
            job = ready[0]
            run = job[2] if not pending else min(job[2], pending[0][0] - clock)
            clock += run
            job[2] -= run
            open_work[job[0]] -= run
            if not job[2]:
                heapq.heappop(ready)

    def release(tasks: list[int], at: int) -> None:
        for t in tasks:
            heapq.heappush(pending, (at, needed_by[t], t))

    release(released_after[0], 0)
    comm_end = 0
    for k, c in enumerate(chain):
        # the classes up to k are released (a task is released after a collective before the one it feeds)
        run_gpu(lambda: not open_work[k])
        comm_end = max(comm_end, clock + sync) + problem.tasks[c].duration
        release(released_after[k + 1], comm_end + sync)
    run_gpu(lambda: not pending and not ready)
    return max(clock, comm_end + sync)
