"""Bucketing: several asynchronous collectives of one kind and group launched as one.

Each collective pays a fixed cost (latency steps, a kernel launch); merging
k of them pays it once, at the price of copies in and out, a later launch
(the bucket waits for its last input) and memory (the bucket's buffers live
until their last reader). Whether that pays depends on the schedule, so the
rewrite is a decision the pipeline takes with the order
(`solvercast.pipeline.buckets`); this module knows what may merge and how a
merge is written:

* `bucket_sites`: the collectives a bucket may take: an all_gather,
  reduce_scatter or all_reduce of `_c10d_functional` with exactly one wait
  and a contiguous tensor input whose value is known.
* Sites with the same `Site.key` (kind, process group, group size, dtype,
  reduce op, and no fence between them: a bucket moves launches, and a
  collective must not cross a send, recv, barrier or effect token) may share
  a launch unless one's input depends on another's result (a merge would
  then wait on itself): `BucketGraph.legal`.
* `BucketPlan`: the buckets, each a tuple of collective node names in graph
  order. A plan is a function of the graph and the options only, so every
  rank builds the same buckets.
* `apply_buckets`: the graph with each bucket written as PyTorch's bucketing
  passes write one, in ordinary aten ops: the members' inputs flattened into
  one buffer (``cat``), one collective, one wait, and each member's result
  taken back out (all_gather: a copy out of the gathered rows;
  reduce_scatter and all_reduce: views of the flat result).

Numerics: a bucketed all_gather moves the same bytes (bitwise identical).
A bucketed reduce_scatter or all_reduce reduces every element over the same
ranks, but the transport may sum in another order for an element at another
offset (NCCL's ring and tree chunk the flat buffer), so it need not be
bitwise identical: `BucketOptions.bitwise` forbids them.
"""

from __future__ import annotations

import operator
from collections import defaultdict
from dataclasses import dataclass

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

from solvercast.errors import RewriteError
from solvercast.fx.extract import extract_problem  # the one reading of storages, writes and fences
from solvercast.graph.collectives import collective_kind_and_group, wait_op
from solvercast.graph.fxmeta import bound_args, node_val, op_target
from solvercast.graph.nodes import NodeKind, classify
from solvercast.rewrites.fake_nodes import FakeNodeBuilder, fake_mode_of

__all__ = ["BUCKET_KINDS", "BITWISE_KINDS", "BUCKET_MEMBERS", "BucketOptions", "Site", "BucketPlan", "BucketGraph", "bucket_sites",
           "apply_buckets", "written_order"]

_C10D = torch.ops._c10d_functional
_ATEN = torch.ops.aten

#: the functional op each bucketable kind is launched with
_OPS = {"all_gather": _C10D.all_gather_into_tensor.default,
        "reduce_scatter": _C10D.reduce_scatter_tensor.default,
        "all_reduce": _C10D.all_reduce.default}
BUCKET_KINDS = tuple(_OPS)
#: kinds whose bucketed result is bitwise the members' results on every transport
BITWISE_KINDS = ("all_gather",)
#: a bucket's launch node records the collectives it launches under this ``meta`` key
BUCKET_MEMBERS = "solvercast_bucket_members"


@dataclass(frozen=True)
class BucketOptions:
    """What bucketing may do. ``kinds``: the collective kinds it may merge; ``bitwise``: only merges whose
    results are bitwise the unmerged ones (all_gather), never one that may sum in another order;
    ``pytorch``: whether the search judges PyTorch's FSDP buckets beside its own plans
    (`solvercast.rewrites.pytorch_buckets`)."""

    kinds: tuple[str, ...] = BUCKET_KINDS
    bitwise: bool = False
    pytorch: bool = True

    def __post_init__(self):
        unknown = [k for k in self.kinds if k not in BUCKET_KINDS]
        if unknown:
            raise ValueError(f"bucketing cannot merge {unknown}; it merges {list(BUCKET_KINDS)}")

    @property
    def allowed_kinds(self) -> tuple[str, ...]:
        return tuple(k for k in self.kinds if not self.bitwise or k in BITWISE_KINDS)


@dataclass(frozen=True)
class Site:
    """One collective a bucket may take."""

    collective: str  # its node's name
    wait: str  # the name of the wait that completes it
    kind: str  # all_gather, reduce_scatter or all_reduce
    # (kind, group name, group size, dtype, reduce op, fences before it, its value's fake mode): sites of
    # one key may share a launch
    key: tuple
    input_bytes: int  # this rank's input


@dataclass(frozen=True)
class BucketPlan:
    """The buckets: each a tuple of two or more collective node names in graph order. Collectives in no
    bucket launch alone."""

    buckets: tuple[tuple[str, ...], ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "buckets", tuple(tuple(b) for b in self.buckets if len(b) >= 2))

    @property
    def merged(self) -> int:
        """Collectives that share a launch."""
        return sum(len(b) for b in self.buckets)

    def describe(self, sites: dict[str, Site]) -> str:
        """One line: per kind, how many collectives became how many launches."""
        if not self.buckets:
            return "no buckets"
        per_kind: dict[str, list[int]] = defaultdict(list)
        for bucket in self.buckets:
            per_kind[sites[bucket[0]].kind].append(len(bucket))
        return "; ".join(f"{kind}: {sum(sizes)} collectives in {len(sizes)} launch{'es' if len(sizes) > 1 else ''}"
                         for kind, sizes in sorted(per_kind.items()))


def bucket_sites(gm: fx.GraphModule, options: BucketOptions = BucketOptions()) -> list[Site]:
    """The collectives of ``gm`` a bucket may take, in graph order (see the module docstring)."""
    wait = wait_op()
    kinds = {_OPS[k]: k for k in options.allowed_kinds}
    sites = []
    epoch = 0  # fences passed so far: no bucket spans a fence (a send, a recv, a barrier, an effect token)
    for node in gm.graph.nodes:
        if node.op == "call_function" and classify(node).kind in (NodeKind.FENCE, NodeKind.EFFECT):
            epoch += 1
            continue
        kind = kinds.get(op_target(node.target)) if node.op == "call_function" else None
        if kind is None or node.kwargs or not isinstance(node.args[0], fx.Node):
            continue
        users = list(node.users)
        if len(users) != 1 or op_target(users[0].target) is not wait:
            continue
        val = node_val(node.args[0])
        if not isinstance(val, torch.Tensor) or val.dim() == 0 or any(not isinstance(d, int) for d in val.shape) \
                or not val.is_contiguous():
            continue  # a bucket is laid out from concrete sizes: symbolic ones (dynamic shapes) stay alone
        _, group_size, _ = collective_kind_and_group(node)
        if kind == "reduce_scatter" and val.shape[0] % group_size:
            continue  # rows of ranks must divide evenly
        args = bound_args(node, _OPS[kind])
        # the fake mode of the input's value, by identity: a bucket's values are made in its members' mode
        mode = id(val.fake_mode) if isinstance(val, FakeTensor) else None
        key = (kind, str(args["group_name"]), group_size, val.dtype, str(args.get("reduce_op", "")), epoch, mode)
        sites.append(Site(node.name, users[0].name, kind, key, val.numel() * val.element_size()))
    return sites


def _order_edges(gm: fx.GraphModule) -> list[tuple[str, str]]:
    """The (earlier, later) node name pairs ``gm``'s extracted problem keeps in order."""
    problem = extract_problem(gm)
    names = [t.name for t in problem.tasks]
    return [(names[a], names[b]) for a, b in problem.edges]


class BucketGraph:
    """The sites of one graph and which of them may share a launch.

    A bucket moves launches and waits, so legality is read on every order the graph keeps, not only its
    data edges: ``order_edges`` are (earlier node, later node) name pairs that must stay in that order, the
    edges of ``gm``'s extracted `Problem` (writes and reads of one storage through views, in-place and
    coalesced collectives, ``out=`` writes; fences). None extracts them.

    ``after[s]``: the sites whose wait some ancestor of site ``s``'s input is (or is downstream of), as a
    bit set: a bucket holding ``s`` and one of them would wait on its own result. Two buckets can still
    need each other (each one's input downstream of the other's wait): `cycle` finds that on the whole plan."""

    def __init__(self, gm: fx.GraphModule, options: BucketOptions = BucketOptions(),
                 order_edges: list[tuple[str, str]] | None = None):
        self.gm = gm
        self.options = options
        self.sites = bucket_sites(gm, options)
        self.by_name = {s.collective: s for s in self.sites}
        self.nodes = list(gm.graph.nodes)
        self.node_named = by_name = {n.name: n for n in self.nodes}
        if order_edges is None:
            order_edges = _order_edges(gm) if self.sites else []
        #: what must be written before each node: its inputs and the nodes the graph orders before it
        self.needs: dict[fx.Node, list[fx.Node]] = {n: list(n.all_input_nodes) for n in self.nodes}
        for a, b in order_edges:
            if by_name[a] not in self.needs[by_name[b]]:
                self.needs[by_name[b]].append(by_name[a])
        index = {s.wait: i for i, s in enumerate(self.sites)}
        below: dict[fx.Node, int] = {}  # node -> the sites' waits it depends on (bit set)
        collective_input: dict[str, int] = {}
        wanted = {s.collective for s in self.sites}
        for node in self.nodes:  # graph order: the order edges run forward in it, as the data edges do
            bits = 0
            for inp in self.needs[node]:
                bits |= below.get(inp, 0)
            if node.name in index:
                bits |= 1 << index[node.name]
            below[node] = bits
            if node.name in wanted:  # what the launch needs: its input and whatever it is ordered after
                collective_input[node.name] = bits
        self.after = [collective_input[s.collective] for s in self.sites]
        self.position = {s.collective: i for i, s in enumerate(self.sites)}

    def legal(self, names) -> bool:
        """Whether the sites named may share one launch: one key, and no one's input depends on another's
        result."""
        members = [self.position[n] for n in names]
        if len({self.sites[i].key for i in members}) != 1:
            return False
        mask = sum(1 << i for i in members)
        return all(not self.after[i] & mask for i in members)

    def cycle(self, plan: BucketPlan) -> tuple[str, ...] | None:
        """A bucket of ``plan`` on a cycle of the graph ``plan`` writes (each bucket's launch one node, its wait
        one node), as its member names; None when the written graph is acyclic."""
        looped = self.looped(plan)
        return plan.buckets[looped[0]] if looped else None

    def looped(self, plan: BucketPlan) -> list[int]:
        """The buckets of ``plan`` (indices) whose launch or wait lies on a cycle of the written graph, or on a
        path from one cycle to another: what is left both of a topological sweep from the sources and of one
        from the sinks (the original graph is acyclic, so every cycle passes through a bucket)."""
        index = {n: i for i, n in enumerate(self.nodes)}
        rep = list(range(len(self.nodes)))  # node -> the node it is written as: its bucket's launch or wait
        bucket_of_rep: dict[int, int] = {}
        for b, bucket in enumerate(plan.buckets):
            launch, wait = index[self.node_named[bucket[0]]], index[self.node_named[self.by_name[bucket[0]].wait]]
            bucket_of_rep[launch] = bucket_of_rep[wait] = b
            for name in bucket:
                rep[index[self.node_named[name]]] = launch
                rep[index[self.node_named[self.by_name[name].wait]]] = wait
        preds: dict[int, set[int]] = defaultdict(set)
        succs: dict[int, set[int]] = defaultdict(set)
        for node in self.nodes:
            v = rep[index[node]]
            for p in self.needs[node]:
                u = rep[index[p]]
                if u != v:
                    preds[v].add(u)
                    succs[u].add(v)
        written = set(rep)

        def left_by_sweep(into: dict[int, set[int]], out_of: dict[int, set[int]]) -> set[int]:
            count = {v: len(into[v]) for v in written}
            ready = [v for v in written if not count[v]]
            while ready:
                for w in out_of[ready.pop()]:
                    count[w] -= 1
                    if not count[w]:
                        ready.append(w)
            return {v for v in written if count[v]}

        forward = left_by_sweep(preds, succs)
        if not forward:
            return []
        both = forward & left_by_sweep(succs, preds)
        return sorted({bucket_of_rep[v] for v in both if v in bucket_of_rep})

    def by_key(self) -> dict[tuple, list[Site]]:
        """The sites of each key, in graph order."""
        out: dict[tuple, list[Site]] = defaultdict(list)
        for s in self.sites:
            out[s.key].append(s)
        return dict(out)

    def check(self, plan: BucketPlan) -> None:
        """Raises `RewriteError` unless every bucket of ``plan`` names sites of this graph, each once,
        that may share a launch."""
        seen: set[str] = set()
        for bucket in plan.buckets:
            unknown = [n for n in bucket if n not in self.by_name]
            if unknown:
                raise RewriteError(f"bucket {list(bucket)}: {unknown} is no collective a bucket may take "
                                   "(an all_gather, reduce_scatter or all_reduce with one wait and a contiguous input)")
            twice = seen.intersection(bucket)
            if twice:
                raise RewriteError(f"{sorted(twice)} is in two buckets")
            seen.update(bucket)
            if len({self.by_name[n].key for n in bucket}) != 1:
                raise RewriteError(f"bucket {list(bucket)} mixes kinds, groups, dtypes or reduce ops")
            if not self.legal(bucket):
                raise RewriteError(f"bucket {list(bucket)}: one member's input depends on another member's "
                                   "result; one launch would wait on itself")
            if list(bucket) != sorted(bucket, key=self.position.__getitem__):
                raise RewriteError(f"bucket {list(bucket)} is not in graph order")
        looped = self.cycle(plan)
        if looped is not None:
            raise RewriteError(f"bucket {list(looped)} and another need each other (each one's input waits on "
                               "the other's result, through data or the order of writes): the plan cannot be written")

    def without_cycles(self, plan: BucketPlan) -> BucketPlan:
        """``plan`` with the buckets on cycles of its written graph halved (by count, graph order kept), all of
        them at once, until none is left: splitting a bucket only removes orders, so this ends, at worst with
        no bucket, after about log2 of the largest bucket's size sweeps."""
        while looped := {plan.buckets[b] for b in self.looped(plan)}:
            plan = BucketPlan(tuple(part for bucket in plan.buckets
                                    for part in ((bucket[:len(bucket) // 2], bucket[len(bucket) // 2:])
                                                 if bucket in looped else (bucket,))))
        return plan

    def greedy(self, cap_bytes: dict[str, int]) -> BucketPlan:
        """Consecutive sites of one key, in graph order, share a launch while their inputs total at most
        ``cap_bytes[kind]`` bytes (a kind not named is not merged) and the merge is legal."""
        buckets = []
        for key, sites in self.by_key().items():
            cap = cap_bytes.get(key[0], 0)
            if cap <= 0:
                continue
            current: list[Site] = []
            total = mask = 0
            for s in sites:
                i = self.position[s.collective]
                # (an earlier member's input precedes this site in graph order: it cannot depend on its wait)
                fits = current and total + s.input_bytes <= cap and not self.after[i] & mask
                if not fits:
                    buckets.append(tuple(c.collective for c in current))
                    current, total, mask = [], 0, 0
                current.append(s)
                total += s.input_bytes
                mask |= 1 << i
            buckets.append(tuple(c.collective for c in current))
        order = {s.collective: i for i, s in enumerate(self.sites)}
        # each bucket is legal alone; two of them (of two kinds, say) may still need each other
        return self.without_cycles(
            BucketPlan(tuple(sorted((b for b in buckets if len(b) >= 2), key=lambda b: order[b[0]]))))


class _Writer:
    """Writes one bucketed graph: nodes in the original order, each emitted after its inputs; a bucket's
    launch at the first of its members' places where every member's input is already written (at the last
    member's at the latest), so no compute is pulled up for it, unless a result is read sooner; its wait at
    the first of its members' waits' places after the launch (at the last one's at the latest), unless a
    result is read sooner. (A reduce_scatter bucket of a backward launches after its last gradient:
    launched at its first member's place it would pull every later gradient's compute up, and a collective
    after it in its group's order would wait for all of it.)"""

    def __init__(self, graph: BucketGraph, plan: BucketPlan):
        self.gm, self.sites, self.order_needs = graph.gm, graph.by_name, graph.needs
        self.graph = fx.Graph()
        self.env: dict[fx.Node, fx.Node] = {}
        self.by_name = graph.node_named
        sites = self.sites
        self.bucket_of = {name: i for i, b in enumerate(plan.buckets) for name in b}
        self.wait_bucket = {sites[name].wait: i for i, b in enumerate(plan.buckets) for name in b}
        self.buckets = plan.buckets
        self.launched: dict[int, fx.Node] = {}
        self.modes: dict[int, FakeTensorMode] = {}  # each bucket's fake mode, from its launch to its wait
        self.mode = None  # the fake mode the bucket being written makes its values in
        self.bucket_needs: dict[tuple[str, int], list[fx.Node]] = {}  # (launch or wait, bucket) -> `_needs`

    def _bucket_mode(self, i: int) -> FakeTensorMode:
        """The fake mode of bucket ``i``'s members' inputs (one: it is part of their key), else a new one
        (values traced with real tensors)."""
        if i not in self.modes:
            self.modes[i] = fake_mode_of([self.by_name[name].args[0] for name in self.buckets[i]])
        return self.modes[i]

    def walk(self) -> None:
        """Every node placed, in the order of the class docstring."""
        last = {b[-1] for b in self.buckets} | {self.sites[b[-1]].wait for b in self.buckets}
        for node in self.gm.graph.nodes:
            if node not in self.env and node.name not in last:
                i = self.bucket_of.get(node.name)
                if i is not None and not self._ready(i):
                    continue  # the bucket launches at a later member's place
                i = self.wait_bucket.get(node.name)
                if i is not None and self.by_name[self.buckets[i][0]] not in self.env:
                    continue  # not launched yet: waited on at a later member's wait, or where a result is read
            self._emit(node)

    def _ready(self, i: int) -> bool:
        """Whether everything bucket ``i``'s launch needs is written."""
        return all(inp in self.env for inp in self._needs(self.by_name[self.buckets[i][0]]))

    def write(self) -> fx.GraphModule:
        self.walk()
        out = fx.GraphModule(self.gm, self.graph)
        out.meta.update(getattr(self.gm, "meta", {}))
        return out

    def _emit(self, root: fx.Node) -> None:
        # iterative depth-first (graphs run to thousands of nodes deep); (node, True) is placed once what it
        # needs is. A node met again while it waits for its needs is on a cycle: `BucketGraph.check` refuses
        # such plans, and this keeps any that slips through from growing the stack without end.
        stack = [(root, False)]
        waiting: set[fx.Node] = set()
        while stack:
            node, expanded = stack.pop()
            if node in self.env:
                continue
            if expanded:
                waiting.discard(node)
                self._place(node)
                continue
            if node in waiting:
                raise RewriteError(f"the bucketed graph has a cycle through {node.name!r}: the plan cannot be written")
            waiting.add(node)
            stack.append((node, True))
            stack.extend((inp, False) for inp in reversed(self._needs(node)) if inp not in self.env)

    def _needs(self, node: fx.Node) -> list[fx.Node]:
        """What must be written before ``node``: its inputs and what the graph orders before it; for a bucket's
        launch, what every member's launch needs, for its wait, what every member's wait needs."""
        if node.name in self.bucket_of:
            key = ("launch", self.bucket_of[node.name])
        elif node.name in self.wait_bucket:
            key = ("wait", self.wait_bucket[node.name])
        else:
            return self.order_needs[node]
        if key not in self.bucket_needs:  # (asked at every member's place: a bucket of hundreds is read once)
            members = self.buckets[key[1]]
            names = members if key[0] == "launch" else [self.sites[name].wait for name in members]
            together = [self.by_name[name] for name in names]
            inside = set(together)
            self.bucket_needs[key] = list(dict.fromkeys(
                inp for member in together for inp in self.order_needs[member] if inp not in inside))
        return self.bucket_needs[key]

    def _place(self, node: fx.Node) -> None:
        i = self.bucket_of.get(node.name)
        if i is not None:  # a member placed: the bucket launches here, in place of every member
            launch = self._launch(i)
            for name in self.buckets[i]:
                self.env[self.by_name[name]] = launch
            return
        i = self.wait_bucket.get(node.name)
        if i is not None:  # a member's wait: the bucket is waited on once, and every member's result taken out
            for name, result in zip(self.buckets[i], self._wait(i)):
                self.env[self.by_name[self.sites[name].wait]] = result
            return
        new = self.graph.node_copy(node, lambda n: self.env[n])
        self.env[node] = new

    # ---- writing one bucket -----------------------------------------------------------------------
    def _add(self, target, args, name: str, kwargs=None) -> fx.Node:
        """A call_function node whose meta["val"] is ``target`` run on its arguments' fake values, in the mode of
        the bucket being written."""
        return FakeNodeBuilder(self.graph, self.mode).add(target, args, name, kwargs)

    def _launch(self, i: int) -> fx.Node:
        self.mode = self._bucket_mode(i)
        members = [self.by_name[name] for name in self.buckets[i]]
        site = self.sites[members[0].name]
        kind, group, size = site.kind, site.key[1], site.key[2]
        inputs = [self.env[m.args[0]] for m in members]
        tag = f"bucket_{kind}"
        if kind == "reduce_scatter":  # each input is (size * n_i): rows of ranks side by side, (size, sum n_i)
            rows = [self._add(_ATEN.view.default, (x, [size, x.meta["val"].numel() // size]), f"{tag}_rows")
                    for x in inputs]
            flat = self._add(_ATEN.view.default, (self._add(_ATEN.cat.default, (rows, 1), f"{tag}_in"), [-1]),
                             f"{tag}_flat")
            launch = self._add(_OPS[kind], (flat, members[0].args[1], size, group), tag)
        else:
            flats = [self._add(_ATEN.view.default, (x, [-1]), f"{tag}_flat") for x in inputs]
            flat = self._add(_ATEN.cat.default, (flats,), f"{tag}_in")
            args = (flat, size, group) if kind == "all_gather" else (flat, members[0].args[1], group)
            launch = self._add(_OPS[kind], args, tag)
        launch.meta[BUCKET_MEMBERS] = self.buckets[i]
        self.launched[i] = launch
        return launch

    def _wait(self, i: int) -> list[fx.Node]:
        self.mode = self._bucket_mode(i)
        members = [self.by_name[name] for name in self.buckets[i]]
        site = self.sites[members[0].name]
        tag = f"bucket_{site.kind}"
        done = self._add(wait_op(), (self.launched[i],), f"{tag}_wait")
        numels = [m.args[0].meta["val"].numel() for m in members]
        results = []
        if site.kind == "all_gather":  # (size, sum n_i): each member's rows copied out, ranks in order
            size = site.key[2]
            rows = self._add(_ATEN.view.default, (done, [size, sum(numels)]), f"{tag}_rows")
            parts = self._add(_ATEN.split_with_sizes.default, (rows, numels, 1), f"{tag}_split")
            for j, m in enumerate(members):
                part = self._add(operator.getitem, (parts, j), f"{tag}_part")
                copy = self._add(_ATEN.clone.default, (part,), f"{tag}_out", {"memory_format": torch.contiguous_format})
                results.append(self._add(_ATEN.view.default, (copy, list(m.meta["val"].shape)), f"{tag}_result"))
        else:
            per_rank = [n // site.key[2] for n in numels] if site.kind == "reduce_scatter" else numels
            parts = self._add(_ATEN.split_with_sizes.default, (done, per_rank), f"{tag}_split")
            for j, m in enumerate(members):
                part = self._add(operator.getitem, (parts, j), f"{tag}_part")
                results.append(self._add(_ATEN.view.default, (part, list(m.meta["val"].shape)), f"{tag}_result"))
        return results


class _OrderOnly(_Writer):
    """The writer's walk without the writing: the order in which it places each node, a bucket's launch and
    its wait named ``("launch", i)`` and ``("wait", i)`` (bucket ``i`` of the plan)."""

    def __init__(self, graph: BucketGraph, plan: BucketPlan):
        super().__init__(graph, plan)
        self.order: list = []

    def _place(self, node: fx.Node) -> None:
        i = self.bucket_of.get(node.name)
        if i is not None:
            self.order.append(("launch", i))
            for name in self.buckets[i]:
                self.env[self.by_name[name]] = node
            return
        i = self.wait_bucket.get(node.name)
        if i is not None:
            self.order.append(("wait", i))
            for name in self.buckets[i]:
                self.env[self.by_name[self.sites[name].wait]] = node
            return
        self.order.append(node.name)
        self.env[node] = node


def written_order(graph: BucketGraph, plan: BucketPlan) -> list:
    """The order `apply_buckets` writes ``graph``'s nodes in for ``plan``: node names, and ``("launch", i)``
    and ``("wait", i)`` where bucket ``i``'s launch and wait go. Raises `RewriteError` on a cycle."""
    walk = _OrderOnly(graph, plan)
    walk.walk()
    return walk.order


def apply_buckets(gm: fx.GraphModule, plan: BucketPlan, graph: BucketGraph | None = None) -> fx.GraphModule:
    """A new module: ``gm`` with each bucket of ``plan`` launched once (see the module docstring); ``gm``
    is not modified. Every node keeps its name; a bucket's nodes are named ``bucket_<kind>...``. Raises
    `RewriteError` for a plan this graph cannot take."""
    graph = BucketGraph(gm) if graph is None else graph
    graph.check(plan)
    return _Writer(graph, plan).write()  # with no bucket, a copy in the same order
