"""Device profiles: the performance numbers of one GPU and its links.

The one home of `DeviceProfile`, the datasheet presets (H100, A100, H200) and
`get_profile`. The cost models (`solvercast.roofline`, `solvercast.collectives`)
read these numbers; nothing here knows about FX.
"""

from __future__ import annotations

import math
import types
from dataclasses import dataclass, field
from typing import Mapping, Optional, Union

import torch

__all__ = ["DeviceProfile", "H100", "A100", "H200", "PROFILES", "get_profile"]

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
