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
each pinned node is wrapped so that it depends on the pinned node before it. Inductor's lowering
of ``control_deps`` records those as extra buffer dependencies, which its scheduler honours as
dependencies in fusion and in every reordering. One chain over all pinned nodes fixes their order
across process groups too. Unlike ``insert_overlap_deps``, which drops the edges between two
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


def chain_edges(graph: fx.Graph, implied: bool = False) -> list[tuple[fx.Node, fx.Node]]:
    """The ``(before, node)`` pairs `pin_order` adds: consecutive `pinned_nodes`, less (unless ``implied``)
    those where ``node`` already depends on ``before`` through the graph's data, which Inductor keeps.

    One pass in graph order: each node's latest pinned ancestor (by chain index) is the largest over its
    inputs; a pinned node whose inputs' latest is the pinned node just before it needs no edge."""
    chain = pinned_nodes(graph)
    index = {node: i for i, node in enumerate(chain)}
    latest: dict[fx.Node, int] = {}
    edges = []
    for node in graph.nodes:
        last = max((latest.get(i, -1) for i in node.all_input_nodes), default=-1)
        i = index.get(node)
        if i is None:
            latest[node] = last
            continue
        if i > 0 and (implied or last < i - 1):
            edges.append((chain[i - 1], node))
        latest[node] = i
    return edges


def pin_order(graph: fx.Graph, implied: bool = False) -> int:
    """Fix the current order of ``graph``'s pinned nodes (`pinned_nodes`) with control dependencies, in
    place: a pinned node that does not already depend on the pinned node before it through data becomes a
    ``control_deps`` node that depends on it (`chain_edges`; ``implied=True`` wraps every pinned node
    but the first).

    Every edge left out is one that data already orders, so the order is the same; each ``control_deps``
    costs what Inductor cannot see through: its lowering realizes the dependency's buffer and adds a weak
    user to it (which stops a consumer from reusing that buffer in place until the dependent node has
    run), and the post-grad reinplacing pass, which turns a functional ``all_reduce`` into an in-place
    ``all_reduce_``, does not look inside it (a copy kernel is added instead).

    Returns how many nodes were wrapped: 0 when there is nothing to chain, or when this torch has no
    ``control_deps`` (a warning then says the order is Inductor's). The graph needs an owning module
    (the wrapped ops' subgraphs are stored on it), as Inductor's post-grad graphs have."""
    edges = chain_edges(graph, implied)
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

    preserve(graph, {node: OrderedSet([before]) for before, node in edges})
    graph.lint()
    return len(edges)
