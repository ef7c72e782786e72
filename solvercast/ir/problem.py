"""The solver-neutral IR: tasks, dependency edges, buffers and the machine.

A `Problem` is built once (by `extract_problem`, or by hand in tests and
synthetic workloads) and never mutated. It validates itself on construction
and derives its lookup tables lazily, once.

Conventions every part of solvercast relies on:

* Task ids are 0..n-1 and form a topological order: every edge goes from a
  lower id to a higher one. For extracted problems this is the FX node order.
* Streams are integers: ``0 .. C-1`` are compute streams (0 is the default
  stream), ``C .. C+M-1`` are comm streams.
* A COMM task that some WAIT task names in ``waits_for`` is an *asynchronous*
  collective: it runs on its process group's comm stream, launched from its
  place in program order on the default compute stream. A COMM task with no
  wait is a *synchronous* comm op: it may run on a compute stream (as in the
  original graph) or be moved to its group's comm stream.
* One comm stream per process group: a COMM task's ``group`` (0, 1, ...: the
  groups in order of first use) runs on comm stream ``C + group % M`` (NCCL
  serialises the collectives of one communicator, not across communicators);
  with fewer comm streams than groups, groups share streams.
* ``preserve_collective_order`` says which COMM tasks keep their original
  relative order (`Problem.comm_chains`): True or "global", all of them;
  "group", those of one process group; False or "free", none (fences keep
  their place through edges whatever the mode). docs/execution_rules.md
  ("Collective order") says when each is safe.
* Durations are integer nanoseconds.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property

from solvercast.errors import InvalidProblemError


#: Accepted values of `Problem.preserve_collective_order` -> the stored one (True, "group" or False).
COLLECTIVE_ORDERS: dict[object, bool | str] = {True: True, "global": True, "group": "group", False: False, "free": False}


def collective_order_value(value: object) -> bool | str:
    """The stored form of a ``preserve_collective_order`` value: True (global), "group" or False (free).
    Raises `InvalidProblemError` for anything else."""
    try:
        return COLLECTIVE_ORDERS[value]
    except (KeyError, TypeError):
        raise InvalidProblemError(
            f"preserve_collective_order must be True or 'global' (every collective keeps its original order), "
            f"'group' (those of one process group do) or False or 'free' (none do), got {value!r}") from None


class Role(str, Enum):
    COMPUTE = "compute"
    COMM = "comm"
    WAIT = "wait"
    FREE = "free"  # views, aliases, anchors: no time, no allocation


@dataclass(frozen=True)
class Task:
    name: str
    role: Role
    duration: int = 0
    occupancy: float = 1.0
    waits_for: int | None = None  # WAIT only: id of the collective it completes
    op: str = ""  # what the task runs, for reports (e.g. "aten.mm", "all_gather")
    # False for ops with no tensor input (factory ops like zeros): lowering moves a task to another
    # stream through its inputs, so these stay on the default stream
    movable: bool = True
    group: int = 0  # COMM only: its process group (0, 1, ... in order of first use), which picks its comm stream

    def __post_init__(self):
        if not isinstance(self.role, Role):
            object.__setattr__(self, "role", Role(self.role))
        if self.duration < 0 or int(self.duration) != self.duration:
            raise InvalidProblemError(f"task {self.name!r}: duration must be a non-negative integer (ns), got {self.duration!r}")
        if not 0.0 < self.occupancy <= 1.0:
            raise InvalidProblemError(f"task {self.name!r}: occupancy must be in (0, 1], got {self.occupancy!r}")
        if self.role in (Role.WAIT, Role.FREE) and self.duration:
            raise InvalidProblemError(f"task {self.name!r}: a {self.role.value} task takes no time, got duration {self.duration}")
        if self.group < 0 or int(self.group) != self.group or (self.group and self.role != Role.COMM):
            raise InvalidProblemError(f"task {self.name!r}: group must be an integer >= 0, and 0 unless it is a COMM task, "
                                      f"got {self.group!r}")
        if (self.role == Role.WAIT) != (self.waits_for is not None):
            raise InvalidProblemError(f"task {self.name!r}: exactly the WAIT tasks name the collective they wait for (waits_for)")


@dataclass(frozen=True)
class Buffer:
    """One storage. Views and other aliases of it are not buffers of their own."""

    name: str
    size: int  # bytes
    producer: int | None  # None: a graph input, resident from the start
    users: tuple[int, ...] = ()  # every task that reads it or an alias of it
    is_output: bool = False  # graph outputs stay until the end
    freeable: bool = False  # graph inputs only: may be freed after their last use

    def __post_init__(self):
        object.__setattr__(self, "users", tuple(sorted(set(self.users))))
        if self.size < 0:
            raise InvalidProblemError(f"buffer {self.name!r}: size must be >= 0 bytes, got {self.size}")
        if self.freeable and self.producer is not None:
            raise InvalidProblemError(f"buffer {self.name!r}: only graph inputs are declared freeable")

    @property
    def is_input(self) -> bool:
        return self.producer is None


@dataclass(frozen=True)
class Machine:
    compute_streams: int = 1
    comm_streams: int = 1
    sync_overhead: int = 0  # ns added to every dependency that crosses streams
    memory_budget: int | None = None  # bytes; None: unconstrained

    def __post_init__(self):
        if self.compute_streams < 1 or self.comm_streams < 1:
            raise InvalidProblemError("a machine needs at least one compute stream and one comm stream")
        if self.sync_overhead < 0:
            raise InvalidProblemError("sync_overhead must be >= 0 ns")
        if self.memory_budget is not None and self.memory_budget < 0:
            raise InvalidProblemError("memory_budget must be >= 0 bytes or None")

    @property
    def num_streams(self) -> int:
        return self.compute_streams + self.comm_streams

    @property
    def compute_stream_ids(self) -> range:
        return range(self.compute_streams)

    @property
    def comm_stream_ids(self) -> range:
        return range(self.compute_streams, self.num_streams)

    def is_compute_stream(self, stream: int) -> bool:
        return 0 <= stream < self.compute_streams


@dataclass(frozen=True)
class Problem:
    tasks: tuple[Task, ...]
    edges: tuple[tuple[int, int], ...]
    buffers: tuple[Buffer, ...] = ()
    machine: Machine = field(default_factory=Machine)
    # True / "global": every COMM task keeps its original relative order; "group": those of one process group
    # do; False / "free": none do (stored as True, "group" or False; `comm_chains` is what each mode keeps)
    preserve_collective_order: bool | str = True
    name: str = ""
    # what extraction derived or assumed about the graph, one line each (e.g. values of nodes the trace
    # left without meta["val"]); not part of the problem's identity
    notes: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self):
        object.__setattr__(self, "tasks", tuple(self.tasks))
        object.__setattr__(self, "notes", tuple(self.notes))
        object.__setattr__(self, "edges", tuple(sorted({(int(u), int(v)) for u, v in self.edges})))
        object.__setattr__(self, "buffers", tuple(self.buffers))
        object.__setattr__(self, "preserve_collective_order", collective_order_value(self.preserve_collective_order))
        self._check()

    # ---- construction-time checks -------------------------------------------------
    def _check(self) -> None:
        n = len(self.tasks)
        for u, v in self.edges:
            if not (0 <= u < n and 0 <= v < n):
                raise InvalidProblemError(f"edge ({u}, {v}) names a task outside 0..{n - 1}")
            if u >= v:
                raise InvalidProblemError(
                    f"edge {self.tasks[u].name!r} -> {self.tasks[v].name!r} goes backwards: "
                    "task ids must be a topological order (renumber the tasks, or the graph has a cycle)")
        edge_set = set(self.edges)
        waited: dict[int, int] = {}
        for t, task in enumerate(self.tasks):
            if task.role != Role.WAIT:
                continue
            c = task.waits_for
            if not (0 <= c < n) or self.tasks[c].role != Role.COMM:
                raise InvalidProblemError(f"wait {task.name!r} must name a COMM task in waits_for, got {c!r}")
            if (c, t) not in edge_set:
                raise InvalidProblemError(f"wait {task.name!r} needs the edge ({c}, {t}) from its collective")
            if c in waited:
                raise InvalidProblemError(
                    f"collective {self.tasks[c].name!r} has two waits: {self.tasks[waited[c]].name!r} and {task.name!r}")
            waited[c] = t
        for buf in self.buffers:
            for t in ((buf.producer,) if buf.producer is not None else ()) + buf.users:
                if not 0 <= t < n:
                    raise InvalidProblemError(f"buffer {buf.name!r} names task {t} outside 0..{n - 1}")
            if buf.producer is not None and any(u < buf.producer for u in buf.users):
                raise InvalidProblemError(f"buffer {buf.name!r} is used by a task before its producer")
            if buf.producer is not None and buf.size and self.tasks[buf.producer].role in (Role.FREE, Role.WAIT):
                raise InvalidProblemError(f"buffer {buf.name!r}: a {self.tasks[buf.producer].role.value} task "
                                          f"({self.tasks[buf.producer].name!r}) allocates nothing, got {buf.size} B")

    # ---- derived lookups (built once, on first use) ---------------------------------
    @property
    def num_tasks(self) -> int:
        return len(self.tasks)

    def _adjacent(self, forward: bool) -> tuple[tuple[int, ...], ...]:
        near: list[list[int]] = [[] for _ in self.tasks]
        for u, v in self.edges:
            if forward:
                near[u].append(v)
            else:
                near[v].append(u)
        return tuple(tuple(n) for n in near)

    @cached_property
    def preds(self) -> tuple[tuple[int, ...], ...]:
        return self._adjacent(forward=False)

    @cached_property
    def succs(self) -> tuple[tuple[int, ...], ...]:
        return self._adjacent(forward=True)

    @cached_property
    def wait_of(self) -> dict[int, int]:
        """Asynchronous collective id -> id of its wait."""
        return {t.waits_for: i for i, t in enumerate(self.tasks) if t.role == Role.WAIT}

    def is_async_comm(self, t: int) -> bool:
        return t in self.wait_of

    @cached_property
    def comm_tasks(self) -> tuple[int, ...]:
        """All COMM tasks in original order (the order SPMD safety preserves)."""
        return tuple(i for i, t in enumerate(self.tasks) if t.role == Role.COMM)

    @cached_property
    def async_chain(self) -> tuple[int, ...]:
        """The asynchronous collectives in original order (the order `async_chains` keeps parts of)."""
        return tuple(c for c in self.comm_tasks if self.is_async_comm(c))

    @property
    def collective_order(self) -> str:
        """"global", "group" or "free": the ``preserve_collective_order`` mode by name."""
        return {True: "global", "group": "group", False: "free"}[self.preserve_collective_order]

    @cached_property
    def comm_chains(self) -> tuple[tuple[int, ...], ...]:
        """The COMM tasks whose original relative order every schedule keeps, one chain per set that keeps
        it (each in original order): all of them ("global"), one chain per process group ("group"), none
        ("free"). Tasks of different chains may be issued in either order."""
        if self.collective_order == "global":
            return (self.comm_tasks,) if self.comm_tasks else ()
        if self.collective_order == "free":
            return ()
        chains: dict[int, list[int]] = {}
        for c in self.comm_tasks:
            chains.setdefault(self.tasks[c].group, []).append(c)
        return tuple(tuple(chain) for _, chain in sorted(chains.items()))

    @cached_property
    def async_chains(self) -> tuple[tuple[int, ...], ...]:
        """`comm_chains` restricted to asynchronous collectives: the launch orders every schedule keeps.
        Under "group" each chain runs on one comm stream in this order."""
        chains = (tuple(c for c in chain if self.is_async_comm(c)) for chain in self.comm_chains)
        return tuple(chain for chain in chains if chain)

    @cached_property
    def comm_order_pairs(self) -> tuple[tuple[int, int], ...]:
        """(a, b): consecutive tasks of a chain of `comm_chains`; a is issued before b in every schedule."""
        return tuple(pair for chain in self.comm_chains for pair in zip(chain, chain[1:]))

    @cached_property
    def sync_preds(self) -> tuple[tuple[int, ...], ...]:
        """For each task, the non-FREE tasks whose results it waits for.

        FREE tasks (views) take no time and run on no stream, so a dependency
        through a chain of views is a dependency on the real producer behind
        them; that producer's stream decides whether a sync is paid.
        """
        sources: list[frozenset[int]] = []
        result: list[tuple[int, ...]] = []
        for t, task in enumerate(self.tasks):
            deps: set[int] = set()
            for p in self.preds[t]:
                deps |= sources[p]
            result.append(tuple(sorted(deps)))
            sources.append(frozenset(deps) if task.role == Role.FREE else frozenset((t,)))
        return tuple(result)

    @cached_property
    def buffer_users(self) -> tuple[tuple[int, ...], ...]:
        """Effective users per buffer: its users, plus the wait of every
        asynchronous collective that reads or writes it (the library holds a
        collective's buffers until it completes)."""
        out = []
        for buf in self.buffers:
            users = set(buf.users)
            for t in buf.users + ((buf.producer,) if buf.producer is not None else ()):
                if t in self.wait_of:
                    users.add(self.wait_of[t])
            out.append(tuple(sorted(users)))
        return tuple(out)

    @cached_property
    def allocated_bytes(self) -> tuple[int, ...]:
        """Bytes each task allocates when it is issued."""
        alloc = [0] * self.num_tasks
        for buf in self.buffers:
            if buf.producer is not None:
                alloc[buf.producer] += buf.size
        return tuple(alloc)

    @cached_property
    def buffer_holders(self) -> tuple[frozenset[int], ...]:
        """Per buffer, the tasks that keep it alive: its effective users (`buffer_users`) and its
        producer. It is freed after the last of them (in program order, or in time with several
        compute streams). The one answer to "who holds this buffer": every solver, bound and
        heuristic reads it here."""
        return tuple(frozenset(users) | ({buf.producer} if buf.producer is not None else frozenset())
                     for buf, users in zip(self.buffers, self.buffer_users))

    def is_freed(self, b: int) -> bool:
        """Whether buffer ``b`` is freed during the step (after its last holder). Outputs and
        non-freeable inputs never are; a freeable input nobody reads is not resident at all."""
        buf = self.buffers[b]
        return not (buf.is_output or (buf.is_input and not (buf.freeable and self.buffer_users[b])))

    @cached_property
    def releasable(self) -> tuple[tuple[int, frozenset[int]], ...]:
        """(bytes, holders) of every buffer that is freed during the step (`is_freed`)."""
        return tuple((buf.size, self.buffer_holders[b]) for b, buf in enumerate(self.buffers) if self.is_freed(b))

    @cached_property
    def release_counts(self) -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """`releasable` laid out for counting frees as tasks are issued (`engine.StepMemory`): per task the
        releasable buffers it holds; per buffer its holder count and the sum of its holders' ids (when one
        holder is left, the sum is that holder); per task the bytes only it holds at the start."""
        touches: list[list[int]] = [[] for _ in self.tasks]
        counts, sums = [], []
        alone = [0] * self.num_tasks
        for k, (size, holders) in enumerate(self.releasable):
            counts.append(len(holders))
            sums.append(sum(holders))
            for h in holders:
                touches[h].append(k)
            if len(holders) == 1:
                alone[next(iter(holders))] += size
        return tuple(map(tuple, touches)), tuple(counts), tuple(sums), tuple(alone)

    @cached_property
    def lifetime_buffers(self) -> tuple[int, ...]:
        """Buffers whose residency depends on the schedule: every non-empty buffer
        but graph inputs that stay resident and freeable inputs nobody reads."""
        return tuple(b for b, buf in enumerate(self.buffers)
                     if buf.size and not (buf.is_input and not (buf.freeable and self.buffer_users[b])))

    @cached_property
    def initial_resident_bytes(self) -> int:
        """Bytes resident before the first step: all graph inputs but freeable ones nobody reads."""
        return sum(b.size for i, b in enumerate(self.buffers)
                   if b.is_input and (not b.freeable or self.buffer_users[i]))

    @cached_property
    def resident_bytes(self) -> int:
        """Bytes resident for the whole step: graph inputs not declared freeable."""
        return sum(b.size for b in self.buffers if b.is_input and not b.freeable)

    def comm_stream(self, t: int) -> int:
        """The comm stream of COMM task ``t``: its process group's (one comm stream per group)."""
        m = self.machine
        return m.compute_streams + self.tasks[t].group % m.comm_streams

    def allowed_streams(self, t: int) -> range | tuple[int, ...]:
        m = self.machine
        task = self.tasks[t]
        if task.role == Role.COMM:
            if self.is_async_comm(t):
                return (self.comm_stream(t),)
            return tuple(m.compute_stream_ids) + (self.comm_stream(t),)
        if not task.movable:
            return (0,)
        return m.compute_stream_ids

    def default_stream(self, t: int) -> int:
        """The stream a task runs on in the original graph."""
        return self.comm_stream(t) if self.is_async_comm(t) else 0

    @cached_property
    def default_streams(self) -> tuple[int, ...]:
        """`default_stream` of every task."""
        return tuple(self.default_stream(t) for t in range(self.num_tasks))

    @cached_property
    def stream_choices(self) -> tuple[tuple[int, ...], ...]:
        """`allowed_streams` of every task, as tuples."""
        return tuple(tuple(self.allowed_streams(t)) for t in range(self.num_tasks))

    # ---- variants ---------------------------------------------------------------------
    def with_budget(self, memory_budget: int | None) -> "Problem":
        return dataclasses.replace(self, machine=dataclasses.replace(self.machine, memory_budget=memory_budget))

    def summary(self) -> str:
        counts = {r: 0 for r in Role}
        work = {r: 0 for r in Role}
        for task in self.tasks:
            counts[task.role] += 1
            work[task.role] += task.duration
        m = self.machine
        lines = [
            f"problem {self.name or '(unnamed)'}: {self.num_tasks} tasks, {len(self.edges)} edges, {len(self.buffers)} buffers",
            "  " + ", ".join(f"{counts[r]} {r.value}" for r in Role),
            f"  compute work {work[Role.COMPUTE] / 1e3:.1f} us, comm work {work[Role.COMM] / 1e3:.1f} us",
            f"  machine: {m.compute_streams} compute + {m.comm_streams} comm streams, sync {m.sync_overhead} ns, "
            f"budget {'none' if m.memory_budget is None else format_bytes(m.memory_budget)}",
            f"  resident inputs {format_bytes(self.resident_bytes)}, all buffers {format_bytes(sum(b.size for b in self.buffers))}",
        ]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")
