"""Seeded random Problems, built directly (no FX), and random topological orders, for tests and
experiments; hand-built problems in the shapes of PyTorch's reordering tests: `solvercast.testing.shapes`;
random FX programs: `solvercast.testing.fuzz` (running FX graphs on one process: `solvercast.graph.local_run`)."""

from __future__ import annotations

import random

from solvercast.ir.problem import Buffer, Machine, Problem, Role, Task


def random_problem(
    seed: int,
    num_tasks: int = 20,
    *,
    compute_streams: int = 1,
    comm_streams: int = 1,
    sync_overhead: int = 0,
    comm_fraction: float = 0.15,
    free_fraction: float = 0.1,
    sync_comm_fraction: float = 0.0,
    max_preds: int = 2,
    memory_budget: int | None = None,
    preserve_collective_order: bool | str = True,
    groups: int = 1,
) -> Problem:
    """A random DAG of about ``num_tasks`` tasks in realistic proportions:
    compute, asynchronous collectives each completed by a later wait, views,
    optionally synchronous comm ops. Every task that produces a value
    allocates a buffer; views and waits alias the buffer they read. With
    ``groups`` > 1 each comm task draws its process group from 0..groups-1
    (one draw more per comm task: the same seed gives another problem)."""
    rng = random.Random(seed)
    tasks: list[Task] = []
    edges: set[tuple[int, int]] = set()
    owner: list[int | None] = []  # task -> buffer index its output lives in (None: no tensor)
    sizes: list[int] = []
    producers: list[int | None] = []
    users: list[set[int]] = []
    readable: list[int] = []  # tasks whose output later tasks may read (not async collectives)
    pending: list[int] = []  # collectives without a wait yet

    def new_buffer(producer: int | None, size: int) -> int:
        sizes.append(size)
        producers.append(producer)
        users.append(set())
        return len(sizes) - 1

    inputs = [new_buffer(None, rng.randint(1, 50)) for _ in range(2)]

    def read(t: int, p: int | None) -> None:
        if p is not None:
            edges.add((p, t))
            if owner[p] is not None:
                users[owner[p]].add(t)
        else:
            users[rng.choice(inputs)].add(t)

    def pick_inputs(t: int, k: int) -> list[int | None]:
        if not readable:
            return [None]
        return [rng.choice(readable) if rng.random() < 0.85 else None for _ in range(k)]

    while len(tasks) < num_tasks:
        t = len(tasks)
        remaining = num_tasks - t
        r = rng.random()
        if pending and (r < 0.15 or remaining <= len(pending)):
            c = pending.pop(rng.randrange(len(pending)))
            tasks.append(Task(f"wait{t}", Role.WAIT, waits_for=c))
            edges.add((c, t))
            users[owner[c]].add(t)
            owner.append(owner[c])
            readable.append(t)
            continue
        if r < 0.15 + comm_fraction and remaining > 1 + len(pending):
            tasks.append(Task(f"coll{t}", Role.COMM, duration=rng.randint(10, 200), op="all_reduce",
                              group=rng.randrange(groups) if groups > 1 else 0))
            owner.append(None)
            for p in pick_inputs(t, 1):
                read(t, p)
            owner[t] = new_buffer(t, rng.randint(1, 60))
            pending.append(t)
            continue
        if r < 0.15 + comm_fraction + free_fraction and readable:
            p = rng.choice(readable)
            tasks.append(Task(f"view{t}", Role.FREE, op="view"))
            owner.append(None)
            read(t, p)
            owner[t] = owner[p]
            readable.append(t)
            continue
        is_sync_comm = r > 1.0 - sync_comm_fraction
        role = Role.COMM if is_sync_comm else Role.COMPUTE
        tasks.append(Task(f"{'comm' if is_sync_comm else 'op'}{t}", role, duration=rng.randint(1, 100),
                          occupancy=rng.choice((0.25, 0.5, 1.0)), op="sync_comm" if is_sync_comm else "mm",
                          group=rng.randrange(groups) if is_sync_comm and groups > 1 else 0))
        owner.append(None)
        for p in pick_inputs(t, rng.randint(1, max_preds)):
            read(t, p)
        owner[t] = new_buffer(t, rng.randint(1, 60))
        readable.append(t)

    outputs = {owner[t] for t in range(max(0, num_tasks - 2), num_tasks) if owner[t] is not None}
    buffers = [
        Buffer(name=f"buf{b}", size=sizes[b], producer=producers[b], users=tuple(users[b]),
               is_output=b in outputs and producers[b] is not None)
        for b in range(len(sizes))
    ]
    machine = Machine(compute_streams=compute_streams, comm_streams=comm_streams, sync_overhead=sync_overhead,
                      memory_budget=memory_budget)
    return Problem(tasks=tuple(tasks), edges=tuple(edges), buffers=tuple(buffers), machine=machine,
                   preserve_collective_order=preserve_collective_order, name=f"random{num_tasks}_s{seed}")


def random_topological_order(problem: Problem, rng: random.Random, keep_comm_order: bool = False) -> list[int]:
    """A uniformly drawn ready task at each step: a random topological order of ``problem``'s tasks;
    with ``keep_comm_order`` the collectives keep the original relative order the problem's
    ``preserve_collective_order`` keeps (`Problem.comm_order_pairs`; all of it under a free order)."""
    comms = problem.comm_tasks
    pairs = problem.comm_order_pairs if problem.collective_order != "free" else tuple(zip(comms, comms[1:]))
    chain = dict(pairs) if keep_comm_order else {}
    indeg = [len(p) for p in problem.preds]
    for b in chain.values():
        indeg[b] += 1
    ready = [t for t in range(problem.num_tasks) if indeg[t] == 0]
    order = []
    while ready:
        t = ready.pop(rng.randrange(len(ready)))
        order.append(t)
        for s in problem.succs[t] + ((chain[t],) if t in chain else ()):
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    return order
