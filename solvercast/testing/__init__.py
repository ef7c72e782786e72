"""Seeded random Problems, built directly (no FX), and random topological orders, for tests and
experiments; hand-built problems in the shapes of PyTorch's reordering tests: `solvercast.testing.shapes`;
random FX programs: `solvercast.testing.fuzz` (running FX graphs on one process: `solvercast.graph.local_run`)."""

from __future__ import annotations

import random

from solvercast.ir.problem import Buffer, Machine, Problem, Role, Task


class _RandomDag:
    """The tasks, edges and buffers of a `random_problem`, drawn from ``rng`` one task at a time. Every
    task that produces a value allocates a buffer; views and waits alias the buffer they read."""

    def __init__(self, rng: random.Random, groups: int):
        self.rng = rng
        self.groups = groups
        self.tasks: list[Task] = []
        self.edges: set[tuple[int, int]] = set()
        self.owner: list[int | None] = []  # task -> buffer index its output lives in (None: no tensor)
        self.sizes: list[int] = []
        self.producers: list[int | None] = []
        self.users: list[set[int]] = []
        self.readable: list[int] = []  # tasks whose output later tasks may read (not async collectives)
        self.pending: list[int] = []  # collectives without a wait yet
        self.inputs = [self._new_buffer(None, rng.randint(1, 50)) for _ in range(2)]

    def _new_buffer(self, producer: int | None, size: int) -> int:
        self.sizes.append(size)
        self.producers.append(producer)
        self.users.append(set())
        return len(self.sizes) - 1

    def _read(self, t: int, p: int | None) -> None:
        """Task ``t`` reads task ``p``'s output, or a graph input where ``p`` is None."""
        if p is not None:
            self.edges.add((p, t))
            if self.owner[p] is not None:
                self.users[self.owner[p]].add(t)
        else:
            self.users[self.rng.choice(self.inputs)].add(t)

    def _pick_inputs(self, k: int) -> list[int | None]:
        if not self.readable:
            return [None]
        return [self.rng.choice(self.readable) if self.rng.random() < 0.85 else None for _ in range(k)]

    def add_wait(self) -> None:
        """A wait completing a pending collective drawn at random; it aliases the collective's buffer."""
        t = len(self.tasks)
        c = self.pending.pop(self.rng.randrange(len(self.pending)))
        self.tasks.append(Task(f"wait{t}", Role.WAIT, waits_for=c))
        self.edges.add((c, t))
        self.users[self.owner[c]].add(t)
        self.owner.append(self.owner[c])
        self.readable.append(t)

    def add_collective(self) -> None:
        """An asynchronous all_reduce, pending until a later wait."""
        t = len(self.tasks)
        rng = self.rng
        self.tasks.append(Task(f"coll{t}", Role.COMM, duration=rng.randint(10, 200), op="all_reduce",
                               group=rng.randrange(self.groups) if self.groups > 1 else 0))
        self.owner.append(None)
        for p in self._pick_inputs(1):
            self._read(t, p)
        self.owner[t] = self._new_buffer(t, rng.randint(1, 60))
        self.pending.append(t)

    def add_view(self) -> None:
        """A view of a readable task's output, aliasing its buffer."""
        t = len(self.tasks)
        p = self.rng.choice(self.readable)
        self.tasks.append(Task(f"view{t}", Role.FREE, op="view"))
        self.owner.append(None)
        self._read(t, p)
        self.owner[t] = self.owner[p]
        self.readable.append(t)

    def add_op(self, is_sync_comm: bool, max_preds: int) -> None:
        """A compute op, or a synchronous comm op, reading up to ``max_preds`` values."""
        t = len(self.tasks)
        rng = self.rng
        role = Role.COMM if is_sync_comm else Role.COMPUTE
        self.tasks.append(Task(f"{'comm' if is_sync_comm else 'op'}{t}", role, duration=rng.randint(1, 100),
                               occupancy=rng.choice((0.25, 0.5, 1.0)), op="sync_comm" if is_sync_comm else "mm",
                               group=rng.randrange(self.groups) if is_sync_comm and self.groups > 1 else 0))
        self.owner.append(None)
        for p in self._pick_inputs(rng.randint(1, max_preds)):
            self._read(t, p)
        self.owner[t] = self._new_buffer(t, rng.randint(1, 60))
        self.readable.append(t)

    def buffers(self) -> tuple[Buffer, ...]:
        """The buffers; those of the last two tasks are the outputs."""
        n = len(self.tasks)
        outputs = {self.owner[t] for t in range(max(0, n - 2), n) if self.owner[t] is not None}
        return tuple(
            Buffer(name=f"buf{b}", size=self.sizes[b], producer=self.producers[b], users=tuple(self.users[b]),
                   is_output=b in outputs and self.producers[b] is not None)
            for b in range(len(self.sizes))
        )


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
    dag = _RandomDag(rng, groups)
    while len(dag.tasks) < num_tasks:
        remaining = num_tasks - len(dag.tasks)
        r = rng.random()
        if dag.pending and (r < 0.15 or remaining <= len(dag.pending)):
            dag.add_wait()
        elif r < 0.15 + comm_fraction and remaining > 1 + len(dag.pending):
            dag.add_collective()
        elif r < 0.15 + comm_fraction + free_fraction and dag.readable:
            dag.add_view()
        else:
            dag.add_op(is_sync_comm=r > 1.0 - sync_comm_fraction, max_preds=max_preds)
    machine = Machine(compute_streams=compute_streams, comm_streams=comm_streams, sync_overhead=sync_overhead,
                      memory_budget=memory_budget)
    return Problem(tasks=tuple(dag.tasks), edges=tuple(dag.edges), buffers=dag.buffers(), machine=machine,
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
