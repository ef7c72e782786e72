"""Values of the nodes a trace left without ``meta["val"]``, derived from the graph.

make_fx leaves some nodes without a value (getitem nodes of multi-output ops, in public traces of whole
training steps); every other part of solvercast reads a node's value. `derive_values` finds them:

* a ``getitem`` of a node whose value (recorded, or derived the same way) is a tuple or list takes the
  element at its index;
* any other node (and a getitem whose source has no value yet) gets one from torch's ``FakeTensorProp``
  run over a copy of the graph, with the recorded values as the inputs and as the values of every node
  that has one (only the nodes without a value run, on fake tensors of the graph's own fake mode, or of
  a new one made from the recorded values when they are real tensors).

The graph and its nodes' metadata are never changed: the values come back as a mapping, which
extraction hands to `solvercast.graph.fxmeta.remember_values` and lowering writes into its own copy.
Nodes that hold no value by design are left out: ``get_attr`` nodes (their attribute is their value), ops
whose schema returns nothing, and a getitem of a recorded container that holds None at its index (the
token-less result of ``with_effects``). When every node has a value, one pass over the nodes is all it
costs.
"""

from __future__ import annotations

import copy
import operator
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
from torch._guards import detect_fake_mode
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx.passes.fake_tensor_prop import FakeTensorProp
from torch.utils._pytree import tree_flatten, tree_map

from solvercast.graph.fxmeta import attribute

__all__ = ["DerivedValues", "derive_values", "returns_nothing"]

#: how a value was derived, as the report names it
BY_GETITEM = "getitem of their source"
BY_FAKE_PROP = "FakeTensorProp"


@dataclass
class DerivedValues:
    """What `derive_values` found: ``values`` (node -> value), how many came from each rule, and the
    nodes whose value could not be derived with the reason (None when every value was derived)."""
    values: dict[fx.Node, Any] = field(default_factory=dict)
    counts: Counter = field(default_factory=Counter)
    unresolved: tuple[fx.Node, ...] = ()
    reason: str | None = None

    def note(self) -> str | None:
        """One line for the report, or None when nothing was derived."""
        if not self.values:
            return None
        how = ", ".join(f"{rule}: {n}" for rule, n in self.counts.items())
        return f"values derived for {len(self.values)} nodes without meta['val'] ({how})"


def returns_nothing(node: fx.Node) -> bool:
    """An op whose schema returns nothing (make_fx records no value for it: ``_foreach_add_``, ...)."""
    schema = getattr(node.target, "_schema", None)
    return node.op == "call_function" and schema is not None and len(schema.returns) == 0


def _getitem_source(node: fx.Node) -> tuple[fx.Node, int] | None:
    if node.op != "call_function" or node.target is not operator.getitem or len(node.args) < 2:
        return None
    src, index = node.args[0], node.args[1]
    if not isinstance(src, fx.Node) or not isinstance(index, int):
        return None
    return src, index


def _item(container: Any, index: int) -> tuple[bool, Any]:
    if isinstance(container, (list, tuple)) and -len(container) <= index < len(container):
        return True, container[index]
    return False, None


def derive_values(gm: fx.GraphModule, nodes: list[fx.Node] | None = None) -> DerivedValues:
    """The values of ``gm``'s nodes without ``meta["val"]`` (see the module's docstring); ``nodes``:
    ``gm``'s nodes in graph order, when the caller has listed them already. Never raises: a value that
    cannot be derived is named in ``unresolved`` with the ``reason``."""
    nodes = list(gm.graph.nodes) if nodes is None else nodes
    out = DerivedValues()
    missing: list[fx.Node] = []
    for node in nodes:
        meta = node.meta
        if "val" in meta or node.op in ("output", "get_attr"):
            continue
        if returns_nothing(node):
            continue
        item = _getitem_source(node)
        if item is not None:
            src, index = item
            if "val" in src.meta:
                found, value = _item(src.meta["val"], index)
                if found and value is None:  # a None result held by a recorded container: no value by design
                    continue
            else:
                found, value = _item(out.values.get(src), index)
            if found:
                out.values[node] = value
                out.counts[BY_GETITEM] += 1
                continue
        missing.append(node)
    if missing:
        _propagate(gm, nodes, missing, out)
    return out


def _propagate(gm: fx.GraphModule, nodes: list[fx.Node], missing: list[fx.Node], out: DerivedValues) -> None:
    """The values of ``missing`` from a FakeTensorProp over a copy of ``gm``."""
    def fail(reason: str, unresolved: list[fx.Node]) -> None:
        out.unresolved = tuple(unresolved)
        out.reason = reason

    placeholders = [n for n in missing if n.op == "placeholder"]
    if placeholders:
        return fail(f"graph input {placeholders[0].name!r} has no value to make a fake input of", missing)
    opaque = [n for n in missing if n.op not in ("call_function",)]
    if opaque:
        return fail(f"{opaque[0].name!r} is a {opaque[0].op}, whose value it cannot know", missing)

    mode = _fake_mode([n.meta["val"] for n in nodes if n.op == "placeholder"]) \
        or _fake_mode([n.meta["val"] for n in nodes if "val" in n.meta])
    if mode is None:  # a trace with real tensors
        mode = FakeTensorMode(allow_non_fake_inputs=True)

    def fake(value):  # a real tensor becomes a fake one of the mode (storages shared as they were)
        return tree_map(lambda v: mode.from_tensor(v) if isinstance(v, torch.Tensor) and not isinstance(v, FakeTensor)
                        else v, value)

    graph = copy.deepcopy(gm.graph)  # FakeTensorProp writes meta["val"]: into the copy's nodes only
    copy_gm = fx.GraphModule(gm, graph)
    by_name = {n.name: n for n in nodes}
    wanted = {n.name for n in missing}
    known = {name: v for name, v in ((n.name, out.values[n]) for n in nodes if n in out.values)}
    results: dict[str, Any] = {}

    class _FillMissing(FakeTensorProp):
        """Runs only the nodes without a value; every other node gives its recorded value."""

        def run_node(self, n: fx.Node) -> Any:
            if n.name in wanted:
                result = super().run_node(n)
                results[n.name] = n.meta.get("val")
                return result
            if "val" in n.meta:
                return fake(n.meta["val"])
            if n.name in known:
                return fake(known[n.name])
            if n.op == "get_attr":
                return fake(attribute(gm, n.target))
            if returns_nothing(n):
                return None
            return torch.fx.Interpreter.run_node(self, n)  # a None item of a recorded container

    placeholder_vals = [fake(n.meta["val"]) for n in graph.nodes if n.op == "placeholder"]
    try:
        _FillMissing(copy_gm, mode=mode).propagate_dont_convert_inputs(*placeholder_vals)
    except Exception as e:  # noqa: BLE001 - any failure of the op under fake tensors is reported
        failed = [n for n in missing if n.name not in results]
        first = failed[0] if failed else None
        for name, value in results.items():
            out.values[by_name[name]] = value
            out.counts[BY_FAKE_PROP] += 1
        detail = str(e).splitlines()[0] if str(e) else ""
        return fail((f"it failed at {first.name!r}" if first is not None else "it failed")
                    + f": {type(e).__name__}: {detail}", failed)
    for node in missing:
        out.values[node] = results.get(node.name)
        out.counts[BY_FAKE_PROP] += 1


def _fake_mode(values: list) -> Any:
    """The fake mode of the recorded values (None when they are real tensors, or of several modes)."""
    tensors = [t for t in tree_flatten(values)[0] if isinstance(t, torch.Tensor)]
    try:
        return detect_fake_mode(tensors)
    except Exception:  # noqa: BLE001 - values of several fake modes: none of them is the graph's
        return None
