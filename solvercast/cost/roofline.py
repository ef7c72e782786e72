"""Compute nodes: roofline time, FLOPs, bytes moved and occupancy.

The one home of how long a compute kernel takes and how much of the GPU it
fills, in **seconds** (floats) and SM shares. Which nodes are compute, views
or collectives is `solvercast.graph.nodes`' answer; collectives are priced in
`solvercast.graph.collectives`.

Roofline
========

``compute_time(node, profile)``::

    t = max(FLOPs / peak(dtype, op class), bytes_moved / hbm_bandwidth) + launch_overhead

* FLOPs come from ``torch.utils.flop_counter.flop_registry`` (matmul, conv,
  attention). The formula is applied to the node's input/output shapes, with
  symbolic sizes replaced by their hints first. Ops without a formula count 0
  FLOPs, i.e. they are costed as memory-bound.
* peak: matmul-class ops (mm, addmm, bmm, baddbmm, _scaled_mm, convolutions,
  scaled-dot-product / flash / efficient / cudnn attention and their
  backwards, flex attention: everything in the FLOP registry, plus the CPU
  attention kernels, ``_int_mm``, ``_addmm_activation`` and ``linear``, which
  reuse a registry formula or a formula of ours) use the
  dense tensor-core rate ``profile.peak_flops[dtype]`` of their first input's
  dtype, falling back to ``profile.vector_flops`` for a dtype with no listed
  tensor-core rate. All other ops use ``profile.vector_flops``.
* bytes_moved = bytes of every distinct tensor input read (once per input
  node) + bytes of every output written, from ``meta["val"]`` (or
  ``meta["tensor_meta"]``), numel x itemsize.
* Nodes that `solvercast.graph.nodes.costs_nothing` names (views by schema, e.g.
  ``aten.view``, ``aten.t``, plus ``aten._unsafe_view``; ``operator.getitem``;
  non-``call_function`` nodes) cost 0: they launch no kernel.

Symbolic sizes: every ``SymInt`` is replaced by its hint
(`solvercast.graph.fxmeta.hint_int`). Unbacked sizes with no hint (e.g. the length
of a ``nonzero``) become :data:`~solvercast.graph.fxmeta.UNBACKED_SIZE_FALLBACK`
(8192, Inductor's default ``unbacked_symint_fallback``): an estimate may
guess. The model never adds guards.

Occupancy
=========

See :func:`occupancy`: tiles / SMs for matmul-class ops, elements /
(SMs x threads x ILP) for the rest, clamped to [MIN_OCCUPANCY, 1];
collectives use the constant
:data:`~solvercast.graph.collectives.COLLECTIVE_OCCUPANCY`.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Optional, Union

import torch
import torch.fx

from solvercast.graph.collectives import COLLECTIVE_OCCUPANCY
from solvercast.cost.device import DeviceProfile, get_profile
from solvercast.graph.fxmeta import (
    UNBACKED_SIZE_FALLBACK,
    hint_int,
    info_bytes,
    input_nodes,
    is_tensor_like,
    node_infos,
    node_val,
    once_per_node,
    tensor_info,
)
from solvercast.graph.nodes import NodeKind, classify, costs_nothing

__all__ = [
    "compute_time", "node_flops", "node_bytes", "occupancy", "MIN_OCCUPANCY", "MATMUL_TILE", "ELEMENTWISE_ILP",
]


def _packet(target: Any) -> Any:
    return getattr(target, "overloadpacket", target)


def _flop_registry() -> Mapping[Any, Callable]:
    from torch.utils.flop_counter import flop_registry

    return flop_registry


_aten = torch.ops.aten

# Matmul-class ops with no registry entry whose leading args match an op that
# has one (the CPU attention kernels matter: graphs are often traced on CPU).
_FLOP_ALIASES: dict[Any, Any] = {}
for _name, _alias in (
    ("_addmm_activation", "addmm"),
    ("_int_mm", "mm"),
    ("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention"),
    (
        "_scaled_dot_product_flash_attention_for_cpu_backward",
        "_scaled_dot_product_flash_attention_backward",
    ),
    ("_scaled_dot_product_attention_math", "_scaled_dot_product_flash_attention"),
    ("scaled_dot_product_attention", "_scaled_dot_product_flash_attention"),
):
    if hasattr(_aten, _name) and hasattr(_aten, _alias):
        _FLOP_ALIASES[getattr(_aten, _name)] = getattr(_aten, _alias)


def _linear_flops(x: Any, w: Any, *args: Any, out_val: Any = None, **kwargs: Any) -> int:
    """aten.linear(input[..., K], weight[N, K], bias) = 2 * rows * K * N."""
    return 2 * math.prod(x.shape) * w.shape[0]


# Matmul-class ops without any registry formula: our own formulas.
_EXTRA_FORMULAS: dict[Any, Callable] = {}
if hasattr(_aten, "linear"):
    _EXTRA_FORMULAS[_aten.linear] = _linear_flops


def is_matmul_class(target: Any) -> bool:
    p = _packet(target)
    if not _hashable(p):
        return False
    reg = _flop_registry()
    return p in reg or p in _FLOP_ALIASES or p in _EXTRA_FORMULAS or target in reg


def _concretize(x: Any) -> Any:
    """Replace fake tensors / TensorMetadata by meta tensors with hinted
    shapes and SymInts by their hints, so FLOP formulas see plain ints."""
    if isinstance(x, torch.fx.Node):
        return _concretize(node_val(x))
    if is_tensor_like(x):
        info = tensor_info(x)
        if info is not None:
            shape, dtype = info
            return torch.empty(shape, dtype=dtype, device="meta")
        return x
    if isinstance(x, torch.Size):
        return torch.Size(hint_int(y, UNBACKED_SIZE_FALLBACK) for y in x)
    if isinstance(x, (list, tuple)):
        if hasattr(x, "_fields"):  # other named tuples: leave as they are
            return x
        return type(x)(_concretize(y) for y in x)
    if isinstance(x, dict):
        return {k: _concretize(v) for k, v in x.items()}
    if isinstance(x, torch.SymInt):
        return hint_int(x, UNBACKED_SIZE_FALLBACK)
    return x


def node_flops(node: torch.fx.Node) -> int:
    """FLOPs of ``node`` from ``torch.utils.flop_counter.flop_registry``.

    The registry formula of the node's op is called on the node's arguments
    (input nodes replaced by their ``meta["val"]``, symbolic sizes by their
    hints) and ``out_val=meta["val"]``. Ops without a formula, and formulas
    that fail, give 0.
    """
    if node.op != "call_function":
        return 0
    reg = _flop_registry()
    target = node.target
    if not _hashable(target) or not _hashable(_packet(target)):
        return 0
    key = _packet(target)
    key = _FLOP_ALIASES.get(key, key)
    formula = reg.get(key) or reg.get(target) or _EXTRA_FORMULAS.get(key)
    if formula is None:
        return 0
    try:
        args = _concretize(tuple(node.args))
        kwargs = _concretize(dict(node.kwargs))
        out = _concretize(node_val(node))
        flops = formula(*args, **kwargs, out_val=out)
    except Exception:
        # Fall back to the raw fake values (some formulas read tensor data).
        try:
            raw = torch.fx.node.map_arg(node.args, node_val)
            raw_kw = torch.fx.node.map_arg(node.kwargs, node_val)
            flops = formula(*raw, **raw_kw, out_val=node_val(node))
        except Exception:
            return 0
    return max(0, hint_int(flops, fallback=0))


def _hashable(x: Any) -> bool:
    try:
        hash(x)
    except TypeError:
        return False
    return True


def node_bytes(node: torch.fx.Node) -> int:
    """Bytes moved by ``node``: every distinct tensor input read once plus
    every output written (numel x itemsize, hinted sizes)."""
    return sum(info_bytes(i) for a in (*input_nodes(node), node) for i in node_infos(a))


def _compute_dtype(node: torch.fx.Node) -> Optional[torch.dtype]:
    for a in (*input_nodes(node), node):
        infos = node_infos(a)
        if infos:
            return infos[0][1]
    return None


#: prices already computed, by `_signature` and profile: a model repeats its layers, and pricing one node
#: (its FLOP formula runs on concrete tensors) costs about 0.1 ms, most of extraction's time otherwise
_PRICES: dict[tuple, float] = {}
_PRICES_MAX = 200_000


def _signature(node: torch.fx.Node) -> tuple | None:
    """What the roofline of ``node`` depends on: its op, the (shape, dtype) of each distinct input and
    output, its other arguments, and which input each argument is (x * x reads one tensor, x * y two).
    None when an argument cannot be keyed. Once per node inside `graph_frozen` (time, then occupancy)."""
    return once_per_node(_compute_signature, node)


def _compute_signature(node: torch.fx.Node) -> tuple | None:
    inputs = input_nodes(node)
    index = {n: i for i, n in enumerate(inputs)}
    args = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: ("input", index[n]))
    try:
        key = (node.op, node.target, repr(args), tuple(node_infos(a) for a in inputs), node_infos(node))
        hash(key)
    except Exception:  # an argument whose repr or hash fails: price it every time
        return None
    return key


def _memoized(kind: str, node: torch.fx.Node, profile: DeviceProfile, price: Callable[[], float]) -> float:
    key = _signature(node)
    if key is None:
        return price()
    key = (kind, profile, key)
    value = _PRICES.get(key)
    if value is None:
        if len(_PRICES) >= _PRICES_MAX:
            _PRICES.clear()
        value = _PRICES[key] = price()
    return value


def compute_time(node: torch.fx.Node, profile: Union[str, DeviceProfile]) -> float:
    """Roofline time of a compute node in seconds::

        max(FLOPs / peak, bytes_moved / hbm_bandwidth) + launch_overhead

    peak is the tensor-core rate of the first input's dtype for matmul-class
    ops, else ``vector_flops``. Free ops (views, getitem, placeholders,
    outputs) return 0.
    """
    profile = get_profile(profile)
    if costs_nothing(classify(node)):
        return 0.0
    return _memoized("time", node, profile, lambda: _compute_time(node, profile))


def _compute_time(node: torch.fx.Node, profile: DeviceProfile) -> float:
    flops = node_flops(node)
    if is_matmul_class(node.target):
        peak = profile.matmul_peak(_compute_dtype(node))
    else:
        peak = profile.vector_flops
    t_compute = flops / peak
    t_memory = node_bytes(node) / profile.hbm_bandwidth
    return max(t_compute, t_memory) + profile.launch_overhead


#: Occupancy never goes below this (even a tiny kernel holds some SMs).
MIN_OCCUPANCY = 0.05
#: Matmul output tile edge used by :func:`occupancy`.
MATMUL_TILE = 128
#: Elements per thread assumed for elementwise/reduction kernels.
ELEMENTWISE_ILP = 4

_CONV_PACKETS = {
    getattr(_aten, n)
    for n in (
        "convolution",
        "_convolution",
        "cudnn_convolution",
        "convolution_overrideable",
        "_slow_conv2d_forward",
        "convolution_backward",
    )
    if hasattr(_aten, n)
}


def occupancy(node: torch.fx.Node, profile: Union[str, DeviceProfile]) -> float:
    """Share of the GPU's SMs the node's kernel fills, in ``[MIN_OCCUPANCY, 1]``.

    Rule:

    * collectives: :data:`COLLECTIVE_OCCUPANCY` (0.1);
    * waits and free ops: :data:`MIN_OCCUPANCY`;
    * matmul-class ops: ``tiles / num_sms`` where the first output is seen as
      a ``rows x cols`` matrix cut into 128x128 tiles: ``cols`` = last dim
      (channel dim 1 for convolutions), ``rows`` = numel / cols, ``tiles =
      ceil(rows/128) * ceil(cols/128)``;
    * everything else: ``elements / (num_sms * threads_per_sm * 4)``, with
      ``elements`` = the largest numel among inputs and outputs (a reduction
      is parallelised over its input) and 4 elements per thread;

    clamped to ``[MIN_OCCUPANCY, 1]``.
    """
    profile = get_profile(profile)
    info = classify(node)
    if info.kind is NodeKind.COLLECTIVE:
        return COLLECTIVE_OCCUPANCY
    if info.kind is NodeKind.WAIT or costs_nothing(info):
        return MIN_OCCUPANCY
    return _memoized("occupancy", node, profile, lambda: _occupancy(node, profile))


def _occupancy(node: torch.fx.Node, profile: DeviceProfile) -> float:
    out_infos = node_infos(node)
    if is_matmul_class(node.target) and out_infos:
        shape = out_infos[0][0]
        numel = math.prod(shape)
        if len(shape) == 0 or numel == 0:
            return MIN_OCCUPANCY
        if _packet(node.target) in _CONV_PACKETS and len(shape) >= 2:
            cols = shape[1]
        else:
            cols = shape[-1]
        cols = max(cols, 1)
        rows = numel // cols
        tiles = math.ceil(rows / MATMUL_TILE) * math.ceil(cols / MATMUL_TILE)
        occ = tiles / profile.num_sms
    else:
        infos = out_infos + tuple(i for a in input_nodes(node) for i in node_infos(a))
        elems = max((math.prod(s) for s, _ in infos), default=0)
        occ = elems / (profile.num_sms * profile.threads_per_sm * ELEMENTWISE_ILP)
    return float(min(1.0, max(MIN_OCCUPANCY, occ)))
