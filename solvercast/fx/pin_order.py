"""Pin a graph's order of collectives, waits and matmuls for Inductor, with control dependencies.

`SolvercastPass` reorders Inductor's post-grad graph, but Inductor's scheduler then orders its own
nodes, and only by data dependencies. Measured on the zoo's FSDP graphs (torch 2.13, CPU,
``tests/end_to_end/test_generated_code_order.py``), two of its steps move the pass's collectives and waits:

* fusion (``Scheduler.fuse_nodes``): a fused kernel takes the place of its earliest member and the
  nodes are sorted topologically again, which pulls up whatever its later members read (in the
  backward of ``simple_fsdp``: matmuls rose above a reduce_scatter);
* ``reorder_for_peak_memory`` (on by default): it reorders the fused nodes to lower the peak; in
  the backward of ``simple_fsdp`` it then moved every matmul ahead of the reduce_scatters the pass
  had interleaved with them, and in a small FSDP forward it sank the all_gathers the pass had
  raised down to their waits.

Both obey dependencies, so, as PyTorch's own overlap scheduler does when asked to
(``insert_overlap_deps``), the order is pinned with Inductor's ``control_deps`` higher-order op:
each collective and wait is made to depend on the matmuls before it (back to the previous collective
or wait), and each matmul on the collective or wait before it. Inductor's lowering of
``control_deps`` records those as extra buffer dependencies (fake weak ones), which its scheduler
honours as dependencies in fusion and in every reordering. One chain over all collectives and waits
fixes their order across process groups too. Only the links that data does not already make are wrapped
(`chain_edges`): a wrapper is not free in the output code. Its lowering adds a weak user to the
buffer it waits on, which can stop that buffer's other consumers from reusing it in place
(``decide_inplace_update`` counts every user not yet run), and the
post-grad reinplacing pass does not look inside it, so a wrapped ``all_reduce`` gets a copy kernel
instead of running in place. The values a wrapped node reads are realized where they are computed
(`_realize_inputs_before`), not inside the wrapper, which would give them its dependencies too. A link
between two matmuls is not taken at all: what the pass decides is
where collectives and waits sit among the matmuls, not the matmuls' order among themselves (counts
in ``experiments/results/pin_order.md``). Unlike ``insert_overlap_deps``, which drops the edges between two
collectives or waits (one communicator's stream orders its collectives), the chain keeps them: the
stream does not order a launch against another collective's wait on the host, and the pass chose
that order.

Pinned are the nodes that stay one call each in Inductor's output code: collective launches, waits,
and the matmul-class ops (those with a FLOP formula: ``mm``, ``bmm``, ``addmm``, attention,
convolution), which Inductor runs as extern kernels. Pointwise ops are not pinned: Inductor fuses
them into the kernels around them (a ``control_deps`` wrapper would stop that), so they may still
move, within what their data and the pinned chain allow.

Only for Inductor: the wrapped graph runs eagerly too (``control_deps`` runs its subgraph), but
`optimize` / `lower` never call this; `SolvercastPass` does, on the graph Inductor hands it.
"""

from __future__ import annotations

import functools
import warnings

import torch
import torch.fx as fx

from solvercast.graph.nodes import NodeKind, classify
from solvercast.cost.roofline import is_matmul_class

__all__ = ["pinned_nodes", "chain_edges", "pin_order", "can_pin"]


@functools.lru_cache(maxsize=1)
def _preserve_node_ordering():
    """Inductor's ``control_deps`` wrapper, else None (a torch that predates it)."""
    try:
        from torch._inductor.fx_passes.control_dependencies import preserve_node_ordering
    except ImportError:  # pragma: no cover - older torch
        return None
    return preserve_node_ordering


def can_pin() -> bool:
    """This torch's Inductor has the ``control_deps`` op that `pin_order` needs."""
    return _preserve_node_ordering() is not None


def _is_pinned(node: fx.Node) -> bool:
    if node.op != "call_function":
        return False
    kind = classify(node).kind
    if kind in (NodeKind.COLLECTIVE, NodeKind.WAIT):
        return True
    return kind is NodeKind.COMPUTE and is_matmul_class(node.target)


def pinned_nodes(graph: fx.Graph) -> list[fx.Node]:
    """The nodes `pin_order` chains, in graph order: collective launches, waits and matmul-class ops."""
    return [n for n in graph.nodes if _is_pinned(n)]


def _is_comm(node: fx.Node) -> bool:
    return classify(node).kind in (NodeKind.COLLECTIVE, NodeKind.WAIT)


def chain_edges(graph: fx.Graph, implied: bool = False, matmuls: bool = False) -> list[tuple[fx.Node, fx.Node]]:
    """The ``(before, node)`` pairs `pin_order` adds, in graph order: each collective or wait after the
    matmuls since the collective or wait before it (after that one when there are none), each matmul
    after the collective or wait before it; with ``matmuls``, instead, each pinned node after the one
    before it. Left out (unless ``implied``) are the pairs that the graph's data (or a pair already
    taken) orders anyway, which Inductor keeps.

    So each collective stays after the compute before it and before the compute after it, and each wait
    after the compute the pass put before it: what decides how much of a collective is hidden. The
    matmuls between two collectives or waits may run in another order among themselves (the sequence
    of kinds in the output code is the same), which leaves Inductor free to fuse around them.

    One pass in graph order; each node carries the set of pinned nodes it depends on (a bit mask over
    the chain), so that a pair is known to be implied without a search."""
    chain = pinned_nodes(graph)
    index = {node: i for i, node in enumerate(chain)}
    mask: dict[fx.Node, int] = {}
    edges = []
    previous, segment = None, []  # the last collective or wait, the matmuls after it
    for node in graph.nodes:
        m = 0
        for i in node.all_input_nodes:
            m |= mask.get(i, 0)
        i = index.get(node)
        if i is not None:
            comm = _is_comm(node)
            if matmuls:
                required = chain[i - 1:i] if i > 0 else []
            elif comm:
                required = segment or ([previous] if previous is not None else [])
            else:
                required = [previous] if previous is not None else []
            for before in required:
                if implied or not (m >> index[before]) & 1:
                    edges.append((before, node))
                    m |= mask[before]
            m |= 1 << i
            if comm:
                previous, segment = node, []
            else:
                segment.append(node)
        mask[node] = m
    return edges


#: Inductor's per-node flag (``GraphLowering.run_node``): realize the node's value when it is lowered
REALIZE = "inductor_realize_to_strides"


def _base(node: fx.Node) -> fx.Node:
    """``node`` without the view ops (``view``, ``permute``, ``t``, ...) on top of it."""
    while (node.op == "call_function" and getattr(node.target, "is_view", False) and node.args
           and isinstance(node.args[0], fx.Node)):
        node = node.args[0]
    return node


def _realize_inputs_before(node: fx.Node) -> None:
    """Have Inductor realize the values ``node`` reads (through views) when they are lowered, not inside
    ``node``'s ``control_deps`` wrapper: Inductor's lowering of the wrapper gives every operation it
    creates the wrapper's dependencies, and a pointwise producer it realizes there (a matmul's input)
    would be ordered after them too, which can split it from the kernel it would join (measured on the
    FSDP models' backward: ``mul_silu`` and ``silu_backward`` in two kernels around a wait). The wrapped
    ops (matmuls, collectives, waits) realize their inputs anyway; only where moves."""
    for value in node.all_input_nodes:
        base = _base(value)
        if base.op == "call_function" and isinstance(base.meta.get("val"), torch.Tensor):
            base.meta[REALIZE] = True


def pin_order(graph: fx.Graph, implied: bool = False, matmuls: bool = False) -> int:
    """Fix the current order of ``graph``'s pinned nodes (`pinned_nodes`) with control dependencies, in
    place: a pinned node that does not already depend on the pinned node before it through data becomes a
    ``control_deps`` node that depends on it (`chain_edges`; ``implied=True, matmuls=True`` wraps every
    pinned node but the first).

    Every edge left out is one that data already orders, so the order is the same; each ``control_deps``
    costs what Inductor cannot see through: its lowering realizes the dependency's buffer and adds a weak
    user to it (which stops a consumer from reusing that buffer in place until the dependent node has
    run), and the post-grad reinplacing pass, which turns a functional ``all_reduce`` into an in-place
    ``all_reduce_``, does not look inside it (a copy kernel is added instead).

    Returns how many nodes were wrapped (a node may wait on several): 0 when there is nothing to chain, or when this torch has no
    ``control_deps`` (a warning then says the order is Inductor's). The graph needs an owning module
    (the wrapped ops' subgraphs are stored on it), as Inductor's post-grad graphs have."""
    edges = chain_edges(graph, implied, matmuls)
    if not edges:
        return 0
    preserve = _preserve_node_ordering()
    if preserve is None:  # pragma: no cover - older torch
        warnings.warn("this torch's Inductor has no control_deps op: the pass's order of collectives, waits and "
                      "matmuls is not pinned, and Inductor may reorder them", stacklevel=2)
        return 0
    if graph.owning_module is None:
        raise ValueError("pin_order needs a graph with an owning module (its control_deps subgraphs live there)")
    from torch.utils._ordered_set import OrderedSet

    deps: dict[fx.Node, OrderedSet] = {}
    for before, node in edges:
        deps.setdefault(node, OrderedSet()).add(before)
    for node in deps:
        _realize_inputs_before(node)
    preserve(graph, deps)
    graph.lint()
    return len(deps)
