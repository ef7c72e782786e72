"""Which values of a graph are provably the same on every rank of a process group.

A rewrite that computes part of a value on each rank of a group and gathers the parts back (sequence
parallelism: `solvercast.rewrites.sequence_parallel`) keeps the program's values only where every rank
would have computed the same value: rank ``r``'s gathered result holds rank ``k``'s rows. `Replication`
proves that, value by value, over one group:

* the result of an all_reduce, all_gather or broadcast over the group (its wait, its getitems) is
  replicated over it; a reduce_scatter's or an all_to_all's is not (each rank gets its own part), nor is a
  collective's over another group (its members are unknown here);
* a graph input is replicated where the caller says so (``inputs``: "all", the tensor-parallel contract
  that what enters a tensor-parallel block is the same on every rank of the block's group, or the names
  of the inputs that are); a module constant (``get_attr``) is: every rank traces one program;
* a pure op's result is replicated when every tensor it reads is; a random op's (`torch.Tag.nondeterministic_seeded`)
  is not, nor a value whose storage something writes in place (what the write reads would need proving
  at that point of the program: not attempted).
"""

from __future__ import annotations

from collections.abc import Collection

import torch
import torch.fx as fx

from solvercast.graph.fxmeta import op_target
from solvercast.graph.nodes import NodeKind, classify, is_wait

__all__ = ["REPLICATING_KINDS", "Replication"]

#: collective kinds whose result is the same on every rank of their group
REPLICATING_KINDS = frozenset({"all_reduce", "all_gather", "broadcast"})


class Replication:
    """Proofs of replication over the groups of ``gm``'s collectives (see the module docstring).
    ``inputs``: "all" or the names of the graph inputs taken to be replicated over every group."""

    def __init__(self, gm: fx.GraphModule, inputs: str | Collection[str] = "all"):
        if isinstance(inputs, str) and inputs != "all":
            raise ValueError(f"replicated inputs must be 'all' or a collection of input names, got {inputs!r}")
        self.inputs = inputs
        names = {n.name for n in gm.graph.nodes if n.op == "placeholder"}
        unknown = [] if inputs == "all" else sorted(set(inputs) - names)
        if unknown:
            raise ValueError(f"replicated inputs {unknown} are not inputs of the graph (its inputs: {sorted(names)})")
        self._gm = gm
        self._written = self._written_storages(gm)
        self._by_group: dict[str, dict[fx.Node, bool]] = {}

    @staticmethod
    def _root(node: fx.Node) -> fx.Node:
        """The node whose storage ``node`` is a view or an alias of (itself when fresh)."""
        seen = set()
        while node not in seen:
            seen.add(node)
            aliases = classify(node).aliases if node.op == "call_function" else ()
            first = aliases[0] if aliases else None
            if not isinstance(first, fx.Node):
                return node
            node = first
        return node

    def _written_storages(self, gm: fx.GraphModule) -> set[fx.Node]:
        return {self._root(w) for n in gm.graph.nodes if n.op == "call_function" for w in classify(n).writes}

    def proven(self, node: fx.Node | object, group: str) -> bool:
        """Whether ``node`` (a graph node, or a constant argument) is the same on every rank of ``group``."""
        if not isinstance(node, fx.Node):
            return True  # a number, a dtype, a shape: the same program on every rank
        if group not in self._by_group:  # one walk in graph order: every input is decided before its readers
            known: dict[fx.Node, bool] = {}
            for n in self._gm.graph.nodes:
                known[n] = self._prove(n, group, known)
            self._by_group[group] = known
        return self._by_group[group][node]

    def _prove(self, node: fx.Node, group: str, known: dict[fx.Node, bool]) -> bool:
        if self._root(node) in self._written:
            return False
        if node.op == "placeholder":
            return self.inputs == "all" or node.name in self.inputs
        if node.op == "get_attr":
            return True
        if node.op != "call_function":
            return False
        target = op_target(node.target)
        info = classify(node)
        if info.kind is NodeKind.COLLECTIVE:
            return info.group_name == group and info.collective is not None \
                and info.collective.name in REPLICATING_KINDS
        if info.distributed and not is_wait(node):  # a c10d op the registry does not know
            return False
        if isinstance(target, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in target.tags:
            return False
        return all(known[a] for a in node.all_input_nodes)  # a wait and a getitem: their collective's answer
