"""Collective-matmul decomposition: an all_gather feeding matmuls, or a matmul feeding a reduce_scatter or
all_reduce, split into ``k`` chunks, so that one chunk's communication can run beside another chunk's matmul.

A tensor-parallel chain (all_gather -> matmul, matmul -> reduce_scatter) leaves nothing to run beside its
collectives, so reordering gains nothing there; chunking does, at the price of ``k`` launches (each pays
the collective's fixed cost), smaller matmuls (below the GPU's peak) and a copy to put the chunks' rows
back in order. Whether that pays depends on shapes and on the schedule, so the degree is a decision the
pipeline takes with the order (`solvercast.pipeline.decompose`); this module knows where it may be taken
and how it is written:

* `matmul_sites`: the sites and the degrees each allows.

  - ``all_gather_matmul``: a functional all_gather of a contiguous input ``x`` (``R`` rows of ``K``, the
    last dimension ``K``) with one wait, whose gathered value reaches one or more ``mm(A, W)`` /
    ``addmm(b, A, W)`` as ``A`` through views only (``view``, ``reshape``, ``_unsafe_view``: the gathered
    buffer is contiguous, rank-major, so ``A`` is it read as ``(ranks * R, K)`` rows). Written with
    degree ``k``: ``x``'s rows cut into ``k`` contiguous chunks, each gathered on its own; each matmul
    run per chunk and the chunks' rows stacked back into rank-major order (``stack(dim=1)``: one copy);
    readers of the gathered value other than those matmuls read it rebuilt the same way. DTensor's
    sequence gather at batch ``B`` > 1 (the gathered ``(ranks * B, S, K)`` split into the ranks' blocks
    and concatenated along the sequence: rows read ``(batch, rank, position)``) is split by batch entries
    instead, each chunk gathered and rearranged as the graph does, its rows one block of the matmul's;
    at degrees the batch does not allow, by ranges of positions across every batch entry (each range copied
    contiguous before its gather, the products stacked back: only where no matmul sums over the rows).
    An addmm's bias must be shared by every row.
  - ``matmul_reduce_scatter``: ``mm(a, W)`` / ``addmm(b, a, W)`` (``M x N``) whose only reader leads to a
    functional reduce_scatter with one wait through nodes that leave the columns alone (views ending in
    ``N``; a split along another dimension whose pieces are concatenated in order along another one).
    Written with degree ``k``: ``W``'s columns cut into ``k`` slices, each product laid out by the same
    chain again and reduce-scattered on its own, the results concatenated along the columns. Where the
    chain re-reads the product in its own flat order with whole rows per rank ("flat": views, DTensor's
    split/cat at batch 1) it is left out.
    DTensor's sequence scatter at batch ``B`` > 1 (the product viewed ``(B, S, N)``, split along the sequence,
    concatenated on dim 0: each rank receives its positions of every batch entry) is split by the result's
    rows instead: whole batch entries, or ranges of each rank's positions across every entry (the gather's
    chunks), each chunk the matmul's input rows that reach it, ordered (rank, batch, position) (one copy of
    ``1/k`` of the input), multiplied and scattered on its own ("batch_major").
  - ``matmul_all_reduce``: the same with an all_reduce (a plain tensor-parallel block's row-parallel
    matmul): each column slice's product all-reduced on its own, the results concatenated.

* `apply_decomposition`: a new module with each site of a plan written at its degree, then chunks carried
  through the pointwise work between a split's joined result and the next split's cuts
  (`solvercast.rewrites.chunk_flow`); ``gm`` is not modified. Collectives keep their group, size and reduce
  op: every rank builds the same chunks.

Numerics: each output element is the same dot product over the same ranks' data, but a matmul of other
sizes may block its sums differently and a transport may sum a chunk in another order, so the results
are close to the original, not bitwise (`DecomposeOptions` turns the rewrite off).
"""

from __future__ import annotations

import operator
from collections import defaultdict
from dataclasses import dataclass

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensor

from solvercast.errors import RewriteError
from solvercast.graph.collectives import collective_kind_and_group, wait_op
from solvercast.graph.fxmeta import bound_args, node_val, op_target
from solvercast.rewrites.chunk_flow import carry_chunks
from solvercast.rewrites.fake_nodes import FakeNodeBuilder, copy_graph, fake_mode_of

__all__ = ["DECOMPOSE_KINDS", "DEGREES", "DecomposeOptions", "MatmulSite", "DecomposePlan", "matmul_sites",
           "apply_decomposition"]

_C10D = torch.ops._c10d_functional
_ATEN = torch.ops.aten
_ALL_GATHER = _C10D.all_gather_into_tensor.default
_REDUCE_SCATTER = _C10D.reduce_scatter_tensor.default
_ALL_REDUCE = _C10D.all_reduce.default
#: the reducing collective each matmul -> collective kind ends in
_REDUCING = {"matmul_reduce_scatter": _REDUCE_SCATTER, "matmul_all_reduce": _ALL_REDUCE}
#: ops that read a contiguous tensor's buffer in the same flat order
_VIEWS = (_ATEN.view.default, _ATEN.reshape.default, _ATEN._unsafe_view.default)
_MATMULS = (_ATEN.mm.default, _ATEN.addmm.default)
DECOMPOSE_KINDS = ("all_gather_matmul", "matmul_reduce_scatter", "matmul_all_reduce")
#: the degrees a site may be split into (1: as is)
DEGREES = (2, 4, 8)


@dataclass(frozen=True)
class DecomposeOptions:
    """Which sites the optimizer may decompose (``kinds``), into how many chunks at most, and whether a plain
    tensor-parallel graph's all_reduces may be written sequence-parallel first."""

    kinds: tuple[str, ...] = DECOMPOSE_KINDS
    max_degree: int = max(DEGREES)
    #: whether all_reduces may first be written sequence-parallel (`solvercast.rewrites.sequence_parallel`)
    sequence_parallel: bool = True
    #: the graph inputs sequence parallelism may take to be the same on every rank of an all_reduce's group
    #: (where the region reads them: a residual, a norm's weight): "all" (the tensor-parallel contract) or
    #: their names (`solvercast.graph.replication`); values computed in the graph are proven, never assumed
    replicated_inputs: str | tuple[str, ...] = "all"
    #: the fraction of the heuristics' step a plan must save to be taken: its results are close, not bitwise,
    #: and the judge is the heuristics, so a step a hair shorter is no reason to change them
    min_gain: float = 0.01

    def __post_init__(self):
        unknown = [k for k in self.kinds if k not in DECOMPOSE_KINDS]
        if unknown:
            raise ValueError(f"decomposition has no kind {unknown}; it knows {list(DECOMPOSE_KINDS)}")
        if not 0.0 <= self.min_gain < 1.0:
            raise ValueError(f"min_gain must be in [0, 1), got {self.min_gain}")
        if self.max_degree < 1:
            raise ValueError(f"max_degree must be at least 1, got {self.max_degree}")
        if isinstance(self.replicated_inputs, str) and self.replicated_inputs != "all":
            raise ValueError(f"replicated_inputs must be 'all' or a tuple of input names, "
                             f"got {self.replicated_inputs!r}")


@dataclass(frozen=True)
class MatmulSite:
    """One collective-matmul pair that may be decomposed."""

    collective: str  # the all_gather's or reduce_scatter's node name
    wait: str  # its wait's name
    kind: str  # one of DECOMPOSE_KINDS
    matmuls: tuple[str, ...]  # the matmuls it feeds (all_gather) or the one it reduces
    chain: tuple[str, ...]  # a reducing site: the layout-keeping nodes from the matmul to the collective
    degrees: tuple[int, ...]  # the degrees (> 1) its sizes allow
    # (kind, sizes, dtype, group): sites of one signature are alike (a model's layers) and decided together
    signature: tuple
    comm_bytes: int  # this rank's input to the collective
    # all_gather: how the gathered rows are read: "rank_major" (the buffer as it is) or "batch_major" (DTensor's
    # sequence gather at batch > 1: split into ranks' blocks, concatenated along the sequence); reducing:
    # "flat" (the chain re-reads the product in its own order), "columns" (the chain replayed per slice) or
    # "batch_major" (DTensor's sequence scatter at batch > 1: split by the result's rows)
    layout: str = "rank_major"


@dataclass(frozen=True)
class DecomposePlan:
    """Each decomposed site's collective name -> its degree (> 1). Sites not named stay as they are."""

    degrees: tuple[tuple[str, int], ...] = ()

    @classmethod
    def of(cls, degrees: dict[str, int]) -> "DecomposePlan":
        return cls(tuple(sorted((n, d) for n, d in degrees.items() if d > 1)))

    @classmethod
    def applicable(cls, degrees: dict[str, int], sites: dict[str, "MatmulSite"]) -> "DecomposePlan":
        """The plan of ``degrees`` (site -> degree, in order of preference) that `apply_decomposition` takes: a
        matmul is split by one site at most (an all_gather's consumer may be a reduce_scatter's producer), so a
        site whose matmul an earlier one splits stays whole."""
        taken: set[str] = set()
        kept = {}
        for name, degree in degrees.items():
            if degree > 1 and not taken.intersection(sites[name].matmuls):
                taken.update(sites[name].matmuls)
                kept[name] = degree
        return cls.of(kept)

    def describe(self, sites: dict[str, MatmulSite]) -> str:
        """One line: per kind and degree, how many sites."""
        if not self.degrees:
            return "no decomposition"
        count: dict[tuple[str, int], int] = defaultdict(int)
        for name, degree in self.degrees:
            count[(sites[name].kind, degree)] += 1
        return "; ".join(f"{kind} x{degree}: {n} site{'s' if n > 1 else ''}"
                         for (kind, degree), n in sorted(count.items()))


def _concrete(val) -> bool:
    return isinstance(val, torch.Tensor) and val.dim() > 0 and all(isinstance(d, int) for d in val.shape)


def _one_fake_mode(nodes) -> bool:
    """Whether the values of ``nodes`` that are fake tensors share one fake mode: a split's new values are
    made in that mode, and values of two modes cannot meet in one op."""
    modes = {id(v.fake_mode) for v in (node_val(n) for n in nodes if isinstance(n, fx.Node)) if isinstance(v, FakeTensor)}
    return len(modes) <= 1


def _allowed(n: int, options: DecomposeOptions) -> tuple[int, ...]:
    return tuple(d for d in DEGREES if d <= min(options.max_degree, n) and n % d == 0)


def _row_broadcast_bias(bias) -> bool:
    """An addmm's bias that every row shares (a vector, or one row): a chunk of rows takes it as it is."""
    val = node_val(bias) if isinstance(bias, fx.Node) else bias
    return not isinstance(val, torch.Tensor) or val.dim() < 2 or val.shape[0] == 1


def _transposed(node: fx.Node) -> bool:
    """``node`` is a 2-D transpose (``permute(x, [1, 0])``, ``t``, ``transpose(x, 0, 1)``)."""
    target = op_target(node.target) if node.op == "call_function" else None
    if target is _ATEN.permute.default:
        return list(node.args[1]) == [1, 0]
    if target is _ATEN.t.default:
        return True
    return target is _ATEN.transpose.int and sorted(a % 2 for a in node.args[1:3]) == [0, 1]


def _view_closure(root: fx.Node, rows: int | None = None):
    """The nodes that read ``root``'s buffer through views only (``root`` first); the (matmul, operand) pairs
    among their readers (the operand read as the rows ``A``); with ``rows``, the matmuls that reduce over
    those rows (a weight's gradient: ``mm(t(Y), A)`` or ``mm(t(A), Z)`` with ``Y``, ``Z`` of ``rows`` rows), as
    (matmul, "t_other" | "t_rows", the other operand, the transpose); and whether anything else reads them."""
    nodes, matmuls, reducers, other = [root], [], [], False
    i = 0
    while i < len(nodes):
        node = nodes[i]
        i += 1
        for user in node.users:
            target = op_target(user.target) if user.op == "call_function" else None
            if target in _VIEWS and user.args[0] is node:
                nodes.append(user)
            elif target is _ATEN.mm.default and user.args[0] is node and user.args[1] is not node:
                matmuls.append((user, node))
            elif target is _ATEN.addmm.default and user.args[1] is node and node not in (user.args[0], user.args[2]) \
                    and _row_broadcast_bias(user.args[0]):
                matmuls.append((user, node))
            elif rows is not None and _reduces_rows(user, node, rows, reducers):
                pass
            else:
                other = True
    inside = set(nodes)
    if any(r[2] in inside for r in reducers):  # a product of the gathered value with itself: read whole
        other = True
        reducers = [r for r in reducers if r[2] not in inside]
    return nodes, matmuls, reducers, other


def _reduces_rows(user: fx.Node, node: fx.Node, rows: int, reducers: list) -> bool:
    """Whether ``user`` reads ``node`` (``rows`` x K) only as a matmul reducing over its rows; appends to
    ``reducers``."""
    def two_d_rows(n) -> bool:
        v = node_val(n) if isinstance(n, fx.Node) else None
        return _concrete(v) and v.dim() == 2 and v.shape[0] == rows

    if not two_d_rows(node):
        return False
    target = op_target(user.target) if user.op == "call_function" else None
    if target is _ATEN.mm.default and user.args[1] is node and isinstance(user.args[0], fx.Node) \
            and _transposed(user.args[0]) and two_d_rows(user.args[0].args[0]) and user.args[0].args[0] is not node:
        reducers.append((user, "t_other", user.args[0].args[0], user.args[0]))
        return True
    if _transposed(user) and user.args[0] is node and user.users and all(
            op_target(m.target) is _ATEN.mm.default and m.args[0] is user and two_d_rows(m.args[1])
            and m.args[1] is not node for m in user.users):
        for m in user.users:
            reducers.append((m, "t_rows", m.args[1], user))
        return True
    return False


def _all_gather_site(node: fx.Node, options: DecomposeOptions) -> MatmulSite | None:
    users = list(node.users)
    if node.kwargs or len(users) != 1 or op_target(users[0].target) is not wait_op():
        return None
    x = node_val(node.args[0])
    if not _concrete(x) or not x.is_contiguous():
        return None
    _, group_size, _ = collective_kind_and_group(node)
    k_dim = x.shape[-1]
    rows = x.numel() // k_dim if k_dim else 0
    batch_major = _sequence_gather(users[0], x, group_size)
    layout = "rank_major" if batch_major is None else "batch_major"
    _, matmuls, reducers, _ = _view_closure(users[0] if batch_major is None else batch_major[-1],
                                            None if batch_major is None else group_size * rows)
    if not rows or not (matmuls or reducers):
        return None
    for mm, operand in matmuls:
        a = node_val(operand)
        if not _concrete(a) or tuple(a.shape) != (group_size * rows, k_dim):
            return None  # the gathered rows are read in another layout: not provably chunkable
    # rank-major: any chunk of the local rows; batch-major: whole batch entries, so that each chunk's rows
    # are one block of the matmul's rows, or (where no matmul sums over the rows) ranges of positions
    if batch_major is None:
        degrees = _allowed(rows, options)
    else:
        degrees = tuple(sorted(set(_allowed(x.shape[0], options)) | set(() if reducers else _allowed(x.shape[1], options))))
    if not degrees or not _one_fake_mode([node.args[0]] + [a for mm, _ in matmuls for a in mm.args]
                                         + [r[2] for r in reducers]):
        return None
    args = bound_args(node, _ALL_GATHER)
    outs = tuple(tuple(node_val(mm).shape) for mm, _ in matmuls) + tuple(tuple(node_val(m).shape) for m, *_ in reducers)
    signature = ("all_gather_matmul", layout, tuple(x.shape), outs, x.dtype, str(args["group_name"]), group_size)
    chain = () if batch_major is None else tuple(n.name for n in batch_major)
    names = tuple(mm.name for mm, _ in matmuls) + tuple(m.name for m, *_ in reducers)
    return MatmulSite(node.name, users[0].name, "all_gather_matmul", names, chain,
                      degrees, signature, x.numel() * x.element_size(), layout)


def _dim(node: fx.Node) -> int:
    """The ``dim`` argument of a split or cat node (its default where the node leaves it out)."""
    return bound_args(node, op_target(node.target))["dim"]


def _split_pieces(cat: fx.Node) -> tuple[fx.Node, list[fx.Node]] | None:
    """(split, pieces) when ``cat`` concatenates, in order, every piece of one ``split`` and nothing else, each
    piece read only by ``cat``; else None."""
    if op_target(cat.target) is not _ATEN.cat.default:
        return None
    pieces = list(cat.args[0])
    first = pieces[0] if pieces and isinstance(pieces[0], fx.Node) else None
    split = first.args[0] if first is not None and first.target is operator.getitem else None
    if split is None or op_target(split.target) is not _ATEN.split.Tensor \
            or [p.args for p in pieces] != [(split, i) for i in range(len(pieces))] \
            or len(split.users) != len(pieces) or any(len(p.users) != 1 for p in pieces):
        return None
    return split, pieces


def _sequence_gather(wait: fx.Node, x, group_size: int) -> list[fx.Node] | None:
    """DTensor's gather along the sequence at batch > 1: the gathered ``(ranks * B, S, K)`` buffer split into
    the ranks' ``(B, S, K)`` blocks (dim 0) and concatenated along dim 1 into ``(B, ranks * S, K)``, whose
    rows read ``(batch, rank, position)``. Returns [split, its pieces..., cat] when ``wait``'s only reader is
    such a split, its pieces read only by the cat, in order; else None."""
    users = list(wait.users)
    if x.dim() != 3 or len(users) != 1 or op_target(users[0].target) is not _ATEN.split.Tensor:
        return None
    split = users[0]
    pieces = list(split.users)
    if split.args[1] != x.shape[0] or _dim(split) != 0 or len(pieces) != group_size or len(pieces[0].users) != 1:
        return None
    cat = next(iter(pieces[0].users))
    found = _split_pieces(cat)
    if found is None or found[0] is not split or _dim(cat) % 3 != 1:
        return None
    return [split, *found[1], cat]


def _column_chain(tensor: fx.Node) -> tuple[fx.Node, list[fx.Node]] | None:
    """Walking back from the reduce_scatter's or all_reduce's input: (the matmul it reads, the nodes between,
    matmul side first) when each step leaves the last dimension (the matmul's columns) alone, so that it can
    be replayed on a slice of the columns: views whose shapes end in that dimension, and a split along
    another dimension whose pieces, in order, are concatenated along another dimension; each node read only
    by the next. Else None."""
    cols = node_val(tensor).shape[-1] if _concrete(node_val(tensor)) else None
    chain: list[fx.Node] = []
    node = tensor
    while True:
        target = op_target(node.target) if node.op == "call_function" else None
        val = node_val(node)
        if len(node.users) != 1 or not _concrete(val) or val.shape[-1] != cols:
            return None
        if target in _MATMULS:
            return node, chain[::-1]
        if target in _VIEWS:
            shape = node.args[1]
            if not isinstance(shape, (list, tuple)) or not shape or shape[-1] != cols:
                return None
            chain.append(node)
            node = node.args[0]
            continue
        if target is _ATEN.cat.default:
            found = _split_pieces(node)
            if found is None or _dim(node) % val.dim() == val.dim() - 1:
                return None
            split, pieces = found
            source = node_val(split.args[0])
            if not _concrete(source) or _dim(split) % source.dim() == source.dim() - 1:
                return None
            chain.extend([node, *pieces, split])
            node = split.args[0]
            continue
        return None


def _keeps_flat_layout(chain: list[fx.Node]) -> bool:
    """Whether a column chain reads the product's buffer in its own flat order: views of contiguous values,
    and splits after leading dimensions of size 1 whose pieces are concatenated on dim 0."""
    for node in chain:
        target = op_target(node.target) if node.op == "call_function" else None
        if target is _ATEN.split.Tensor:
            source = node_val(node.args[0])
            dim = _dim(node) % source.dim()
            if not source.is_contiguous() or any(d != 1 for d in source.shape[:dim]):
                return False
        elif target is _ATEN.cat.default:
            if _dim(node) != 0:
                return False
        elif target in _VIEWS:
            if not node_val(node.args[0]).is_contiguous():
                return False
    return True


def _waited_once(node: fx.Node) -> fx.Node | None:
    """A collective's one wait, when its other readers (if any) are the graph's output: a forward returns a
    collective's value for its backward, which reads it after the wait, so the rewritten value can stand in."""
    waits = [u for u in node.users if u.op == "call_function" and op_target(u.target) is wait_op()]
    if node.kwargs or len(waits) != 1 or any(u.op != "output" for u in node.users if u is not waits[0]):
        return None
    return waits[0]


def _reducing_site(node: fx.Node, kind: str, options: DecomposeOptions) -> MatmulSite | None:
    """A matmul -> reduce_scatter or matmul -> all_reduce site at collective ``node``, or None."""
    wait = _waited_once(node)
    if wait is None or not isinstance(node.args[0], fx.Node):
        return None
    found = _column_chain(node.args[0])
    if found is None:
        return None
    mm, chain = found
    y = node_val(mm)
    t = node_val(node.args[0])
    _, group_size, _ = collective_kind_and_group(node)
    if not _concrete(y) or not _concrete(t) or y.dim() != 2 or y.numel() != t.numel():
        return None
    weight = node_val(mm.args[1] if op_target(mm.target) is _ATEN.mm.default else mm.args[2])
    if not _concrete(weight) or weight.dim() != 2:
        return None
    if op_target(mm.target) is _ATEN.addmm.default:
        bias = node_val(mm.args[0])
        if not _concrete(bias) or bias.dim() not in (1, 2) or bias.shape[-1] != y.shape[1]:
            return None
    degrees = _allowed(y.shape[1], options)
    if not degrees or not _one_fake_mode(list(mm.args) + [node.args[0]]):
        return None
    args = bound_args(node, _REDUCING[kind])
    # "flat": the chain only re-reads the product's buffer in its own order, each rank's block whole rows, so a
    # column slice's product can be reduced as it is
    flat = _keeps_flat_layout(chain) and (kind == "matmul_all_reduce" or y.shape[0] % group_size == 0)
    layout = "flat" if flat else "columns"
    sequence = _sequence_scatter(chain, group_size) if kind == "matmul_reduce_scatter" else None
    if not flat and sequence is not None and (op_target(mm.target) is _ATEN.mm.default
                                              or _row_broadcast_bias(mm.args[0])):
        batch, local = sequence
        layout, degrees = "batch_major", tuple(sorted(set(_allowed(batch, options)) | set(_allowed(local, options))))
    signature = (kind, tuple(y.shape), tuple(weight.shape), y.dtype, str(args["reduce_op"]),
                 str(args["group_name"]), group_size)
    return MatmulSite(node.name, wait.name, kind, (mm.name,), tuple(n.name for n in chain),
                      degrees, signature, t.numel() * t.element_size(), layout)


def _sequence_scatter(chain: list[fx.Node], group_size: int) -> tuple[int, int] | None:
    """DTensor's scatter along the sequence at batch > 1: the product's rows viewed ``(B, S, N)``, split along
    the sequence into the ranks' ``(B, S / ranks, N)`` blocks and concatenated along dim 0, so that each rank
    receives its positions of every batch entry. Returns (B, S / ranks), else None."""
    if len(chain) != group_size + 3:
        return None
    view, split, cat = chain[0], chain[1], chain[-1]
    val = node_val(view)
    if op_target(view.target) not in _VIEWS or op_target(split.target) is not _ATEN.split.Tensor \
            or op_target(cat.target) is not _ATEN.cat.default or split.args[0] is not view \
            or val.dim() != 3 or val.shape[0] < 2:
        return None
    batch, seq, _ = val.shape
    if _dim(split) % 3 != 1 or split.args[1] * group_size != seq or _dim(cat) % 3 != 0:
        return None
    return batch, seq // group_size


def matmul_sites(gm: fx.GraphModule, options: DecomposeOptions = DecomposeOptions()) -> list[MatmulSite]:
    """The sites of ``gm`` that may be decomposed, in graph order (see the module docstring)."""
    sites = []
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        target = op_target(node.target)
        site = None
        if target is _ALL_GATHER and "all_gather_matmul" in options.kinds:
            site = _all_gather_site(node, options)
        elif target is _REDUCE_SCATTER and "matmul_reduce_scatter" in options.kinds:
            site = _reducing_site(node, "matmul_reduce_scatter", options)
        elif target is _ALL_REDUCE and "matmul_all_reduce" in options.kinds:
            site = _reducing_site(node, "matmul_all_reduce", options)
        if site is not None:
            sites.append(site)
    return sites


def _erase_unread(graph: fx.Graph, nodes) -> None:
    """Erase ``nodes`` (any order) as they become unread."""
    left = list(nodes)
    while left:
        unread = [n for n in left if not n.users]
        if not unread:
            raise RewriteError(f"nodes still read after the rewrite: {[n.name for n in left]}")
        for n in unread:
            graph.erase_node(n)
            left.remove(n)


def _write_sequence_gather(gm: fx.GraphModule, site: MatmulSite, k: int) -> None:
    """A batch-major site in ``k`` chunks, each gathered on its own and rearranged as the graph does (split
    into the ranks' blocks, concatenated along the sequence), the matmuls run per chunk:

    * where ``k`` divides the batch, whole batch entries: each chunk's rows are one block of the matmuls'
      rows (outputs joined by one cat along the rows), and matmuls that sum over the rows take each chunk
      against the same block of their other operand, the partial products summed;
    * else ranges of the local positions across every batch entry: chunk ``p`` is ``x[:, p]`` made
      contiguous (a copy of ``1/k`` of the input), its rows ``(batch, rank, i)``; the products are stacked
      back into ``(batch, rank, p, i)`` order (one copy, as rank-major chunks are). Only where no matmul
      sums over the rows (`_all_gather_site`)."""
    graph = gm.graph
    by_name = {n.name: n for n in graph.nodes}
    ag, wait = by_name[site.collective], by_name[site.wait]
    split, *pieces, cat = [by_name[n] for n in site.chain]
    x = ag.args[0]
    batch, seq, k_dim = node_val(x).shape
    size, group = ag.args[1], ag.args[2]
    by_batch = batch % k == 0
    entries, step = (batch // k, seq) if by_batch else (batch, seq // k)  # each chunk's batch entries, positions
    b = FakeNodeBuilder(graph, fake_mode_of([x]))
    tag = f"{site.collective}_x{k}"
    with graph.inserting_before(ag):
        if by_batch:
            inputs = [b.add(_ATEN.slice.Tensor, (x, 0, j * entries, (j + 1) * entries), f"{tag}_in") for j in range(k)]
        else:
            inputs = [b.add(_ATEN.clone.default, (b.add(_ATEN.slice.Tensor, (x, 1, j * step, (j + 1) * step), f"{tag}_in"),),
                            f"{tag}_contiguous", {"memory_format": torch.contiguous_format}) for j in range(k)]
        launches = [b.add(_ALL_GATHER, (chunk, size, group), f"{tag}_ag") for chunk in inputs]
    with graph.inserting_before(wait):
        chunks = []  # each (entries, ranks * step, K)
        for launch in launches:
            done = b.add(wait_op(), (launch,), f"{tag}_wait")
            parts = b.add(_ATEN.split.Tensor, (done, entries), f"{tag}_split")
            items = [b.add(operator.getitem, (parts, r), f"{tag}_piece") for r in range(size)]
            chunks.append(b.add(_ATEN.cat.default, (items, 1), f"{tag}_seq"))
        rows = [b.add(_ATEN.view.default, (c, [entries * size * step, k_dim]), f"{tag}_rows") for c in chunks]
    closure, matmuls, reducers, other = _view_closure(cat, batch * size * seq)
    if reducers and not by_batch:
        raise RewriteError(f"site {site.collective!r}: a matmul sums over its rows; position chunks cannot take it")

    def joined(parts: list[fx.Node], like: fx.Node, name: str) -> fx.Node:
        """Per-chunk values put back in the order of ``like``'s rows (batch, rank, position), as node ``name``."""
        if by_batch:
            return b.add(_ATEN.cat.default, (parts, 0), name)
        cols = node_val(like).shape[-1]
        views = [b.add(_ATEN.view.default, (v, [batch, size, step, cols]), f"{name}_rows") for v in parts]
        stacked = b.add(_ATEN.stack.default, (views, 2), f"{name}_stack")
        return b.add(_ATEN.view.default, (stacked, list(node_val(like).shape)), name)

    for mm, _ in matmuls:
        with graph.inserting_before(mm):
            parts = [b.add(op_target(mm.target), (chunk, mm.args[1]) if op_target(mm.target) is _ATEN.mm.default
                           else (mm.args[0], chunk, mm.args[2]), f"{mm.name}_part", dict(mm.kwargs)) for chunk in rows]
            out = joined(parts, mm, f"{mm.name}_out")
        mm.replace_all_uses_with(out)
        graph.erase_node(mm)
    block = entries * size * seq  # each chunk's rows: one block of the full rows (by batch entries)
    transposes = set()
    for mm, how, other_operand, transpose in reducers:  # sums over the rows: one partial product per chunk
        with graph.inserting_before(mm):
            total = None
            for j, chunk in enumerate(rows):
                piece = b.add(_ATEN.slice.Tensor, (other_operand, 0, j * block, (j + 1) * block), f"{mm.name}_rows")
                if how == "t_other":
                    args = (b.add(_ATEN.permute.default, (piece, [1, 0]), f"{mm.name}_t"), chunk)
                else:
                    args = (b.add(_ATEN.permute.default, (chunk, [1, 0]), f"{mm.name}_t"), piece)
                part = b.add(_ATEN.mm.default, args, f"{mm.name}_part")
                total = part if total is None else b.add(_ATEN.add.Tensor, (total, part), f"{mm.name}_sum")
        mm.replace_all_uses_with(total)
        graph.erase_node(mm)
        transposes.add(transpose)
    for transpose in transposes:  # the transposes only the replaced matmuls read
        if not transpose.users:
            graph.erase_node(transpose)
    if other:  # the rearranged gathered value rebuilt for its other readers
        with graph.inserting_before(cat):
            rebuilt = joined(chunks, cat, f"{tag}_gathered")
        cat.replace_all_uses_with(rebuilt)
    for node in reversed(closure[1:]):
        if not node.users:
            graph.erase_node(node)
    _erase_unread(graph, [cat, *pieces, split, wait, ag])


def _write_all_gather(gm: fx.GraphModule, site: MatmulSite, k: int) -> None:
    if site.layout == "batch_major":
        _write_sequence_gather(gm, site, k)
        return
    graph = gm.graph
    by_name = {n.name: n for n in graph.nodes}
    ag, wait = by_name[site.collective], by_name[site.wait]
    x = ag.args[0]
    x_val = node_val(x)
    size, group = ag.args[1], ag.args[2]
    k_dim = x_val.shape[-1]
    rows = x_val.numel() // k_dim
    step = rows // k
    b = FakeNodeBuilder(graph, fake_mode_of([x]))
    tag = f"{site.collective}_x{k}"
    with graph.inserting_before(ag):
        flat = b.add(_ATEN.view.default, (x, [rows, k_dim]), f"{tag}_rows")
        launches = [b.add(_ALL_GATHER, (b.add(_ATEN.slice.Tensor, (flat, 0, j * step, (j + 1) * step), f"{tag}_in"),
                                        size, group), f"{tag}_ag") for j in range(k)]
    with graph.inserting_before(wait):
        waits = [b.add(wait_op(), (launch,), f"{tag}_wait") for launch in launches]
    closure, matmuls, _, other = _view_closure(wait)
    for mm, _ in matmuls:
        out_cols = node_val(mm).shape[1]
        with graph.inserting_before(mm):
            parts = []
            for j, chunk in enumerate(waits):
                args = (chunk, mm.args[1]) if op_target(mm.target) is _ATEN.mm.default else \
                    (mm.args[0], chunk, mm.args[2])
                part = b.add(op_target(mm.target), args, f"{mm.name}_part", dict(mm.kwargs))
                parts.append(b.add(_ATEN.view.default, (part, [size, step, out_cols]), f"{mm.name}_rows"))
            stacked = b.add(_ATEN.stack.default, (parts, 1), f"{mm.name}_stack")
            out = b.add(_ATEN.view.default, (stacked, list(node_val(mm).shape)), f"{mm.name}_out")
        mm.replace_all_uses_with(out)
        graph.erase_node(mm)
    if other:  # the gathered value rebuilt in rank-major order for its other readers
        with graph.inserting_before(wait):
            parts = [b.add(_ATEN.view.default, (w, [size, step, k_dim]), f"{tag}_rows_out") for w in waits]
            stacked = b.add(_ATEN.stack.default, (parts, 1), f"{tag}_stack")
            gathered = b.add(_ATEN.view.default, (stacked, list(node_val(wait).shape)), f"{tag}_gathered")
        wait.replace_all_uses_with(gathered)
    for node in reversed(closure[1:]):  # views only the replaced matmuls read
        if not node.users:
            graph.erase_node(node)
    _erase_unread(graph, [wait, ag])


def _stand_in(collective: fx.Node, wait: fx.Node, joined: fx.Node) -> None:
    """The joined chunks read wherever the collective's wait was, and by the graph's output where it read the
    collective itself (`_waited_once`)."""
    wait.replace_all_uses_with(joined)
    for user in list(collective.users):
        if user.op == "output":
            user.replace_input_with(collective, joined)


def _write_sequence_scatter(gm: fx.GraphModule, site: MatmulSite, k: int) -> None:
    """A batch-major reduce_scatter site (`_sequence_scatter`) in ``k`` chunks of its result's rows: whole batch
    entries where ``k`` divides the batch, else ranges of each rank's positions across every batch entry. Chunk
    ``j`` takes the matmul's input rows that reach it, ordered (rank, batch, position) as the scatter wants them
    (one copy of ``1/k`` of the input), multiplies and scatters them on its own; the results are joined along
    the batch or the positions, where `solvercast.rewrites.chunk_flow` can carry them on as chunks."""
    graph = gm.graph
    by_name = {n.name: n for n in graph.nodes}
    rs, wait, mm = by_name[site.collective], by_name[site.wait], by_name[site.matmuls[0]]
    args = bound_args(rs, _REDUCE_SCATTER)
    size = args["group_size"]
    batch, seq, cols = node_val(by_name[site.chain[0]]).shape
    local = seq // size
    is_mm = op_target(mm.target) is _ATEN.mm.default
    rows = mm.args[0] if is_mm else mm.args[1]
    k_dim = node_val(rows).shape[1]
    by_batch = batch % k == 0
    entries, step = (batch // k, local) if by_batch else (batch, local // k)
    b = FakeNodeBuilder(graph, fake_mode_of([mm]))
    tag = f"{site.collective}_x{k}"
    launches = []
    with graph.inserting_before(mm):
        blocks = b.add(_ATEN.reshape.default, (rows, [batch, size, local, k_dim]), f"{tag}_blocks")
        for j in range(k):
            part = b.add(_ATEN.slice.Tensor, (blocks, 0, j * entries, (j + 1) * entries) if by_batch
                         else (blocks, 2, j * step, (j + 1) * step), f"{tag}_in")
            ordered = b.add(_ATEN.clone.default, (b.add(_ATEN.permute.default, (part, [1, 0, 2, 3]), f"{tag}_ranks"),),
                            f"{tag}_contiguous", {"memory_format": torch.contiguous_format})
            flat = b.add(_ATEN.view.default, (ordered, [size * entries * step, k_dim]), f"{tag}_rows")
            product = b.add(_ATEN.mm.default, (flat, mm.args[1]), f"{mm.name}_part", dict(mm.kwargs)) if is_mm else \
                b.add(_ATEN.addmm.default, (mm.args[0], flat, mm.args[2]), f"{mm.name}_part", dict(mm.kwargs))
            launches.append(b.add(_REDUCE_SCATTER, (product, args["reduce_op"], size, args["group_name"]),
                                  f"{tag}_launch"))
    with graph.inserting_before(wait):
        chunks = [b.add(_ATEN.view.default, (b.add(wait_op(), (launch,), f"{tag}_wait"), [entries, step, cols]),
                        f"{tag}_chunk") for launch in launches]
        out = b.add(_ATEN.cat.default, (chunks, 0 if by_batch else 1), f"{tag}_cat")
    _stand_in(rs, wait, out)
    _erase_unread(graph, [wait, rs, *(by_name[n] for n in site.chain), mm])


def _write_reducing(gm: fx.GraphModule, site: MatmulSite, k: int) -> None:
    if site.layout == "batch_major":
        _write_sequence_scatter(gm, site, k)
        return
    graph = gm.graph
    by_name = {n.name: n for n in graph.nodes}
    rs, wait, mm = by_name[site.collective], by_name[site.wait], by_name[site.matmuls[0]]
    chain = [by_name[n] for n in site.chain]
    args = bound_args(rs, _REDUCING[site.kind])
    is_mm = op_target(mm.target) is _ATEN.mm.default
    cols = node_val(mm).shape[1]
    step = cols // k
    b = FakeNodeBuilder(graph, fake_mode_of([mm]))
    tag = f"{site.collective}_x{k}"
    launches = []
    with graph.inserting_before(mm):
        for j in range(k):
            lo, hi = j * step, (j + 1) * step
            weight = mm.args[1] if is_mm else mm.args[2]
            w_j = b.add(_ATEN.slice.Tensor, (weight, 1, lo, hi), f"{mm.name}_cols")
            if is_mm:
                part = b.add(_ATEN.mm.default, (mm.args[0], w_j), f"{mm.name}_part", dict(mm.kwargs))
            else:
                bias = mm.args[0]
                bias_j = b.add(_ATEN.slice.Tensor, (bias, node_val(bias).dim() - 1, lo, hi), f"{mm.name}_bias")
                part = b.add(_ATEN.addmm.default, (bias_j, mm.args[1], w_j), f"{mm.name}_part", dict(mm.kwargs))
            # a chain that keeps the flat layout with whole rows per rank is left out (no copy); else replayed
            tensor = part if site.layout == "flat" else _replay_columns(b, chain, {mm: part}, step)
            launch_args = (tensor, args["reduce_op"], args["group_size"], args["group_name"]) \
                if site.kind == "matmul_reduce_scatter" else (tensor, args["reduce_op"], args["group_name"])
            launches.append(b.add(_REDUCING[site.kind], launch_args, f"{tag}_launch"))
    with graph.inserting_before(wait):
        waits = [b.add(wait_op(), (launch,), f"{tag}_wait") for launch in launches]
        out = b.add(_ATEN.cat.default, (waits, -1), f"{tag}_cat")
        if site.layout == "flat":
            out = b.add(_ATEN.view.default, (out, list(node_val(wait).shape)), f"{tag}_out")
    _stand_in(rs, wait, out)
    _erase_unread(graph, [wait, rs, *chain, mm])


def _replay_columns(b: FakeNodeBuilder, chain: list[fx.Node], env: dict, cols: int) -> fx.Node:
    """The column chain (`_column_chain`) written again on a slice of ``cols`` columns (``env``: the matmul ->
    the slice's product); returns the slice's collective input."""
    last = next(iter(env.values()))
    for node in chain:
        target = op_target(node.target) if node.op == "call_function" else node.target
        if target in _VIEWS:
            new = b.add(target, (env[node.args[0]], list(node.args[1][:-1]) + [cols]), f"{node.name}_cols")
        else:
            new = b.add(target, fx.map_arg(node.args, lambda n: env[n]), f"{node.name}_cols", dict(node.kwargs))
        env[node] = last = new
    return last


def apply_decomposition(gm: fx.GraphModule, plan: DecomposePlan,
                        sites: dict[str, MatmulSite] | None = None) -> fx.GraphModule:
    """A new module: ``gm`` with each site of ``plan`` written at its degree (see the module docstring);
    ``gm`` is not modified. Raises `RewriteError` for a site or degree this graph does not allow."""
    sites = {s.collective: s for s in matmul_sites(gm)} if sites is None else sites
    owner: dict[str, str] = {}
    for name, degree in plan.degrees:
        for mm in sites[name].matmuls if name in sites else ():
            if mm in owner:
                raise RewriteError(f"sites {owner[mm]!r} and {name!r} both split matmul {mm!r}: one of them at most")
            owner[mm] = name
        if name not in sites:
            raise RewriteError(f"{name!r} is no collective-matmul site of this graph")
        if degree not in sites[name].degrees:
            raise RewriteError(f"site {name!r} cannot be split into {degree} chunks (its sizes allow "
                               f"{list(sites[name].degrees)})")
    out = fx.GraphModule(gm, copy_graph(gm.graph))
    out.meta.update(getattr(gm, "meta", {}))
    for name, degree in plan.degrees:
        site = sites[name]
        if site.kind == "all_gather_matmul":
            _write_all_gather(out, site, degree)
        else:
            _write_reducing(out, site, degree)
    carry_chunks(out.graph)
    out.graph.lint()
    out.recompile()
    return out
