"""Shared helpers for the workload models: dtypes, fake process groups,
functional-collective wrappers and fake-mode tracing with ``make_fx``.

Process groups
--------------
Collectives need a ``group_name``. We never touch the global default process
group (``dist.init_process_group``): other code in the same process may want
to own it. Instead :func:`fake_group` builds, once per world size, a
stand-alone ``ProcessGroup`` backed by the ``fake`` backend's
``FakeProcessGroup`` (the one ``torch.testing._internal.distributed.fake_pg``
registers), names it ``solvercast_fake_w{W}`` and registers it under that
name with c10d. Hence:

* names are deterministic (independent of which models were built before),
* ``_resolve_process_group(name).size()`` gives the world size (the cost
  model uses this for all_reduce / all_to_all),
* any number of world sizes coexist in one process,
* traced graphs can even be run eagerly on real CPU tensors (the fake group
  hallucinates results with the right shapes, no communication).

If that registration is not possible (other torch versions), the same name is
used unregistered: tracing with fake tensors does not resolve group names.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Iterable, Sequence

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

from solvercast.graph.nodes import NodeKind, classify

__all__ = [
    "DTYPES",
    "Comm",
    "ffn_width",
    "layer_norm",
    "model_meta",
    "fake_group",
    "group_is_registered",
    "divisible",
    "dtype_name",
    "parse_dtype",
    "require",
    "trace",
]

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
    "float64": torch.float64,
}


def parse_dtype(value: Any) -> torch.dtype:
    """Accept a torch.dtype or one of the names in :data:`DTYPES`."""
    if isinstance(value, torch.dtype):
        if value not in DTYPES.values():
            raise ValueError(f"unsupported dtype {value}; valid: {sorted(set(DTYPES))}")
        return value
    if isinstance(value, str):
        key = value.lower().removeprefix("torch.")
        if key in DTYPES:
            return DTYPES[key]
    raise ValueError(f"unknown dtype {value!r}; valid: {sorted(set(DTYPES))}")


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


# --------------------------------------------------------------------------
# fake process groups
# --------------------------------------------------------------------------

_GROUPS: dict[tuple[str, int], tuple[str, Any]] = {}  # (tag, world size) -> (name, ProcessGroup or None); keeps pgs alive
_LOCK = threading.Lock()


def register_fake_group(name: str, world_size: int) -> Any:
    """A ProcessGroup of ``world_size`` fake ranks (we are rank 0), registered as ``name`` (no default
    process group needed; a group already registered under ``name`` with that size is returned)."""
    from torch._C._distributed_c10d import (  # noqa: PLC0415
        FakeProcessGroup,
        PrefixStore,
        ProcessGroup,
        _register_process_group,
        _resolve_process_group,
    )
    from torch.testing._internal.distributed.fake_pg import FakeStore  # noqa: PLC0415  (registers "fake")

    try:  # already registered (e.g. module reloaded) and still alive
        existing = _resolve_process_group(name)
        if existing.size() == world_size:
            return existing
    except Exception:
        pass
    store = PrefixStore(f"{name}/", FakeStore())
    pg = ProcessGroup(store, 0, world_size)
    backend = FakeProcessGroup._create_internal(0, world_size)
    for dev in ("cpu", "cuda"):
        pg._register_backend(torch.device(dev), ProcessGroup.BackendType.CUSTOM, backend)
    pg._set_default_backend(ProcessGroup.BackendType.CUSTOM)
    pg._set_group_name(name)
    _register_process_group(name, pg)
    if _resolve_process_group(name).size() != world_size:  # pragma: no cover - sanity
        raise RuntimeError("fake process group registration mismatch")
    return pg


def _still_registered(name: str, world_size: int) -> bool:
    try:
        from torch._C._distributed_c10d import _resolve_process_group  # noqa: PLC0415

        return _resolve_process_group(name).size() == world_size
    except Exception:
        return False


def fake_group(world_size: int, tag: str = "") -> str:
    """Deterministic group name for ``world_size`` fake ranks, registered once per process.
    ``tag`` names one of several groups of a mesh (``dp``, ``tp``): groups with different tags are
    different communicators even when their sizes are equal."""
    world_size = int(world_size)
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    key = (str(tag), world_size)
    with _LOCK:
        hit = _GROUPS.get(key)
        if hit is not None:
            name, pg = hit
            if pg is not None and not _still_registered(name, world_size):
                # e.g. dist.destroy_process_group() unregistered every group
                try:
                    _GROUPS[key] = (name, register_fake_group(name, world_size))
                except Exception:  # pragma: no cover
                    _GROUPS[key] = (name, None)
            return name
        name = f"solvercast_fake_{tag}_w{world_size}" if tag else f"solvercast_fake_w{world_size}"
        try:
            pg = register_fake_group(name, world_size)
        except Exception:  # pragma: no cover - depends on the torch build
            pg = None
        _GROUPS[key] = (name, pg)
        return name


def restore_fake_groups() -> None:
    """Register again every fake group made so far that is no longer registered
    (``dist.destroy_process_group()`` unregisters them all)."""
    with _LOCK:
        keys = list(_GROUPS)
    for tag, world_size in keys:
        fake_group(world_size, tag)


def group_is_registered(world_size: int, tag: str = "") -> bool:
    """True when :func:`fake_group` could register a real (fake-backend) group,
    i.e. graphs using it can be executed eagerly."""
    fake_group(world_size, tag)
    return _GROUPS[(str(tag), int(world_size))][1] is not None


# --------------------------------------------------------------------------
# functional collectives
# --------------------------------------------------------------------------

_C10D = torch.ops._c10d_functional


class Comm:
    """Thin wrappers over ``torch.ops._c10d_functional`` for one group.

    Every collective returns an un-waited tensor; call :meth:`wait` right
    before the result is used (models do, the scheduler moves waits later).
    """

    def __init__(self, world_size: int):
        self.world_size = int(world_size)
        self.group_name = fake_group(self.world_size)

    def all_reduce(self, t: torch.Tensor, op: str = "sum") -> torch.Tensor:
        return _C10D.all_reduce(t, op, self.group_name)

    def all_gather(self, t: torch.Tensor) -> torch.Tensor:
        """Concatenate the ranks' ``t`` along dim 0."""
        return _C10D.all_gather_into_tensor(t, self.world_size, self.group_name)

    def reduce_scatter(self, t: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """Sum over ranks, each keeps its 1/world_size slice of dim 0."""
        return _C10D.reduce_scatter_tensor(t, op, self.world_size, self.group_name)

    def all_to_all(self, t: torch.Tensor, output_split_sizes: Sequence[int] | None = None,
                   input_split_sizes: Sequence[int] | None = None) -> torch.Tensor:
        """Equal splits over dim 0 unless split sizes are given."""
        if input_split_sizes is None:
            input_split_sizes = [t.shape[0] // self.world_size] * self.world_size
        if output_split_sizes is None:
            output_split_sizes = list(input_split_sizes)
        return _C10D.all_to_all_single(t, list(output_split_sizes), list(input_split_sizes), self.group_name)

    @staticmethod
    def wait(t: torch.Tensor) -> torch.Tensor:
        return _C10D.wait_tensor(t)


# --------------------------------------------------------------------------
# parameter checks
# --------------------------------------------------------------------------


def require(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


def divisible(a: int, b: int, what: str) -> None:
    require(b > 0 and a % b == 0, f"{what}: {a} is not divisible by {b}")


# --------------------------------------------------------------------------
# tracing
# --------------------------------------------------------------------------

InputSpec = tuple[str, Sequence[int], torch.dtype]


def trace(body: Callable[[dict[str, torch.Tensor]], Any], inputs: Iterable[InputSpec],
          meta: dict[str, Any] | None = None) -> fx.GraphModule:
    """Trace ``body(named_inputs)`` with ``make_fx(tracing_mode="fake")``.

    ``inputs`` are ``(name, shape, dtype)``; they become placeholders named
    ``name`` in that order. Inputs are fake tensors from a fresh
    ``FakeTensorMode`` (no real memory, any size). ``meta`` is stored in
    ``gm.meta["solvercast"]``.
    """
    specs = [(str(n), tuple(int(s) for s in shape), dt) for n, shape, dt in inputs]
    names = [s[0] for s in specs]
    if len(set(names)) != len(names):  # pragma: no cover - programming error
        raise ValueError(f"duplicate input names in {names}")

    fake_mode = FakeTensorMode()
    with fake_mode:
        fakes = [torch.empty(shape, dtype=dt) for _, shape, dt in specs]

    def fn(*args: torch.Tensor) -> Any:
        return body(dict(zip(names, args)))

    with torch.no_grad():
        gm = make_fx(fn, tracing_mode="fake")(*fakes)

    # make_fx records every output of multi-output ops (e.g. LayerNorm's mean
    # and rstd) as getitem nodes even when unused: drop those dead, pure nodes.
    for node in reversed(list(gm.graph.nodes)):
        if classify(node).kind is NodeKind.GETITEM and not node.users:
            gm.graph.erase_node(node)

    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(names):  # pragma: no cover - sanity
        raise RuntimeError("placeholder count mismatch after tracing")
    # free the generated names first so that e.g. "x" can't clash with "x_1"
    for i, ph in enumerate(placeholders):
        ph._rename(f"__solvercast_tmp_{i}")
    for ph, name in zip(placeholders, names):
        ph._rename(name)
        if ph.name != name:  # pragma: no cover - names are chosen not to clash with op names
            raise RuntimeError(f"placeholder name {name!r} clashes with a traced node")
        ph.target = name
    gm.recompile()
    gm.meta["solvercast"] = dict(meta or {})
    return gm


def model_meta(name: str, p: dict[str, Any], comm: Comm, **extra: Any) -> dict[str, Any]:
    """What a model records in ``gm.meta["solvercast"]``: its name, parameters and process group."""
    params = {k: (dtype_name(v) if isinstance(v, torch.dtype) else v) for k, v in p.items()}
    return {"model": name, "params": params, "world_size": comm.world_size,
            "group_name": comm.group_name, **extra}


def ffn_width(p: dict[str, Any]) -> int:
    """The MLP's width: ``ffn`` where given, else 4 x ``hidden``."""
    return int(p["ffn"]) if p.get("ffn") else 4 * int(p["hidden"])


def layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Layer norm over the last dimension."""
    return F.layer_norm(x, (x.shape[-1],), w, b)
