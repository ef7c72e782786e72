"""Lower bounds on makespan and peak memory, and start-time windows.

Every report states the gap to the best of these bounds; solvers use the
windows to narrow their start domains.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from solvercast.ir.engine import per_problem
from solvercast.ir.problem import Problem, Role


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
    # the compute stream's idle time while collectives it cannot cover are in flight, the memory budget
    # deciding what can cover them, see `exposure_bound`
    exposure: int | None = 0

    @property
    def makespan(self) -> int:
        return max(self.critical_path, self.compute, self.comm, self.sequencing or 0, self.windows or 0,
                   self.exposure or 0)

    def to_dict(self) -> dict:
        return {"critical_path": self.critical_path, "compute": self.compute, "comm": self.comm,
                "sequencing": self.sequencing, "windows": self.windows, "exposure": self.exposure,
                "makespan": self.makespan,
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
    sequencing, window and exposure bounds (None): they cost seconds at tens of thousands of tasks, and `optimize`
    skips them when its time plan has nothing left after the fixed costs. Computed once per problem (the
    report, CP-SAT's cut and its polish each ask)."""
    return per_problem(problem, f"lower bounds, structural {structural}", lambda p: _lower_bounds(p, structural))


def _lower_bounds(problem: Problem, structural: bool) -> Bounds:
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
                  windows=window_bound(problem) if structural else None,
                  exposure=exposure_bound(problem) if structural else None)


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
    longest dependency paths with forced syncs, plus the order each comm stream runs its asynchronous
    collectives in where the collective order fixes it (`ordered_stream_chains`: each starts after the
    previous one ends). An
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
    for chain in ordered_stream_chains(problem):  # a comm stream runs these collectives in this order
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
    in original order (the order it runs them in under the global collective order)."""
    chains: dict[int, list[int]] = {}
    for c in problem.async_chain:
        chains.setdefault(problem.comm_stream(c), []).append(c)
    return chains


def ordered_stream_chains(problem: Problem) -> list[list[int]]:
    """Asynchronous collectives that one comm stream runs one after another in this order in every schedule:
    under the global order each comm stream's (`comm_stream_chains`); under the per-group order each process
    group's (pinned to one stream, launched in its order; other groups' collectives on that stream may run
    between them, which these chains leave out); none under a free order."""
    if problem.collective_order == "global":
        return list(comm_stream_chains(problem).values())
    return [list(chain) for chain in problem.async_chains]


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

    Valid for every chain a comm stream runs in a fixed order (`ordered_stream_chains`: under the global
    order each comm stream's collectives, those of the process groups it serves, an asynchronous collective
    being pinned to its group's stream; under the per-group order each group's), and the bound is the
    largest over the chains of `_chain_window_bound`, the compute stream(s) shared; the other collectives
    are left out, which only relaxes. 0 under a free order."""
    return max((_chain_window_bound(problem, chain) for chain in ordered_stream_chains(problem)), default=0)


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


#: `exposure_bound` builds a task x buffer matrix per collective (its work grows with tasks x collectives x
#: buffers): past this many tasks it is not computed (0). Measured on the loaded 2-core machine: 0.02 s for
#: fsdp_tp (287 tasks) and fsdp_layers 8 layers (532), 0.15 s for synthetic 600; 0.57 s at 1,000, 5.4 s at 2,000
EXPOSURE_MAX_TASKS = 600


def _closures(problem: Problem):
    """Boolean matrices ``anc[t, q]`` (q is t or one of its ancestors) and ``desc[t, q]`` (q is t or one of its
    descendants)."""
    import numpy as np

    n = problem.num_tasks
    nbytes = (n + 7) // 8

    def matrix(edges, order) -> "np.ndarray":
        reach = [0] * n
        for t in order:
            mask = 1 << t
            for q in edges[t]:
                mask |= reach[q]
            reach[t] = mask
        packed = np.frombuffer(b"".join(r.to_bytes(nbytes, "little") for r in reach), dtype=np.uint8)
        return np.unpackbits(packed.reshape(n, nbytes), axis=1, bitorder="little")[:, :n].astype(bool)

    return matrix(problem.preds, range(n)), matrix(problem.succs, range(n - 1, -1, -1))


def exposure_bound(problem: Problem) -> int:
    """A makespan bound from collectives whose time in flight the compute stream cannot fill, the memory
    budget deciding what may fill it.

    One compute stream, collective order kept. Between an asynchronous collective c's launch point and its
    wait, in program order, the compute stream runs only the tasks issued between the two (the launch waits
    for the work enqueued before it; the wait blocks the stream until c has ended), and that window lasts at
    least ``2 * sync + duration(c)`` (launch -> start, the collective, end -> wait). A task t may sit in the
    window only if it is neither issued before the launch (c's ancestors, the comm tasks before c in the kept
    order and their ancestors) nor after the wait (the wait's descendants), and if the bytes that are resident
    at t's step in *every* such order fit the budget: a buffer is, when its producer is t, an ancestor of t,
    or issued before the launch, and one of its holders is t, a descendant of t, or issued after the wait
    (outputs are never freed, inputs always there). So the stream idles at least ``2 * sync + duration(c)``
    minus the work of the tasks that may fill c's window. Windows that cannot overlap add up: c_j after c_i in
    the kept order cannot launch inside c_i's window when it depends on c_i's wait, or when the bytes resident
    at c_j's launch with c_i still in flight (by the same rule) exceed the budget; the best chain of such
    collectives (a longest path) is added to the compute work. Without a budget only dependencies decide:
    collectives whose result the next compute needs with too little independent work to cover them.

    Not computed (0) with several compute streams (the windows overlap on the GPU and memory is judged over
    time there), when the collective order is not the global one (the launch order, which makes windows
    disjoint and decides what is issued before a launch, is not fixed), or past EXPOSURE_MAX_TASKS tasks."""
    import numpy as np

    machine = problem.machine
    chain = problem.async_chain
    n = problem.num_tasks
    if (machine.compute_streams != 1 or problem.collective_order != "global" or not chain
            or n > EXPOSURE_MAX_TASKS):
        return 0
    sync, budget = machine.sync_overhead, machine.memory_budget
    anc, desc = _closures(problem)
    # work the compute stream may run in a window: compute tasks and synchronous comm ops (which may take it)
    on_compute = [task.role == Role.COMPUTE or (task.role == Role.COMM and not problem.is_async_comm(t))
                  for t, task in enumerate(problem.tasks)]
    fill = np.array([task.duration if ok else 0 for ok, task in zip(on_compute, problem.tasks)], dtype=np.int64)
    compute_work = sum(task.duration for task in problem.tasks if task.role == Role.COMPUTE)

    # issued before c's launch: c, earlier comm tasks (the order is kept) and their ancestors; after c's wait
    before = {}
    seen = np.zeros(n, dtype=bool)
    for k in problem.comm_tasks:
        seen |= anc[k]
        if k in problem.wait_of:
            before[k] = seen.copy()
    after = {c: desc[problem.wait_of[c]] for c in chain}

    def candidates(c: int) -> np.ndarray:  # tasks with work that dependencies and the order let into c's window
        return np.flatnonzero((fill > 0) & ~before[c] & ~after[c])

    def window_idle(c: int, fillers: np.ndarray) -> int:
        return max(0, 2 * sync + problem.tasks[c].duration - int(fill[fillers].sum()))

    if budget is None:
        idle = {c: window_idle(c, candidates(c)) for c in chain}
        disjoint = {(ci, cj): bool(after[ci][cj]) for i, ci in enumerate(chain) for cj in chain[i + 1:]}
    else:
        buffers = list(problem.lifetime_buffers)
        sizes = np.array([problem.buffers[b].size for b in buffers], dtype=np.int64)
        producer = np.array([-1 if problem.buffers[b].producer is None else problem.buffers[b].producer
                             for b in buffers], dtype=np.int64)  # (an integer array when there is none)
        never_freed = np.array([not problem.is_freed(b) for b in buffers], dtype=bool)
        is_input = producer < 0
        holders = [sorted(problem.buffer_holders[b]) for b in buffers]
        # produced_by[t, b]: b's producer is t or an ancestor of t (inputs: always); held_from[t, b]: a holder
        # of b is t or a descendant of t (never freed: always)
        produced_by = np.where(is_input[None, :], True, desc[np.maximum(producer, 0)].T)
        held_from = np.zeros((n, len(buffers)), dtype=bool)
        for j, hs in enumerate(holders):
            if never_freed[j]:
                held_from[:, j] = True
            elif hs:
                held_from[:, j] = anc[hs].any(axis=0)

        def fits(rows: np.ndarray, c: int) -> np.ndarray:
            """The tasks of ``rows`` whose step, inside c's window, fits the budget in every order."""
            live = (produced_by[rows] | born_before[c][None, :]) & (held_from[rows] | held_after[c][None, :])
            return rows[problem.resident_bytes + live.astype(np.int64) @ sizes <= budget]

        def born(mask: np.ndarray) -> np.ndarray:  # buffers produced by a task of ``mask`` (inputs: always)
            return is_input | mask[np.maximum(producer, 0)]

        holds = np.zeros((n, len(buffers)), dtype=np.int32)  # holds[t, b]: t is a holder of b
        for j, hs in enumerate(holders):
            holds[hs, j] = 1

        def held(mask: np.ndarray) -> np.ndarray:  # buffers held by a task of ``mask`` (never freed: always)
            return never_freed | (mask.astype(np.int32) @ holds > 0)

        born_before = {c: born(before[c]) for c in chain}
        held_after = {c: held(after[c]) for c in chain}
        idle = {c: window_idle(c, fits(candidates(c), c)) for c in chain}
        disjoint = {}
        for i, ci in enumerate(chain):
            later = list(chain[i + 1:])
            if not later:
                continue
            # rows: each later collective's launch step with ci in flight (its buffers held until its wait);
            # what is born before cj's launch includes cj's ancestors
            live = np.array([born_before[cj] for cj in later]) & (held_from[later] | held_after[ci][None, :])
            over = problem.resident_bytes + live.astype(np.int64) @ sizes > budget
            for cj, forced in zip(later, over):
                disjoint[ci, cj] = bool(after[ci][cj] or forced)

    # the longest chain of pairwise disjoint windows: consecutive ones suffice (launches are in chain order)
    best: dict[int, int] = {}
    for j, cj in enumerate(chain):
        best[cj] = idle[cj] + max([0] + [best[ci] for ci in chain[:j] if disjoint[ci, cj]])
    return compute_work + max(best.values())
