"""Collectives: one record per kind, and the alpha-beta model of their time.

The one home of what a collective kind is. Each `CollectiveKind` record
holds everything solvercast knows about that kind: the
``torch.ops._c10d_functional`` ops that launch it (functional, in-place and
coalesced forms), what ``N`` (the bytes of the model) is for its node, and
its alpha-beta time. Adding a kind is adding one record to `REGISTRY`.

Alpha-beta model
================

``solvercast.cost.model.collective_time(kind, nbytes, p, profile)``, with ``p`` the group size,
``N`` = ``nbytes``, ``a`` = ``profile.link_latency`` (per step) and ``B`` =
``profile.link_bandwidth`` (**unidirectional** NVLink bandwidth per GPU, i.e.
half of the datasheet's bidirectional total; NCCL's "bus bandwidth")::

    kind             N means                         time (p >= 2)
    ---------------  ------------------------------  -----------------------------------------
    all_gather       FULL gathered (output) size      (p-1) a + (p-1)/p * N / B        (ring)
    reduce_scatter   FULL (input, pre-scatter) size   (p-1) a + (p-1)/p * N / B        (ring)
    all_reduce       buffer size                      N <  small: ceil(log2 p) a + N / B (one-shot/tree)
                                                      N >= small: 2(p-1) a + 2(p-1)/p * N / B (ring)
    all_to_all       per-rank buffer size             (p-1) a + (p-1)/p * N / B
    broadcast        buffer size                      (p-1) a + N / B     (pipelined ring/chain)

    p <= 1: 0 for every kind (nothing is communicated).

``small`` is ``profile.all_reduce_small_bytes`` (default 128 KiB, Inductor's
default ``one_shot_all_reduce_threshold_bytes``). ``a`` absorbs the NCCL
kernel launch; no separate launch overhead is added to collectives.

For ``_c10d_functional`` nodes, :func:`collective_kind_and_group` derives
``N`` with the record's ``wire_bytes``: all_reduce / broadcast: the input
size; all_gather: the output (gathered) size; reduce_scatter: the input size;
all_to_all: max(input, output) size (uneven splits); coalesced variants: the
sum over their tensors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Protocol

import torch
import torch.fx

from solvercast.graph.fxmeta import attribute, bound_args, hint_int, node_val, op_target, val_bytes


__all__ = [
    "CollectiveKind", "REGISTRY", "COLLECTIVE_KINDS", "COLLECTIVE_OCCUPANCY", "kind_named",
    "collective_kind_and_group", "kind_of_op", "legacy_process_group", "wait_op",
]

#: Occupancy reported for collectives: NCCL runs on a handful of channels
#: (one CTA each, typically 8-16 on NVLink), ~10% of an H100's 132 SMs.
COLLECTIVE_OCCUPANCY = 0.1


class Links(Protocol):
    """What the time formulas read of a device (`solvercast.cost.device.DeviceProfile` has it)."""

    link_latency: float  # seconds per step
    link_bandwidth: float  # bytes per second, one direction
    all_reduce_small_bytes: int  # below this an all_reduce is one-shot


@dataclass(frozen=True)
class CollectiveKind:
    """One kind of collective.

    * ``name``: the kind's name (``collective_time``'s ``kind``).
    * ``ops``: names of the ``torch.ops._c10d_functional`` ops that launch it
      (ops this torch lacks are skipped).
    * ``wire_bytes(in_bytes, out_bytes, group_size)``: ``N`` of the model
      for one node, from its input and output bytes.
    * ``seconds(n, p, profile)``: alpha-beta time for a group of ``p >= 2``.
    * ``label``: its short name on a picture's bars (``AG``); the name itself when empty.
    """

    name: str
    ops: tuple[str, ...]
    wire_bytes: Callable[[int, int, int], int]
    seconds: Callable[[float, int, Links], float]
    # legacy in-place ``torch.ops.c10d`` ops (what make_fx records from ``dist.all_reduce`` and FSDP2):
    # name -> (argument it writes, argument it reads). Their schemas declare no alias; they are
    # synchronous in the graph (no separate wait).
    legacy: tuple[tuple[str, str, str], ...] = ()
    label: str = ""


def _input_bytes(in_bytes: int, out_bytes: int, group_size: int) -> int:
    return in_bytes


def _gathered_bytes(in_bytes: int, out_bytes: int, group_size: int) -> int:
    return out_bytes if out_bytes else in_bytes * group_size


def _larger_side_bytes(in_bytes: int, out_bytes: int, group_size: int) -> int:
    return max(in_bytes, out_bytes)


def _ring(n: float, p: int, profile: Links) -> float:
    """p-1 steps, each moving 1/p of the buffer."""
    return (p - 1) * profile.link_latency + (p - 1) / p * n / profile.link_bandwidth


def _all_reduce(n: float, p: int, profile: Links) -> float:
    """One-shot (log p steps, whole buffer) below the small-message threshold, else a ring
    reduce_scatter + all_gather."""
    a, bw = profile.link_latency, profile.link_bandwidth
    if n < profile.all_reduce_small_bytes:
        return math.ceil(math.log2(p)) * a + n / bw
    return 2 * (p - 1) * a + 2 * (p - 1) / p * n / bw


def _chain(n: float, p: int, profile: Links) -> float:
    """Pipelined chain: p-1 hops of latency, the whole buffer once through each link."""
    return (p - 1) * profile.link_latency + n / profile.link_bandwidth


#: Every collective kind, in the order `COLLECTIVE_KINDS` lists them.
REGISTRY: tuple[CollectiveKind, ...] = (
    CollectiveKind("all_reduce", ("all_reduce", "all_reduce_", "all_reduce_coalesced", "all_reduce_coalesced_"),
                   _input_bytes, _all_reduce,
                   legacy=(("allreduce_", "tensors", "tensors"), ("allreduce_coalesced_", "tensors", "tensors")),
                   label="AR"),
    CollectiveKind("all_gather", ("all_gather_into_tensor", "all_gather_into_tensor_out",
                                  "all_gather_into_tensor_coalesced"), _gathered_bytes, _ring,
                   legacy=(("_allgather_base_", "output_tensor", "input_tensor"),
                           ("allgather_", "output_tensors", "input_tensors")), label="AG"),
    CollectiveKind("reduce_scatter", ("reduce_scatter_tensor", "reduce_scatter_tensor_out",
                                      "reduce_scatter_tensor_coalesced"),
                   _input_bytes, _ring,
                   legacy=(("_reduce_scatter_base_", "output_tensor", "input_tensor"),
                           ("reduce_scatter_", "output_tensors", "input_tensors")), label="RS"),
    CollectiveKind("all_to_all", ("all_to_all_single",), _larger_side_bytes, _ring,
                   legacy=(("alltoall_base_", "output", "input"),), label="A2A"),
    CollectiveKind("broadcast", ("broadcast", "broadcast_"), _input_bytes, _chain,
                   legacy=(("broadcast_", "tensors", "tensors"),), label="BC"),
)

#: Point-to-point ops and barriers of ``torch.ops.c10d``: ordering fences for communication (a
#: collective moved across one can hang every rank: a recv above its peer's send). Name -> the
#: argument it writes ("" for none).
FENCES: Mapping[str, str] = {"send": "", "recv_": "tensors", "recv_any_source_": "tensors", "barrier": ""}

COLLECTIVE_KINDS = tuple(k.name for k in REGISTRY)
_BY_NAME: Mapping[str, CollectiveKind] = {k.name: k for k in REGISTRY}

_c10d = getattr(torch.ops, "_c10d_functional", None)


def _c10d_op(name: str) -> Any:
    if _c10d is None:
        return None
    try:
        return getattr(_c10d, name).default
    except (AttributeError, RuntimeError):
        return None


_BY_OP: dict[Any, CollectiveKind] = {
    op: kind for kind in REGISTRY for op in map(_c10d_op, kind.ops) if op is not None
}
_legacy_ns = getattr(torch.ops, "c10d", None)


def _legacy_op(name: str) -> Any:
    try:
        return getattr(_legacy_ns, name).default if _legacy_ns is not None else None
    except (AttributeError, RuntimeError):
        return None


#: legacy op -> (its kind, the argument it writes, the argument it reads)
LEGACY_OPS: dict[Any, tuple[CollectiveKind, str, str]] = {
    op: (kind, written, read) for kind in REGISTRY for name, written, read in kind.legacy
    if (op := _legacy_op(name)) is not None
}
_BY_OP.update((op, kind) for op, (kind, _, _) in LEGACY_OPS.items())
FENCE_OPS: dict[Any, str] = {op: written for name, written in FENCES.items() if (op := _legacy_op(name)) is not None}
_WAIT_OP = _c10d_op("wait_tensor")


def kind_of_op(target: Any) -> Optional[CollectiveKind]:
    """The record of the collective an FX ``call_function`` target launches, else None."""
    try:
        return _BY_OP.get(target)
    except TypeError:  # an unhashable target
        return None


def kind_named(name: str) -> CollectiveKind:
    """The record of the kind called ``name``; ValueError for an unknown name."""
    record = _BY_NAME.get(name)
    if record is None:
        raise ValueError(f"unknown collective kind {name!r}; expected one of {COLLECTIVE_KINDS}")
    return record


def wait_op() -> Any:
    """``torch.ops._c10d_functional.wait_tensor.default`` (None without torch.distributed ops)."""
    return _WAIT_OP


def _group_size_from_name(group_name: Any, default_group_size: int) -> int:
    if hasattr(group_name, "size") and callable(group_name.size):
        try:
            return int(group_name.size())
        except Exception:
            pass
    try:
        import torch.distributed as dist

        if dist.is_available():
            from torch.distributed.distributed_c10d import _resolve_process_group

            return int(_resolve_process_group(group_name).size())
    except Exception:
        pass
    return int(default_group_size)


def legacy_process_group(node: torch.fx.Node) -> Any:
    """The ``ProcessGroup`` a legacy ``c10d`` collective or fence (send, recv, barrier) runs on: its
    torchbind ``process_group`` argument (a ``get_attr`` of the traced module, as make_fx records it),
    unboxed; None when the graph does not carry it (or this is no legacy collective or fence)."""
    target = op_target(node.target)
    if target not in LEGACY_OPS and target not in FENCE_OPS:
        return None
    pg = bound_args(node, target).get("process_group")
    if isinstance(pg, torch.fx.Node):
        if pg.op != "get_attr" or pg.graph.owning_module is None:
            return None
        try:
            pg = attribute(pg.graph.owning_module, pg.target)
        except AttributeError:
            return None
    if isinstance(pg, torch.ScriptObject):
        try:
            import torch.distributed as dist

            pg = dist.ProcessGroup.unbox(pg)
        except Exception:  # another torchbind class, or no c10d in this build
            return None
    return pg if pg is not None and callable(getattr(pg, "size", None)) else None


def _default_group_size(default_group_size: int) -> int:
    """The default process group's size when this process has one, else ``default_group_size``."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return int(dist.get_world_size())
    except Exception:
        pass
    return int(default_group_size)


def collective_kind_and_group(
    node: torch.fx.Node, default_group_size: int = 8
) -> tuple[str, int, int]:
    """``(kind, group_size, nbytes)`` of a ``_c10d_functional`` collective node.

    kind is one of :data:`COLLECTIVE_KINDS`. group_size comes from the op's
    ``group_size`` argument (all_gather / reduce_scatter), from the process
    group registered under ``group_name`` (others), for legacy ``c10d`` ops
    from their ``ProcessGroup`` argument (`legacy_process_group`) or the
    default group, else ``default_group_size``. nbytes: the record's ``wire_bytes`` (see the
    module docstring). Raises ``ValueError`` for other nodes.
    """
    target = op_target(node.target)
    record = kind_of_op(target) if node.op == "call_function" else None
    if record is None:
        raise ValueError(f"node {node.name} ({node.target}) is not a _c10d_functional collective")
    bound = bound_args(node, target)
    legacy = LEGACY_OPS.get(target)
    inp = bound.get(legacy[2]) if legacy is not None else bound.get("input", bound.get("inputs"))
    in_bytes = val_bytes(torch.fx.node.map_arg(inp, node_val))
    out_bytes = val_bytes(node_val(node))

    if "group_size" in bound and bound["group_size"] is not None:
        group_size = hint_int(bound["group_size"], fallback=default_group_size)
    elif legacy is not None:  # a torchbind ProcessGroup where the graph carries it, else the default group
        pg = legacy_process_group(node)
        group_size = _group_size_from_name(pg, default_group_size) if pg is not None \
            else _default_group_size(default_group_size)
    else:
        group_size = _group_size_from_name(bound.get("group_name"), default_group_size)
    return record.name, group_size, record.wire_bytes(in_bytes, out_bytes, group_size)
