"""Chunks carried through pointwise work, instead of joined and cut again.

A decomposed reduce_scatter arrives in chunks that are joined (``cat``); the join is read by pointwise work
(the residual add, RMSNorm) whose result is cut again (``slice``) into the next decomposed all_gather's
chunks. Written so, the next layer's first gather waits for the last scatter chunk and the whole norm.
Carried instead, chunk ``j`` of the gather's input is computed from chunk ``j`` of the scatter's result
alone, so one chunk's norm and gather run while the next chunk is still being reduced.

`carry_chunks` rewrites a graph in place. It takes every set of cuts ``slice(x, d, lo, hi)`` that splits ``x``
along ``d`` into equal chunks and walks up from ``x``:

* an op tagged pointwise, a dtype conversion, or a reduction over dimensions after ``d``, is
  written once per chunk on its operands' chunks (an operand broadcast along ``d`` is read whole);
* a join ``cat(pieces, d)`` whose pieces are the chunks gives them up as they are;
* anything else is cut by a view.

A value written per chunk that something still reads whole is joined from its chunks (one copy) rather
than computed again, so no op runs twice. A cut's contiguous copy (``clone``) is dropped where its chunk
is computed contiguous. Each output element is computed by the same op from the same elements.
"""

from __future__ import annotations

import torch
import torch.fx as fx

from solvercast.graph.fxmeta import bound_args, node_val, op_target
from solvercast.rewrites.fake_nodes import FakeNodeBuilder, fake_mode_of

__all__ = ["carry_chunks"]

_ATEN = torch.ops.aten
_SLICE = _ATEN.slice.Tensor
_CAT = _ATEN.cat.default
_REDUCTIONS = (_ATEN.mean.dim, _ATEN.sum.dim_IntList, _ATEN.amax.default, _ATEN.amin.default)

Range = tuple[int, int]


def _tensor(val) -> bool:
    return isinstance(val, torch.Tensor) and all(isinstance(s, int) for s in val.shape)


def _cut(node: fx.Node) -> tuple[fx.Node, int, Range] | None:
    """(x, d, (lo, hi)) when ``node`` is ``slice(x, d, lo, hi)`` with step 1 on a tensor of known shape."""
    if node.op != "call_function" or op_target(node.target) is not _SLICE or not isinstance(node.args[0], fx.Node):
        return None
    x = node_val(node.args[0])
    if not _tensor(x) or x.dim() == 0:
        return None
    args = bound_args(node, _SLICE)
    if args["step"] != 1 or not all(isinstance(args[k], (int, type(None))) for k in ("dim", "start", "end")):
        return None
    d = args["dim"] % x.dim()
    size = x.shape[d]
    lo, hi = (args["start"] or 0), (size if args["end"] is None else args["end"])
    lo, hi = (lo + size if lo < 0 else lo), (hi + size if hi < 0 else hi)
    return node.args[0], d, (max(0, min(lo, size)), max(0, min(hi, size)))


def _equal_partition(ranges: set[Range], size: int) -> bool:
    """Whether ``ranges`` cut ``[0, size)`` into at least two equal, adjacent chunks."""
    ordered = sorted(ranges)
    width = ordered[0][1] - ordered[0][0]
    return len(ordered) >= 2 and width > 0 and ordered[0][0] == 0 and ordered[-1][1] == size \
        and all(b - a == width for a, b in ordered) and all(p[1] == q[0] for p, q in zip(ordered, ordered[1:]))


class _Carrier:
    """Writes each op above a set of cuts once per chunk (`chunk`), then joins or erases the originals."""

    def __init__(self, graph: fx.Graph):
        self.graph = graph
        self.memo: dict[tuple[fx.Node, int, Range], fx.Node] = {}
        # (op, d, chunk width) -> its chunks: an op two partitions reach (a residual read by gathers split at two
        # degrees) is written for each, and each partition alone rebuilds it
        self.written: dict[tuple[fx.Node, int, int], dict[Range, fx.Node]] = {}
        self.joins: set[fx.Node] = set()  # joins whose pieces were taken as chunks

    def _builder(self, *nodes: fx.Node) -> FakeNodeBuilder:
        return FakeNodeBuilder(self.graph, fake_mode_of(nodes))

    def operand_dims(self, node: fx.Node, d: int) -> dict[int, int | None] | None:
        """For an op that may be written per chunk along ``d``: each tensor argument's position -> the
        dimension of it that follows ``d`` (None: read whole). None where the op cannot be chunked."""
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            return None
        target = node.target
        out = node_val(node)
        if not _tensor(out) or out.dim() <= d or torch.Tag.nondeterministic_seeded in target.tags:
            return None
        if target in _REDUCTIONS:
            args = bound_args(node, target)
            source = node_val(node.args[0])
            dims = args["dim"] if isinstance(args["dim"], (list, tuple)) else [args["dim"]]
            if not _tensor(source) or not dims or any(k % source.dim() <= d for k in dims):
                return None
            return {0: d}
        if torch.Tag.pointwise not in target.tags and not (target is _ATEN._to_copy.default
                                                            and set(node.kwargs) <= {"dtype"}):
            return None
        dims: dict[int, int | None] = {}
        for i, arg in enumerate(node.args):
            if isinstance(arg, fx.Node):
                val = node_val(arg)
                if not _tensor(val):
                    return None
                at = d - (out.dim() - val.dim())
                if at < 0 or val.shape[at] == 1:
                    dims[i] = None
                elif val.shape[at] == out.shape[d]:
                    dims[i] = at
                else:
                    return None
            elif isinstance(arg, (list, tuple)) and any(isinstance(a, fx.Node) for a in arg):
                return None
        if any(isinstance(v, fx.Node) for v in node.kwargs.values()):
            return None
        return dims if any(v is not None for v in dims.values()) else None

    def chunk(self, node: fx.Node, d: int, span: Range) -> fx.Node:
        """``node[..., lo:hi along d]`` computed as far up as the ops allow."""
        key = (node, d, span)
        if key in self.memo:
            return self.memo[key]
        lo, hi = span
        piece = self._piece(node, d, span)
        if piece is not None:
            new = piece
            self.joins.add(node)
        elif (dims := self.operand_dims(node, d)) is not None:
            args = tuple(self.chunk(a, dims[i], span) if dims.get(i) is not None else a for i, a in enumerate(node.args))
            with self.graph.inserting_after(node):
                new = self._builder(node, *[a for a in args if isinstance(a, fx.Node)]).add(
                    node.target, args, f"{node.name}_chunk", dict(node.kwargs))
            self.written.setdefault((node, d, hi - lo), {})[span] = new
        else:
            with self.graph.inserting_after(node):
                new = self._builder(node).add(_SLICE, (node, d, lo, hi), f"{node.name}_cut")
        self.memo[key] = new
        return new

    @staticmethod
    def _piece(node: fx.Node, d: int, span: Range) -> fx.Node | None:
        """The piece of a join along ``d`` that is exactly ``span``, else None."""
        if node.op != "call_function" or op_target(node.target) is not _CAT:
            return None
        val = node_val(node)
        if bound_args(node, _CAT)["dim"] % val.dim() != d:
            return None
        at = 0
        for piece in node.args[0]:
            width = node_val(piece).shape[d]
            if (at, at + width) == span:
                return piece
            at += width
        return None

    def finish(self) -> None:
        """Each op written per chunk: joined from its chunks where still read whole, else erased; so are the
        joins whose pieces now stand for them."""
        order = {n: i for i, n in enumerate(self.graph.nodes)}
        done: set[fx.Node] = set()
        for (node, d, _), chunks in sorted(self.written.items(), key=lambda item: -order[item[0][0]]):
            if node in done:  # written for two partitions: its whole readers already read one's join
                continue
            done.add(node)
            if node.users:
                parts = [chunks[s] for s in sorted(chunks)]
                last = max(parts, key=lambda p: order.get(p, -1))
                with self.graph.inserting_after(last):
                    joined = self._builder(*parts).add(_CAT, (parts, d), f"{node.name}_joined")
                node.replace_all_uses_with(joined)
            self.graph.erase_node(node)
        for join in self.joins:  # a join nothing reads whole any more
            if not join.users:
                self.graph.erase_node(join)


def carry_chunks(graph: fx.Graph) -> int:
    """Carry chunks through the pointwise work above every equal partition of cuts in ``graph`` (see the
    module docstring). Returns how many ops were written per chunk (an op two partitions reach counts twice)."""
    cuts: dict[tuple[fx.Node, int], list[tuple[fx.Node, Range]]] = {}
    for node in graph.nodes:
        found = _cut(node)
        if found is not None:
            x, d, span = found
            cuts.setdefault((x, d), []).append((node, span))
    carrier = _Carrier(graph)
    for (x, d), slices in cuts.items():
        if (carrier.operand_dims(x, d) is None and _Carrier._piece(x, d, slices[0][1]) is None) \
                or not _equal_partition({s for _, s in slices}, node_val(x).shape[d]):
            continue
        for node, span in slices:
            new = carrier.chunk(x, d, span)
            node.replace_all_uses_with(new)
            graph.erase_node(node)
            for user in list(new.users):  # a cut's contiguous copy, where the chunk is computed contiguous
                if op_target(user.target) is _ATEN.clone.default and user.args[0] is new \
                        and node_val(new).is_contiguous() and new.target is not _SLICE:
                    user.replace_all_uses_with(new)
                    graph.erase_node(user)
    written = len(carrier.written)
    carrier.finish()
    return written
