"""Writing new nodes into a rewritten graph: each with its fake value (``meta["val"]``), computed by running
the op on its arguments' fake values in one fake mode, so that extraction prices the new nodes as it prices
traced ones."""

from __future__ import annotations

import torch
import torch.fx as fx
from torch._guards import detect_fake_mode
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.utils._pytree import tree_map

from solvercast.graph.fxmeta import node_val

__all__ = ["FakeNodeBuilder", "copy_graph", "fake_mode_of"]


def fake_mode_of(nodes) -> FakeTensorMode:
    """The fake mode the values of ``nodes`` were made in (a new one where none is fake: a graph traced with
    real tensors); new values that meet them must be made in it."""
    vals = [node_val(n) for n in nodes if isinstance(n, fx.Node)]
    return detect_fake_mode([v for v in vals if isinstance(v, FakeTensor)]) or FakeTensorMode()


class FakeNodeBuilder:
    """Adds call_function nodes to ``graph`` with their fake values made in ``mode``."""

    def __init__(self, graph: fx.Graph, mode: FakeTensorMode):
        self.graph, self.mode = graph, mode

    def add(self, target, args, name: str, kwargs=None) -> fx.Node:
        node = self.graph.create_node("call_function", target, tuple(args), kwargs or {}, name=name)

        def fake(v):
            return self.mode.from_tensor(v) if isinstance(v, torch.Tensor) and not isinstance(v, FakeTensor) else v

        vals = tree_map(lambda a: fake(a.meta["val"]) if isinstance(a, fx.Node) else a, tuple(args))
        with self.mode:
            node.meta["val"] = target(*vals, **(kwargs or {}))
        return node


def copy_graph(graph: fx.Graph) -> fx.Graph:
    """A copy of ``graph`` whose nodes keep their names and meta."""
    new = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for node in graph.nodes:
        env[node] = new.node_copy(node, lambda n: env[n])
    return new
