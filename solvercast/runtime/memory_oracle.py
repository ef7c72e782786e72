"""Peak memory of running an FX graph module, measured on real tensors: an oracle for the memory model.

`live_bytes_peak(gm, args, freed_inputs)` runs ``gm``'s nodes in their order on real (small, CPU) tensors
and counts the bytes of the tensor storages alive after every node, from the storages themselves: a
dispatch mode sees every op's outputs, each distinct storage is counted once (by its base address; views
share it, in-place ops return it) from the op that made it until Python frees it (a ``weakref.finalize``
on the storage object, which PyTorch keeps as long as any tensor uses the storage). On ``meta`` tensors,
which allocate nothing and have no address, a storage is told apart by its identity (the storage object
PyTorch shares among its views), so the same count runs on graphs too large to run for real (the
public backward graphs: 5-40 GiB each); what such a graph allocates with a ``device`` of its own is made
on meta too. A higher-order op (flex attention) runs as it would, its body uncounted (a fused kernel's
temporaries), its outputs counted; on meta, where its body need not run, its outputs are fresh tensors
of their traced shapes. Nothing here reads
the memory model (`solvercast.ir.engine`, `Problem.buffers`): it is what the tests check the model
against.

How values are released is the runtime's:

* every value is dropped after the last node that reads it, as FX's generated code does
  (``x = None`` after its last use) and Inductor's ``del buf``; a multi-output op's tuple lives until
  its last getitem, so an unused output dies there;
* "caller holds inputs" (``freed_inputs`` None or empty): the caller keeps every input it passed;
* "freed inputs": the inputs named in ``freed_inputs`` are dropped after their last use, as
  torch.compile's backward does (AOTAutograd clears its saved tensors and hands the grads over in a
  list; Inductor's ``call(args)`` clears ``args`` and deletes each input after its last reader); the
  others (parameters) stay held. A freed input that nothing reads stays until the call returns: Inductor
  binds it to a local it never deletes, and so does FX's boxed code. The call takes ``args`` over and
  clears the list, and a freed input that something outside still references is an error, not a
  silent undercount.

Collectives run as local stand-ins with ProcessGroupNCCL's lifetimes: each allocates its output, in one
allocation, when it is called (the functional collectives allocate their result at the launch), and the
stand-in keeps references to its inputs and outputs until the first ``wait_tensor`` on one of its outputs
(NCCL stashes them on the work object, ``stashed_for_allocator_safety_``, and releases them in the
wait); an ``out=`` collective writes the tensor it is given and allocates nothing, and a coalesced one's
first wait releases all of it. A wait returns its argument, the collective's own tensor. `solvercast.graph.local_run`'s
`LocalCollectives` could not stand in: it holds nothing past the call and builds an all_gather's result
from ``world_size`` temporaries (an extra output's worth at the all_gather); neither could the fake
process group, whose ``FakeWork`` holds nothing. The stand-ins' values are rank 0's in a world where
every rank holds this rank's input. Memory a kernel allocates for itself and frees before it returns (a
workspace) is not counted; `allocator_peak` counts it.

`generated_code_peak` runs the module's own generated Python code (the boxed form, Inductor's calling
convention, for freed inputs) under the same count, and `allocator_peak` runs `live_bytes_peak` under
torch's profiler, which sees every allocation of the CPU allocator: the checks that the node loop
releases what the real code releases and that no allocation escapes the count.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
import torch.fx as fx
from torch._ops import HigherOrderOperator
from torch.fx.graph import _BoxedCodeGen
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map

from solvercast.errors import MeasureError

__all__ = ["OracleResult", "allocator_peak", "generated_code_peak", "live_bytes_peak", "meta_inputs"]

_C10D = torch.ops._c10d_functional


@dataclass(frozen=True)
class OracleResult:
    """What one run held. ``peak``: the most bytes alive at once, graph inputs included. ``peak_node``: the
    node during which it was reached (None: before the first node). ``resident_at_start``: the bytes of the
    inputs' and the module constants' storages, alive before the first node. ``timeline``: (node, bytes
    alive after it and the frees that follow it), one per node but placeholders and the output; ``during``:
    (node, the most bytes alive while it ran)."""

    peak: int
    peak_node: str | None
    resident_at_start: int
    timeline: tuple[tuple[str, int], ...]
    during: tuple[tuple[str, int], ...]


def _storage_key(storage: torch.UntypedStorage) -> int:
    """Where a storage's memory is: its base address, or on a device that allocates nothing (``meta``: every
    address is 0) the storage itself, which its views and in-place results share."""
    return storage.data_ptr() or storage._cdata


class _LiveStorages:
    """Bytes of the storages alive now (``now``) and the most since `mark` (``high``), each storage counted
    once by `_storage_key`. Several storage objects on one address (rare: a storage made from another's
    memory) count once, until the last of them dies."""

    def __init__(self):
        self.objects: dict[int, int] = {}  # storage impl -> its address
        self.live: dict[int, list[int]] = {}  # address -> [bytes, storage objects alive]
        self.now = 0
        self.high = 0

    def track_leaves(self, out) -> None:
        """`track` every tensor in ``out`` (an op's result: a tensor, or a tuple or list of them)."""
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.track(t)

    def track(self, t: torch.Tensor) -> None:
        storage = t.untyped_storage()
        impl, address, nbytes = storage._cdata, _storage_key(storage), storage.nbytes()
        known = self.objects.get(impl)
        if known is not None:
            if known == address and self.live[known][0] >= nbytes:
                return
            self._release(impl)  # resized in place (resize_, an out= argument grown): counted anew below
        elif nbytes == 0:  # nothing allocated; empty storages may share the null address
            return
        else:
            weakref.finalize(storage, self._release_if_known, impl)
        if nbytes == 0:
            return
        self.objects[impl] = address
        entry = self.live.get(address)
        if entry is None:
            self.live[address] = [nbytes, 1]
            self.now += nbytes
            self.high = max(self.high, self.now)
        else:
            entry[1] += 1
            if nbytes > entry[0]:
                self.now += nbytes - entry[0]
                entry[0] = nbytes
                self.high = max(self.high, self.now)

    def _release_if_known(self, impl: int) -> None:
        if impl in self.objects:
            self._release(impl)

    def _release(self, impl: int) -> None:
        address = self.objects.pop(impl)
        entry = self.live[address]
        entry[1] -= 1
        if entry[1] == 0:
            del self.live[address]
            self.now -= entry[0]

    def alive(self, t: torch.Tensor) -> bool:
        return t.untyped_storage()._cdata in self.objects

    def mark(self) -> None:
        self.high = self.now


# Each stand-in allocates its output in one allocation and nothing else, as the collective does (values:
# rank 0's part of a world whose ranks all hold this rank's input), or writes the ``out`` it is given;
# returns (outputs, inputs).
def _all_reduce(args, kwargs):
    return [torch.add(args[0], args[0])], [args[0]]


def _all_reduce_inplace(args, kwargs):
    return [args[0].add_(args[0])], [args[0]]


def _all_reduce_coalesced(args, kwargs):
    return [torch.add(t, t) for t in args[0]], list(args[0])


def _all_reduce_coalesced_inplace(args, kwargs):
    return [t.add_(t) for t in args[0]], list(args[0])


def _gathered(t: torch.Tensor, w: int) -> torch.Tensor:
    return torch.cat([t] * w)


def _all_gather(args, kwargs):
    return [_gathered(args[0], int(args[1]))], [args[0]]


def _has_values(*tensors: torch.Tensor) -> bool:
    """Whether values can be written: not on ``meta`` (a meta count's ``out`` may be a real tensor the graph
    allocated on its own device)."""
    return all(t.device.type != "meta" for t in tensors)


def _all_gather_out(args, kwargs):
    t, w, out = args[0], int(args[1]), kwargs["out"]
    if _has_values(t, out):  # written in place, no temporary: the collective allocates nothing
        out.view(w, *t.shape).copy_(t.unsqueeze(0).expand(w, *t.shape))
    return [out], [t]


def _all_gather_coalesced(args, kwargs):
    return [_gathered(t, int(args[1])) for t in args[0]], list(args[0])


def _scattered(t: torch.Tensor, w: int) -> torch.Tensor:
    return t.reshape(w, t.shape[0] // w, *t.shape[1:]).sum(0)


def _reduce_scatter(args, kwargs):
    return [_scattered(args[0], int(args[2]))], [args[0]]


def _reduce_scatter_out(args, kwargs):
    t, w, out = args[0], int(args[2]), kwargs["out"]
    if _has_values(t, out):
        torch.sum(t.reshape(w, t.shape[0] // w, *t.shape[1:]), 0, out=out)
    return [out], [t]


def _reduce_scatter_coalesced(args, kwargs):
    return [_scattered(t, int(args[2])) for t in args[0]], list(args[0])


def _all_to_all(args, kwargs):
    t, outs, ins = args[0], [int(s) for s in args[1]], [int(s) for s in args[2]]
    out = t.new_empty((sum(outs), *t.shape[1:]))
    if not _has_values(t):  # data-dependent split sizes need not fit a meta input's rows
        return [out], [t]
    at = 0
    for chunk, rows in zip(t.split(ins), outs):  # rank 0's own chunk from every rank, as far as it fits
        k = min(rows, chunk.shape[0])
        out[at:at + k].copy_(chunk[:k])
        at += rows
    return [out], [t]


_STAND_INS = {
    _C10D.all_reduce.default: _all_reduce,
    _C10D.all_reduce_.default: _all_reduce_inplace,
    _C10D.all_reduce_coalesced.default: _all_reduce_coalesced,
    _C10D.all_reduce_coalesced_.default: _all_reduce_coalesced_inplace,
    _C10D.all_gather_into_tensor.default: _all_gather,
    _C10D.all_gather_into_tensor_out.default: _all_gather_out,
    _C10D.all_gather_into_tensor_coalesced.default: _all_gather_coalesced,
    _C10D.reduce_scatter_tensor.default: _reduce_scatter,
    _C10D.reduce_scatter_tensor_out.default: _reduce_scatter_out,
    _C10D.reduce_scatter_tensor_coalesced.default: _reduce_scatter_coalesced,
    _C10D.all_to_all_single.default: _all_to_all,
}
_RETURNS_LIST = {_C10D.all_reduce_coalesced.default, _C10D.all_reduce_coalesced_.default,
                 _C10D.all_gather_into_tensor_coalesced.default, _C10D.reduce_scatter_tensor_coalesced.default}


class _Counting(TorchDispatchMode):
    """Counts every op's output storages in ``storages``; runs collectives as stand-ins that hold their
    inputs and outputs until their wait (``pending``, by output `_storage_key`). ``on_meta``: a factory op's
    ``device`` becomes ``meta``, so what the graph allocates on its own meets the meta inputs."""

    def __init__(self, storages: _LiveStorages, on_meta: bool = False):
        super().__init__()
        self.storages = storages
        self.on_meta = on_meta
        self.pending: dict[int, list[torch.Tensor]] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.on_meta and "device" in kwargs:
            kwargs = {**kwargs, "device": torch.device("meta")}
        if func in _STAND_INS:
            outputs, inputs = _STAND_INS[func](args, kwargs)
            held = inputs + outputs
            for t in outputs:
                self.pending[_storage_key(t.untyped_storage())] = held
            for t in held:
                self.storages.track(t)
            return outputs if func in _RETURNS_LIST else outputs[0]
        if func is _C10D.wait_tensor.default:
            held = self.pending.pop(_storage_key(args[0].untyped_storage()), None)
            if held is not None:  # the first wait on a coalesced result releases all of it
                for t in held:
                    self.pending.pop(_storage_key(t.untyped_storage()), None)
            return args[0]
        if getattr(func, "namespace", None) in ("_c10d_functional", "c10d"):
            raise MeasureError(f"memory oracle: no stand-in for the collective {func}: its lifetimes are unknown")
        out = func(*args, **kwargs)
        self.storages.track_leaves(out)
        return out


def _count_higher_order_ops(gm: fx.GraphModule) -> None:
    """Let `_Counting` see ``gm``'s higher-order ops (flex attention's backward): torch hands a HOP to a
    dispatch mode only through a handler registered for that mode's type. Each runs as it would, the mode
    set aside for its body (a fused kernel's temporaries are its own), and its outputs are counted."""
    for node in gm.graph.nodes:
        op = node.target
        if node.op == "call_function" and isinstance(op, HigherOrderOperator) and _Counting not in op.python_key_table:
            op.py_impl(_Counting)(functools.partial(_run_higher_order_op, op))


def _meta_like(val):
    """A ``meta`` tensor of each traced tensor value's shape, strides and dtype in ``val``; the rest as it is."""
    return tree_map(lambda v: torch.empty_strided(tuple(int(s) for s in v.shape), tuple(int(s) for s in v.stride()),
                                                  dtype=v.dtype, device="meta") if isinstance(v, torch.Tensor) else v,
                    val)


def _run_higher_order_op(op: HigherOrderOperator, mode: _Counting, *args, **kwargs):
    out = op(*args, **kwargs)
    mode.storages.track_leaves(out)
    return out


def meta_inputs(gm: fx.GraphModule) -> list:
    """``meta`` tensors of ``gm``'s placeholders' shapes, strides and dtypes (from ``meta["val"]``), for a count
    of a graph too large to run (module doc); a placeholder whose value is no tensor gets it as it is."""
    return [_meta_like(node.meta.get("val")) for node in _placeholders(gm)]


def _placeholders(gm: fx.GraphModule) -> list[fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "placeholder"]


def _check_args(gm: fx.GraphModule, args: Sequence, freed: set[str]) -> list[fx.Node]:
    placeholders = _placeholders(gm)
    if len(args) != len(placeholders):
        raise MeasureError(f"memory oracle: {len(args)} inputs for {len(placeholders)} placeholders")
    unknown = freed - {n.name for n in placeholders}
    if unknown:
        raise MeasureError(f"memory oracle: freed_inputs names no placeholder: {sorted(unknown)}")
    return placeholders


def _start(storages: _LiveStorages, values: Iterable) -> int:
    for v in values:
        for t in tree_leaves(v):
            if isinstance(t, torch.Tensor):
                storages.track(t)
    return storages.now


def _check_released(storages: _LiveStorages, freed: dict[str, weakref.ref], outputs: list) -> None:
    """A freed input still alive after the run, not returned, is referenced from outside the graph."""
    kept = {_storage_key(t.untyped_storage()) for t in outputs if isinstance(t, torch.Tensor)}
    for name, ref in freed.items():
        t = ref()
        if t is not None and storages.alive(t) and _storage_key(t.untyped_storage()) not in kept:
            raise MeasureError(f"memory oracle: freed input {name!r} is still referenced after the run: the caller "
                               "must hand its inputs over (pass a list nothing else refers to)")


def _weak_inputs(placeholders: list[fx.Node], args: Sequence, freed: set[str]) -> dict:
    return {n.name: weakref.ref(a) for n, a in zip(placeholders, args)
            if n.name in freed and isinstance(a, torch.Tensor)}


def live_bytes_peak(gm: fx.GraphModule, args: list, freed_inputs: Iterable[str] | None = None) -> OracleResult:
    """Run ``gm``'s nodes in order on ``args`` (real tensors, one per placeholder) and count the bytes of the
    storages alive (module doc). ``freed_inputs``: placeholder names the runtime frees after their last
    use (None or empty: the caller holds every input); the call then takes ``args`` over and clears it.
    Raises `MeasureError` for a collective without a stand-in, arguments that do not fit the placeholders,
    or a freed input referenced from outside."""
    freed = set(freed_inputs or ())
    placeholders = _check_args(gm, args, freed)
    nodes = list(gm.graph.nodes)
    last_use: dict[fx.Node, fx.Node] = {}
    for node in nodes:
        for inp in node.all_input_nodes:
            last_use[inp] = node
    dies_after: dict[fx.Node, list[fx.Node]] = {}
    for value, user in last_use.items():
        dies_after.setdefault(user, []).append(value)

    storages = _LiveStorages()
    on_meta = _on_meta(args)
    constants = {n: _attribute(gm, n.target) for n in nodes if n.op == "get_attr"}  # the module holds them
    if on_meta:
        constants = {n: c.to("meta") if isinstance(c, torch.Tensor) else c for n, c in constants.items()}
    resident = _start(storages, list(args) + list(constants.values()))
    weak = _weak_inputs(placeholders, args, freed)
    # The caller's or the module's inputs, and freed inputs nothing reads: Inductor's ``call(args)`` binds every
    # input to a local (``a, b = args; args.clear()``) and deletes only those it reads, after their last use.
    held = [a for n, a in zip(placeholders, args) if n.name not in freed or n not in last_use]
    env: dict[fx.Node, object] = dict(zip(placeholders, args))
    if freed:
        args.clear()
    _count_higher_order_ops(gm)
    storages.mark()
    peak, peak_node = resident, None
    timeline, during, outputs = [], [], []
    with torch.no_grad(), _Counting(storages, on_meta):
        for node in nodes:
            if node.op == "placeholder":
                continue
            if node.op == "output":
                returned = tree_leaves(fx.map_arg(node.args, lambda n: env[n]))
                outputs = [t for t in returned if isinstance(t, torch.Tensor)]
                del returned
                break
            if node.op == "get_attr":
                result = constants[node]
            else:
                call_args = fx.map_arg(node.args, lambda n: env[n])
                call_kwargs = fx.map_arg(node.kwargs, lambda n: env[n])
                if on_meta and isinstance(node.target, HigherOrderOperator):
                    # its body need not run on meta (flex attention's mask under vmap does not): its outputs
                    # are fresh allocations of their traced shapes, as the model takes them
                    result = _meta_like(node.meta["val"])
                elif node.op == "call_function":
                    result = node.target(*call_args, **call_kwargs)
                elif node.op == "call_method":
                    result = getattr(call_args[0], node.target)(*call_args[1:], **call_kwargs)
                else:
                    result = gm.get_submodule(node.target)(*call_args, **call_kwargs)
                del call_args, call_kwargs
            if node.users:
                env[node] = result
            del result
            if storages.high > peak:
                peak, peak_node = storages.high, node.name
            during.append((node.name, storages.high))
            for value in dies_after.get(node, ()):
                env.pop(value, None)
            timeline.append((node.name, storages.now))
            storages.mark()
    env.clear()
    del held  # the call returns: the caller's references are its own business from here on
    _check_released(storages, weak, outputs)
    return OracleResult(peak=peak, peak_node=peak_node, resident_at_start=resident,
                        timeline=tuple(timeline), during=tuple(during))


def _on_meta(args: Sequence) -> bool:
    return any(isinstance(a, torch.Tensor) and a.is_meta for a in args)


def _attribute(gm: fx.GraphModule, target: str):
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def generated_code_peak(gm: fx.GraphModule, args: list, freed_inputs: Iterable[str] | None = None) -> int:
    """The peak bytes (module doc's count) of running ``gm``'s own generated code on ``args``: ``gm(*args)``
    with the caller holding every input, or with ``freed_inputs`` the boxed form (``forward(args_list)``,
    which clears the list) on a list of every input, the others held apart as a module holds its
    parameters. Takes ``args`` over and clears it when inputs are freed. Raises `MeasureError` as
    `live_bytes_peak` does."""
    freed = set(freed_inputs or ())
    placeholders = _check_args(gm, args, freed)
    storages = _LiveStorages()
    _start(storages, args)
    weak = _weak_inputs(placeholders, args, freed)
    on_meta = _on_meta(args)
    module = gm
    if freed:
        module = fx.GraphModule(gm, _boxed_copy(gm.graph))
        held = [a for n, a in zip(placeholders, args) if n.name not in freed]
        boxed = list(args)
        args.clear()
    _count_higher_order_ops(gm)
    storages.mark()
    with torch.no_grad(), _Counting(storages, on_meta):
        out = module(boxed) if freed else module(*args)
    outputs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
    if freed:
        del held
        _check_released(storages, weak, outputs)
    return storages.high


def _boxed_copy(graph: fx.Graph) -> fx.Graph:
    copied = fx.Graph()
    copied.output(copied.graph_copy(graph, {}))
    copied.set_codegen(_BoxedCodeGen())
    return copied


def allocator_peak(gm: fx.GraphModule, args: Sequence,
                   freed_inputs: Iterable[str] | None = None) -> tuple[OracleResult, int]:
    """`live_bytes_peak` on copies of ``args`` made under torch's profiler, which records every allocation
    and release of the CPU allocator: the result and the allocator's own peak (the most bytes allocated at
    once, the copied inputs included; the module's constants, made before, are not in it). The two agree
    unless a kernel allocates memory that no op returns (a workspace: CPU matmuls in bfloat16 pack their
    operands), or a Python scalar is wrapped as a tensor (a few bytes). ``args`` is left as it is."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = live_bytes_peak(gm, _copies(args), freed_inputs)
    events = sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
                    key=lambda e: e.start_ns())
    now = high = 0
    for e in events:
        now += e.nbytes()
        high = max(high, now)
    return result, high


def _copies(args: Sequence) -> list:
    """``args`` on fresh storages, one per storage of theirs (inputs that share a storage still do)."""
    storages: dict[int, torch.UntypedStorage] = {}
    out = []
    for a in args:
        if not isinstance(a, torch.Tensor):
            out.append(a)
            continue
        old = a.untyped_storage()
        if old.data_ptr() not in storages:
            storages[old.data_ptr()] = old.clone()
        new = storages[old.data_ptr()]
        out.append(torch.empty(0, dtype=a.dtype, device=a.device).set_(new, a.storage_offset(), a.shape, a.stride()))
    return out
