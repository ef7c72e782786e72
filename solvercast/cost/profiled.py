"""Profile-guided costs: a `torch.profiler` Chrome trace of the same program as a cost model.

`profile_cost_model(trace, gm)` reads the JSON that ``prof.export_chrome_trace(path)`` writes and
returns a `solvercast.cost.calibrate.MeasuredCostModel`:

* compute ops: every top-level ``cpu_op`` event (not nested in another op of its thread, not on a
  collective library's worker) recorded with ``record_shapes=True`` gets the `op_key` of its name and
  its tensor arguments' "Input Dims", "Input type" and "Input Strides": a graph node whose
  `node_op_key` is equal takes the median duration of those events. With CUDA kernels in the trace,
  an op's duration is the sum of the kernels linked to it or to the ops nested in it ("External
  id"), else its host duration. Collective launches (``c10d::``, ``_c10d_functional::``) are not
  compute: their host time is not the collective's.
* collectives: ``record_param_comms`` events (collective name, message sizes, group size; device time
  from their kernels when present) and gloo's ``gloo:<kind>`` annotations (bytes from their input,
  group size from the trace's ``distributedInfo`` or ``group_size``) become `CollectiveRow`s,
  interpolated between measured sizes by `CollectiveRows`.
* anything the trace lacks falls back to ``base`` (the analytic model); `MeasuredCostModel.coverage`
  says how many did.

Only the CPU path is exercised by the tests (a trace recorded on CPU, gloo collectives between two
local processes); the CUDA kernel linking follows the trace format but has not been run on a GPU.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from collections.abc import Iterable
from typing import Any, Optional

from solvercast.cost.calibrate import (
    PROFILER_DTYPE_NAMES,
    CollectiveRow,
    CollectiveRows,
    MeasuredCostModel,
    TensorSig,
    agree_on_rows,
    agree_on_table,
    op_key,
    ranks_in,
)
from solvercast.cost.model import AnalyticCostModel, CostModel
from solvercast.cost.device import get_profile

__all__ = ["TraceCosts", "profile_cost_model", "read_trace"]

# bytes per element by the names a trace uses: "Input type" (c10 TypeMeta names) and record_param_comms'
# "dtype" (c10 ScalarType names)
_ITEMSIZE = {**{name: dtype.itemsize for dtype, name in PROFILER_DTYPE_NAMES.items()},
             "Float": 4, "Double": 8, "Half": 2, "BFloat16": 2, "Long": 8, "Int": 4, "Short": 2, "Char": 1,
             "Byte": 1, "Bool": 1}
_DTYPE_NAMES = set(PROFILER_DTYPE_NAMES.values())
# collective names as the profiler writes them -> solvercast kinds
_KINDS = {
    "allreduce": "all_reduce", "all_reduce": "all_reduce", "allreduce_coalesced": "all_reduce",
    "allgather": "all_gather", "all_gather": "all_gather", "_allgather_base": "all_gather",
    "allgather_into_tensor_coalesced": "all_gather", "all_gather_into_tensor": "all_gather",
    "reduce_scatter": "reduce_scatter", "_reduce_scatter_base": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
    "all_to_all": "all_to_all", "alltoall": "all_to_all", "alltoall_base": "all_to_all",
    "all_to_all_single": "all_to_all", "broadcast": "broadcast",
}
_COLLECTIVE_LAUNCH_PREFIXES = ("c10d::", "_c10d_functional::", "c10d_functional::")


@dataclasses.dataclass
class TraceCosts:
    """What a trace measured: ``ops`` (op_key -> durations in seconds, one per event),
    ``collectives`` (`CollectiveRow`s) and ``source`` (the trace's path)."""

    ops: dict[str, list[float]]
    collectives: list[CollectiveRow]
    source: str

    def seconds(self) -> dict[str, float]:
        """op_key -> the median of its events."""
        return {k: statistics.median(v) for k, v in self.ops.items()}


def _events(data: Any) -> list[dict]:
    events = data.get("traceEvents", []) if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise ValueError("not a Chrome trace: no traceEvents list")
    return [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]


def _tensor_sigs(args: dict) -> Optional[list[TensorSig]]:
    """The tensor arguments of a recorded op (None when the trace has no shapes: record_shapes off)."""
    types_, dims, strides = args.get("Input type"), args.get("Input Dims"), args.get("Input Strides")
    if types_ is None or dims is None:
        return None
    strides = strides if strides is not None else [[] for _ in dims]
    sigs: list[TensorSig] = []
    for t, d, s in zip(types_, dims, strides):
        if t in _DTYPE_NAMES:
            sigs.append((tuple(d), t, tuple(s)))
        elif t == "TensorList" and d and isinstance(d[0], list):
            sigs.extend((tuple(di), "?", tuple(si)) for di, si in zip(d, s or [[] for _ in d]))
    return sigs


def _top_level(events: list[dict]) -> list[dict]:
    """Ops not nested in another op of their thread, nor in a collective library's annotation."""
    out = []
    by_thread: dict[tuple, list[dict]] = {}
    for e in events:
        if e.get("cat") == "cpu_op" or str(e.get("name", "")).startswith(("gloo:", "nccl:")):
            by_thread.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    for evs in by_thread.values():
        evs.sort(key=lambda e: (float(e["ts"]), -float(e.get("dur", 0))))
        open_until = -math.inf
        for e in evs:
            ts, end = float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))
            if ts < open_until:
                continue  # nested in the enclosing op or library annotation
            open_until = end
            if e.get("cat") == "cpu_op":
                out.append(e)
    return out


def _nested_ids(events: list[dict], top: dict) -> set:
    ts, end = float(top["ts"]), float(top["ts"]) + float(top.get("dur", 0))
    return {e["args"].get("External id") for e in events
            if e.get("cat") == "cpu_op" and (e.get("pid"), e.get("tid")) == (top.get("pid"), top.get("tid"))
            and ts <= float(e["ts"]) and float(e["ts"]) + float(e.get("dur", 0)) <= end and "args" in e}


def _kernel_time(kernels: dict[Any, float], ids: Iterable) -> Optional[float]:
    found = [kernels[i] for i in ids if i in kernels]
    return sum(found) if found else None


def read_trace(path_or_data: Any, group_size: Optional[int] = None) -> TraceCosts:
    """Measured ops and collectives of a ``torch.profiler`` Chrome trace (a path, or the loaded JSON).
    ``group_size`` sizes gloo collectives (default: the trace's ``distributedInfo.world_size``).
    Raises ``ValueError`` for a file that is not a Chrome trace."""
    source = "trace"
    if isinstance(path_or_data, (str, bytes)) or hasattr(path_or_data, "__fspath__"):
        source = str(path_or_data)
        try:
            with open(path_or_data) as f:
                data = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"cannot read {source!r} as a Chrome trace: {e}") from None
    else:
        data = path_or_data
    events = _events(data)
    if group_size is None and isinstance(data, dict):
        group_size = (data.get("distributedInfo") or {}).get("world_size")
    kernels: dict[Any, float] = {}  # External id -> summed device seconds
    for e in events:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            i = e.get("args", {}).get("External id")
            kernels[i] = kernels.get(i, 0.0) + float(e.get("dur", 0)) / 1e6

    ops: dict[str, list[float]] = {}
    for e in _top_level(events):
        name = str(e.get("name", ""))
        sigs = _tensor_sigs(e.get("args", {}))
        if sigs is None or name.startswith(_COLLECTIVE_LAUNCH_PREFIXES):
            continue
        seconds = float(e.get("dur", 0)) / 1e6
        if kernels:
            device = _kernel_time(kernels, _nested_ids(events, e))
            seconds = device if device is not None else seconds
        ops.setdefault(op_key(name, sigs), []).append(seconds)

    rows: list[CollectiveRow] = []
    for e in events:
        name, args = str(e.get("name", "")), e.get("args", {})
        if name == "record_param_comms":
            kind = _KINDS.get(str(args.get("Collective name", "")).lower())
            p = int(args.get("Group size") or group_size or 0)
            size = _ITEMSIZE.get(str(args.get("dtype", "")), 4)
            elements = (int(args.get("In msg nelems", 0)) if kind == "reduce_scatter"
                        else max(int(args.get("In msg nelems", 0)), int(args.get("Out msg nelems", 0))))
            nbytes = elements * size
            seconds = _kernel_time(kernels, [args.get("External id")]) if kernels else None
        elif name.startswith("gloo:"):
            kind = _KINDS.get(name[len("gloo:"):])
            p = int(group_size or 0)
            sigs = _tensor_sigs(args) or []
            nbytes = sum(math.prod(d) * _ITEMSIZE.get(t, 4) for d, t, _ in sigs)
            if kind == "all_gather":
                nbytes *= p  # the model's N is the gathered size; gloo records the input shard
            seconds = None
        else:
            continue
        if kind is None or p < 1:
            continue
        rows.append(CollectiveRow(kind, nbytes, p, seconds if seconds is not None else float(e.get("dur", 0)) / 1e6))
    return TraceCosts(ops, rows, source)


def profile_cost_model(trace: Any, base: Optional[CostModel] = None, group_size: Optional[int] = None,
                       device: str = "h100", *, group: Any = None, agree: bool = True) -> MeasuredCostModel:
    """A `MeasuredCostModel` from a ``torch.profiler`` Chrome trace (`read_trace`): compute nodes
    matched by op, shapes, dtypes and strides; collectives by kind, bytes and group size,
    interpolated between measured sizes; everything else from ``base`` (default: the analytic model
    of ``device``). ``model.coverage(gm)`` says how many of ``gm``'s ops fell back. The sync overhead
    is ``base``'s (a trace does not isolate it).

    With an initialised process group (``group``, or the default one) every rank must call this with
    its own trace: the ops' medians are agreed as in `calibrate` (`agree_on_table`) and the collective
    rows of all ranks are pooled (`agree_on_rows`), so every rank gets the same model;
    ``agree=False`` skips that (unsafe across ranks)."""
    costs = read_trace(trace, group_size)
    base = base if base is not None else AnalyticCostModel(get_profile(device))
    seconds, rows = costs.seconds(), list(costs.collectives)
    if agree:
        seconds, rows = agree_on_table(seconds, group), agree_on_rows(rows, group)
    return MeasuredCostModel(base=base, seconds=seconds, collectives=CollectiveRows(tuple(rows)),
                             source="profile" if agree and ranks_in(group) > 1 else f"profile {costs.source}")

