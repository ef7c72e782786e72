"""Measure a lowered module with collectives that really run asynchronously.

Without a process group a traced graph's collectives cannot run, and the local stand-ins of
`solvercast.testing` run them inline on the caller's stream: nothing can overlap, so a measured step
says nothing about a schedule's comm hiding. `measure` runs the module with every
``_c10d_functional`` collective replaced by an **asynchronous stand-in**:

* it is launched where the graph (the schedule) launches it, allocates its output of the real shape
  and dtype on the caller's stream at the launch (as the functional collectives do), holds its inputs
  until its wait (as ProcessGroupNCCL does), and runs on the comm channel of its process group
  (one per group: NCCL serialises one communicator's collectives, different groups run side by side)
  for its modelled duration (`extract_problem`'s, from ``device`` or ``cost_model``, or ``durations``);
* its ``wait_tensor`` makes the caller wait for it, at the wait's place in the graph;
* its output holds the values `solvercast.graph.local_run.LocalCollectives` computes (written with out=
  kernels, no temporaries), so a measured module computes what `run_local` computes.

The comm channel is, on CUDA, a side stream per group: the stream waits for the caller's stream at
the launch (ProcessGroupNCCL's event), spins for the duration (``torch.cuda._sleep``, calibrated to
nanoseconds once per process), writes the output and records an event the wait makes the waiting
stream wait on. On CPU it is a worker thread per group: the job writes the output and sleeps out the
rest of the duration (torch's CPU kernels and ``time.sleep`` release the GIL, so the caller's ops
really overlap it); the wait joins the job. On CPU the compute streams of a lowered module do not
overlap each other (the anchor ops are no-ops there and one thread runs every op), so only comm
hiding is measured.

`measure(gm, args)` returns a `Measurement` (`measure_side_by_side` measures several modules with their
steps interleaved): the median step time of ``iters`` timed steps after
``warmup`` (CUDA events on CUDA, ``time.perf_counter`` on CPU) and the peak bytes one step allocates
above its inputs (``torch.cuda.max_memory_allocated`` on CUDA; on CPU the largest total size of the
storages the step's ops created that were alive at once, tracked through a dispatch mode in a
separate, untimed step).
"""

from __future__ import annotations

import copy
import statistics
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import torch
import torch.fx as fx
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from solvercast.cost.calibrate import cuda_seconds
from solvercast.errors import MeasureError
from solvercast.fx.extract import extract_problem
from solvercast.graph.nodes import is_distributed

__all__ = ["Measurement", "MeasureError", "asynchronous_collectives", "collective_durations", "cuda_median_ns", "measure",
           "measure_side_by_side", "run_asynchronously"]

_C10D = torch.ops._c10d_functional


@dataclass(frozen=True)
class Measurement:
    """One module measured: ``step_ns`` the median of ``steps_ns`` (one per timed step),
    ``peak_bytes`` what one step allocated above its inputs (None when not measured), on ``device``
    ("cuda" or "cpu"), with ``collectives`` asynchronous stand-ins per step."""

    step_ns: int
    steps_ns: tuple[int, ...]
    peak_bytes: int | None
    device: str
    collectives: int


# ---- stand-in outputs: LocalCollectives' values, written into the real output buffer ---------------

def _bind(op, args, kwargs) -> dict:
    """The op's arguments by schema name (positional or keyword)."""
    out = {}
    for i, a in enumerate(op._schema.arguments):
        if i < len(args):
            out[a.name] = args[i]
        elif a.name in kwargs:
            out[a.name] = kwargs[a.name]
    return out


def _all_reduce(a):
    t = a["input"]
    out = torch.empty_like(t)
    return out, (t,), lambda: torch.mul(t, 2, out=out)


def _all_reduce_inplace(a):
    t = a["input"]
    return t, (t,), lambda: t.mul_(2)


def _all_reduce_coalesced(a):
    ts = list(a["inputs"])
    outs = [torch.empty_like(t) for t in ts]

    def fill():
        for t, o in zip(ts, outs):
            torch.mul(t, 2, out=o)
    return outs, tuple(ts), fill


def _all_gather(a):
    t, w = a["input"], int(a["group_size"])
    n = t.shape[0]
    out = t.new_empty((w * n, *t.shape[1:]))

    def fill():
        for i in range(w):
            torch.mul(t, i + 1, out=out[i * n:(i + 1) * n])
    return out, (t,), fill


def _reduce_scatter(a):
    t, w = a["input"], int(a["group_size"])
    out = t.new_empty((t.shape[0] // w, *t.shape[1:]))
    return out, (t,), lambda: torch.sum(t.reshape(w, t.shape[0] // w, *t.shape[1:]), 0, out=out)


def _all_to_all(a):
    t = a["input"]
    ins = [int(s) for s in a["input_split_sizes"]]
    outs = [int(s) for s in a["output_split_sizes"]]
    out = t.new_empty((sum(outs), *t.shape[1:]))

    def fill():  # LocalCollectives' chunks in reverse order, as far as the real output holds them
        at = 0
        for chunk in reversed(t.split(ins)):
            k = min(chunk.shape[0], out.shape[0] - at)
            out[at:at + k].copy_(chunk[:k])
            at += k
    return out, (t,), fill


#: functional collective -> (bound args -> (output, inputs held until the wait, fill))
_STAND_INS: Mapping = {
    _C10D.all_reduce.default: _all_reduce,
    _C10D.all_reduce_.default: _all_reduce_inplace,
    _C10D.all_reduce_coalesced.default: _all_reduce_coalesced,
    _C10D.all_gather_into_tensor.default: _all_gather,
    _C10D.reduce_scatter_tensor.default: _reduce_scatter,
    _C10D.all_to_all_single.default: _all_to_all,
}


# ---- comm channels -------------------------------------------------------------------------------

class _Pending:
    __slots__ = ("done", "holds")

    def __init__(self, done, holds):
        self.done = done  # a Future (CPU) or a torch.cuda.Event (CUDA)
        self.holds = holds  # inputs and outputs kept alive until the wait


class _CpuChannels:
    """A worker thread per process group; a collective is a job that fills its output and sleeps out
    the rest of its duration."""

    def __init__(self):
        self.workers: dict[str, ThreadPoolExecutor] = {}

    def launch(self, group: str, duration_ns: int, fill: Callable[[], object], tensors=()) -> Future:
        worker = self.workers.get(group)
        if worker is None:
            worker = self.workers[group] = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"comm-{group}")

        def job():
            start = time.perf_counter()
            with torch.no_grad():
                fill()
            left = duration_ns * 1e-9 - (time.perf_counter() - start)
            if left > 0:
                time.sleep(left)
        return worker.submit(job)

    def wait(self, done: Future) -> None:
        done.result()

    def close(self) -> None:
        for w in self.workers.values():
            w.shutdown(wait=True)


_NS_PER_CYCLE: dict[int, float] = {}


def _ns_per_cycle(device_index: int) -> float:
    """Nanoseconds per ``torch.cuda._sleep`` cycle on this device (median of 5 timed spins)."""
    if device_index not in _NS_PER_CYCLE:
        cycles = 2_000_000
        rates = []
        for _ in range(5):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            torch.cuda._sleep(cycles)
            b.record()
            b.synchronize()
            rates.append(a.elapsed_time(b) * 1e6 / cycles)
        _NS_PER_CYCLE[device_index] = statistics.median(rates)
    return _NS_PER_CYCLE[device_index]


class _CudaChannels:
    """A side stream per process group: wait for the caller's stream, spin for the duration, fill."""
    def __init__(self, device: torch.device):
        self.device = device
        self.streams: dict[str, torch.cuda.Stream] = {}
        self.ns_per_cycle = _ns_per_cycle(device.index if device.index is not None else torch.cuda.current_device())

    def launch(self, group: str, duration_ns: int, fill: Callable[[], object], tensors=()):
        stream = self.streams.get(group)
        if stream is None:
            stream = self.streams[group] = torch.cuda.Stream(device=self.device)
        launcher = torch.cuda.current_stream(self.device)
        stream.wait_stream(launcher)
        done = torch.cuda.Event()
        with torch.cuda.stream(stream):
            cycles = int(duration_ns / self.ns_per_cycle)
            if cycles > 0:
                torch.cuda._sleep(cycles)
            fill()
            done.record(stream)
        return done, stream, launcher, tensors

    def wait(self, pending) -> None:
        done, stream, launcher, tensors = pending
        waiter = torch.cuda.current_stream(self.device)
        waiter.wait_event(done)
        if waiter != launcher:  # the launching stream never waited: its allocator must wait for the comm stream
            for t in tensors:
                t.record_stream(stream)

    def close(self) -> None:
        pass


class _Runtime:
    """The collectives in flight of one measured module."""
    def __init__(self, channels):
        self.channels = channels
        self.pending: dict[int, _Pending] = {}  # id(output tensor) -> its collective
        self.launched = 0

    def launch(self, op, duration_ns: int, args, kwargs):
        a = _bind(op, args, kwargs)
        group = str(a.get("group_name", ""))
        out, inputs, fill = _STAND_INS[op](a)
        outs = out if isinstance(out, list) else [out]
        done = self.channels.launch(group, duration_ns, fill, (*inputs, *outs))
        entry = _Pending(done, (inputs, tuple(outs)))
        for o in outs:
            self.pending[id(o)] = entry
        self.launched += 1
        return out

    def wait(self, t):
        entry = self.pending.pop(id(t), None)
        if entry is None:
            raise MeasureError("wait_tensor on a tensor that no asynchronous stand-in produced")
        self.channels.wait(entry.done)  # each output's wait waits (a coalesced one's may be on other streams)
        return t

    def drain(self) -> None:
        """Wait for every collective still in flight (one whose wait the graph lacks)."""
        for entry in {id(e): e for e in self.pending.values()}.values():
            self.channels.wait(entry.done)
        self.pending.clear()


class _Launch:
    """FX target of a rewritten collective node."""
    def __init__(self, runtime: _Runtime, op, duration_ns: int, name: str):
        self.runtime, self.op, self.duration_ns = runtime, op, duration_ns
        self.__name__ = f"async_{name}"

    def __call__(self, *args, **kwargs):
        return self.runtime.launch(self.op, self.duration_ns, args, kwargs)


class _Wait:
    def __init__(self, runtime: _Runtime):
        self.runtime = runtime
        self.__name__ = "async_wait"

    def __call__(self, t):
        return self.runtime.wait(t)


# ---- the rewritten module ---------------------------------------------------------------------------

def collective_durations(gm: fx.GraphModule, *, problem=None, device="h100", cost_model=None) -> dict[str, int]:
    """Collective node name -> duration in ns: ``problem``'s (matched by task name), else those of
    ``extract_problem(gm, device, cost_model=cost_model)``."""
    if problem is None:
        problem = extract_problem(gm, device=device, cost_model=cost_model)
    return {problem.tasks[t].name: problem.tasks[t].duration for t in problem.comm_tasks}


def asynchronous_collectives(gm: fx.GraphModule, durations: Mapping[str, int], channels) -> tuple[fx.GraphModule,
                                                                                                   _Runtime]:
    """A copy of ``gm`` whose collectives and waits run through a `_Runtime` on ``channels``.
    Raises `MeasureError` for a distributed op without a stand-in or a collective without a duration."""
    out = copy.deepcopy(gm)
    runtime = _Runtime(channels)
    for node in out.graph.nodes:
        if node.op != "call_function" or not is_distributed(node):
            continue
        if node.target is _C10D.wait_tensor.default:
            node.target = _Wait(runtime)
        elif node.target in _STAND_INS:
            if node.name not in durations:
                raise MeasureError(f"no duration for collective {node.name!r}")
            node.target = _Launch(runtime, node.target, int(durations[node.name]), node.name)
        else:
            raise MeasureError(f"no asynchronous stand-in for {node.target} ({node.name!r}); supported: "
                               f"{', '.join(str(k) for k in _STAND_INS)}")
    out.recompile()
    return out, runtime


class _LiveBytes(TorchDispatchMode):
    """Bytes of the storages the ops under this mode created, alive at once: ``peak``. Storages that
    existed before (``known``: the inputs') are not counted."""

    def __init__(self, known: Sequence[torch.Tensor]):
        super().__init__()
        self.lock = threading.Lock()
        self.skip = {t.untyped_storage().data_ptr() for t in known if isinstance(t, torch.Tensor)}
        self.live: dict[int, list[int]] = {}  # storage address -> [bytes, tensors alive]
        self.now = 0
        self.peak = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self._track(t)
        return out

    def _track(self, t: torch.Tensor) -> None:
        storage = t.untyped_storage()
        key, nbytes = storage.data_ptr(), storage.nbytes()
        if nbytes == 0 or key in self.skip:
            return
        with self.lock:
            entry = self.live.get(key)
            if entry is None:
                entry = self.live[key] = [nbytes, 0]
                self.now += nbytes
                self.peak = max(self.peak, self.now)
            entry[1] += 1
        weakref.finalize(t, self._release, key)

    def _release(self, key: int) -> None:
        with self.lock:
            entry = self.live.get(key)
            if entry is None:
                return
            entry[1] -= 1
            if entry[1] == 0:
                self.now -= entry[0]
                del self.live[key]


def _channels_for(args):
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    dev = tensors[0].device if tensors else torch.device("cpu")
    return dev, (_CudaChannels(dev) if dev.type == "cuda" else _CpuChannels())


def run_asynchronously(gm: fx.GraphModule, args: Sequence, durations: Mapping[str, int]) -> list[torch.Tensor]:
    """``gm(*args)`` once with asynchronous collectives (``durations``: ns by collective node name),
    outputs as a flat list: the values `solvercast.graph.local_run.run_local` computes."""
    dev, channels = _channels_for(args)
    run_gm, runtime = asynchronous_collectives(gm, durations, channels)
    try:
        with torch.no_grad():
            out = run_gm(*args)
        runtime.drain()
    finally:
        channels.close()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    return list(out) if isinstance(out, (tuple, list)) else [out]


def cuda_median_ns(fn: Callable[[], object], iters: int = 20, warmup: int = 3) -> float:
    """Median device time (ns) of ``fn()`` on the current stream over ``iters`` calls after ``warmup``
    (`cuda_seconds`: the host's launch latency hidden; for micro-benchmarks: no inputs are cloned between calls)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    return statistics.median(cuda_seconds(fn) * 1e9 for _ in range(iters))


def _fresh(args):
    return [a.clone() if isinstance(a, torch.Tensor) else a for a in args]


def measure(gm: fx.GraphModule, args: Sequence, *, problem=None, durations: Mapping[str, int] | None = None,
            device="h100", cost_model=None, iters: int = 20, warmup: int = 3, peak: bool = True) -> Measurement:
    """Run ``gm`` (a lowered module, or any graph of functional collectives) on ``args`` with
    asynchronous collectives and return its `Measurement`.

    Collective durations (ns) by node name: ``durations``, else ``problem``'s tasks, else
    `extract_problem` of ``gm`` with ``device`` / ``cost_model``. The arguments' device decides the
    runtime (CUDA streams or CPU threads). Every step runs on fresh clones of ``args`` (graphs may
    update parameters in place), cloned outside the timed region. Raises `MeasureError` (see
    `asynchronous_collectives`) and ``ValueError`` for ``iters < 1``.
    """
    if durations is None:
        durations = collective_durations(gm, problem=problem, device=device, cost_model=cost_model)
    return measure_side_by_side([gm], args, [durations], iters=iters, warmup=warmup, peak=peak)[0]


def measure_side_by_side(modules: Sequence[fx.GraphModule], args: Sequence, durations: Sequence[Mapping[str, int]],
                         *, iters: int = 20, warmup: int = 3, peak: bool = True) -> list[Measurement]:
    """`measure` for several modules of one program (e.g. one graph in several orders), their timed
    steps interleaved (one step of each in turn, ``iters`` rounds), so that load drifting on shared
    cores or clocks changing reach every module alike. ``durations[i]`` belongs to ``modules[i]``."""
    if iters < 1:
        raise ValueError(f"iters must be >= 1, got {iters}")
    if len(durations) != len(modules):
        raise ValueError("one durations mapping per module")
    dev, _ = _channels_for(args)
    cuda = dev.type == "cuda"
    runs = []
    for gm, d in zip(modules, durations):
        channels = _CudaChannels(dev) if cuda else _CpuChannels()
        runs.append((channels, *asynchronous_collectives(gm, d, channels)))

    def step(run_gm, runtime, inputs):
        with torch.no_grad():
            out = run_gm(*inputs)
        runtime.drain()
        return out

    peaks: list[int | None] = [None] * len(runs)
    times: list[list[int]] = [[] for _ in runs]
    try:
        for i, (_, run_gm, runtime) in enumerate(runs):
            for _ in range(warmup):
                step(run_gm, runtime, _fresh(args))
            if peak:
                inputs = _fresh(args)
                if cuda:
                    torch.cuda.synchronize(dev)
                    torch.cuda.reset_peak_memory_stats(dev)
                    base = torch.cuda.memory_allocated(dev)
                    out = step(run_gm, runtime, inputs)
                    torch.cuda.synchronize(dev)
                    peaks[i] = torch.cuda.max_memory_allocated(dev) - base
                else:
                    tracker = _LiveBytes(inputs)
                    with tracker:
                        out = step(run_gm, runtime, inputs)
                    peaks[i] = tracker.peak
                del out, inputs
            runtime.launched = 0
        for _ in range(iters):
            for i, (_, run_gm, runtime) in enumerate(runs):
                inputs = _fresh(args)
                if cuda:
                    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    torch.cuda.synchronize(dev)
                    a.record()
                    step(run_gm, runtime, inputs)
                    b.record()
                    b.synchronize()
                    times[i].append(int(a.elapsed_time(b) * 1e6))
                else:
                    start = time.perf_counter_ns()
                    step(run_gm, runtime, inputs)
                    times[i].append(time.perf_counter_ns() - start)
                del inputs
    finally:
        for channels, _, _ in runs:
            channels.close()
    return [Measurement(step_ns=int(statistics.median(t)), steps_ns=tuple(t), peak_bytes=p, device=dev.type,
                        collectives=runtime.launched // iters)
            for t, p, (_, _, runtime) in zip(times, peaks, runs)]
