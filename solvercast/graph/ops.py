"""Anchor ops: how a lowered graph says which stream runs what.

Two operators in the ``solvercast`` torch library namespace::

    solvercast::record(Tensor x, int stream) -> Tensor
    solvercast::wait_and_bind(Tensor(a) x, int stream, Tensor[] tokens) -> Tensor(a)

``record(x, s)`` marks that ``x`` has just been produced on stream ``s`` and
returns a *token*: a new 0-element tensor (0 bytes) that carries the event, not
a view of ``x``. A token must not keep ``x`` alive: a task that waits on it only
for ordering (a write after a read, or a later token standing for earlier ones)
would otherwise hold ``x`` until then, above the memory the schedule was judged
by. Nothing needs ``x`` kept for the token: its block is reused in
stream order, and a stream that reads ``x`` binds it (``record_stream``). ``wait_and_bind(x, s, tokens)`` says that the
consumer that follows runs on stream ``s`` and reads ``x`` only after every
token's producer has finished; it returns an alias of ``x`` (no copy), which
the consumer reads instead of ``x``.

Stream mechanism (brackets)
---------------------------
Stream ids follow `Problem`: ``0 .. C-1`` compute streams (0 is the stream
that is current when the graph is called, "the caller's stream"), ``C ..``
comm streams. Outside a bracket the current stream is stream 0. A node that
runs on stream ``s != 0`` is bracketed::

    a_bound = wait_and_bind(a, s, [tokens...])   # makes s current, waits for the tokens
    y = op(a_bound, b)                           # launched on s
    y_token = record(y, s)                       # event on s; the caller's stream is current again

``wait_and_bind`` with ``s != 0`` makes stream ``s`` current; ``record`` with
``s != 0`` records its event on ``s`` and makes stream 0 current again. A node
on stream 0 only needs ``wait_and_bind(v, 0, tokens)`` for inputs ``v`` that
were produced on other streams. Asynchronous collectives are launched from
stream 0 (the collective library runs them on its own stream and its
``wait_tensor`` synchronizes), so they need no anchors of their own. The
lowered graph therefore means what it says only when run in node order, as
``GraphModule`` does; ``make_fx`` / ``torch.export`` keep that order and the
anchors (both ops are registered with ``torch.fx.node.has_side_effect``, so
dead-code elimination never drops a bracket's ``record``).

Runtimes
--------
* CPU, Meta, fake tensors and every other backend: no-ops
  (``CompositeExplicitAutograd`` kernels). A lowered graph runs anywhere and
  computes exactly what the original does.
* CUDA: a small runtime maps stream ids to ``torch.cuda.Stream`` objects per
  device (id 0 = the caller's current stream; other ids get a lazily created
  side stream each, or one given with :func:`set_stream`). ``record`` records
  a ``torch.cuda.Event`` on its stream and attaches it to the token;
  ``wait_and_bind`` makes its stream wait on the tokens' events and calls
  ``x.record_stream(stream)`` so the caching allocator keeps ``x`` alive
  until the consuming stream is done with it.

Aliasing
--------
``wait_and_bind``'s schema declares the alias (``Tensor(a) x -> Tensor(a)``)
and its kernels return a view (``aten.alias``), never a copy; ``record``
returns a fresh 0-byte tensor and declares no alias.
Functionalization refuses custom ops with aliased outputs, so
``wait_and_bind`` carries a Python ``Functionalize`` kernel: it runs the op on the unwrapped tensors
(so the traced graph keeps the anchor and its data flow) and returns a
functional view of ``x`` whose value is the anchor's output — mutations made
through the alias still reach ``x`` (``torch.func.functionalize``,
``torch.export.export(...).run_decompositions()``).
"""

from __future__ import annotations

import threading
import warnings

import torch
import torch.fx
from torch import Tensor

__all__ = [
    "NAMESPACE", "ANCHOR_OPS", "record", "wait_and_bind", "is_anchor", "get_stream", "set_stream", "reset_streams",
]

NAMESPACE = "solvercast"

_lib = torch.library.Library(NAMESPACE, "DEF")  # kept alive: the registrations live as long as it does
_lib.define("record(Tensor x, int stream) -> Tensor")
_lib.define("wait_and_bind(Tensor(a) x, int stream, Tensor[] tokens) -> Tensor(a)")

record = torch.ops.solvercast.record.default
wait_and_bind = torch.ops.solvercast.wait_and_bind.default
ANCHOR_OPS = (record, wait_and_bind)


def is_anchor(target) -> bool:
    """Whether an FX node target is one of the anchor ops (overload or packet)."""
    return target in ANCHOR_OPS or target in (torch.ops.solvercast.record, torch.ops.solvercast.wait_and_bind)


def _token_of(x: Tensor) -> Tensor:
    """A new 0-element tensor on ``x``'s device: nothing allocated, and ``x`` not held."""
    return x.new_empty((0,))


# ---- no-op kernels: CPU, Meta/fake, everything but CUDA ----------------------------------

def _record_noop(x: Tensor, stream: int) -> Tensor:
    return _token_of(x)


def _wait_and_bind_noop(x: Tensor, stream: int, tokens: list[Tensor]) -> Tensor:
    return torch.ops.aten.alias.default(x)


# ---- CUDA runtime ------------------------------------------------------------------------------

class _StreamRuntime:
    """Stream ids -> CUDA streams, per device; the caller's stream per thread and device."""

    def __init__(self):
        self.lock = threading.Lock()
        self.streams: dict[tuple[int, int], "torch.cuda.Stream"] = {}
        self.local = threading.local()
        self.warned = False

    def _bases(self) -> dict[int, "torch.cuda.Stream"]:
        bases = getattr(self.local, "bases", None)
        if bases is None:
            bases = self.local.bases = {}
        return bases

    def side(self, stream_id: int, device: torch.device) -> "torch.cuda.Stream":
        idx = device.index if device.index is not None else torch.cuda.current_device()
        key = (idx, int(stream_id))
        with self.lock:
            s = self.streams.get(key)
            if s is None:
                s = self.streams[key] = torch.cuda.Stream(device=idx)
            return s

    def is_side(self, s: "torch.cuda.Stream", device_index: int) -> bool:
        with self.lock:
            items = list(self.streams.items())
        return any(d == device_index and v == s for (d, _), v in items)

    def base(self, device: torch.device) -> "torch.cuda.Stream":
        """The caller's stream: the current one unless a bracket made a side stream current."""
        cur = torch.cuda.current_stream(device)
        bases = self._bases()
        if self.is_side(cur, cur.device_index):
            return bases.get(cur.device_index, torch.cuda.default_stream(device))
        bases[cur.device_index] = cur
        return cur

    def resolve(self, stream_id: int, device: torch.device) -> "torch.cuda.Stream":
        return self.base(device) if stream_id == 0 else self.side(stream_id, device)

    def enter(self, stream_id: int, device: torch.device) -> "torch.cuda.Stream":
        target = self.resolve(stream_id, device)
        if torch.cuda.current_stream(device) != target:
            torch.cuda.set_stream(target)
        return target

    def leave(self, device: torch.device) -> None:
        base = self.base(device)
        if torch.cuda.current_stream(device) != base:
            torch.cuda.set_stream(base)

    def all_streams(self, device: torch.device) -> list["torch.cuda.Stream"]:
        idx = device.index if device.index is not None else torch.cuda.current_device()
        with self.lock:
            items = list(self.streams.items())
        return [self.base(device)] + [s for (d, _), s in items if d == idx]


_RUNTIME = _StreamRuntime()


def get_stream(stream_id: int, device=None) -> "torch.cuda.Stream":
    """The CUDA stream that stream id ``stream_id`` runs on (0: the caller's stream)."""
    device = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
    return _RUNTIME.resolve(int(stream_id), device)


def set_stream(stream_id: int, stream: "torch.cuda.Stream") -> None:
    """Run stream id ``stream_id`` (>= 1) on ``stream`` (e.g. a high-priority stream for comm ops)."""
    if stream_id == 0:
        raise ValueError("stream 0 is always the caller's current stream")
    with _RUNTIME.lock:
        _RUNTIME.streams[(stream.device_index, int(stream_id))] = stream


def reset_streams() -> None:
    """Forget the side streams (new ones are created on next use)."""
    with _RUNTIME.lock:
        _RUNTIME.streams.clear()


def _record_cuda(x: Tensor, stream: int) -> Tensor:
    s = _RUNTIME.resolve(stream, x.device)
    event = torch.cuda.Event()
    event.record(s)
    token = _token_of(x)
    token._solvercast_event = event  # the token object itself carries its event to wait_and_bind
    if stream != 0:
        _RUNTIME.leave(x.device)  # end of the bracket: the caller's stream is current again
    return token


def _wait_and_bind_cuda(x: Tensor, stream: int, tokens: list[Tensor]) -> Tensor:
    s = _RUNTIME.enter(stream, x.device)
    for token in tokens:
        event = getattr(token, "_solvercast_event", None)
        if event is None:  # token without its event (e.g. made by another runtime): wait for everything
            if not _RUNTIME.warned:
                _RUNTIME.warned = True
                warnings.warn("solvercast.wait_and_bind got a token without an event; synchronizing all streams",
                              stacklevel=2)
            for other in _RUNTIME.all_streams(x.device):
                if other != s:
                    s.wait_stream(other)
        else:
            s.wait_event(event)
    if not torch.cuda.is_current_stream_capturing():
        x.record_stream(s)  # the allocator must not reuse x's block before s is done with it
    return torch.ops.aten.alias.default(x)


# ---- functionalization: keep the anchor in the graph, keep the alias in the functional world --

_FUNCTIONALIZE = torch._C.DispatchKeySet(torch._C.DispatchKey.Functionalize)


def _unwrap(t):
    if isinstance(t, Tensor) and torch._is_functional_tensor(t):
        torch._sync(t)
        return torch._from_functional_tensor(t)
    if isinstance(t, (list, tuple)):
        return [_unwrap(v) for v in t]
    return t


def _functionalize_kernel(op):
    def kernel(x: Tensor, stream: int, *rest):
        args = [_unwrap(x), stream] + [_unwrap(r) for r in rest]
        with torch._C._ExcludeDispatchKeyGuard(_FUNCTIONALIZE):
            out = op(*args)
        # A functional view of x (mutations through it reach x) whose current value is the
        # anchor's output, so that readers of the result read the anchor in the traced graph.
        view = torch.ops.aten.alias.default(x)
        torch._functionalize_replace(view, out)
        return view

    return kernel


def _register() -> None:
    for name, noop, cuda in (("record", _record_noop, _record_cuda),
                             ("wait_and_bind", _wait_and_bind_noop, _wait_and_bind_cuda)):
        _lib.impl(name, noop, "CompositeExplicitAutograd")
        _lib.impl(name, cuda, "CUDA")
    # identity semantics: autograd sees the view wait_and_bind makes; a token has no gradient
    for name in ("record", "wait_and_bind"):
        _lib.impl(name, torch.library.fallthrough_kernel, "Autograd")
    _lib.impl("wait_and_bind", _functionalize_kernel(wait_and_bind), "Functionalize")
    for op in ANCHOR_OPS:
        torch.fx.node.has_side_effect(op)


_register()
