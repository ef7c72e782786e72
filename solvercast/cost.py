"""Device profiles and the cost model: how long each FX node takes, and how much
of the GPU it fills.

Everything here returns **seconds** (floats); :func:`to_ns` turns a duration
into the integer nanoseconds that the solvers use.

Compute nodes (roofline)
========================

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
* Views (ops whose schema returns a non-mutating alias of an input, e.g.
  ``aten.view``, ``aten.t``, plus ``aten._unsafe_view``), ``operator.getitem``
  and non-``call_function`` nodes cost 0: they launch no kernel.

Symbolic sizes: every ``SymInt`` is replaced by its hint
(``symbolic_shapes.optimization_hint``, else ``sym.node.hint``, else the shape
environment's hint). Unbacked sizes with no hint (e.g. the length of a
``nonzero``) become :data:`UNBACKED_SIZE_FALLBACK` (8192, Inductor's default
``unbacked_symint_fallback``). The model never adds guards.

Collectives (alpha-beta model)
==============================

``collective_time(kind, nbytes, p, profile)``, with ``p`` the group size,
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
``N``: all_reduce / broadcast: the input size; all_gather: the output
(gathered) size; reduce_scatter: the input size; all_to_all: max(input,
output) size (uneven splits); coalesced variants: the sum over their tensors.

Occupancy
=========

See :func:`occupancy`: tiles / SMs for matmul-class ops, elements /
(SMs x threads x ILP) for the rest, clamped to [MIN_OCCUPANCY, 1];
collectives use the constant :data:`COLLECTIVE_OCCUPANCY`.
"""

from __future__ import annotations

import math
import operator
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Optional, Union

import torch
import torch.fx

__all__ = [
    "DeviceProfile",
    "H100",
    "A100",
    "H200",
    "PROFILES",
    "get_profile",
    "compute_time",
    "node_flops",
    "node_bytes",
    "occupancy",
    "collective_time",
    "collective_kind_and_group",
    "is_collective",
    "is_wait",
    "node_cost",
    "to_ns",
    "COLLECTIVE_KINDS",
    "COLLECTIVE_OCCUPANCY",
    "MIN_OCCUPANCY",
    "UNBACKED_SIZE_FALLBACK",
]

# --------------------------------------------------------------------------
# Device profiles
# --------------------------------------------------------------------------

_FP8_DTYPES = tuple(
    getattr(torch, n)
    for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
    if hasattr(torch, n)
)


@dataclass(frozen=True)
class DeviceProfile:
    """Performance numbers of one GPU (and its links) used by the cost model.

    Units: FLOP/s, bytes/s, seconds.

    * ``peak_flops``: dense (no sparsity) tensor-core FLOP/s per dtype, used
      for matmul-class ops. ``torch.float32`` holds the **TF32** tensor-core
      rate (what fp32 matmuls get with TF32 enabled). A dtype not listed falls
      back to ``vector_flops``. Stored read-only.
    * ``vector_flops``: CUDA-core (non-tensor-core) FP32 FLOP/s, used for all
      other ops (which our model counts as 0 FLOPs, hence memory-bound).
    * ``hbm_bandwidth``: device memory bandwidth.
    * ``link_bandwidth``: intra-node (NVLink) bandwidth per GPU **per
      direction** (datasheet bidirectional total / 2). The collective
      formulas divide bytes by this (NCCL's bus bandwidth).
    * ``link_latency``: per-step latency ``alpha`` of the collective model.
    * ``launch_overhead``: fixed cost added to every compute kernel.
    * ``sync_overhead``: cost of a cross-stream event record + wait.
    * ``num_sms``, ``threads_per_sm``: used by :func:`occupancy`.
    * ``all_reduce_small_bytes``: all_reduce messages below this use the
      latency-bound one-shot formula.
    """

    name: str
    peak_flops: Mapping[torch.dtype, float] = field(hash=False)
    vector_flops: float
    hbm_bandwidth: float
    link_bandwidth: float
    link_latency: float
    launch_overhead: float
    sync_overhead: float
    num_sms: int
    threads_per_sm: int = 2048
    all_reduce_small_bytes: int = 128 * 1024

    def __post_init__(self) -> None:
        flops = dict(self.peak_flops)
        for k, v in flops.items():
            if not isinstance(k, torch.dtype):
                raise TypeError(f"peak_flops keys must be torch.dtype, got {k!r}")
            if not (v > 0 and math.isfinite(v)):
                raise ValueError(f"peak_flops[{k}] must be positive, got {v!r}")
        object.__setattr__(self, "peak_flops", types.MappingProxyType(flops))
        for f in ("vector_flops", "hbm_bandwidth", "link_bandwidth"):
            v = getattr(self, f)
            if not (v > 0 and math.isfinite(v)):
                raise ValueError(f"{f} must be positive, got {v!r}")
        for f in ("link_latency", "launch_overhead", "sync_overhead"):
            v = getattr(self, f)
            if not (v >= 0 and math.isfinite(v)):
                raise ValueError(f"{f} must be >= 0, got {v!r}")
        if self.num_sms < 1 or self.threads_per_sm < 1:
            raise ValueError("num_sms and threads_per_sm must be >= 1")
        if self.all_reduce_small_bytes < 0:
            raise ValueError("all_reduce_small_bytes must be >= 0")

    def matmul_peak(self, dtype: Optional[torch.dtype]) -> float:
        """Tensor-core FLOP/s for ``dtype`` (``vector_flops`` if not listed)."""
        if dtype is None:
            return self.vector_flops
        return self.peak_flops.get(dtype, self.vector_flops)


# Latency / overhead figures are not on datasheets; they are estimates shared by
# all three presets:
# * link_latency 1 us per ring step: NCCL's tuning model puts NVLink hardware
#   latency at ~0.6 us per step plus a base latency of several us per call;
#   1 us per step gives ~7 us for an 8-GPU ring all_gather of a tiny tensor.
# * launch_overhead 2 us: typical back-to-back kernel gap without CUDA graphs
#   (measured values range 1-5 us).
# * sync_overhead 2 us: cudaEventRecord + cudaStreamWaitEvent, as seen on the
#   device timeline.

#: NVIDIA H100 SXM5 80GB. Source: NVIDIA H100 Tensor Core GPU datasheet
#: (dense, i.e. half the "with sparsity" figures): TF32 494.7 TFLOP/s,
#: BF16/FP16 989.4 TFLOP/s, FP8 1978.9 TFLOP/s, FP64 tensor core 66.9 TFLOP/s,
#: FP32 (CUDA cores) 66.9 TFLOP/s; HBM3 3.35 TB/s; NVLink 4 900 GB/s total
#: bidirectional -> 450 GB/s per direction; 132 SMs (H100 whitepaper).
H100 = DeviceProfile(
    name="h100",
    peak_flops={
        torch.float32: 494.7e12,  # TF32 tensor cores
        torch.bfloat16: 989.4e12,
        torch.float16: 989.4e12,
        torch.float64: 66.9e12,
        torch.int8: 1978.9e12,  # TOPS
        **{d: 1978.9e12 for d in _FP8_DTYPES},
    },
    vector_flops=66.9e12,
    hbm_bandwidth=3.35e12,
    link_bandwidth=450e9,
    link_latency=1e-6,
    launch_overhead=2e-6,
    sync_overhead=2e-6,
    num_sms=132,
)

#: NVIDIA A100 80GB SXM. Source: NVIDIA A100 Tensor Core GPU datasheet
#: (dense): TF32 156 TFLOP/s, BF16/FP16 312 TFLOP/s, INT8 624 TOPS, FP64
#: tensor core 19.5 TFLOP/s, FP32 19.5 TFLOP/s; HBM2e 2,039 GB/s; NVLink 3
#: 600 GB/s total bidirectional -> 300 GB/s per direction; 108 SMs (A100
#: whitepaper). No FP8 tensor cores (fp8 falls back to vector_flops).
A100 = DeviceProfile(
    name="a100",
    peak_flops={
        torch.float32: 156e12,  # TF32 tensor cores
        torch.bfloat16: 312e12,
        torch.float16: 312e12,
        torch.float64: 19.5e12,
        torch.int8: 624e12,  # TOPS
    },
    vector_flops=19.5e12,
    hbm_bandwidth=2.039e12,
    link_bandwidth=300e9,
    link_latency=1e-6,
    launch_overhead=2e-6,
    sync_overhead=2e-6,
    num_sms=108,
)

#: NVIDIA H200 SXM 141GB. Source: NVIDIA H200 Tensor Core GPU datasheet
#: (dense): same compute as H100 SXM (TF32 494.7, BF16/FP16 989.4, FP8
#: 1978.9 TFLOP/s, FP32 66.9 TFLOP/s); HBM3e 4.8 TB/s; NVLink 900 GB/s total
#: bidirectional -> 450 GB/s per direction; 132 SMs (GH100).
H200 = DeviceProfile(
    name="h200",
    peak_flops=dict(H100.peak_flops),
    vector_flops=66.9e12,
    hbm_bandwidth=4.8e12,
    link_bandwidth=450e9,
    link_latency=1e-6,
    launch_overhead=2e-6,
    sync_overhead=2e-6,
    num_sms=132,
)

#: Presets by lower-case name.
PROFILES: Mapping[str, DeviceProfile] = types.MappingProxyType(
    {"h100": H100, "a100": A100, "h200": H200}
)


def get_profile(device: Union[str, DeviceProfile]) -> DeviceProfile:
    """Return ``device`` if it is a :class:`DeviceProfile`, else the preset
    named ``device`` ("h100", "a100", "h200"; case-insensitive).

    Raises ``ValueError`` (listing the known names) for an unknown name and
    ``TypeError`` for anything else.
    """
    if isinstance(device, DeviceProfile):
        return device
    if isinstance(device, str):
        key = device.strip().lower()
        if key in PROFILES:
            return PROFILES[key]
        raise ValueError(
            f"unknown device {device!r}; known devices: {', '.join(sorted(PROFILES))} "
            "(or pass a DeviceProfile)"
        )
    raise TypeError(f"device must be a str or DeviceProfile, got {type(device).__name__}")


# --------------------------------------------------------------------------
# Symbolic sizes and tensor metadata
# --------------------------------------------------------------------------

#: Size used for an unbacked symbolic size that has no hint (Inductor's
#: default ``unbacked_symint_fallback``).
UNBACKED_SIZE_FALLBACK = 8192


def _hint_int(x: Any, fallback: int = UNBACKED_SIZE_FALLBACK) -> int:
    """Concrete int for an int / SymInt without adding guards."""
    if isinstance(x, bool):
        return int(x)
    if isinstance(x, int):
        return x
    if isinstance(x, torch.SymInt):
        from torch.fx.experimental import symbolic_shapes as ss

        opt = getattr(ss, "optimization_hint", None)
        if opt is not None:
            try:
                return int(opt(x, fallback=fallback))
            except Exception:
                pass
        node = x.node
        for attr in ("hint", "_hint"):
            try:
                h = getattr(node, attr, None)
            except Exception:
                h = None
            if h is not None:
                try:
                    return int(h)
                except Exception:
                    pass
        for name in ("size_hint", "hint_int"):  # older torch versions
            fn = getattr(ss, name, None)
            if fn is not None:
                try:
                    return int(fn(x, fallback=fallback))
                except Exception:
                    pass
        try:
            shape_env = node.shape_env
            h = shape_env.size_hint(node.expr, allow_none=True)
            if h is not None:
                return int(h)
        except Exception:
            pass
        return fallback
    try:
        return int(x)
    except Exception:
        return fallback


def _tensor_info(v: Any) -> Optional[tuple[tuple[int, ...], torch.dtype]]:
    """(hinted shape, dtype) for a tensor or TensorMetadata, else None."""
    if isinstance(v, torch.Tensor):
        return tuple(_hint_int(s) for s in v.shape), v.dtype
    shape = getattr(v, "shape", None)
    dtype = getattr(v, "dtype", None)
    if shape is not None and isinstance(dtype, torch.dtype):
        try:
            return tuple(_hint_int(s) for s in shape), dtype
        except TypeError:
            return None
    return None


def _node_val(node: torch.fx.Node) -> Any:
    meta = node.meta
    if "val" in meta:
        return meta["val"]
    return meta.get("tensor_meta")


def _is_tensor_like(v: Any) -> bool:
    """A tensor, or metadata with a shape and a dtype (e.g. TensorMetadata)."""
    if isinstance(v, torch.Tensor):
        return True
    return hasattr(v, "shape") and isinstance(getattr(v, "dtype", None), torch.dtype)


def _flatten(x: Any) -> Iterable[Any]:
    if _is_tensor_like(x):
        yield x
    elif isinstance(x, (list, tuple)):
        for y in x:
            yield from _flatten(y)
    elif isinstance(x, dict):
        for y in x.values():
            yield from _flatten(y)
    else:
        yield x


def _infos(v: Any) -> list[tuple[tuple[int, ...], torch.dtype]]:
    out = []
    for t in _flatten(v):
        info = _tensor_info(t)
        if info is not None:
            out.append(info)
    return out


def _nbytes(info: tuple[tuple[int, ...], torch.dtype]) -> int:
    shape, dtype = info
    return math.prod(shape) * _itemsize(dtype)


def _itemsize(dtype: torch.dtype) -> int:
    try:
        return dtype.itemsize
    except AttributeError:  # very old torch
        return torch.empty((), dtype=dtype).element_size()


def _val_bytes(v: Any) -> int:
    return sum(_nbytes(i) for i in _infos(v))


def _input_nodes(node: torch.fx.Node) -> list[torch.fx.Node]:
    """Distinct input nodes, in first-use order."""
    return list(dict.fromkeys(node.all_input_nodes))


# --------------------------------------------------------------------------
# Op classification
# --------------------------------------------------------------------------


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


def _is_matmul_class(target: Any) -> bool:
    p = _packet(target)
    if not _hashable(p):
        return False
    reg = _flop_registry()
    return p in reg or p in _FLOP_ALIASES or p in _EXTRA_FORMULAS or target in reg


# Views whose schema does not declare the alias (still no kernel).
_FREE_OPS = {
    getattr(_aten, n).default for n in ("_unsafe_view", "_reshape_alias") if hasattr(_aten, n)
}


def _is_free_op(node: torch.fx.Node) -> bool:
    """True for nodes that launch no kernel: non-call_function nodes,
    ``operator.getitem``, pure views (schema returns a non-mutating alias)
    and ``aten._unsafe_view``."""
    if node.op != "call_function":
        return True
    target = node.target
    if target is operator.getitem or target in _FREE_OPS:
        return True
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


# --------------------------------------------------------------------------
# FLOPs, bytes, compute time
# --------------------------------------------------------------------------


def _concretize(x: Any) -> Any:
    """Replace fake tensors / TensorMetadata by meta tensors with hinted
    shapes and SymInts by their hints, so FLOP formulas see plain ints."""
    if isinstance(x, torch.fx.Node):
        return _concretize(_node_val(x))
    if _is_tensor_like(x):
        info = _tensor_info(x)
        if info is not None:
            shape, dtype = info
            return torch.empty(shape, dtype=dtype, device="meta")
        return x
    if isinstance(x, torch.Size):
        return torch.Size(_hint_int(y) for y in x)
    if isinstance(x, (list, tuple)):
        if hasattr(x, "_fields"):  # other named tuples: leave as they are
            return x
        return type(x)(_concretize(y) for y in x)
    if isinstance(x, dict):
        return {k: _concretize(v) for k, v in x.items()}
    if isinstance(x, torch.SymInt):
        return _hint_int(x)
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
        out = _concretize(_node_val(node))
        flops = formula(*args, **kwargs, out_val=out)
    except Exception:
        # Fall back to the raw fake values (some formulas read tensor data).
        try:
            raw = torch.fx.node.map_arg(node.args, _node_val)
            raw_kw = torch.fx.node.map_arg(node.kwargs, _node_val)
            flops = formula(*raw, **raw_kw, out_val=_node_val(node))
        except Exception:
            return 0
    return max(0, _hint_int(flops, fallback=0))


def _hashable(x: Any) -> bool:
    try:
        hash(x)
    except TypeError:
        return False
    return True


def node_bytes(node: torch.fx.Node) -> int:
    """Bytes moved by ``node``: every distinct tensor input read once plus
    every output written (numel x itemsize, hinted sizes)."""
    read = sum(_val_bytes(_node_val(a)) for a in _input_nodes(node))
    return read + _val_bytes(_node_val(node))


def _compute_dtype(node: torch.fx.Node) -> Optional[torch.dtype]:
    for a in _input_nodes(node):
        infos = _infos(_node_val(a))
        if infos:
            return infos[0][1]
    infos = _infos(_node_val(node))
    return infos[0][1] if infos else None


def compute_time(node: torch.fx.Node, profile: Union[str, DeviceProfile]) -> float:
    """Roofline time of a compute node in seconds::

        max(FLOPs / peak, bytes_moved / hbm_bandwidth) + launch_overhead

    peak is the tensor-core rate of the first input's dtype for matmul-class
    ops, else ``vector_flops``. Free ops (views, getitem, placeholders,
    outputs) return 0.
    """
    profile = get_profile(profile)
    if _is_free_op(node):
        return 0.0
    flops = node_flops(node)
    if _is_matmul_class(node.target):
        peak = profile.matmul_peak(_compute_dtype(node))
    else:
        peak = profile.vector_flops
    t_compute = flops / peak
    t_memory = node_bytes(node) / profile.hbm_bandwidth
    return max(t_compute, t_memory) + profile.launch_overhead


# --------------------------------------------------------------------------
# Occupancy
# --------------------------------------------------------------------------

#: Occupancy never goes below this (even a tiny kernel holds some SMs).
MIN_OCCUPANCY = 0.05
#: Occupancy reported for collectives: NCCL runs on a handful of channels
#: (one CTA each, typically 8-16 on NVLink), ~10% of an H100's 132 SMs.
COLLECTIVE_OCCUPANCY = 0.1
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
    if is_collective(node):
        return COLLECTIVE_OCCUPANCY
    if is_wait(node) or _is_free_op(node):
        return MIN_OCCUPANCY
    out_infos = _infos(_node_val(node))
    if _is_matmul_class(node.target) and out_infos:
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
        infos = out_infos + [i for a in _input_nodes(node) for i in _infos(_node_val(a))]
        elems = max((math.prod(s) for s, _ in infos), default=0)
        occ = elems / (profile.num_sms * profile.threads_per_sm * ELEMENTWISE_ILP)
    return float(min(1.0, max(MIN_OCCUPANCY, occ)))


# --------------------------------------------------------------------------
# Collectives
# --------------------------------------------------------------------------

COLLECTIVE_KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")


def collective_time(
    kind: str, nbytes: int, group_size: int, profile: Union[str, DeviceProfile]
) -> float:
    """Alpha-beta time in seconds of one collective (formulas in the module
    docstring). ``nbytes`` is the FULL size for all_gather (gathered output)
    and reduce_scatter (input); group_size <= 1 gives 0."""
    profile = get_profile(profile)
    if kind not in COLLECTIVE_KINDS:
        raise ValueError(f"unknown collective kind {kind!r}; expected one of {COLLECTIVE_KINDS}")
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes}")
    p = int(group_size)
    if p <= 1:
        return 0.0
    a = profile.link_latency
    bw = profile.link_bandwidth
    n = float(nbytes)
    if kind in ("all_gather", "reduce_scatter", "all_to_all"):
        return (p - 1) * a + (p - 1) / p * n / bw
    if kind == "all_reduce":
        if nbytes < profile.all_reduce_small_bytes:
            return math.ceil(math.log2(p)) * a + n / bw
        return 2 * (p - 1) * a + 2 * (p - 1) / p * n / bw
    # broadcast: pipelined chain/ring
    return (p - 1) * a + n / bw


_c10d = getattr(torch.ops, "_c10d_functional", None)


def _c10d_op(name: str) -> Any:
    if _c10d is None:
        return None
    try:
        return getattr(_c10d, name).default
    except (AttributeError, RuntimeError):
        return None


# op -> kind
_COLLECTIVE_OPS: dict[Any, str] = {}
for _name, _kind in (
    ("all_reduce", "all_reduce"),
    ("all_reduce_", "all_reduce"),
    ("all_reduce_coalesced", "all_reduce"),
    ("all_reduce_coalesced_", "all_reduce"),
    ("all_gather_into_tensor", "all_gather"),
    ("all_gather_into_tensor_out", "all_gather"),
    ("all_gather_into_tensor_coalesced", "all_gather"),
    ("reduce_scatter_tensor", "reduce_scatter"),
    ("reduce_scatter_tensor_coalesced", "reduce_scatter"),
    ("all_to_all_single", "all_to_all"),
    ("broadcast", "broadcast"),
    ("broadcast_", "broadcast"),
):
    _op = _c10d_op(_name)
    if _op is not None:
        _COLLECTIVE_OPS[_op] = _kind

_WAIT_OP = _c10d_op("wait_tensor")


def is_collective(node: torch.fx.Node) -> bool:
    """True for a ``torch.ops._c10d_functional`` collective node (not a wait)."""
    return node.op == "call_function" and _hashable(node.target) and node.target in _COLLECTIVE_OPS


def is_wait(node: torch.fx.Node) -> bool:
    """True for ``torch.ops._c10d_functional.wait_tensor``."""
    return node.op == "call_function" and _WAIT_OP is not None and node.target is _WAIT_OP


def _bound_args(node: torch.fx.Node) -> dict[str, Any]:
    """Map schema argument names to the node's values (positional or kw)."""
    schema = node.target._schema
    out: dict[str, Any] = {}
    for i, a in enumerate(schema.arguments):
        if i < len(node.args) and not a.kwarg_only:
            out[a.name] = node.args[i]
        elif a.name in node.kwargs:
            out[a.name] = node.kwargs[a.name]
        elif a.has_default_value():
            out[a.name] = a.default_value
    return out


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


def collective_kind_and_group(
    node: torch.fx.Node, default_group_size: int = 8
) -> tuple[str, int, int]:
    """``(kind, group_size, nbytes)`` of a ``_c10d_functional`` collective node.

    kind is one of :data:`COLLECTIVE_KINDS`. group_size comes from the op's
    ``group_size`` argument (all_gather / reduce_scatter) or from the process
    group registered under ``group_name`` (others), else
    ``default_group_size``. nbytes: see the module docstring (all_gather: the
    gathered output; reduce_scatter: the input; all_to_all: max of input and
    output; coalesced ops: the sum). Raises ``ValueError`` for other nodes.
    """
    if not is_collective(node):
        raise ValueError(f"node {node.name} ({node.target}) is not a _c10d_functional collective")
    kind = _COLLECTIVE_OPS[node.target]
    bound = _bound_args(node)
    inp = bound.get("input", bound.get("inputs"))
    in_bytes = _val_bytes(torch.fx.node.map_arg(inp, _node_val))
    out_bytes = _val_bytes(_node_val(node))

    if "group_size" in bound and bound["group_size"] is not None:
        group_size = _hint_int(bound["group_size"], fallback=default_group_size)
    else:
        group_size = _group_size_from_name(bound.get("group_name"), default_group_size)

    if kind == "all_gather":
        nbytes = out_bytes if out_bytes else in_bytes * group_size
    elif kind == "all_to_all":
        nbytes = max(in_bytes, out_bytes)
    else:
        nbytes = in_bytes
    return kind, group_size, nbytes


# --------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------


def node_cost(
    node: torch.fx.Node,
    profile: Union[str, DeviceProfile],
    cost_fn: Optional[Callable[[torch.fx.Node], Optional[float]]] = None,
    default_group_size: int = 8,
) -> tuple[float, float]:
    """``(duration seconds, occupancy)`` of one node.

    * collectives: :func:`collective_time` of :func:`collective_kind_and_group`,
      occupancy :data:`COLLECTIVE_OCCUPANCY`;
    * waits: ``(0.0, MIN_OCCUPANCY)`` (a wait only blocks its stream);
    * everything else: :func:`compute_time` and :func:`occupancy`.

    If ``cost_fn`` is given and ``cost_fn(node)`` returns a number (not
    None), that number replaces the duration; occupancy still comes from the
    model. A negative or non-finite override raises ``ValueError``.
    """
    profile = get_profile(profile)
    if is_collective(node):
        kind, p, nbytes = collective_kind_and_group(node, default_group_size)
        duration = collective_time(kind, nbytes, p, profile)
        occ = COLLECTIVE_OCCUPANCY
    elif is_wait(node):
        duration, occ = 0.0, MIN_OCCUPANCY
    else:
        duration = compute_time(node, profile)
        occ = occupancy(node, profile)
    if cost_fn is not None:
        override = cost_fn(node)
        if override is not None:
            override = float(override)
            if not (math.isfinite(override) and override >= 0):
                raise ValueError(
                    f"cost_fn returned {override!r} for node {node.name}; "
                    "expected a finite duration >= 0 in seconds"
                )
            duration = override
    return duration, occ


def to_ns(seconds: float) -> int:
    """Seconds -> integer nanoseconds for the solvers.

    Rounds half up (1.5 ns -> 2, 2.5 ns -> 3); any positive duration becomes
    at least 1 ns, so nonzero work never becomes free; 0 stays 0. Negative or
    non-finite input raises ``ValueError``.
    """
    s = float(seconds)
    if not math.isfinite(s) or s < 0:
        raise ValueError(f"duration must be finite and >= 0, got {seconds!r}")
    if s == 0:
        return 0
    # Round to 1e-6 ns first to drop float noise (2.5e-9 * 1e9 = 2.4999...).
    ns = math.floor(round(s * 1e9, 6) + 0.5)
    return max(1, int(ns))
