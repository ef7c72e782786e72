"""The sequence-parallel rewrite: an all_reduce whose result is worked on row by row (residual adds, norms,
elementwise ops) up to the next matmul becomes a reduce_scatter, the row-wise work on this rank's block of
rows, and an all_gather where full rows are read again (the next matmul, the graph's outputs).

A ring all_reduce moves what a reduce_scatter and an all_gather move together, so the rewrite costs no
bandwidth; it shrinks the row-wise work and its activations by the group size, and it splits the
collective into two halves the schedule can place apart, an all_gather feeding a matmul that
collective-matmul decomposition (`solvercast.rewrites.decompose`) can then chunk. Whether that pays is the
pipeline's decision (`solvercast.pipeline.decompose`); this module knows where the rewrite applies and how
it is written:

* `sp_sites`: the all_reduces it may take: functional, reduce op "sum", one wait, a 2-D input of
  concrete sizes ``(M, N)`` whose ``M`` rows divide evenly over a group of a power-of-two size.
* The row-wise region of a set of sites: the nodes, starting at the sites' waits, whose rows depend only
  on the same rows of their inputs, each a tensor ``(M, c)``: elementwise ops (`ROW_WISE`) whose other
  operands are scalars, tensors broadcast along the rows (a norm's weight), or region values; reductions
  over the last dimension (``mean``, ``sum``, ``amax`` with ``keepdim``); ``native_layer_norm`` over the
  last dimension and its outputs. A residual ``add(R, wait)`` of a replicated ``R`` of the same shape
  joins the region by folding ``R`` into the reduction: ``reduce_scatter(t + R / size)`` gives this rank's
  rows of ``all_reduce(t) + R`` (``R`` is the same on every rank; dividing by a power of two is exact).
  Whatever the region reads from outside it (``R``, a norm's weight) must be the same on every rank of the
  group, or the gathered rows would mix ranks' values: `solvercast.graph.replication` proves it, taking
  graph inputs as the caller says (``replicated_inputs``; by default all, the tensor-parallel contract).
* `apply_sequence_parallel`: the graph with the region computed on blocks of ``M / size`` rows; every
  reader outside the region reads the value all-gathered back (rank-major blocks: the rows in order).

Numerics: the reduce_scatter sums in another order than the all_reduce did, and a folded residual is
summed with the partial products, so results are close to the original, not bitwise.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Collection
from dataclasses import dataclass

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensor

from solvercast.errors import RewriteError
from solvercast.graph.collectives import collective_kind_and_group, wait_op
from solvercast.graph.fxmeta import bound_args, node_val, op_target
from solvercast.graph.replication import Replication
from solvercast.rewrites.fake_nodes import FakeNodeBuilder, copy_graph, fake_mode_of

__all__ = ["ROW_WISE", "SPSite", "sp_sites", "row_region", "apply_sequence_parallel"]

_C10D = torch.ops._c10d_functional
_ATEN = torch.ops.aten
_ALL_REDUCE = _C10D.all_reduce.default
_REDUCE_SCATTER = _C10D.reduce_scatter_tensor.default
_ALL_GATHER = _C10D.all_gather_into_tensor.default

#: elementwise ops whose output row i depends only on row i of their (row-shaped) operands
ROW_WISE = frozenset({
    _ATEN.add.Tensor, _ATEN.sub.Tensor, _ATEN.mul.Tensor, _ATEN.div.Tensor, _ATEN.add.Scalar, _ATEN.mul.Scalar,
    _ATEN.sub.Scalar, _ATEN.div.Scalar, _ATEN.pow.Tensor_Scalar, _ATEN.relu.default, _ATEN.gelu.default,
    _ATEN.silu.default, _ATEN.sigmoid.default, _ATEN.tanh.default, _ATEN.exp.default, _ATEN.neg.default,
    _ATEN.rsqrt.default, _ATEN.sqrt.default, _ATEN.reciprocal.default, _ATEN.clone.default,
    _ATEN._to_copy.default, _ATEN.native_dropout.default,
})
#: reductions that are row-wise when they reduce the last dimension only, keeping it
_LAST_DIM_REDUCTIONS = frozenset({_ATEN.mean.dim, _ATEN.sum.dim_IntList, _ATEN.amax.default})
_LAYER_NORM = _ATEN.native_layer_norm.default


@dataclass(frozen=True)
class SPSite:
    """One all_reduce the rewrite may take."""

    collective: str
    wait: str
    rows: int  # M
    group_size: int
    group_name: str


def sp_sites(gm: fx.GraphModule) -> list[SPSite]:
    """The all_reduces of ``gm`` the rewrite may take, in graph order (see the module docstring)."""
    vals = [node_val(n) for n in gm.graph.nodes]
    if len({id(v.fake_mode) for v in vals if isinstance(v, FakeTensor)}) > 1:
        return []  # the rewrite's values are made in the graph's one fake mode
    sites = []
    for node in gm.graph.nodes:
        if node.op != "call_function" or op_target(node.target) is not _ALL_REDUCE or node.kwargs:
            continue
        users = list(node.users)
        if len(users) != 1 or op_target(users[0].target) is not wait_op():
            continue
        args = bound_args(node, _ALL_REDUCE)
        t = node_val(node.args[0])
        _, size, _ = collective_kind_and_group(node)
        if str(args["reduce_op"]) != "sum" or not isinstance(t, torch.Tensor) or t.dim() != 2 \
                or not all(isinstance(d, int) for d in t.shape) or not t.dtype.is_floating_point \
                or size < 2 or size & (size - 1) or t.shape[0] % size:
            continue
        sites.append(SPSite(node.name, users[0].name, int(t.shape[0]), size, str(args["group_name"])))
    return sites


def _is_row_broadcast(v, rows: int) -> bool:
    """A value broadcast along the rows of an ``(rows, c)`` tensor: a scalar, a number, or a tensor whose
    first of two dimensions is 1 (or of fewer dimensions)."""
    if not isinstance(v, torch.Tensor):
        return True
    return v.dim() < 2 or (v.dim() == 2 and v.shape[0] == 1 and rows != 1)


def _rows_of(v, rows: int) -> bool:
    return isinstance(v, torch.Tensor) and v.dim() == 2 and v.shape[0] == rows


def _row_wise(node: fx.Node, region: set[fx.Node], rows: int, same: Callable[[fx.Node], bool]) -> bool:
    """Whether ``node`` computes its rows from the same rows of region values (and row-broadcast others
    that ``same`` proves alike on every rank of the group)."""
    if node.op != "call_function":
        return False
    target = op_target(node.target)
    val = node_val(node)
    if node.target is operator.getitem:
        return node.args[0] in region and _rows_of(val, rows)
    tensors = node.all_input_nodes
    if not tensors or not any(a in region for a in tensors):
        return False
    others_ok = all(a in region or (_is_row_broadcast(node_val(a), rows) and same(a)) for a in tensors)
    region_rows = all(_rows_of(node_val(a), rows) for a in tensors if a in region)
    if not (others_ok and region_rows):
        return False
    if target in ROW_WISE:
        return _rows_of(val, rows) or (isinstance(val, tuple) and all(_rows_of(v, rows) for v in val))
    if target in _LAST_DIM_REDUCTIONS:
        args = bound_args(node, target)
        dims, keep = args.get("dim"), args.get("keepdim", False)
        dims = [dims] if isinstance(dims, int) else list(dims or [])
        return bool(keep) and [d % 2 for d in dims] == [1] and _rows_of(val, rows)
    if target is _LAYER_NORM:
        return node.args[0] in region and len(node.args[1]) == 1 and \
            all(a is None or not isinstance(a, fx.Node) or a not in region for a in node.args[2:4])
    return False


def _fold(node: fx.Node, waits: dict[fx.Node, SPSite], region: set[fx.Node],
          same: Callable[[fx.Node], bool]) -> SPSite | None:
    """The site whose reduction can take ``node = add(R, wait)`` (``R`` proven replicated by ``same``, of
    the wait's shape, read only here among the wait's readers), or None."""
    if node.op != "call_function" or op_target(node.target) is not _ATEN.add.Tensor or node.kwargs \
            or len(node.args) != 2:
        return None
    a, b = node.args
    for wait, other in ((a, b), (b, a)):
        if wait in waits and isinstance(other, fx.Node) and other not in region and len(wait.users) == 1 \
                and same(other):
            r, w = node_val(other), node_val(wait)
            if isinstance(r, torch.Tensor) and tuple(r.shape) == tuple(w.shape) and r.dtype == w.dtype:
                return waits[wait]
    return None


@dataclass
class Region:
    """The row-wise region of a set of sites: ``nodes`` (the sites' waits and the row-wise nodes after them,
    in graph order), ``folds`` (a residual add -> the site whose reduction takes it)."""

    nodes: list[fx.Node]
    folds: dict[fx.Node, SPSite]


def row_region(gm: fx.GraphModule, sites: list[SPSite], replicated_inputs: str | Collection[str] = "all") -> Region:
    """The row-wise region of ``sites`` (all of one group and one row count). Raises `RewriteError` otherwise.
    Every value the region reads from outside (a folded residual, a norm's weight) must be proven the same
    on every rank of the group (`solvercast.graph.replication`; ``replicated_inputs``: the graph inputs
    taken to be)."""
    if not sites:
        return Region([], {})
    if len({(s.rows, s.group_size, s.group_name) for s in sites}) != 1:
        raise RewriteError("sequence parallelism over sites of different groups or row counts")
    rows = sites[0].rows
    replication = Replication(gm, replicated_inputs)

    def same(node: fx.Node) -> bool:
        return replication.proven(node, sites[0].group_name)

    by_name = {n.name: n for n in gm.graph.nodes}
    waits = {by_name[s.wait]: s for s in sites}
    region: set[fx.Node] = set()
    folds: dict[fx.Node, SPSite] = {}
    folded_waits: set[fx.Node] = set()
    order = []
    for node in gm.graph.nodes:
        if node in waits:
            region.add(node)
            order.append(node)
            continue
        site = _fold(node, waits, region, same)
        if site is not None and by_name[site.wait] not in folded_waits:
            folds[node] = site
            folded_waits.add(by_name[site.wait])
            region.add(node)
            order.append(node)
            continue
        if _row_wise(node, region, rows, same):
            region.add(node)
            order.append(node)
    return Region(order, folds)


class _Writer:
    def __init__(self, gm: fx.GraphModule, sites: list[SPSite], region: Region):
        self.gm, self.region = gm, region
        self.graph = fx.Graph()
        self.env: dict[fx.Node, fx.Node] = {}  # original node -> its full value in the new graph
        self.shard: dict[fx.Node, fx.Node] = {}  # region node -> its block of rows in the new graph
        self.site = sites[0]
        by_name = {n.name: n for n in gm.graph.nodes}
        self.collectives = {by_name[s.collective] for s in sites}
        self.waits = {by_name[s.wait]: by_name[s.collective] for s in sites}
        self.folded = {by_name[s.wait] for s in region.folds.values()}
        self.in_region = set(region.nodes)
        self.builder = FakeNodeBuilder(self.graph, fake_mode_of(gm.graph.nodes))

    def add(self, target, args, name: str, kwargs=None) -> fx.Node:
        return self.builder.add(target, args, name, kwargs)

    def full(self, node: fx.Node) -> fx.Node:
        """``node``'s full value in the new graph: a region value all-gathered (once) where first read."""
        if node not in self.env:
            if node not in self.shard:
                raise RewriteError(f"{node.name} is read before it is written")
            s = self.site
            launch = self.add(_ALL_GATHER, (self.shard[node], s.group_size, s.group_name), f"{node.name}_sp_ag")
            self.env[node] = self.add(wait_op(), (launch,), f"{node.name}_sp_gathered")
        return self.env[node]

    def reduce_scatter(self, tensor: fx.Node, name: str) -> fx.Node:
        s = self.site
        launch = self.add(_REDUCE_SCATTER, (tensor, "sum", s.group_size, s.group_name), f"{name}_sp_rs")
        return self.add(wait_op(), (launch,), f"{name}_sp_rows")

    def write(self) -> fx.GraphModule:
        for node in self.gm.graph.nodes:
            if node in self.collectives:
                continue  # launched where its wait (or the residual add that folds it) was
            if node in self.waits and node not in self.folded:
                self.shard[node] = self.reduce_scatter(self.full(self.waits[node].args[0]), node.name)
            elif node in self.region.folds:
                self.shard[node] = self._fold(node)
            elif node in self.waits:
                continue  # folded into a residual add
            elif node in self.in_region:
                self.shard[node] = self._sharded_copy(node)
            else:
                self.env[node] = self.graph.node_copy(node, self.full)
        out = fx.GraphModule(self.gm, self.graph)
        out.meta.update(getattr(self.gm, "meta", {}))
        out.graph.lint()
        out.recompile()
        return out

    def _fold(self, node: fx.Node) -> fx.Node:
        wait = next(a for a in node.args if a in self.waits)
        other = next(a for a in node.args if a is not wait)
        t = self.full(self.waits[wait].args[0])
        scaled = self.add(_ATEN.mul.Tensor, (self.full(other), 1.0 / self.site.group_size), f"{node.name}_sp_share")
        summed = self.add(_ATEN.add.Tensor, (t, scaled), f"{node.name}_sp_sum")
        return self.reduce_scatter(summed, node.name)

    def _sharded_copy(self, node: fx.Node) -> fx.Node:
        def arg(a):
            return self.shard[a] if a in self.shard else self.full(a)

        args = fx.map_arg(node.args, arg)
        kwargs = fx.map_arg(node.kwargs, arg)
        return self.add(node.target, args, f"{node.name}_sp", dict(kwargs))


def apply_sequence_parallel(gm: fx.GraphModule, sites: list[SPSite],
                            replicated_inputs: str | Collection[str] = "all") -> fx.GraphModule:
    """A new module: ``gm`` with each of ``sites`` written sequence-parallel (see the module docstring);
    ``gm`` is not modified. Raises `RewriteError` for sites of different groups or row counts.
    ``replicated_inputs``: `row_region`'s."""
    if not sites:
        return fx.GraphModule(gm, copy_graph(gm.graph))
    region = row_region(gm, sites, replicated_inputs)
    return _Writer(gm, sites, region).write()
