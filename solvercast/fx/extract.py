"""FX GraphModule -> Problem.

Reads only the graph and each node's ``meta["val"]`` (fake tensors from
make_fx, torch.export or AOT); a node without one gets a value derived from
the graph (`solvercast.fx.values`: a getitem takes its source's element,
any other node a FakeTensorProp over a copy), which every reader of values
sees through `solvercast.graph.fxmeta.node_val` while extraction runs, and
the Problem's ``notes`` say so. Never modifies the input module. One task per
schedulable node (everything but placeholders, get_attr and output), task ids
in graph order.

Roles, from `solvercast.graph.nodes.classify` and the storages below:
  placeholder / get_attr    graph inputs: resident buffers (or freeable if named)
  _c10d_functional.*        COMM; asynchronous when a wait_tensor completes it
  wait_tensor               WAIT; returns its collective's buffer (an alias)
  ops named in comm_ops     COMM without a wait: synchronous comm ops
  no fresh storage          FREE (views, reshape of contiguous input, getitem,
                            detach, alias, ...), unless the op writes an input
                            (`solvercast.graph.nodes.is_free_task`)
  writes an input (schema)  COMPUTE; aliases the written buffer, and is ordered
                            after earlier readers and before later ones
  anything else             COMPUTE

Costs come from a `solvercast.cost.model.CostModel`: the analytic model of
``device`` unless ``cost_model`` is given, with ``cost_fn`` overriding
durations per node.

Buffers are storages: two values sharing a storage are one buffer. A node
uses every storage of every node it reads, which is also how PyTorch's FX
memory estimator counts uses.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
import torch.fx as fx
from torch.utils._pytree import tree_flatten

from solvercast.cost.model import AnalyticCostModel, CostFnOverrides, CostModel
from solvercast.cost.device import DeviceProfile, get_profile
from solvercast.errors import ExtractionError
from solvercast.fx.values import derive_values, returns_nothing
from solvercast.graph.fxmeta import attribute, graph_frozen, hint_int, remember_values
from solvercast.gc_paused import gc_paused
from solvercast.graph.nodes import NodeKind, classify, is_free_task, is_task, waits_on_inputs
from solvercast.ir.problem import Buffer, Machine, Problem, Role, Task


def _tensors(val) -> list[torch.Tensor]:
    if isinstance(val, torch.Tensor):  # most values: no pytree walk
        return [val]
    return [v for v in tree_flatten(val)[0] if isinstance(v, torch.Tensor)]


def _storage_key(t: torch.Tensor) -> tuple[int, str]:
    return (t.untyped_storage()._cdata, str(t.device))


def _storage_bytes(t: torch.Tensor) -> int:
    """Bytes of ``t``'s storage. A buffer size must be known, so a symbolic size without a hint
    gets no fallback: `hint_int` raises `UnhintedSizeError` (a ValueError)."""
    try:
        return hint_int(t.untyped_storage().nbytes(), fallback=None)
    except (RuntimeError, NotImplementedError):  # e.g. tensor subclasses without a storage
        return hint_int(t.numel(), fallback=None) * t.element_size()


def _through_getitems(node: object, info: dict) -> object:
    """The value ``node`` takes an element of, through getitems (itself when it is no getitem)."""
    while isinstance(node, fx.Node) and node in info and info[node].kind is NodeKind.GETITEM and node.args:
        node = node.args[0]
    return node


def _is_none_item(node: fx.Node, derived: dict) -> bool:
    """A getitem of a container whose value holds None at that index."""
    if classify(node).kind is not NodeKind.GETITEM or len(node.args) < 2 or not isinstance(node.args[0], fx.Node):
        return False
    src, index = node.args[0], node.args[1]
    container = src.meta["val"] if "val" in src.meta else derived.get(src)
    return isinstance(container, (list, tuple)) and isinstance(index, int) and -len(container) <= index < len(container) \
        and container[index] is None


_ON_A_GROUP = (NodeKind.COLLECTIVE, NodeKind.FENCE)  # a fence is a synchronous op of its communicator


def _matches(node: fx.Node, ops: Iterable) -> bool:
    target = node.target
    packet = getattr(target, "overloadpacket", None)
    for op in ops:
        if target is op or (packet is not None and packet is op):
            return True
        if isinstance(op, str) and op in (str(target), getattr(target, "__name__", None), str(packet)):
            return True
    return False


@graph_frozen()  # extraction and the cost model ask several times per node
@gc_paused()
def extract_problem(
    gm: fx.GraphModule,
    device: str | DeviceProfile = "h100",
    compute_streams: int = 1,
    comm_ops: Iterable | None = None,
    cost_fn: Callable[[fx.Node], float | None] | None = None,
    *,
    comm_streams: int | None = None,
    memory_budget: int | None = None,
    freeable_inputs: Iterable[str] = (),
    preserve_collective_order: bool | str = True,
    default_group_size: int = 8,
    cost_model: CostModel | None = None,
) -> Problem:
    """Build the scheduling Problem of ``gm``.

    Streams: ``compute_streams`` compute streams, and ``comm_streams`` comm
    streams (None: one per process group the collectives use; each
    collective runs on its group's, `Problem.comm_stream`).

    Costs: ``cost_model`` if given, else `AnalyticCostModel` of ``device``
    (``default_group_size`` sizes collectives whose process group cannot be
    resolved, and synchronous comm ops); ``cost_fn(node)`` (seconds, or None)
    overrides durations node by node (`CostFnOverrides`).

    Collective order: ``preserve_collective_order`` (True / "global", "group",
    False / "free"; `Problem.comm_chains`); fences are ordered with every
    comm op by edges in every mode.

    Raises `ExtractionError` naming the node for: a node without
    ``meta["val"]`` whose value cannot be derived (`solvercast.fx.values`),
    a graph whose nodes are not in dependency order (not a DAG), a shape that
    cannot be known (symbolic without a hint).
    """
    profile = get_profile(device)  # checked also where a cost model is given
    costs: CostModel = cost_model if cost_model is not None else AnalyticCostModel(profile, default_group_size)
    if cost_fn is not None:
        costs = CostFnOverrides(costs, cost_fn)
    reading = _Extraction(gm, costs, comm_ops=tuple(comm_ops or ()), freeable=set(freeable_inputs),
                          default_group_size=default_group_size)
    reading.read()
    machine = Machine(compute_streams=compute_streams,
                      comm_streams=max(1, len(reading.group_index)) if comm_streams is None else comm_streams,
                      sync_overhead=costs.sync_overhead(), memory_budget=memory_budget)
    return Problem(tasks=tuple(reading.tasks), edges=tuple(reading.edges), buffers=tuple(reading.buffers),
                   machine=machine, preserve_collective_order=preserve_collective_order,
                   name=graph_name(gm), notes=tuple(n for n in (reading.derived.note(),) if n))


StorageKey = tuple[int, str]  # (storage's address, device): two values sharing one are one buffer


class _Extraction:
    """One reading of a graph, phase by phase (`read`): values and their storages, the unions of storages
    that alias (constants, schemas, waits), each node's role and cost, the order every storage's writes and
    reads keep, fences, and the buffers. Each phase fills the fields the next ones read."""

    def __init__(self, gm: fx.GraphModule, costs: CostModel, *, comm_ops: tuple, freeable: set[str],
                 default_group_size: int):
        self.gm = gm
        self.costs = costs
        self.comm_ops = comm_ops
        self.freeable = freeable
        self.default_group_size = default_group_size
        self.nodes = list(gm.graph.nodes)
        self.inputs_of = {node: node.all_input_nodes for node in self.nodes}  # torch builds a new list per call
        self.storages_of: dict[fx.Node, list[StorageKey]] = {}
        self.alias_of: dict[StorageKey, StorageKey] = {}  # a storage -> the one it is (union-find parent)
        self.storage_bytes: dict[StorageKey, int] = {}

    def read(self) -> None:
        self._check_node_order()
        # values of nodes the trace left without one, seen by every reader from here on (before any fact
        # about a node is remembered); nothing to do when every node has a value
        self.derived = derive_values(self.gm, self.nodes)
        remember_values(self.derived.values)
        self._check_readable()
        self._read_storages()
        self._classify()
        self._unite_constants()
        self._unite_schema_aliases()
        self._unite_waits()
        self._find_primary_waits()
        self._tasks()
        self._storage_order()
        self._fence_order()
        self._buffers()

    # -- union of storages ---------------------------------------------------------------------
    def canon(self, key: StorageKey) -> StorageKey:
        alias_of = self.alias_of
        while key in alias_of:
            key = alias_of[key]
        return key

    def unite(self, mine: StorageKey, theirs: StorageKey) -> None:
        """``mine`` is the same storage as ``theirs`` from now on."""
        a, b = self.canon(mine), self.canon(theirs)
        if a != b:
            self.alias_of[a] = b

    # -- values ----------------------------------------------------------------------------------
    def _check_node_order(self) -> None:
        seen: set[fx.Node] = set()
        for node in self.nodes:
            for inp in self.inputs_of[node]:
                if inp not in seen:
                    raise ExtractionError(
                        f"node {node.name!r} reads {inp.name!r}, which comes later in the graph: the graph is not "
                        "a DAG in node order (run graph.lint() and fix the cycle or reorder the nodes)")
            seen.add(node)

    def _check_readable(self) -> None:
        opaque = [n for n in self.nodes if classify(n).kind is NodeKind.OPAQUE]
        if opaque:
            raise ExtractionError(
                f"node {opaque[0].name!r} is a {opaque[0].op} ({opaque[0].target}): solvercast cannot see or cost "
                f"what it runs ({len(opaque)} such node(s)); trace the model to aten ops with "
                "make_fx(..., tracing_mode='fake') or torch.export instead of symbolic_trace")
        unknown = self.freeable - {n.name for n in self.nodes if n.op in ("placeholder", "get_attr")}
        if unknown:
            raise ExtractionError(f"freeable_inputs names no graph input: {sorted(unknown)}")

    def value_of(self, node: fx.Node):
        if node.op == "get_attr" and "val" not in node.meta:
            return attribute(self.gm, node.target)
        if "val" not in node.meta:
            derived = self.derived
            if node in derived.values:
                return derived.values[node]
            if returns_nothing(node):  # make_fx records no value for ops that return None (foreach_add_, ...)
                return None
            if node.op == "placeholder" and not node.users:  # an input nothing reads (e.g. an int a repro passes)
                return None
            if _is_none_item(node, derived.values):  # the None result of a with_effects node
                return None
            raise ExtractionError(
                f"node {node.name!r} ({node.op} {node.target}) has no meta['val'], and none could be derived "
                f"(a getitem takes its source's element, any other node a FakeTensorProp over a copy of the graph: "
                f"{derived.reason or 'not run'}): trace the model with "
                "make_fx(..., tracing_mode='fake') or torch.export (FakeTensorProp on a symbolic_trace graph "
                "gives values, but its Python callables and modules cannot be costed as aten ops)")
        return node.meta["val"]

    def _read_storages(self) -> None:
        storage_bytes = self.storage_bytes
        for node in self.nodes:
            if node.op == "output":
                continue
            keys = []
            for t in _tensors(self.value_of(node)):
                try:
                    key = _storage_key(t)
                    storage_bytes.setdefault(key, _storage_bytes(t))
                except ValueError as e:
                    raise ExtractionError(
                        f"node {node.name!r} ({node.target}): its size cannot be known ({e}); give the symbolic "
                        "sizes hints (trace with example inputs, or `solvercast.graph.fxmeta.give_size_hint` for a "
                        "size read from data) or mark them static") from None
                keys.append(key)
            self.storages_of[node] = keys

    # -- classification --------------------------------------------------------------------------
    def _classify(self) -> None:
        self.task_nodes = task_nodes = [n for n in self.nodes if is_task(n)]
        self.task_id = {n: i for i, n in enumerate(task_nodes)}
        self.info = info = {n: classify(n) for n in task_nodes}
        # process groups in order of first use: each is a communicator with its own comm stream
        self.group_index: dict[str | None, int] = {}
        for node in task_nodes:
            if info[node].kind in _ON_A_GROUP:
                self.group_index.setdefault(info[node].group_name, len(self.group_index))
        for node in task_nodes:  # a stream token (record) is 0 bytes and holds nothing: no buffer of its own
            if info[node].kind is NodeKind.ANCHOR and not info[node].aliases:
                self.storages_of[node] = []

    def kind_behind(self, node: fx.Node) -> tuple[NodeKind | None, fx.Node]:
        """What a wait waits on, looking through getitems of coalesced results: the node and its kind (None for
        a node that is no task, e.g. a graph input)."""
        source = _through_getitems(node, self.info)
        return (self.info[source].kind if source in self.info else None), source

    def collective_behind(self, node: fx.Node) -> fx.Node | None:
        """The collective a wait completes, looking through getitem of coalesced results."""
        kind, source = self.kind_behind(node)
        return source if kind is NodeKind.COLLECTIVE else None

    # -- aliases -----------------------------------------------------------------------------------
    def _unite_constants(self) -> None:
        """A graph constant is the module's own tensor, so its storage is the attribute's: two get_attr nodes of
        one attribute, or attributes that are views of one tensor, are one storage whatever their traced values
        say (a real trace gives every get_attr value a storage of its own, one per node)."""
        constant_storage: dict[StorageKey, StorageKey] = {}  # attribute's storage -> the first node's key
        for node in self.nodes:
            if node.op != "get_attr":
                continue
            try:
                held = [_storage_key(t) for t in _tensors(attribute(self.gm, node.target))]
            except (AttributeError, RuntimeError, NotImplementedError):  # no such attribute, or no storage to read
                continue
            if len(held) == len(self.storages_of[node]):
                for mine, real in zip(self.storages_of[node], held):
                    self.unite(mine, constant_storage.setdefault(real, mine))

    def _unite_schema_aliases(self) -> None:
        """Aliasing by schema: a view, an in-place or out= result, a getitem of a multi-output op is its
        input's storage; a returned tensor list aliasing a list argument (an in-place coalesced collective)
        is, element by element, the storages of the list's nodes. Fake traces share storages already; real
        traces give every value its own, so only the schemas say."""
        storages_of, info = self.storages_of, self.info

        def one_storage(src) -> StorageKey | None:
            keys = storages_of.get(src) if src is not None else None
            return keys[0] if keys is not None and len(keys) == 1 else None

        for node in self.task_nodes:
            for r, src in enumerate(info[node].aliases):
                if src is None:
                    continue
                if info[node].kind is NodeKind.GETITEM:
                    if src not in storages_of or not isinstance(node.args[1], int):
                        continue
                    container = self.value_of(src)
                    if not isinstance(container, (list, tuple)):
                        continue
                    theirs = [_storage_key(t) for t in _tensors(container[node.args[1]])]
                    mine = storages_of[node]
                else:
                    val = self.value_of(node)
                    returned = val[r] if len(info[node].aliases) > 1 and isinstance(val, (list, tuple)) else val
                    mine = [_storage_key(t) for t in _tensors(returned)]
                    if isinstance(src, tuple):  # a tensor list: element i is the i-th node's storage
                        theirs = [one_storage(s) for s in src]
                    elif src in storages_of:
                        theirs = storages_of[src]
                    else:
                        continue
                if len(theirs) == 1:
                    if theirs[0] is not None:
                        for m in mine:
                            self.unite(m, theirs[0])
                elif len(mine) == len(theirs):
                    for m, t in zip(mine, theirs):
                        if t is not None:
                            self.unite(m, t)

    def _unite_waits(self) -> None:
        """A wait returns its collective's buffer (its schema declares no alias): every wait, also one on a
        graph input or on a waited value, so that all unions are made before anything reads `canon`."""
        for node in self.task_nodes:
            if self.info[node].kind is NodeKind.WAIT and node.args and isinstance(node.args[0], fx.Node):
                for mine, theirs in zip(self.storages_of[node], self.storages_of.get(node.args[0], ())):
                    self.unite(mine, theirs)

    def _find_primary_waits(self) -> None:
        self.earlier = set(waits_on_inputs(self.gm.graph))  # finished when this graph starts (`waits_on_inputs`)
        self.primary_wait: dict[fx.Node, fx.Node] = {}
        self.waited_again: set[fx.Node] = set()  # a wait on a wait's result: its collective is complete already
        for node in self.task_nodes:
            if self.info[node].kind is NodeKind.WAIT and node not in self.earlier:
                kind, source = self.kind_behind(node.args[0])
                if kind is NodeKind.COLLECTIVE:
                    self.primary_wait.setdefault(source, node)
                elif kind is NodeKind.WAIT:
                    self.waited_again.add(node)
                else:
                    raise ExtractionError(
                        f"wait {node.name!r} does not wait on a collective ({node.args[0]}); "
                        "only _c10d_functional collectives have separate waits")

    # -- tasks -------------------------------------------------------------------------------------
    def _tasks(self) -> None:
        canon, info, storages_of, task_id = self.canon, self.info, self.storages_of, self.task_id
        known_storages: set[StorageKey] = set()
        for node in self.nodes:
            if node.op in ("placeholder", "get_attr"):
                known_storages.update(canon(k) for k in storages_of[node])
        self.tasks: list[Task] = []
        self.wait_edges: list[tuple[int, int]] = []  # collective -> the wait that completes it
        self.allocates: dict[fx.Node, list[StorageKey]] = {}
        op_names: dict = {}  # target -> its name (an op's str() is Python code: once per op, not per node)
        for node in self.task_nodes:
            op_name = op_names.get(node.target)
            if op_name is None:
                op_name = op_names[node.target] = str(node.target)
            fresh = [k for k in storages_of[node] if canon(k) not in known_storages]
            for k in storages_of[node]:
                known_storages.add(canon(k))
            self.allocates[node] = [canon(k) for k in fresh]
            completes = self._wait_edge(node)
            if completes is not None:
                self.wait_edges.append(completes)
            role = self._role(node, allocates=bool(fresh))
            duration, occupancy = self._cost(node, role, op_name)
            group = self.group_index.get(info[node].group_name, 0) if info[node].kind in _ON_A_GROUP else 0
            self.tasks.append(Task(
                name=node.name, role=role, duration=duration, occupancy=min(1.0, max(occupancy, 1e-6)),
                waits_for=task_id[self.collective_behind(node.args[0])] if role == Role.WAIT else None,
                op=op_name, movable=any(storages_of.get(i) for i in self.inputs_of[node]),
                group=group if role == Role.COMM else 0))

    def _waits_for_collective(self, node: fx.Node) -> bool:
        """A wait that completes a collective of this graph (not one on an input, nor on a waited value)."""
        return self.info[node].kind is NodeKind.WAIT and node not in self.earlier and node not in self.waited_again

    def _wait_edge(self, node: fx.Node) -> tuple[int, int] | None:
        """What a wait follows: its collective, or for a second wait on a coalesced collective the first."""
        if not self._waits_for_collective(node):
            return None
        first = self.primary_wait[self.collective_behind(node.args[0])]
        before = self.collective_behind(node.args[0]) if first is node else first
        return self.task_id[before], self.task_id[node]

    def _role(self, node: fx.Node, *, allocates: bool) -> Role:
        info = self.info[node]
        if info.kind is NodeKind.WAIT:
            # a wait on an input or a waited value hands back its storage, and a second wait on a coalesced
            # collective was completed by the first: only a collective's first wait waits
            if self._waits_for_collective(node) and self.primary_wait[self.collective_behind(node.args[0])] is node:
                return Role.WAIT
            return Role.FREE
        if info.kind in _ON_A_GROUP or _matches(node, self.comm_ops):  # a fence: a synchronous comm op
            return Role.COMM
        if is_free_task(info, allocates=allocates, holds_storage=bool(self.storages_of[node]),
                        reads_nodes=bool(self.inputs_of[node])):
            return Role.FREE
        return Role.COMPUTE

    def _cost(self, node: fx.Node, role: Role, op_name: str) -> tuple[float, float]:
        """(duration, occupancy) of a task in ``role``."""
        if role not in (Role.COMPUTE, Role.COMM):
            return 0, 1.0
        try:
            if role == Role.COMM and self.info[node].kind is not NodeKind.COLLECTIVE:  # a synchronous comm op
                nbytes = sum(self.storage_bytes[k] for k in self.storages_of[node])
                return self.costs.sync_comm_duration(node, nbytes, self.default_group_size), 1.0
            return self.costs.duration(node), self.costs.occupancy(node)
        except ExtractionError:
            raise
        except Exception as e:  # the cost model cannot size this op
            raise ExtractionError(f"node {node.name!r} ({op_name}): cannot estimate its cost: {e}") from e

    # -- order -------------------------------------------------------------------------------------
    def _storage_order(self) -> None:
        """Data edges, and: any two tasks touching one storage, one of them writing, keep their order. A write
        ends with its task, an in-place collective's with its wait (the library writes the buffer until then)."""
        canon, info, storages_of, task_id = self.canon, self.info, self.storages_of, self.task_id
        task_nodes, primary_wait = self.task_nodes, self.primary_wait
        self.users: dict[StorageKey, set[int]] = {}
        users = self.users
        self.edges: set[tuple[int, int]] = set(self.wait_edges)
        edges = self.edges
        last_readers: dict[StorageKey, list[int]] = {}  # readers since the last write, per storage
        last_writer: dict[StorageKey, tuple[int, int]] = {}  # storage -> (writing task, task its write ends at)
        for node in task_nodes:
            t = task_id[node]
            for inp in self.inputs_of[node]:
                if inp in task_id:
                    edges.add((task_id[inp], t))
                for k in storages_of.get(inp, ()):
                    k = canon(k)
                    users.setdefault(k, set()).add(t)
                    if k in last_writer:  # read after write
                        writer, done = last_writer[k]
                        if done < t:
                            edges.add((done, t))
                        elif writer < t:  # read between an in-place collective and its wait
                            edges.add((writer, t))
                    last_readers.setdefault(k, []).append(t)
            written = self._written_by(node)
            own_wait = primary_wait.get(node) if info[node].kind is NodeKind.COLLECTIVE else None
            write_ends = task_id[own_wait] if own_wait is not None else t
            for k in written:
                if k in last_writer:  # write after write, also where the writer reads nothing of it
                    writer, done = last_writer[k]
                    if done < t:
                        edges.add((done, t))
                    elif writer < t:
                        edges.add((writer, t))
                for r in last_readers.get(k, []):
                    if r != t:
                        edges.add((r, t))  # write after read
                    wait = primary_wait.get(task_nodes[r])
                    if wait is not None and task_id[wait] < t:
                        edges.add((task_id[wait], t))  # the collective reads it until its wait
                last_writer[k] = (t, write_ends)
                last_readers[k] = []

    def _written_by(self, node: fx.Node) -> set[StorageKey]:
        written = set()
        for v in self.info[node].writes:
            written.update(self.canon(k) for k in self.storages_of.get(v, ()))
        if self.info[node].kind is NodeKind.WAIT and node not in self.earlier:
            coll = self.collective_behind(node.args[0])
            if coll is not None and coll is not node.args[0]:
                # a wait on one result of a coalesced collective writes every result again: on gloo the
                # work copies its results out at each wait, so a write to any of them before the last wait
                # is lost (an in-place op between two waits of one coalesced reduce_scatter was undone)
                written.update(self.canon(k) for k in self.storages_of.get(coll, ()))
        return written

    def _fence_order(self) -> None:
        """Fences (send, recv, barrier, and effect-token ordering: with_effects) keep their place among the
        communication ops whatever collective order is kept (global, per process group, free): each comm op
        gets an edge to the first fence after it and from the last fence before it, and each fence from the
        fence before it, so every fence stays ordered with every collective (O(comm ops) edges)."""
        fences = (NodeKind.FENCE, NodeKind.EFFECT)
        info, task_id = self.info, self.task_id
        comm = [task_id[n] for n in self.task_nodes if info[n].kind in (NodeKind.COLLECTIVE, *fences)]
        fence_at = [i for i, t in enumerate(comm) if info[self.task_nodes[t]].kind in fences]
        for k, i in enumerate(fence_at):
            stop = fence_at[k + 1] if k + 1 < len(fence_at) else len(comm)
            for j in range(fence_at[k - 1] if k else 0, i):  # the fence before, and the comm ops since
                self.edges.add((comm[j], comm[i]))
            for j in range(i + 1, stop):  # the comm ops up to the next fence
                self.edges.add((comm[i], comm[j]))

    # -- buffers -----------------------------------------------------------------------------------
    def _buffers(self) -> None:
        canon, storages_of = self.canon, self.storages_of
        producer: dict[StorageKey, int | None] = {}
        input_name: dict[StorageKey, str] = {}
        output_storages: set[StorageKey] = set()
        for node in self.nodes:
            if node.op in ("placeholder", "get_attr"):
                for k in storages_of[node]:
                    k = canon(k)
                    if k not in producer:
                        producer[k] = None
                        input_name[k] = node.name
            elif node in self.task_id:
                for k in self.allocates[node]:
                    producer.setdefault(k, self.task_id[node])
            elif node.op == "output":
                for inp in self.inputs_of[node]:
                    output_storages.update(canon(k) for k in storages_of.get(inp, ()))
        self.buffers = []
        for k, prod in producer.items():
            name = input_name.get(k) or self.task_nodes[prod].name
            users = self.users.get(k, set())
            self.buffers.append(Buffer(
                name=name, size=self.storage_bytes[k], producer=prod, users=tuple(users),
                is_output=k in output_storages,
                # an input nobody reads is held to the end all the same: Inductor's call(args) unpacks it into a
                # local it never deletes
                freeable=prod is None and name in self.freeable and bool(users)))


def graph_name(gm: fx.GraphModule) -> str:
    """The name a problem extracted from ``gm`` gets: the built-in model and its parameters, else the class."""
    info = getattr(gm, "meta", {}).get("solvercast") if isinstance(getattr(gm, "meta", None), dict) else None
    if info and info.get("model"):
        params = ",".join(f"{k}={v}" for k, v in sorted(info.get("params", {}).items()))
        return f"{info['model']}({params})"
    return type(gm).__name__
