"""Seeded random Problems, built directly (no FX), random topological orders, random inputs for FX
graphs, and deterministic local collectives to run them with (`LocalCollectives`), for tests and
experiments."""

from __future__ import annotations

import random

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from solvercast.problem import Buffer, Machine, Problem, Role, Task


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
    preserve_collective_order: bool = True,
) -> Problem:
    """A random DAG of about ``num_tasks`` tasks in realistic proportions:
    compute, asynchronous collectives each completed by a later wait, views,
    optionally synchronous comm ops. Every task that produces a value
    allocates a buffer; views and waits alias the buffer they read."""
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
            tasks.append(Task(f"coll{t}", Role.COMM, duration=rng.randint(10, 200), op="all_reduce"))
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
                          occupancy=rng.choice((0.25, 0.5, 1.0)), op="sync_comm" if is_sync_comm else "mm"))
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
    with ``keep_comm_order`` the collectives keep their original relative order."""
    comms = problem.comm_tasks
    chain = dict(zip(comms, comms[1:])) if keep_comm_order else {}
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


def random_inputs(gm, seed: int = 0, device: str = "cpu") -> list:
    """Random tensors of ``gm``'s placeholders' shapes and dtypes (from ``meta["val"]``), scaled by
    1/sqrt(last dim) so that deep graphs stay finite; integer inputs are 0/1. A placeholder whose
    value is no tensor (the opaque DeviceMesh a DTensor graph passes through) gets None."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        val = node.meta["val"]
        if not isinstance(val, torch.Tensor):
            out.append(None)
        elif val.dtype.is_floating_point:
            scale = max(val.shape[-1] if val.dim() else 1, 1) ** -0.5
            out.append((torch.randn(tuple(val.shape), generator=gen) * scale).to(val.dtype))
        else:
            out.append(torch.randint(0, 2, tuple(val.shape), generator=gen, dtype=val.dtype))
    return [t if t is None else t.to(device) for t in out]


_C10D = torch.ops._c10d_functional


class LocalCollectives(TorchDispatchMode):
    """Deterministic stand-ins for the functional collectives (right shapes, no process group), so
    that outputs can be compared bit for bit; every other op runs as is. The in-place all-reduce
    writes its input, as the real one does."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is _C10D.all_reduce.default:
            return args[0] * 2
        if func is _C10D.all_reduce_.default:
            return args[0].mul_(2)
        if func is _C10D.all_reduce_coalesced.default:
            return [t * 2 for t in args[0]]
        if func is _C10D.all_gather_into_tensor.default:
            t, w = args[0], args[1]
            return torch.cat([t * (i + 1) for i in range(w)])
        if func is _C10D.reduce_scatter_tensor.default:
            t, w = args[0], args[2]
            return t.reshape(w, t.shape[0] // w, *t.shape[1:]).sum(0)
        if func is _C10D.all_to_all_single.default:
            t, ins = args[0], list(args[2])
            return torch.cat(list(reversed(t.split(ins))))
        if func is _C10D.wait_tensor.default:
            return args[0]
        return func(*args, **kwargs)


def run_local(gm, args: list[torch.Tensor]) -> list[torch.Tensor]:
    """``gm(*args)`` with `LocalCollectives`, outputs as a flat list."""
    with torch.no_grad(), LocalCollectives():
        out = gm(*args)
    return list(out) if isinstance(out, (tuple, list)) else [out]
