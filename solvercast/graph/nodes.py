"""What an FX node is: the one node classifier.

``classify(node)`` answers, for extraction, the cost model and lowering alike:
is the node a graph input, the output, a collective (of which kind, on which
process group), a wait, a getitem, a metadata query, a view, or compute, and
which of its arguments it writes in place. Everything that depends only on
the op (the target) is decided once per target and cached; only the written
arguments and the process group are read from the node's own arguments.

Two questions sound alike and are kept apart on purpose, each with its rule:

* `costs_nothing` (cost model, by the op's **schema**): the node launches no
  kernel it must be priced for: not a ``call_function``, ``getitem``, or a
  view (the schema returns a non-mutating alias of an input, or one of the
  views that do not declare it). It needs no storages, so it works on any
  node, also outside extraction.
* `is_free_task` (extraction, by **storage**): the scheduler's FREE role:
  the node allocates no storage, writes nothing and does no data work. It is
  decided from the storages extraction tracks (a reshape of a contiguous
  input is free whatever its schema says), and it also covers metadata
  queries (``sym_size``, ...), which read no data but are not schema views.

Unifying them would change results: e.g. ``call_module`` nodes cost nothing
by schema yet are compute tasks when they allocate, and metadata queries are
FREE tasks yet priced as a kernel launch when the cost model is asked.
"""

from __future__ import annotations

import enum
import functools
import operator
from dataclasses import dataclass
from typing import Any, Optional

import torch
import torch.fx as fx

from solvercast.graph import ops
from solvercast.graph.collectives import FENCE_OPS, LEGACY_OPS, CollectiveKind, kind_of_op, legacy_process_group, wait_op
from solvercast.graph.fxmeta import bound_args, hint_int, is_tensor_like, node_val, once_per_node, op_target

__all__ = [
    "NodeKind", "NodeInfo", "classify", "op_target", "schemaless_ops", "waits_on_inputs", "is_collective", "is_wait", "is_task", "costs_nothing", "is_free_task",
    "METADATA_OPS",
]


class NodeKind(enum.Enum):
    """What a node does, as far as scheduling and costing care."""

    INPUT = "input"  # placeholder or get_attr: a graph input
    OUTPUT = "output"
    OPAQUE = "opaque"  # call_module / call_method: no schema to read
    COLLECTIVE = "collective"  # a _c10d_functional collective launch
    WAIT = "wait"  # _c10d_functional.wait_tensor
    GETITEM = "getitem"  # operator.getitem of a multi-output node
    METADATA = "metadata"  # reads a tensor's metadata only (sym_size, ...)
    VIEW = "view"  # a non-mutating alias of an input (by schema)
    ANCHOR = "anchor"  # solvercast.record / wait_and_bind: stream bookkeeping, no kernel, no memory
    FENCE = "fence"  # send / recv / barrier: communication must not be reordered across it
    EFFECT = "effect"  # higher_order.with_effects: effect-token ordering, a fence for communication (not itself one)
    COMPUTE = "compute"  # everything else: a kernel


@dataclass(frozen=True)
class NodeInfo:
    """The classification of one node.

    * ``collective``: the kind's record (COLLECTIVE only).
    * ``group_name``: the process group a collective or fence runs on, as named
      by its ``group_name`` argument, or for a legacy ``c10d`` op (collective,
      send, recv, barrier) by its ``ProcessGroup`` argument (None when it has none).
    * ``mutated_args``: schema names of the arguments the op writes in place
      (``self`` of ``add_``, ``out`` of an out= variant, ``input`` of
      ``all_reduce_``); ``writes``: the nodes passed there (tensor lists
      flattened).
    * ``aliases``: per schema return, the input node it is an alias of (its
      schema's alias annotation, ``Tensor(a)`` / ``Tensor(a!)``: views,
      in-place and out= results), or None for a fresh result; for a return
      aliasing a tensor list (``Tensor(a!)[]``), the tuple of the list's
      nodes, the returned list's element i an alias of the i-th; for a
      ``getitem``, its container. Storages of traced values are not enough:
      values traced with real tensors get a storage each, views included.
    * ``distributed``: an op of a c10d namespace (``_c10d_functional`` or
      ``c10d``): a collective, a wait, or one the registry does not know.
      Dead-code elimination keeps these: a rank that skipped one would leave
      the others waiting.
    """

    kind: NodeKind
    collective: Optional[CollectiveKind] = None
    group_name: Optional[str] = None
    mutated_args: tuple[str, ...] = ()
    writes: tuple[fx.Node, ...] = ()
    aliases: tuple[Optional[fx.Node | tuple[Optional[fx.Node], ...]], ...] = ()
    distributed: bool = False


_aten = torch.ops.aten

#: Ops that read only a tensor's metadata, never its data: no GPU work, no stream.
METADATA_OPS = frozenset({_aten.sym_size.int, _aten.sym_numel.default, _aten.sym_stride.int,
                          _aten.sym_storage_offset.default})

# Views whose schema does not declare the alias (still no kernel).
_UNDECLARED_VIEWS = frozenset(
    getattr(_aten, n).default for n in ("_unsafe_view", "_reshape_alias") if hasattr(_aten, n)
)

# Ops whose schema declares an alias of their input but which copy when the input's strides allow no
# view (reshape of a permuted tensor, contiguous of a transposed one): `_copies_its_input` asks the values.
_MAYBE_COPIES = frozenset(
    getattr(getattr(_aten, n), o) for n, o in (("reshape", "default"), ("flatten", "using_ints"),
                                                ("reshape_as", "default"), ("contiguous", "default"))
    if hasattr(_aten, n) and hasattr(getattr(_aten, n), o)
)

_WITH_EFFECTS = getattr(getattr(torch.ops, "higher_order", None), "with_effects", None)

_NODE_OPS = {"placeholder": NodeKind.INPUT, "get_attr": NodeKind.INPUT, "output": NodeKind.OUTPUT}


@dataclass(frozen=True)
class _OpFacts:
    """What the target alone says."""

    kind: NodeKind
    collective: Optional[CollectiveKind]
    written: tuple[str, ...]  # schema names of the arguments written in place
    distributed: bool
    return_aliases: tuple[Optional[str], ...] = ()  # per return, the argument whose alias set it shares


def _is_schema_view(target: Any) -> bool:
    """The schema returns only non-mutating aliases and writes no argument."""
    schema = getattr(target, "_schema", None)
    if schema is None or not isinstance(target, torch._ops.OpOverload):
        return False
    if not schema.returns:
        return False
    for a in schema.arguments:
        if a.alias_info is not None and a.alias_info.is_write:
            return False
    for r in schema.returns:
        if r.alias_info is None or r.alias_info.is_write:
            return False
    return True


def _written_args(target: Any) -> tuple[str, ...]:
    schema = getattr(target, "_schema", None)
    if schema is None:
        return ()
    return tuple(a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write)


def _return_aliases(target: Any) -> tuple[Optional[str], ...]:
    schema = getattr(target, "_schema", None)
    if schema is None:
        return ()
    by_set = {}
    for a in schema.arguments:
        if a.alias_info is not None:
            for alias_set in a.alias_info.before_set:
                by_set.setdefault(alias_set, a.name)
    # ``Tensor(a)[]`` (split, unbind, chunk): the annotation sits on the list's elements, which the
    # Python schema does not expose; the argument is the one annotated ``Tensor(a -> *)``
    into_wildcard = [a.name for a in schema.arguments if a.alias_info is not None and "*" in a.alias_info.after_set]
    out = []
    for r in schema.returns:
        if r.alias_info is None:
            out.append(None)
        elif r.alias_info.before_set:
            out.append(next((by_set[x] for x in r.alias_info.before_set if x in by_set), None))
        else:
            out.append(into_wildcard[0] if len(into_wildcard) == 1 else None)
    return tuple(out) if any(out) else ()


def _legacy_aliases(target: Any, written: str) -> tuple[Optional[str], ...]:
    """A legacy c10d collective returns the tensors it writes (``allreduce_(Tensor[] tensors, ...) ->
    (Tensor[], Work)``) without declaring the alias: the return of the written argument's type is it."""
    schema = getattr(target, "_schema", None)
    arg = next((a for a in schema.arguments if a.name == written), None) if schema is not None else None
    if arg is None:
        return ()
    out = tuple(written if str(r.type) == str(arg.type) else None for r in schema.returns)
    return out if any(out) else ()


def _op_facts(target: Any) -> _OpFacts:
    distributed = getattr(target, "namespace", None) in ("_c10d_functional", "c10d")
    legacy = LEGACY_OPS.get(target) if distributed else None
    if legacy is not None:  # in place, though their schemas declare no alias
        return _OpFacts(NodeKind.COLLECTIVE, legacy[0], (legacy[1],), distributed, _legacy_aliases(target, legacy[1]))
    fence = FENCE_OPS.get(target) if distributed else None
    if fence is not None:
        return _OpFacts(NodeKind.FENCE, None, (fence,) if fence else (), distributed, ())
    if target is _WITH_EFFECTS and target is not None:
        return _OpFacts(NodeKind.EFFECT, None, (), distributed, ())
    collective = kind_of_op(target)
    if collective is not None:
        kind = NodeKind.COLLECTIVE
    elif target is wait_op() and target is not None:
        kind = NodeKind.WAIT
    elif target is operator.getitem:
        kind = NodeKind.GETITEM
    elif ops.is_anchor(target):
        kind = NodeKind.ANCHOR
    elif target in METADATA_OPS:
        kind = NodeKind.METADATA
    elif target in _UNDECLARED_VIEWS or _is_schema_view(target):
        kind = NodeKind.VIEW
    else:
        kind = NodeKind.COMPUTE
    aliases = _return_aliases(target)
    if target in _UNDECLARED_VIEWS and not aliases:  # _unsafe_view: a view of ``self`` all the same
        aliases = ("self",)
    return _OpFacts(kind, collective, _written_args(target), distributed, aliases)


_cached_op_facts = functools.lru_cache(maxsize=4096)(_op_facts)


def _facts(target: Any) -> _OpFacts:
    try:
        return _cached_op_facts(target)
    except TypeError:  # an unhashable target
        return _op_facts(target)


def classify(node: fx.Node) -> NodeInfo:
    """The `NodeInfo` of ``node`` (never raises for a well-formed FX node); once per node inside
    `solvercast.graph.fxmeta.graph_frozen`."""
    return once_per_node(_classify, node)


def _classify(node: fx.Node) -> NodeInfo:
    kind = _NODE_OPS.get(node.op)
    if kind is not None:
        return NodeInfo(kind)
    if node.op != "call_function":
        return NodeInfo(NodeKind.OPAQUE)
    target = op_target(node.target)
    facts = _facts(target)
    if facts.kind is NodeKind.GETITEM:
        container = node.args[0] if node.args and isinstance(node.args[0], fx.Node) else None
        return NodeInfo(facts.kind, aliases=(container,), distributed=facts.distributed)
    if target in _MAYBE_COPIES and _copies_its_input(node, target):
        return NodeInfo(NodeKind.COMPUTE)  # a copy: a kernel, and a fresh storage (no alias)
    on_a_group = facts.kind in (NodeKind.COLLECTIVE, NodeKind.FENCE)
    if not facts.written and not facts.return_aliases and not on_a_group:
        return NodeInfo(facts.kind, distributed=facts.distributed)
    bound = bound_args(node, target)
    aliases = tuple(_alias_source(bound.get(name)) if name is not None else None for name in facts.return_aliases)
    writes = []
    for name in facts.written:
        value = bound.get(name)
        for v in _flatten(value) if isinstance(value, (list, tuple)) else (value,):  # allgather_'s Tensor[][]
            if isinstance(v, fx.Node):
                writes.append(v)
    group = bound.get("group_name") if facts.kind is NodeKind.COLLECTIVE else None
    if on_a_group and (target in LEGACY_OPS or target in FENCE_OPS):
        pg = legacy_process_group(node)
        group = getattr(pg, "group_name", None) if pg is not None else None
    return NodeInfo(facts.kind, collective=facts.collective, group_name=None if group is None else str(group),
                    mutated_args=facts.written, writes=tuple(writes), aliases=aliases,
                    distributed=facts.distributed)


def _alias_source(value: Any) -> Any:
    """What a return aliases, from the argument its schema names: the node, or for a tensor list
    (``Tensor(a!)[] inputs`` of an in-place coalesced collective) the tuple of its elements' nodes,
    flattened, element i the i-th (None where an element is no node); None for anything else."""
    if isinstance(value, fx.Node):
        return value
    if isinstance(value, (list, tuple)):
        flat = _flatten(value)
        if any(isinstance(v, fx.Node) for v in flat):
            return tuple(v if isinstance(v, fx.Node) else None for v in flat)
    return None


def _flatten(value: Any) -> list:
    out = []
    for v in value:
        out.extend(_flatten(v) if isinstance(v, (list, tuple)) else (v,))
    return out


def _copies_its_input(node: fx.Node, target: Any) -> bool:
    """Whether a reshape-like node copies: ``reshape`` (``flatten``, ``reshape_as``) returns a view when
    ``view`` can give the new shape on the input's strides, else a contiguous copy; ``contiguous`` copies
    unless the input already is. Decided on the input's (hinted) geometry, so it holds for fake and real
    traces alike; a node without tensor values stays a view."""
    x = node_val(node.args[0]) if node.args and isinstance(node.args[0], fx.Node) else None
    y = node_val(node)
    if not (is_tensor_like(x) and is_tensor_like(y)) or not hasattr(x, "stride"):
        return False
    try:
        shape = [hint_int(d, 1) for d in x.shape]
        strides = [hint_int(d, 1) for d in (x.stride() if callable(x.stride) else x.stride)]  # TensorMetadata: a tuple
        meta = torch.empty_strided(shape, strides, dtype=x.dtype, device="meta")
        if target is _aten.contiguous.default:
            fmt = node.kwargs.get("memory_format", torch.contiguous_format)
            return not meta.is_contiguous(memory_format=fmt)
        meta.view([hint_int(d, 1) for d in y.shape])
    except RuntimeError:  # view() refuses: reshape copies
        return True
    except Exception:  # geometry that cannot be read: keep the schema's answer
        return False
    return False


def is_distributed(node: fx.Node) -> bool:
    """`NodeInfo.distributed` from the op alone (cheaper than `classify`)."""
    return node.op == "call_function" and _facts(op_target(node.target)).distributed


def is_collective(node: fx.Node) -> bool:
    """True for a ``torch.ops._c10d_functional`` collective node (not a wait)."""
    return classify(node).kind is NodeKind.COLLECTIVE


def is_wait(node: fx.Node) -> bool:
    """True for ``torch.ops._c10d_functional.wait_tensor``."""
    return classify(node).kind is NodeKind.WAIT


def is_task(node: fx.Node) -> bool:
    """A schedulable node: one task per node that is not a graph input or the output."""
    return node.op not in _NODE_OPS


def costs_nothing(info: NodeInfo) -> bool:
    """The cost model prices the node at 0 (by schema; see the module docstring):
    not a ``call_function``, ``getitem``, or a view."""
    return info.kind in (NodeKind.INPUT, NodeKind.OUTPUT, NodeKind.OPAQUE, NodeKind.GETITEM, NodeKind.VIEW,
                         NodeKind.ANCHOR)


def is_free_task(info: NodeInfo, *, allocates: bool, holds_storage: bool, reads_nodes: bool) -> bool:
    """The scheduler's FREE role (by storage; see the module docstring).

    ``allocates``: the node's value has a storage no earlier node had;
    ``holds_storage``: its value has any storage; ``reads_nodes``: it has
    input nodes. Free: allocates nothing, writes nothing, and is an alias of
    its input, reads nothing, or reads metadata only. An op that reads tensor
    data and returns a scalar (``item``) does GPU work and is not free.
    """
    if info.kind is NodeKind.ANCHOR:
        return True  # a token is 0 bytes and holds nothing; wait_and_bind returns an alias
    if allocates or info.writes:
        return False
    return holds_storage or not reads_nodes or info.kind is NodeKind.METADATA


def schemaless_ops(graph: fx.Graph) -> dict[str, int]:
    """Ops the cost model prices without an op schema, by name, with counts: compute
    ``call_function`` nodes whose target is a Python callable (``operator.matmul``, ``torch.relu`` in
    a ``symbolic_trace`` graph) rather than an aten overload, and higher-order ops torch's FLOP registry
    has no formula for (a user Triton kernel; flex attention has one). No FLOP formula applies to them,
    so the roofline prices them by bytes moved alone: a matmul among them is priced too low. The report
    lists them."""
    from torch.utils.flop_counter import flop_registry

    out: dict[str, int] = {}
    for node in graph.nodes:
        if node.op != "call_function" or classify(node).kind is not NodeKind.COMPUTE:
            continue
        target = op_target(node.target)
        if not isinstance(target, torch._ops.OpOverload) and not _has_flop_formula(target, flop_registry):
            name = f"{getattr(node.target, '__module__', '') or ''}.{getattr(node.target, '__name__', node.target)}"
            out[name.lstrip(".")] = out.get(name.lstrip("."), 0) + 1
    return dict(sorted(out.items()))


def _has_flop_formula(target: Any, registry: dict) -> bool:
    try:
        return target in registry
    except TypeError:  # an unhashable target
        return False


def waits_on_inputs(graph: fx.Graph) -> list[fx.Node]:
    """The waits whose collective is a graph input (through getitems of a coalesced result): collectives an
    earlier graph launched, as a backward graph waits on its forward's last reduce_scatters. Extraction takes
    them as finished when this graph starts, as PyTorch's overlap scheduler and autoparallel's step simulator
    do (their time left in flight is not modelled); the report names them."""
    out = []
    for node in graph.nodes:
        if node.op != "call_function" or classify(node).kind is not NodeKind.WAIT or not node.args:
            continue
        source = node.args[0]
        while isinstance(source, fx.Node) and source.op == "call_function" and \
                classify(source).kind is NodeKind.GETITEM and source.args:
            source = source.args[0]
        if isinstance(source, fx.Node) and source.op == "placeholder":
            out.append(node)
    return out
