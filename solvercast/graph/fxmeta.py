"""What an FX node's metadata says about its tensors: shapes, dtypes, bytes.

The one home of symbolic-size hinting (`hint_int`) and of reading a node's
value (``meta["val"]``, else a value derived for it inside `graph_frozen`
(`remember_values`), else ``meta["tensor_meta"]``) as (hinted shape, dtype)
pairs and bytes, plus `bound_args`, an op's arguments by schema name. Nothing
here guards on a symbolic size: sizes are read through their hints only.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from typing import Any, Callable, Iterable, Optional

import torch
import torch.fx

from solvercast.errors import UnhintedSizeError

__all__ = [
    "UNBACKED_SIZE_FALLBACK", "UnhintedSizeError", "hint_int", "tensor_info", "tensor_infos", "node_val",
    "is_tensor_like", "info_bytes", "val_bytes", "input_nodes", "bound_args", "graph_frozen", "once_per_node",
    "node_infos", "attribute", "remember_values", "give_size_hint",
]

#: Size used for an unbacked symbolic size that has no hint (Inductor's
#: default ``unbacked_symint_fallback``).
UNBACKED_SIZE_FALLBACK = 8192


def hint_int(x: Any, fallback: Optional[int]) -> int:
    """Concrete int for an int / SymInt, without adding guards.

    A SymInt gives the hint recorded on its node. Without one (an unbacked
    size, e.g. the length of a ``nonzero``) the answer depends on the caller:

    * ``fallback=None``: the value the user gave its symbols (the shape
      environment's ``var_to_hint_override``, which ``mark_unbacked(...,
      hint_override=)`` and `give_size_hint` fill), else raise
      `UnhintedSizeError`. Extraction sizes buffers with this: a peak-memory
      budget checked against a guessed size would be a silent lie, so it asks
      the user to give hints instead.
    * an int: ask the shape environment (``optimization_hint``, older torch
      versions' ``size_hint``) and use ``fallback`` when it has nothing. The
      roofline uses :data:`UNBACKED_SIZE_FALLBACK` (Inductor's choice): a
      duration estimate may guess.

    Anything else is passed to ``int()`` (whose error is raised with
    ``fallback=None`` and replaced by ``fallback`` otherwise).
    """
    if isinstance(x, bool):
        return int(x)
    if isinstance(x, int):
        return x
    if isinstance(x, torch.SymInt):
        try:
            recorded = x.node.hint
        except Exception:  # a SymInt whose node keeps no hint (e.g. a nested int)
            recorded = None
        if recorded is not None:
            return int(recorded)
        if fallback is None:
            given = _given_hint(x)
            if given is None:
                raise UnhintedSizeError(f"symbolic size {x} has no hint")
            return given
        return _shape_env_hint(x, fallback)
    if fallback is None:
        return int(x)
    try:
        return int(x)
    except Exception:
        return fallback


def _given_hint(x: torch.SymInt) -> Optional[int]:
    """``x`` with every symbol replaced by its recorded value or the hint the user gave it (the shape
    environment's ``var_to_hint_override``); None when a symbol has neither."""
    try:
        env, expr = x.node.shape_env, x.node.expr
        expr = expr.xreplace(env.replacements)
        backed = env.backed_var_to_val if hasattr(env, "backed_var_to_val") else env.var_to_val  # older torch
        values = {**backed, **getattr(env, "var_to_hint_override", {})}
        expr = expr.xreplace({s: values[s] for s in expr.free_symbols if s in values})
        return int(expr) if expr.is_number else None
    except Exception:  # a SymInt without a shape environment (e.g. a nested int)
        return None


def give_size_hint(size: torch.SymInt, value: int) -> None:
    """Give an unbacked symbolic size (e.g. a ``_local_scalar_dense`` node's ``meta["val"]``, an all_to_all's
    split size read from data) the value to plan with. Recorded where torch keeps user hints (the shape
    environment's ``var_to_hint_override``, as ``mark_unbacked(..., hint_override=)`` does), so extraction
    and the cost models read it as that size."""
    if not isinstance(size, torch.SymInt) or not size.node.expr.is_symbol:
        raise ValueError(f"give_size_hint: {size!r} is not a plain symbolic size (a SymInt of one symbol)")
    if int(value) < 0:
        raise ValueError(f"give_size_hint: a size is at least 0, got {value} for {size}")
    size.node.shape_env.var_to_hint_override[size.node.expr] = int(value)


def _shape_env_hint(x: torch.SymInt, fallback: int) -> int:
    """The shape environment's best value for a SymInt whose node has no hint."""
    from torch.fx.experimental import symbolic_shapes as ss

    opt = getattr(ss, "optimization_hint", None)
    if opt is not None:
        try:
            return int(opt(x, fallback=fallback))
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
        node = x.node
        h = node.shape_env.size_hint(node.expr, allow_none=True)
        if h is not None:
            return int(h)
    except Exception:
        pass
    return fallback


def _hint_size(x: Any) -> int:
    return hint_int(x, UNBACKED_SIZE_FALLBACK)


def tensor_info(v: Any) -> Optional[tuple[tuple[int, ...], torch.dtype]]:
    """(hinted shape, dtype) for a tensor or TensorMetadata, else None.
    Unbacked sizes become :data:`UNBACKED_SIZE_FALLBACK`."""
    if isinstance(v, torch.Tensor):
        shape = tuple(v.shape)
        if all(type(s) is int for s in shape):  # static sizes: nothing to hint
            return shape, v.dtype
        return tuple(_hint_size(s) for s in shape), v.dtype
    shape = getattr(v, "shape", None)
    dtype = getattr(v, "dtype", None)
    if shape is not None and isinstance(dtype, torch.dtype):
        try:
            return tuple(_hint_size(s) for s in shape), dtype
        except TypeError:
            return None
    return None


def node_val(node: torch.fx.Node) -> Any:
    """The node's value: ``meta["val"]``, else the value derived for it inside `graph_frozen`
    (`remember_values`), else ``meta["tensor_meta"]`` (None if none of them)."""
    meta = node.meta
    if "val" in meta:
        return meta["val"]
    derived = _derived_values()
    if derived and node in derived:
        return derived[node]
    return meta.get("tensor_meta")


def is_tensor_like(v: Any) -> bool:
    """A tensor, or metadata with a shape and a dtype (e.g. TensorMetadata)."""
    if isinstance(v, torch.Tensor):
        return True
    return hasattr(v, "shape") and isinstance(getattr(v, "dtype", None), torch.dtype)


def _flatten(x: Any) -> Iterable[Any]:
    if is_tensor_like(x):
        yield x
    elif isinstance(x, (list, tuple)):
        for y in x:
            yield from _flatten(y)
    elif isinstance(x, dict):
        for y in x.values():
            yield from _flatten(y)
    else:
        yield x


def tensor_infos(v: Any) -> list[tuple[tuple[int, ...], torch.dtype]]:
    """`tensor_info` of every tensor in a (nested) value, in order."""
    out = []
    for t in _flatten(v):
        info = tensor_info(t)
        if info is not None:
            out.append(info)
    return out


_FROZEN: contextvars.ContextVar[dict | None] = contextvars.ContextVar("solvercast_graph_frozen", default=None)


@contextlib.contextmanager
def graph_frozen():
    """Inside the block, facts about a node (`once_per_node`) are computed once and remembered: extraction
    and the cost model ask several times per node. The graph and its metadata must not change inside it."""
    token = _FROZEN.set({})
    try:
        yield
    finally:
        _FROZEN.reset(token)


_VALUES = object()  # key of the derived values in `graph_frozen`'s store


def remember_values(values: dict) -> None:
    """Inside `graph_frozen`: ``values`` (node -> value) are the values of nodes without ``meta["val"]``,
    derived from the graph (`solvercast.fx.values`); `node_val` reads them until the block ends. The
    nodes' metadata is not touched. Call it before any `once_per_node` fact is computed."""
    cache = _FROZEN.get()
    if cache is None:
        raise RuntimeError("remember_values needs graph_frozen: derived values last as long as its block")
    cache[_VALUES] = values


def _derived_values() -> dict | None:
    cache = _FROZEN.get()
    return None if cache is None else cache.get(_VALUES)


def once_per_node(fact: Callable[[torch.fx.Node], Any], node: torch.fx.Node) -> Any:
    """``fact(node)``, remembered per (fact, node) inside `graph_frozen` (computed every time outside)."""
    cache = _FROZEN.get()
    if cache is None:
        return fact(node)
    per_node = cache.get(fact)  # one dict per fact: no key tuple to build and hash per call
    if per_node is None:
        per_node = cache[fact] = {}
    try:
        return per_node[node]
    except KeyError:
        value = per_node[node] = fact(node)
        return value


def _node_infos(node: torch.fx.Node) -> tuple[tuple[tuple[int, ...], torch.dtype], ...]:
    return tuple(tensor_infos(node_val(node)))


def node_infos(node: torch.fx.Node) -> tuple[tuple[tuple[int, ...], torch.dtype], ...]:
    """`tensor_infos` of the node's value, as a tuple (once per node inside `graph_frozen`)."""
    return once_per_node(_node_infos, node)


def info_bytes(info: tuple[tuple[int, ...], torch.dtype]) -> int:
    """numel x itemsize of a (shape, dtype) pair."""
    shape, dtype = info
    return math.prod(shape) * _itemsize(dtype)


def _itemsize(dtype: torch.dtype) -> int:
    try:
        return dtype.itemsize
    except AttributeError:  # very old torch
        return torch.empty((), dtype=dtype).element_size()


def val_bytes(v: Any) -> int:
    """Bytes of every tensor in a (nested) value (numel x itemsize, hinted sizes)."""
    return sum(info_bytes(i) for i in tensor_infos(v))


def attribute(root: Any, qualified_name: str) -> Any:
    """What a ``get_attr`` node's target (``"layer.weight"``) names on ``root`` (its graph's module);
    raises ``AttributeError`` when it names nothing."""
    obj = root
    for part in str(qualified_name).split("."):
        obj = getattr(obj, part)
    return obj


def input_nodes(node: torch.fx.Node) -> list[torch.fx.Node]:
    """Distinct input nodes, in first-use order."""
    return list(dict.fromkeys(node.all_input_nodes))


def op_target(target: Any) -> Any:
    """The overload an FX target stands for. A graph made by ``symbolic_trace`` names an op's packet
    (``_c10d_functional.all_reduce``); a packet with a single overload is that overload."""
    if isinstance(target, torch._ops.OpOverloadPacket):
        try:
            if target.overloads() == ["default"]:
                return target.default
        except (AttributeError, RuntimeError):
            pass
    return target


def bound_args(node: torch.fx.Node, target: Any = None) -> dict[str, Any]:
    """Map the schema argument names of an op node to the node's values
    (positional or keyword; defaults for the arguments it leaves out). ``target``: the overload whose
    schema to read, when the node names its packet (`solvercast.graph.nodes.op_target`)."""
    schema = (target if target is not None else node.target)._schema
    out: dict[str, Any] = {}
    for i, a in enumerate(schema.arguments):
        if i < len(node.args) and not a.kwarg_only:
            out[a.name] = node.args[i]
        elif a.name in node.kwargs:
            out[a.name] = node.kwargs[a.name]
        elif a.has_default_value():
            out[a.name] = a.default_value
    return out
