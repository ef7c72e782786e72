"""Costs from measurements: time a graph's ops on the device at hand, fit link parameters from
collective timings, and make every rank schedule with the same table.

* `calibrate(gm)` runs ``gm`` once on real random inputs (on CPU, or CUDA when present) to get valid
  arguments for every op, then times each distinct compute op once per `op_key` (op, shapes, dtypes,
  strides of its tensor arguments) with warm-up and repeats, and returns a `MeasuredCostModel` for
  `extract_problem(cost_model=...)` / `optimize(cost_model=...)`. Timings are cached on disk per
  device name and torch version (`cache_path`), each with its spread and the load it was taken under
  (`Timing`). A later call trusts the cache only after timing a few of its ops again (`CacheTrust`): a
  cache written while the machine was busy is measured anew, as is any entry whose median ran well
  above its fastest run; ``refresh=True`` re-times everything.
* `MeasuredCostModel`: the `solvercast.cost.model.CostModel` that answers from a table of measured seconds
  per `op_key` and from measured collective rows (`CollectiveRows`, interpolated between measured
  sizes), and asks its ``base`` (the analytic model) for everything else. `fallbacks` lists the
  nodes it could not answer. `solvercast.cost.profiled` builds the same model from a profiler trace.
* `measure_collectives` times real collectives of the initialised process group;
  `fit_link_parameters` fits a `DeviceProfile`'s alpha-beta parameters (``link_latency``,
  ``link_bandwidth``) to such rows.
* `agree_on_table`: ranks measure different times, and different costs give different collective
  orders, which hangs the job. When a process group is initialised, `calibrate` all-gathers every
  rank's table and every rank takes the per-op median over ranks: the same table everywhere.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import hashlib
import json
import math
import os
import platform
import re
import statistics
import time
import types
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Optional

import torch
import torch.fx as fx

from solvercast.graph.collectives import COLLECTIVE_KINDS, collective_kind_and_group
from solvercast.cost.model import AnalyticCostModel, CostModel, collective_time, to_ns
from solvercast.cost.device import DeviceProfile, get_profile
from solvercast.errors import ExtractionError
from solvercast.graph.local_run import LocalCollectives, random_inputs
from solvercast.graph.fxmeta import bound_args, hint_int, node_val, op_target
from solvercast.graph.nodes import NodeKind, classify, costs_nothing

__all__ = [
    "CACHE_ENV", "CLOCKS", "CacheTrust", "CollectiveRow", "CollectiveRows", "MeasuredCostModel", "PROFILER_DTYPE_NAMES",
    "Timing",
    "agree_on_rows", "agree_on_table", "cache_path", "calibrate", "carried_free_nodes", "device_name", "fit_link_parameters",
    "measure_collectives", "node_op_key", "op_key", "ranks_in", "time_calls",
]

#: Environment variable naming the calibration cache directory (default ``~/.cache/solvercast``).
CACHE_ENV = "SOLVERCAST_CACHE_DIR"

#: torch dtype -> the name torch.profiler writes in a trace's "Input type" (c10's TypeMeta name), so a
#: graph node and a trace event give the same `op_key`.
PROFILER_DTYPE_NAMES: Mapping[torch.dtype, str] = types.MappingProxyType({
    torch.float32: "float", torch.float64: "double", torch.float16: "c10::Half", torch.bfloat16: "c10::BFloat16",
    torch.int64: "long int", torch.int32: "int", torch.int16: "short int", torch.int8: "signed char",
    torch.uint8: "unsigned char", torch.bool: "bool", torch.complex64: "c10::complex<float>",
    torch.complex128: "c10::complex<double>",
})

# ---- op keys ---------------------------------------------------------------------------------------

TensorSig = tuple[tuple[int, ...], str, tuple[int, ...]]  # (shape, dtype name, strides)


def op_key(op_name: str, tensors: Iterable[TensorSig]) -> str:
    """The key of one op call: its name (``aten::mm``) and the shape, dtype and strides of each tensor
    argument, in schema order. Non-tensor arguments are not part of it (a trace does not record them
    reliably), so ``sum(x, 0)`` and ``sum(x, 1)`` share a key."""
    parts = [f"{list(shape)}:{dtype}:{list(strides)}" for shape, dtype, strides in tensors]
    return f"{op_name}({';'.join(parts)})"


def _tensor_sig(v: Any, in_list: bool) -> Optional[TensorSig]:
    shape = getattr(v, "shape", None)
    dtype = getattr(v, "dtype", None)
    if shape is None or not isinstance(dtype, torch.dtype):
        return None
    stride = v.stride() if callable(getattr(v, "stride", None)) else getattr(v, "stride", ())
    # a trace records no dtype for the tensors of a list argument
    name = "?" if in_list else PROFILER_DTYPE_NAMES.get(dtype, str(dtype))
    return (tuple(hint_int(s, 1) for s in shape), name, tuple(hint_int(s, 1) for s in stride))


def _op_name(target: Any) -> str:
    target = op_target(target)
    schema = getattr(target, "_schema", None)
    if schema is not None:
        return schema.name
    return f"{getattr(target, '__module__', '') or ''}.{getattr(target, '__qualname__', target)}".lstrip(".")


# a Python number passed where the schema takes a Tensor runs as a 0-d "wrapped number" tensor, which
# the profiler records as one
_WRAPPED_NUMBER = ((bool, "bool"), (int, "long int"), (float, "double"))


def node_op_key(node: fx.Node) -> str:
    """`op_key` of a ``call_function`` node, from the fake values of its arguments."""
    target = op_target(node.target)
    schema = getattr(target, "_schema", None)
    tensor_params: set[str] = set()
    if schema is not None:
        bound = bound_args(node, target)
        values = list(bound.values())
        tensor_params = {a.name for a in schema.arguments if isinstance(a.type, torch.TensorType)}
        names = list(bound)
    else:
        values = list(node.args) + list(node.kwargs.values())
        names = [""] * len(values)
    sigs: list[TensorSig] = []
    for name, value in zip(names, values):
        if name in tensor_params and not isinstance(value, fx.Node):
            wrapped = next((t for kind, t in _WRAPPED_NUMBER if isinstance(value, kind)), None)
            if wrapped is not None:
                sigs.append(((), wrapped, ()))
                continue
        in_list = isinstance(value, (list, tuple))
        for item in (value if in_list else (value,)):
            v = node_val(item) if isinstance(item, fx.Node) else item
            sig = _tensor_sig(v, in_list)
            if sig is not None:
                sigs.append(sig)
    return op_key(_op_name(node.target), sigs)


# ---- collective rows -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class CollectiveRow:
    """One measured collective: ``kind`` (a `solvercast.graph.collectives` name), ``nbytes`` (the model's N:
    the gathered size for all_gather, the input for reduce_scatter), ``group_size``, ``seconds``."""

    kind: str
    nbytes: int
    group_size: int
    seconds: float

    def __post_init__(self) -> None:
        if self.kind not in COLLECTIVE_KINDS:
            raise ValueError(f"unknown collective kind {self.kind!r}; expected one of {COLLECTIVE_KINDS}")
        if self.nbytes < 0 or self.group_size < 1 or not (math.isfinite(self.seconds) and self.seconds >= 0):
            raise ValueError(f"bad collective row {self}")


@dataclasses.dataclass(frozen=True)
class CollectiveRows:
    """Measured collective times, interpolated piecewise linearly in bytes between measured sizes of
    one (kind, group size). Below the smallest size: the smallest size's time (latency-bound); above
    the largest: the last segment's slope (bandwidth-bound). Repeated sizes: their median."""

    rows: tuple[CollectiveRow, ...] = ()

    def __post_init__(self) -> None:
        points: dict[tuple[str, int], dict[int, list[float]]] = {}
        for r in self.rows:
            points.setdefault((r.kind, r.group_size), {}).setdefault(r.nbytes, []).append(r.seconds)
        curves = {key: tuple((n, statistics.median(ts)) for n, ts in sorted(by_size.items()))
                  for key, by_size in points.items()}
        object.__setattr__(self, "_curves", curves)

    def seconds(self, kind: str, nbytes: int, group_size: int) -> Optional[float]:
        """Interpolated seconds, or None when no row has this kind and group size."""
        curve = self._curves.get((kind, group_size))
        if not curve:
            return None
        sizes = [n for n, _ in curve]
        i = bisect.bisect_left(sizes, nbytes)
        if i < len(sizes) and sizes[i] == nbytes:
            return curve[i][1]
        if i == 0:
            return curve[0][1]
        if len(curve) == 1:  # one point: that latency, growing with size beyond it
            return curve[0][1] * nbytes / max(sizes[0], 1)
        (n0, t0), (n1, t1) = (curve[-2], curve[-1]) if i == len(curve) else (curve[i - 1], curve[i])
        return max(0.0, t0 + (t1 - t0) * (nbytes - n0) / (n1 - n0))

    def key(self) -> str:
        return ";".join(f"{k}/{p}:{curve}" for (k, p), curve in sorted(self._curves.items()))


# ---- the measured cost model -----------------------------------------------------------------------


def _frozen(table: Mapping[str, float]) -> Mapping[str, float]:
    return types.MappingProxyType({str(k): float(v) for k, v in sorted(table.items())})


@dataclasses.dataclass(frozen=True)
class MeasuredCostModel:
    """`CostModel` from measurements: a compute node (or a collective timed locally) takes the seconds
    ``seconds[node_op_key(node)]``; a collective the table lacks takes ``collectives``' interpolated
    time for its kind, bytes and group size; anything else, occupancy, and (unless
    ``sync_overhead_seconds`` is given) the sync overhead come from ``base``.

    With ``charge_free_ops`` (CPU: one thread runs everything), a priced node also takes the measured
    host time of the free nodes it is the first priced consumer of (views, getitems, waits: no kernel
    on a GPU, so the scheduler prices them at 0, but a CPU thread spends time on them); see
    `carried_free_nodes`.

    ``source`` says where the numbers come from (device name, trace path); ``new_measurements`` is
    how many ops the call that made this model timed (0 when everything came from the cache)."""

    base: CostModel
    seconds: Mapping[str, float]
    collectives: CollectiveRows = CollectiveRows()
    sync_overhead_seconds: Optional[float] = None
    source: str = ""
    new_measurements: int = dataclasses.field(default=0, compare=False)
    default_group_size: int = 8
    charge_free_ops: bool = False
    #: per op key, how and when it was measured (calibration): the report says how old and noisy the costs are
    timings: Mapping[str, Timing] = dataclasses.field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "seconds", _frozen(self.seconds))
        if self.sync_overhead_seconds is not None and not self.sync_overhead_seconds >= 0:
            raise ValueError(f"sync_overhead_seconds must be >= 0, got {self.sync_overhead_seconds!r}")

    def measured_seconds(self, node: fx.Node) -> Optional[float]:
        """The measured seconds of ``node``, or None when the measurements lack it (the base answers)."""
        info = classify(node)
        if info.kind is NodeKind.WAIT:
            return 0.0
        if node.op != "call_function" or costs_nothing(info):
            return None
        found = self.seconds.get(node_op_key(node))
        if found is not None or info.kind is not NodeKind.COLLECTIVE:
            return found
        kind, p, nbytes = collective_kind_and_group(node, self.default_group_size)
        return self.collectives.seconds(kind, nbytes, p)

    def duration(self, node: fx.Node) -> int:
        measured = self.measured_seconds(node)
        own = self.base.duration(node) if measured is None else to_ns(measured)
        if not self.charge_free_ops:
            return own
        carried = sum(self.seconds.get(node_op_key(v), 0.0) for v in carried_free_nodes(node))
        return own + to_ns(carried)

    def occupancy(self, node: fx.Node) -> float:
        return self.base.occupancy(node)

    def collective_time(self, kind: str, nbytes: int, group_size: int) -> int:
        measured = self.collectives.seconds(kind, nbytes, group_size)
        return self.base.collective_time(kind, nbytes, group_size) if measured is None else to_ns(measured)

    def sync_comm_duration(self, node: fx.Node, nbytes: int, group_size: int) -> int:
        return self.collective_time("all_reduce", nbytes, group_size)

    def sync_overhead(self) -> int:
        if self.sync_overhead_seconds is None:
            return self.base.sync_overhead()
        return to_ns(self.sync_overhead_seconds)

    def cache_key(self) -> str:
        digest = hashlib.sha256(json.dumps(list(self.seconds.items())).encode())
        digest.update(self.collectives.key().encode())
        return (f"measured/1({self.source};ops={len(self.seconds)};{digest.hexdigest()[:16]};"
                f"sync={self.sync_overhead_seconds!r};free_ops={self.charge_free_ops};base={self.base.cache_key()})")

    def fallbacks(self, gm: fx.GraphModule) -> list[str]:
        """Names of the nodes of ``gm`` the model prices (compute nodes and collectives; views, waits
        and inputs cost nothing) whose time the measurements lack: ``base`` prices them."""
        return [n.name for n in gm.graph.nodes if _is_priced(n) and self.measured_seconds(n) is None]

    def coverage(self, gm: fx.GraphModule) -> str:
        """One line: how many of ``gm``'s priced nodes the measurements covered and how many fell back."""
        priced = [n for n in gm.graph.nodes if _is_priced(n)]
        missing = {n.name for n in priced if self.measured_seconds(n) is None}
        comm = [n.name for n in priced if classify(n).kind is NodeKind.COLLECTIVE]
        comm_measured = sum(1 for name in comm if name not in missing)
        return (f"measured costs ({self.source}): {len(priced) - len(missing)} of {len(priced)} priced ops "
                f"measured ({comm_measured} of {len(comm)} collectives); {len(missing)} fell back to the model"
                + self._age_and_noise())

    def _age_and_noise(self) -> str:
        """``; taken 3 min-2.1 h ago, median up to 1.2 x the fastest call, load 0.4-1.9`` (what is known)."""
        if not self.timings:
            return ""
        ages = [time.time() - t.at for t in self.timings.values() if t.at is not None]
        noise = max((t.median / t.low for t in self.timings.values() if t.low > 0), default=1.0)
        loads = [t.load for t in self.timings.values() if t.load is not None]
        said = [f"taken {_ago(min(ages))}-{_ago(max(ages))} ago" if ages else "taken at an unrecorded time",
                f"median up to {noise:.2f} x the fastest call"]
        if loads:
            said.append(f"load {min(loads):.1f}-{max(loads):.1f}")
        return "; " + ", ".join(said)


def _ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def _is_priced(node: fx.Node) -> bool:
    info = classify(node)
    return (node.op == "call_function" and info.kind in (NodeKind.COMPUTE, NodeKind.COLLECTIVE)
            and not costs_nothing(info))


def _is_free_call(node: fx.Node) -> bool:
    """A call the scheduler prices at 0 that still runs on the host: a view, a getitem, a wait."""
    info = classify(node)
    return node.op == "call_function" and info.kind is not NodeKind.ANCHOR and (
        costs_nothing(info) or info.kind is NodeKind.WAIT)


def _graph_position(node: fx.Node) -> Any:
    """A key that orders nodes as their graph does: FX's own sort key (kept up to date on insertion),
    else the index (older torch)."""
    key = getattr(node, "_sort_key", None)
    return key if key is not None else list(node.graph.nodes).index(node)


def _first_priced_consumer(v: fx.Node) -> Optional[fx.Node]:
    """The priced node, first in graph order, that reads ``v`` directly or through free nodes."""
    best, stack, seen = None, list(v.users), set()
    while stack:
        u = stack.pop()
        if u in seen:
            continue
        seen.add(u)
        if _is_priced(u):
            if best is None or _graph_position(u) < _graph_position(best):
                best = u
        elif _is_free_call(u):
            stack.extend(u.users)
    return best


def carried_free_nodes(node: fx.Node) -> list[fx.Node]:
    """The free nodes whose host time ``node`` carries on a CPU: those upstream of it through free
    nodes only whose first priced consumer (in graph order) is ``node``. A free node no priced node
    reads (a view returned as an output) is carried by none."""
    if not _is_priced(node):
        return []
    out, stack, seen = [], list(node.all_input_nodes), set()
    while stack:
        v = stack.pop()
        if v in seen or not _is_free_call(v):
            continue
        seen.add(v)
        if _first_priced_consumer(v) is node:
            out.append(v)
            stack.extend(v.all_input_nodes)
    return out


# ---- calibration ---------------------------------------------------------------------------------


def device_name(device: torch.device) -> str:
    """A name for the cache: the GPU's name, or the CPU's model and the number of threads torch uses."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            found = re.search(r"^model name\s*:\s*(.+)$", f.read(), re.M)
        if found:
            model = found.group(1).strip()
    except OSError:
        pass
    return f"cpu {model} {torch.get_num_threads()} threads"


def cache_path(device: torch.device, cache_dir: Optional[str] = None) -> str:
    """The cache file for ``device``: ``cache_dir``, else ``$SOLVERCAST_CACHE_DIR``, else
    ``~/.cache/solvercast``; one JSON file per device name and torch version."""
    root = cache_dir or os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "solvercast")
    slug = re.sub(r"[^A-Za-z0-9.]+", "_", f"{device_name(device)}-torch{torch.__version__}").strip("_")
    return os.path.join(root, f"calibration-{slug}.json")


@dataclasses.dataclass(frozen=True)
class Timing:
    """One op's measurement: the median, fastest and slowest of its timed calls (seconds), the host's
    one-minute load average while it was taken, and when (Unix seconds). A cache written before these
    were kept holds the median alone (``low == high == median``, no load, no time)."""

    median: float
    low: float
    high: float
    load: Optional[float] = None
    at: Optional[float] = None

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @staticmethod
    def from_json(v: Any) -> "Timing":
        if isinstance(v, (int, float)):
            return Timing(float(v), float(v), float(v))
        return Timing(float(v["median"]), float(v["low"]), float(v["high"]), v.get("load"), v.get("at"))


@dataclasses.dataclass(frozen=True)
class CacheTrust:
    """When `calibrate` trusts a cached timing (experiments/results/calibration.md: a cache written while the
    machine was busy predicted a step 91% too long; measured afresh, within 2%)."""

    #: an entry whose median ran this many times its fastest call was taken on a busy machine: re-measured
    noisy_median_over_min: float = 1.5
    #: ... unless its median is below this: a few-microsecond op jitters that much on a quiet machine too, and
    #: weighs little in a step
    noise_floor_seconds: float = 20e-6
    #: cached ops of the graph timed again before the cache is trusted (the slowest ones above the noise floor:
    #: they weigh most, and their timings are steady enough to compare)
    check_ops: int = 5
    #: ... each with this many timed calls (after one warm-up): a bounded cost, a few ms on the zoo's ops
    check_repeats: int = 3
    #: the sample's median ratio (now / cached) outside [1 / (1 + this), 1 + this]: the cache is measured anew
    check_tolerance: float = 0.3

    def noisy(self, t: Timing) -> bool:
        return t.median >= self.noise_floor_seconds and t.median > self.noisy_median_over_min * t.low


def _load_cache(path: str) -> dict[str, Timing]:
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return {str(k): Timing.from_json(v) for k, v in data.get("ops", {}).items()}


def _save_cache(path: str, device: torch.device, table: Mapping[str, Timing]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump({"device": device_name(device), "torch": torch.__version__,
                   "ops": {k: t.to_json() for k, t in sorted(table.items())}}, f, indent=1)
    os.replace(tmp, path)  # atomic: ranks sharing a directory never read half a file


def _load_average() -> Optional[float]:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):  # not on every platform
        return None


class _ArgumentCapture(fx.Interpreter):
    """Runs the graph on real tensors and keeps the arguments of the first node of each wanted key
    (valid values: indices in range, shapes as traced). Collectives and waits run on the local
    stand-ins of `solvercast.testing`: calibration needs their outputs' shapes, not a process group."""

    def __init__(self, gm: fx.GraphModule, wanted: dict[fx.Node, str]):
        super().__init__(gm)
        self.wanted = wanted
        self.captured: dict[str, tuple[Any, tuple, dict]] = {}

    def run_node(self, n: fx.Node) -> Any:
        key = self.wanted.get(n)
        if key is not None and key not in self.captured:
            args, kwargs = self.fetch_args_kwargs_from_env(n)
            self.captured[key] = (n.target, args, kwargs)
        if classify(n).kind in (NodeKind.COLLECTIVE, NodeKind.WAIT):
            with LocalCollectives():
                return super().run_node(n)
        return super().run_node(n)


def _mutates(target: Any) -> bool:
    schema = getattr(op_target(target), "_schema", None)
    return schema is not None and any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)


def _clone(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.clone()
    if isinstance(x, (list, tuple)):
        return type(x)(_clone(y) for y in x)
    return x


#: CPU clocks `time_calls` may use: the wall clock, or the calling thread's CPU time (one intra-op
#: thread on cores shared with other processes: the time the op ran, not the time it waited for a core).
CLOCKS: Mapping[str, Callable[[], float]] = types.MappingProxyType({"wall": time.perf_counter,
                                                                    "thread": time.thread_time})


#: GPU cycles of spin queued before a timed call (about 0.5 ms at the 1.98 GHz an H200 runs at). Events around a
#: call on an idle GPU time the host's launch of its kernels too (on a virtualized H200 host a 256 x 256 matmul
#: timed 22.7 us so and 4.9 us behind the spin, and the zoo's programs were predicted 32-52% above their measured
#: CUDA time): behind a spin the host enqueues the call while the GPU is still busy, and the events time its
#: kernels alone.
QUEUE_AHEAD_CYCLES = 1_000_000


#: how `_time_once` times a call on a GPU, part of the cache key: a table timed another way measures something else
CUDA_TIMING = "queued-max-host"


def cuda_times(fn: Callable[[], Any], context: Optional[Callable[[], Any]] = None) -> tuple[float, float]:
    """(device seconds, host seconds) of ``fn()`` on the current CUDA stream: CUDA events with a spin queued ahead
    (`QUEUE_AHEAD_CYCLES`) so the host's launch latency is not counted in the first, and the host's wall time to
    issue the call (no waiting for the GPU) in the second. ``context``: entered around the timed call (a dispatch
    mode), not around the spin."""
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(QUEUE_AHEAD_CYCLES)
    with context() if context is not None else contextlib.nullcontext():
        begin.record()
        started = time.perf_counter()
        fn()
        host = time.perf_counter() - started
        end.record()
    end.synchronize()
    return begin.elapsed_time(end) / 1e3, host


def cuda_seconds(fn: Callable[[], Any], context: Optional[Callable[[], Any]] = None) -> float:
    """Device seconds of ``fn()`` (`cuda_times`)."""
    return cuda_times(fn, context)[0]


def _time_once(fn: Callable, args: tuple, kwargs: dict, device: torch.device, mode: Optional[Callable[[], Any]],
               clock: Callable[[], float]) -> float:
    """Seconds of one call: on a GPU the longer of its device time and the host's time to issue it
    (`cuda_times`), since a stream runs a kernel no sooner than the host has launched it and a program of small
    ops runs at the host's pace; ``clock`` on a CPU. An op that writes its arguments gets fresh copies first
    (not timed), so repeats see the same values."""
    if _mutates(fn):
        args, kwargs = _clone(args), _clone(kwargs)
    if device.type == "cuda":
        return max(cuda_times(lambda: fn(*args, **kwargs), mode))
    ctx = mode() if mode is not None else contextlib.nullcontext()
    with ctx:
        started = clock()
        fn(*args, **kwargs)
        return clock() - started


def time_calls(calls: Mapping[str, tuple[Callable, tuple, dict]], device: torch.device, warmup: int = 3,
               repeats: int = 11, mode: Optional[Callable[[], Any]] = None, clock: str = "wall",
               after_round: Optional[Callable[[int], Any]] = None, hot: bool = False,
               spread: Optional[dict[str, tuple[float, float]]] = None) -> dict[str, float]:
    """key -> median seconds of its call ``fn(*args, **kwargs)`` over ``repeats`` rounds after
    ``warmup`` rounds. A round calls every entry once, in the order given (the program's), so that a
    call finds the caches as the other ops left them, as in the program. ``hot=True`` precedes each
    timed call by an untimed call of the same op, as when one op is timed in a loop: its code and
    data are then hot, and on one CPU thread the zoo graphs were predicted 17-22% below their time
    in the running module (experiments/results/calibration_hot.md; 13-27% in an earlier run). ``mode``: a context (e.g. a
    TorchDispatchMode) every call runs under, as the program predicted does. ``after_round(r)`` runs
    after round ``r`` (warm-up rounds included): a measurement taken there sees the same machine load
    as the op timings (experiments/gpu/calibration.py times the module so). ``spread``, when given,
    receives each key's fastest and slowest timed call."""
    tick = CLOCKS[clock]
    samples: dict[str, list[float]] = {k: [] for k in calls}
    for r in range(warmup + max(1, repeats)):
        for key, (fn, args, kwargs) in calls.items():
            if hot:
                _time_once(fn, args, kwargs, device, mode, tick)
            seconds = _time_once(fn, args, kwargs, device, mode, tick)
            if r >= warmup:
                samples[key].append(seconds)
        if after_round is not None:
            after_round(r)
    if spread is not None:
        spread.update({k: (min(v), max(v)) for k, v in samples.items()})
    return {k: statistics.median(v) for k, v in samples.items()}


def _timed_nodes(gm: fx.GraphModule, with_collectives: bool, with_free: bool) -> dict[fx.Node, str]:
    """node -> op_key of every node calibration times: compute kernels, collectives and waits when
    asked, free nodes (views, getitems) when asked."""
    out = {}
    for n in gm.graph.nodes:
        kind = classify(n).kind
        if _is_priced(n) and (kind is NodeKind.COMPUTE or with_collectives):
            out[n] = node_op_key(n)
        elif with_free and _is_free_call(n) and (kind is not NodeKind.WAIT or with_collectives):
            out[n] = node_op_key(n)
    return out


def _table_suffix(dev: torch.device, mode, clock: str, hot: bool) -> str:
    """What a table's keys carry besides the op: a table measured under a dispatch mode or with another clock
    measures something else, so it is kept apart."""
    suffix = f"|mode={getattr(mode, '__qualname__', type(mode).__name__)}" if mode is not None else ""
    suffix += f"|clock={clock}" if clock != "wall" and dev.type == "cpu" else ""
    suffix += "|hot" if hot else ""
    suffix += f"|timing={CUDA_TIMING}" if dev.type == "cuda" else ""
    return suffix


def _to_measure(cache: dict, keys: set[str], refresh: bool, trust: CacheTrust) -> tuple[set[str], set[str]]:
    """(keys to measure, trusted keys to time again before the cache is believed: the slowest above the noise
    floor)."""
    missing = set(keys) if refresh else {k for k in keys if k not in cache or trust.noisy(cache[k])}
    weighty = sorted((k for k in keys - missing if cache[k].median >= trust.noise_floor_seconds),
                     key=lambda k: (-cache[k].median, k))
    return missing, set() if refresh else set(weighty[: trust.check_ops])


def _timings(calls: dict, dev: torch.device, warm: int, reps: int, mode, clock: str, hook, hot: bool
             ) -> dict[str, Timing]:
    """`time_calls`' medians with their spread and the machine's load now."""
    spread: dict[str, tuple[float, float]] = {}
    with torch.no_grad():
        medians = time_calls(calls, dev, warm, reps, mode, clock, hook, hot, spread=spread)
    load, now = _load_average(), time.time()
    return {k: Timing(m, *spread.get(k, (m, m)), load, now) for k, m in medians.items()}


def calibrate(
    gm: fx.GraphModule,
    device: Optional[str | torch.device] = None,
    *,
    base: Optional[CostModel] = None,
    collectives: CollectiveRows = CollectiveRows(),
    cache_dir: Optional[str] = None,
    warmup: int = 3,
    repeats: int = 11,
    mode: Optional[Callable[[], Any]] = None,
    clock: str = "wall",
    after_round: Optional[Callable[[int], Any]] = None,
    hot: bool = False,
    group: Any = None,
    agree: bool = True,
    seed: int = 0,
    refresh: bool = False,
    trust: CacheTrust = CacheTrust(),
) -> MeasuredCostModel:
    """Measure ``gm``'s ops on ``device`` (None: CUDA when available, else CPU) and return a
    `MeasuredCostModel` for `extract_problem` / `optimize`.

    Each distinct `node_op_key` (op, shapes, dtypes, strides) is timed with ``warmup`` calls and the
    median of ``repeats``, in rounds over all of them (`time_calls`), on the arguments it gets when
    ``gm`` runs on random inputs
    (`solvercast.graph.local_run.random_inputs`). Timings are read from and added to the cache
    (`cache_path`), each with its spread and load (`Timing`). A cached entry is used only if it was not
    noisy and a sample of the graph's cached ops, timed again, agrees with the cache (``trust``; a
    sample that disagrees warns and measures every op of the graph anew); ``refresh`` re-times every op.
    When every key is cached and the sample agrees, only the sample runs. Collectives are priced by ``collectives``
    (measured rows, e.g. `measure_collectives`) and else by ``base`` (default: the analytic H100
    model), unless ``mode`` is given: then every op, collectives included, is timed inside ``mode()``
    (e.g. `solvercast.graph.local_run.LocalCollectives`, when the program predicted runs under it). On CPU
    the sync overhead is 0 (one thread, no streams) and free nodes (views, getitems, waits) are timed
    too and charged to the kernel that first reads them (`MeasuredCostModel.charge_free_ops`); on
    CUDA the sync overhead is ``base``'s. ``clock``: how CPU
    calls are timed (`CLOCKS`: "wall", or "thread" for one intra-op thread on shared cores).
    ``after_round``, ``hot``: see `time_calls` (``after_round`` is called only when something is
    measured).

    With an initialised process group (``group``, or the default group), every rank must call this:
    the tables are all-gathered and each rank keeps the per-op median over ranks (`agree_on_table`),
    so all ranks schedule with one table; ``agree=False`` skips that (unsafe across ranks).

    Raises `ExtractionError` when ``gm`` cannot run on real inputs (an op fails), with the node.
    """
    dev = torch.device(device) if device is not None else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    base = base if base is not None else AnalyticCostModel(get_profile("h100"))
    path = cache_path(dev, cache_dir)
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {sorted(CLOCKS)}, got {clock!r}")
    suffix = _table_suffix(dev, mode, clock, hot)
    cache = _load_cache(path)
    cpu = dev.type == "cpu"
    wanted = {n: k + suffix for n, k in _timed_nodes(gm, with_collectives=mode is not None, with_free=cpu).items()}
    keys = set(wanted.values())
    missing, sample = _to_measure(cache, keys, refresh, trust)

    def captured(these: set[str]) -> dict:
        """The calls of ``these`` keys, with the arguments they get when ``gm`` runs (graph order)."""
        capture = _ArgumentCapture(gm, {n: k for n, k in wanted.items() if k in these})
        try:
            with torch.no_grad():
                capture.run(*random_inputs(gm, seed=seed, device=str(dev)))
        except Exception as e:
            raise ExtractionError(f"calibrate: the graph does not run on real {dev} inputs: "
                                  f"{type(e).__name__}: {e}") from e
        return capture.captured

    calls = captured(missing | sample) if missing or sample else {}
    if sample:
        again = _timings({k: calls[k] for k in sample}, dev, 1, trust.check_repeats, mode, clock, None, hot)
        ratio = statistics.median(again[k].median / cache[k].median if cache[k].median > 0 else 1.0 for k in sample)
        if not 1 / (1 + trust.check_tolerance) <= ratio <= 1 + trust.check_tolerance:
            warnings.warn(f"calibrate: {len(sample)} cached ops timed again ran {ratio:.2f} x their cached times "
                          f"(tolerance {trust.check_tolerance:g}): the cache at {path} was taken under other "
                          "conditions; measuring every op of this graph anew", stacklevel=2)
            missing = set(keys)
            calls = {**calls, **captured(missing - set(calls))}
    timed: dict[str, Timing] = {}
    if missing:
        timed = _timings({k: c for k, c in calls.items() if k in missing}, dev, warmup, repeats, mode, clock,
                         after_round, hot)
    del calls
    table = {**cache, **timed}
    if agree:  # this graph's ops only: the cache may hold every op this device ever timed
        medians = agree_on_table({k: table[k].median for k in keys}, group)
        table.update({k: dataclasses.replace(table[k], median=m) for k, m in medians.items() if m != table[k].median})
    if table != cache:
        _save_cache(path, dev, table)
    strip = (lambda k: k[: len(k) - len(suffix)]) if suffix else (lambda k: k)
    return MeasuredCostModel(base=base, seconds={strip(k): table[k].median for k in keys}, collectives=collectives,
                             sync_overhead_seconds=0.0 if cpu else None, charge_free_ops=cpu,
                             source=f"calibrated on {device_name(dev)}, torch {torch.__version__}{suffix}",
                             new_measurements=len(timed), timings={strip(k): table[k] for k in keys})


# ---- every rank, one table -------------------------------------------------------------------------


def ranks_in(group: Any = None) -> int:
    """Ranks of ``group`` (None: the default group); 1 without an initialised process group."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return 1
    return dist.get_world_size(group)


def agree_on_table(table: Mapping[str, float], group: Any = None) -> dict[str, float]:
    """The table every rank of ``group`` (None: the default group) agrees on: all ranks' tables
    all-gathered, and for each key the median of the ranks that measured it. Every rank computes it
    from the same gathered tables, so every rank gets the same floats. Without an initialised process
    group (or with one rank) ``table`` itself. Every rank of the group must call it."""
    if ranks_in(group) <= 1:
        return dict(table)
    import torch.distributed as dist

    gathered: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, dict(table), group=group)
    keys = sorted(set().union(*(g.keys() for g in gathered)))
    return {k: float(statistics.median(sorted(g[k] for g in gathered if k in g))) for k in keys}


def agree_on_rows(rows: Sequence[CollectiveRow], group: Any = None) -> list[CollectiveRow]:
    """Every rank's measured collective rows, all-gathered, in rank order: the same list on every rank
    of ``group`` (`CollectiveRows` takes the median of a repeated size). Without an initialised
    process group (or with one rank) ``rows`` itself. Every rank of the group must call it."""
    if ranks_in(group) <= 1:
        return list(rows)
    import torch.distributed as dist

    gathered: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, [dataclasses.astuple(r) for r in rows], group=group)
    return [CollectiveRow(*r) for rank_rows in gathered for r in rank_rows]


# ---- collectives: measure and fit ----------------------------------------------------------------


def measure_collectives(
    sizes: Sequence[int],
    kinds: Sequence[str] = ("all_reduce", "all_gather"),
    group: Any = None,
    warmup: int = 2,
    repeats: int = 5,
    device: Optional[torch.device] = None,
) -> list[CollectiveRow]:
    """Time real collectives of the initialised process group ``group`` on float32 buffers of each
    byte size in ``sizes`` (the model's N: the gathered size for all_gather). Each call starts after a
    barrier; a call's time is the slowest rank's (all-reduced max), so every rank returns the same
    rows. Kinds: all_reduce, all_gather, reduce_scatter, broadcast (what the backend supports). Raises
    ``RuntimeError`` without an initialised process group."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("measure_collectives needs an initialised process group (dist.init_process_group)")
    p = dist.get_world_size(group)
    dev = device or torch.device("cpu")
    rows = []
    for kind in kinds:
        for nbytes in sizes:
            numel = max(p, nbytes // 4 // p * p)  # divisible by the group, for gather and scatter
            full = torch.ones(numel, device=dev)
            shard = torch.ones(numel // p, device=dev)

            def call() -> None:
                if kind == "all_reduce":
                    dist.all_reduce(full, group=group)
                elif kind == "all_gather":
                    dist.all_gather_into_tensor(full, shard, group=group)
                elif kind == "reduce_scatter":
                    dist.reduce_scatter_tensor(shard, full, group=group)
                elif kind == "broadcast":
                    dist.broadcast(full, src=dist.get_global_rank(group, 0) if group is not None else 0, group=group)
                else:
                    raise ValueError(f"measure_collectives cannot time {kind!r}")

            samples = []
            for i in range(warmup + repeats):
                dist.barrier(group=group)
                started = time.perf_counter()
                call()
                if dev.type == "cuda":
                    torch.cuda.synchronize(dev)
                elapsed = torch.tensor([time.perf_counter() - started], dtype=torch.float64, device=dev)
                dist.all_reduce(elapsed, op=dist.ReduceOp.MAX, group=group)
                if i >= warmup:
                    samples.append(float(elapsed.item()))
            rows.append(CollectiveRow(kind, numel * 4, p, statistics.median(samples)))
    return rows


def _alpha_beta_coefficients(kind: str, nbytes: int, p: int, base: DeviceProfile) -> tuple[float, float]:
    """(c_a, c_b) with time = c_a * link_latency + c_b / link_bandwidth for this collective: the model
    is linear in both, so two evaluations of `collective_time` give them."""
    latency_only = dataclasses.replace(base, link_latency=1.0, link_bandwidth=1e300)
    bandwidth_only = dataclasses.replace(base, link_latency=0.0, link_bandwidth=1.0)
    return collective_time(kind, nbytes, p, latency_only), collective_time(kind, nbytes, p, bandwidth_only)


def fit_link_parameters(rows: Iterable[CollectiveRow], base: DeviceProfile | str = "h100",
                        name: Optional[str] = None) -> DeviceProfile:
    """``base`` with ``link_latency`` and ``link_bandwidth`` fitted to measured collectives: least
    squares of each row's time relative to itself (small and large messages weigh alike) over the
    alpha-beta formulas of `solvercast.graph.collectives`, the latency held at >= 0.

    Raises ``ValueError`` when the rows cannot fix both parameters (fewer than 2 rows with a group of
    2 or more) or give no positive bandwidth."""
    import numpy as np

    base = get_profile(base)
    rows = [r for r in rows if r.group_size >= 2 and r.seconds > 0]
    if len(rows) < 2:
        raise ValueError("fit_link_parameters needs at least 2 measured collectives with a group of 2 or more")
    coef = np.array([_alpha_beta_coefficients(r.kind, r.nbytes, r.group_size, base) for r in rows])
    t = np.array([r.seconds for r in rows])
    a_matrix = coef / t[:, None]  # relative residuals: rows scaled by their own time
    target = np.ones(len(rows))
    (alpha, inv_bw), *_ = np.linalg.lstsq(a_matrix, target, rcond=None)
    if alpha < 0:  # latency below zero: refit the bandwidth alone with no latency
        alpha = 0.0
        col = a_matrix[:, 1]
        inv_bw = float(col @ target / (col @ col)) if col @ col > 0 else 0.0
    if not inv_bw > 0:
        raise ValueError("the measured collectives give no positive bandwidth (times do not grow with bytes)")
    return dataclasses.replace(base, name=name or f"{base.name}-fitted", link_latency=float(alpha),
                               link_bandwidth=float(1.0 / inv_bw))
