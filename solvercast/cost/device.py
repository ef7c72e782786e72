"""Device profiles: the performance numbers of one GPU and its links.

The one home of `DeviceProfile`, the datasheet presets (H100, A100, H200) and
`get_profile`. The cost models (`solvercast.cost.roofline`, `solvercast.graph.collectives`)
read these numbers; nothing here knows about FX.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import types
from dataclasses import dataclass, field, replace
from typing import Mapping, Optional, Union

import torch

__all__ = ["DeviceProfile", "H100", "A100", "H200", "PROFILES", "get_profile", "EventRow", "StreamPairRow",
           "StreamFit", "fit_stream_parameters", "pair_prediction"]

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
H200 = dataclasses.replace(H100, name="h200", peak_flops=dict(H100.peak_flops), hbm_bandwidth=4.8e12)

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


# ---- fitting the occupancy and sync model to micro-benchmarks ------------------------------------
#
# The engine's occupancy rule (docs/execution_rules.md, O1) lets two kernels on two compute streams run
# side by side only when their occupancies sum to at most 1; otherwise the second waits for the first.
# Occupancy is ``tiles / num_sms`` (matmuls) or ``threads / (num_sms * threads_per_sm)`` (elementwise),
# so a profile's ``num_sms`` scales every occupancy alike: the fit chooses the ``num_sms`` under which
# the rule predicts the measured pairs best. ``sync_overhead`` is the measured cost of one event record
# + wait. experiments/gpu/streams.py microbench measures the rows on a GPU.


@dataclass(frozen=True)
class StreamPairRow:
    """Two kernels measured alone (``first_ns``, ``second_ns``) and launched together on two streams
    (``together_ns``, first launch to last end); ``first_occupancy`` / ``second_occupancy`` are their
    occupancies under the profile being fitted (`solvercast.cost.roofline.occupancy`). ``label`` says what
    ran (e.g. "mm 1024 | mm 1024")."""

    first_occupancy: float
    second_occupancy: float
    first_ns: float
    second_ns: float
    together_ns: float
    label: str = ""

    def __post_init__(self) -> None:
        for f in ("first_occupancy", "second_occupancy"):
            if not 0 < getattr(self, f) <= 1:
                raise ValueError(f"{f} must be in (0, 1], got {getattr(self, f)!r}")
        for f in ("first_ns", "second_ns", "together_ns"):
            v = getattr(self, f)
            if not (v > 0 and math.isfinite(v)):
                raise ValueError(f"{f} must be positive, got {v!r}")


@dataclass(frozen=True)
class EventRow:
    """The measured cost of one cross-stream event record + wait (``ns``), e.g. the extra time per
    kernel of a ping-pong between two streams over the same kernels on one stream."""

    ns: float
    label: str = ""


@dataclass(frozen=True)
class StreamFit:
    """The fitted ``profile`` (its ``num_sms`` and ``sync_overhead`` replaced), the occupancy scale
    ``scale`` (datasheet ``num_sms`` / fitted), the mean relative error of the pair predictions before
    (``error_before``, the input profile) and after the fit, and how many pairs the fitted rule and the
    measurements agree on as overlapping or not (``agree`` of ``pairs``)."""

    profile: DeviceProfile
    scale: float
    error_before: float
    error_after: float
    agree: int
    pairs: int


def pair_prediction(row: StreamPairRow, scale: float = 1.0) -> float:
    """The engine's time for ``row``'s two kernels on two streams with every occupancy multiplied by
    ``scale`` (capped at 1): side by side (the longer one) when they fit together, else one after the
    other."""
    occ = min(1.0, row.first_occupancy * scale) + min(1.0, row.second_occupancy * scale)
    return max(row.first_ns, row.second_ns) if occ <= 1.0 + 1e-9 else row.first_ns + row.second_ns


def _overlapped(row: StreamPairRow) -> bool:
    """Whether the measurement is nearer to side by side than to one after the other."""
    serial, parallel = row.first_ns + row.second_ns, max(row.first_ns, row.second_ns)
    return abs(row.together_ns - parallel) < abs(row.together_ns - serial)


def _pair_error(rows, scale: float) -> float:
    return sum(abs(pair_prediction(r, scale) - r.together_ns) / r.together_ns for r in rows) / len(rows)


def fit_stream_parameters(profile: DeviceProfile | str, pairs: "list[StreamPairRow] | tuple[StreamPairRow, ...]",
                          events: "list[EventRow] | tuple[EventRow, ...]" = ()) -> StreamFit:
    """Fit ``profile``'s occupancy (through ``num_sms``) and ``sync_overhead`` to measured rows.

    The occupancy scale is chosen on a geometric grid from 1/16 to 16 (97 points) to minimise the mean
    relative error of `pair_prediction` against ``together_ns``; among equal errors the scale nearest
    1 (the datasheet) wins, so rows that say nothing leave the profile as it is. The fitted ``num_sms``
    is ``round(num_sms / scale)`` (at least 1). ``sync_overhead`` is the median of ``events`` in
    seconds, or the profile's when there are none. Raises ``ValueError`` without pair rows.
    """
    profile = get_profile(profile)
    if not pairs:
        raise ValueError("fit_stream_parameters needs at least one StreamPairRow")
    grid = [16.0 ** (k / 48) for k in range(-48, 49)]
    best = min(grid, key=lambda s: (round(_pair_error(pairs, s), 12), abs(math.log(s))))
    num_sms = max(1, round(profile.num_sms / best))
    sync = statistics.median(e.ns for e in events) * 1e-9 if events else profile.sync_overhead
    fitted = replace(profile, name=f"{profile.name}-fitted", num_sms=num_sms, sync_overhead=sync)
    scale = profile.num_sms / num_sms
    agree = sum((pair_prediction(r, scale) < r.first_ns + r.second_ns) == _overlapped(r) for r in pairs)
    return StreamFit(profile=fitted, scale=scale, error_before=_pair_error(pairs, 1.0),
                     error_after=_pair_error(pairs, scale), agree=agree, pairs=len(pairs))
