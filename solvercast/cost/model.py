"""The cost model: what extraction asks of it, and the analytic answer.

`extract_problem` takes every task's cost through one protocol, `CostModel`:
a node's duration and occupancy, the time of a collective, a synchronous
comm op's duration, the cross-stream sync overhead, and a stable
`~CostModel.cache_key`. `AnalyticCostModel` answers from a `DeviceProfile`
(roofline for compute, alpha-beta for collectives); measured costs plug in
as another implementation, or per node through a ``cost_fn``
(`CostFnOverrides`).

Where each part lives:

* `solvercast.cost.device`: `DeviceProfile` and the presets;
* `solvercast.graph.fxmeta`: FX metadata, symbolic-size hints, bytes;
* `solvercast.graph.nodes`: what a node is (compute, collective, wait, view, ...);
* `solvercast.cost.roofline`: compute time and occupancy of compute nodes;
* `solvercast.graph.collectives`: one record per collective kind, alpha-beta time.

The functions of those modules return **seconds** (floats); :func:`to_ns`
turns a duration into the integer nanoseconds that the solvers use, and the
`CostModel` methods answer in nanoseconds. The pricing functions of device,
roofline and collectives are re-exported here: one import for a cost model's author.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import types
from typing import Callable, Optional, Protocol, Union, runtime_checkable

import torch.fx

from solvercast.graph.collectives import (
    COLLECTIVE_KINDS,
    COLLECTIVE_OCCUPANCY,
    collective_kind_and_group,
    kind_named,
)
from solvercast.cost.device import A100, H100, H200, PROFILES, DeviceProfile, get_profile
from solvercast.graph.fxmeta import UNBACKED_SIZE_FALLBACK
from solvercast.graph.nodes import NodeKind, classify, is_collective, is_wait
from solvercast.cost.roofline import MIN_OCCUPANCY, compute_time, node_bytes, node_flops, occupancy

__all__ = [
    "CostModel",
    "AnalyticCostModel",
    "CostFnOverrides",
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

CostFn = Callable[[torch.fx.Node], Optional[float]]


@runtime_checkable
class CostModel(Protocol):
    """What extraction asks about costs. Durations are integer nanoseconds."""

    def duration(self, node: torch.fx.Node) -> int:
        """Time of a compute node or a ``_c10d_functional`` collective (0 for a wait)."""

    def occupancy(self, node: torch.fx.Node) -> float:
        """Share of the GPU's SMs the node fills, in (0, 1]."""

    def collective_time(self, kind: str, nbytes: int, group_size: int) -> int:
        """Time of one collective of ``kind`` (a `solvercast.graph.collectives` name) on ``nbytes``."""

    def sync_comm_duration(self, node: torch.fx.Node, nbytes: int, group_size: int) -> int:
        """Time of a synchronous comm op the caller named (``comm_ops``), which produces ``nbytes``."""

    def sync_overhead(self) -> int:
        """Cost of one cross-stream event record + wait."""

    def cache_key(self) -> str:
        """A key that is equal for models that give equal costs, and stable across processes
        (built from values, never from object addresses)."""


def _model_seconds(node: torch.fx.Node, profile: DeviceProfile, default_group_size: int) -> float:
    """The analytic duration in seconds: alpha-beta for collectives, 0 for waits, roofline else."""
    kind = classify(node).kind
    if kind is NodeKind.COLLECTIVE:
        name, p, nbytes = collective_kind_and_group(node, default_group_size)
        return collective_time(name, nbytes, p, profile)
    if kind is NodeKind.WAIT:
        return 0.0  # a wait only blocks its stream
    return compute_time(node, profile)


def _checked_override(seconds: float, node: torch.fx.Node) -> float:
    """A ``cost_fn`` duration as a float; a negative or non-finite one raises ``ValueError``."""
    seconds = float(seconds)
    if not (math.isfinite(seconds) and seconds >= 0):
        raise ValueError(
            f"cost_fn returned {seconds!r} for node {node.name}; "
            "expected a finite duration >= 0 in seconds"
        )
    return seconds


@dataclasses.dataclass(frozen=True)
class AnalyticCostModel:
    """`CostModel` from a device profile: roofline for compute nodes, alpha-beta for
    collectives, a synchronous comm op priced as an all_reduce of the bytes it produces.
    ``default_group_size`` sizes a collective whose process group cannot be resolved."""

    profile: DeviceProfile
    default_group_size: int = 8

    def duration(self, node: torch.fx.Node) -> int:
        return to_ns(_model_seconds(node, self.profile, self.default_group_size))

    def occupancy(self, node: torch.fx.Node) -> float:
        return occupancy(node, self.profile)

    def collective_time(self, kind: str, nbytes: int, group_size: int) -> int:
        return to_ns(collective_time(kind, nbytes, group_size, self.profile))

    def sync_comm_duration(self, node: torch.fx.Node, nbytes: int, group_size: int) -> int:
        return self.collective_time("all_reduce", nbytes, group_size)

    def sync_overhead(self) -> int:
        return to_ns(self.profile.sync_overhead)

    def cache_key(self) -> str:
        fields = []
        for f in dataclasses.fields(self.profile):
            value = getattr(self.profile, f.name)
            if f.name == "peak_flops":
                value = sorted((str(dtype), rate) for dtype, rate in value.items())
            fields.append(f"{f.name}={value!r}")
        return f"analytic/1({';'.join(fields)};default_group_size={self.default_group_size})"


@dataclasses.dataclass(frozen=True)
class CostFnOverrides:
    """``base`` with per-node durations from ``cost_fn(node)`` (seconds, or None to keep
    ``base``'s). Occupancy, collective times and the sync overhead stay ``base``'s.

    For a compute node or a collective, ``base`` is asked first (an error of it
    surfaces even when ``cost_fn`` knows the node) and a negative or non-finite
    override raises ``ValueError``; for a synchronous comm op ``cost_fn`` is asked
    first and ``base`` only when it returns None."""

    base: CostModel
    cost_fn: CostFn

    def duration(self, node: torch.fx.Node) -> int:
        modelled = self.base.duration(node)
        override = self.cost_fn(node)
        return modelled if override is None else to_ns(_checked_override(override, node))

    def occupancy(self, node: torch.fx.Node) -> float:
        return self.base.occupancy(node)

    def collective_time(self, kind: str, nbytes: int, group_size: int) -> int:
        return self.base.collective_time(kind, nbytes, group_size)

    def sync_comm_duration(self, node: torch.fx.Node, nbytes: int, group_size: int) -> int:
        seconds = self.cost_fn(node)
        if seconds is None:
            return self.base.sync_comm_duration(node, nbytes, group_size)
        return to_ns(seconds)

    def sync_overhead(self) -> int:
        return self.base.sync_overhead()

    def cache_key(self) -> str:
        """``base``'s key and the cost_fn's: its own ``cache_key()`` if it has one, else
        its module, qualified name and a digest of its code. Values a closure captured
        are not part of that: give such a cost_fn a ``cache_key()``. Raises ``TypeError``
        for a callable with neither a ``cache_key()`` nor code (e.g. a functools.partial)."""
        own = getattr(self.cost_fn, "cache_key", None)
        if callable(own):
            fn_key = str(own())
        else:
            code = getattr(self.cost_fn, "__code__", None)
            if code is None:
                raise TypeError(f"cost_fn {type(self.cost_fn).__name__} has no stable identity: "
                                "give it a cache_key() method")
            name = f"{getattr(self.cost_fn, '__module__', '')}.{getattr(self.cost_fn, '__qualname__', '')}"
            fn_key = f"{name}#{_code_digest(code)}"
        return f"{self.base.cache_key()}+cost_fn({fn_key})"


def _code_digest(code: types.CodeType) -> str:
    """Digest of a code object's bytecode, names and constants (nested code included);
    set constants are sorted, so string hashing does not change it."""
    h = hashlib.sha256(code.co_code)
    h.update(repr(code.co_names).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            h.update(_code_digest(const).encode())
        elif isinstance(const, frozenset):
            h.update(repr(sorted(map(repr, const))).encode())
        else:
            h.update(repr(const).encode())
    return h.hexdigest()[:16]


def collective_time(
    kind: str, nbytes: int, group_size: int, profile: Union[str, DeviceProfile]
) -> float:
    """Alpha-beta time in seconds of one collective (formulas in
    `solvercast.graph.collectives`). ``nbytes`` is the FULL size for all_gather (gathered output)
    and reduce_scatter (input); group_size <= 1 gives 0."""
    profile = get_profile(profile)
    record = kind_named(kind)
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes}")
    p = int(group_size)
    if p <= 1:
        return 0.0
    return record.seconds(float(nbytes), p, profile)


def node_cost(
    node: torch.fx.Node,
    profile: Union[str, DeviceProfile],
    cost_fn: Optional[CostFn] = None,
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
    duration = _model_seconds(node, profile, default_group_size)
    occ = occupancy(node, profile)
    if cost_fn is not None:
        override = cost_fn(node)
        if override is not None:
            duration = _checked_override(override, node)
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
