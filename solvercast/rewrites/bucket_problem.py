"""A bucket plan's Problem built from the unbucketed one, without writing the plan's graph.

Writing a plan's graph (`apply_buckets`) and extracting it costs seconds on a 10,000-task graph: every node
is copied, the buckets get fake values, and the whole graph is read again. A search that compares dozens of
plans cannot pay that for each. `merged_problem` builds the plan's `Problem` from the unbucketed one
instead, as the writer would write it: each bucket's launches become one copy-in task (the ``cat``) and one
launch, their waits one wait, and an all_gather's results one copy out per member; the edges into and out
of the members go to these tasks, the members' buffers become the bucket's (the flat input, held until the
wait; the flat result). The new tasks are priced by extracting a graph of the bucket alone, written by
`apply_buckets`, with the caller's costs (`BucketPricer`), once per bucket shape: a model's layers repeat
their shapes, so a plan costs about a walk over the problem.

The tasks are put in the order the writer puts its nodes (`written_order`: the original order, a bucket's
launch at the first member's place where every member's input is written, its wait at the first
member's wait's place after it), so the original order's simulation is the written graph's. What it leaves out are the
writer's views, getitems and splits: free tasks, which take no time and hold no storage of their own.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import torch.fx as fx

from solvercast.errors import RewriteError
from solvercast.graph.fxmeta import node_val
from solvercast.ir.problem import Buffer, Problem, Role, Task
from solvercast.rewrites.bucketing import BucketGraph, BucketOptions, BucketPlan, apply_buckets, written_order

__all__ = ["BucketPrice", "BucketPricer", "MergedPlan", "merged_problem"]


@dataclass(frozen=True)
class BucketPrice:
    """What one bucket's written tasks cost (ns): the copy in before the launch, the launch (and its
    occupancy), and each member's copy out after the wait (all_gather; 0 for the others' views)."""

    copy_in: int
    launch: int
    occupancy: float
    copy_out: tuple[int, ...]


class BucketPricer:
    """Prices buckets of ``graph``'s sites by extracting each bucket written alone (``extract(gm,
    freeable_inputs=())`` returns its `Extracted`, as `solvercast.pipeline.extracted.extract_for_optimize`
    does), once per shape: the members' kind, group, dtype, reduce op and input shapes."""

    def __init__(self, graph: BucketGraph, extract):
        self.graph, self.extract = graph, extract
        self.prices: dict[tuple, BucketPrice] = {}

    def shape_key(self, bucket: tuple[str, ...]) -> tuple:
        graph = self.graph
        site = graph.by_name[bucket[0]]
        shapes = tuple(tuple(node_val(graph.node_named[name].args[0]).shape) for name in bucket)
        return site.key[:5] + (shapes,)

    def price(self, bucket: tuple[str, ...]) -> BucketPrice:
        """The bucket's price; raises `SolvercastError` where a graph of it alone cannot be written or
        extracted."""
        key = self.shape_key(bucket)
        if key not in self.prices:
            self.prices[key] = self._priced(bucket)
        return self.prices[key]

    def _priced(self, bucket: tuple[str, ...]) -> BucketPrice:
        alone = _bucket_alone(self.graph, bucket)
        written = apply_buckets(alone, BucketPlan((bucket,)), BucketGraph(alone, BucketOptions(), order_edges=[]))
        problem = self.extract(written, freeable_inputs=()).problem
        launch = next(t for t, task in enumerate(problem.tasks) if task.role == Role.COMM)
        wait = problem.wait_of[launch]
        before = sum(task.duration for task in problem.tasks[:launch] if task.role == Role.COMPUTE)
        after = tuple(task.duration for task in problem.tasks[wait + 1:] if task.role == Role.COMPUTE)
        if self.graph.by_name[bucket[0]].kind == "all_gather":
            if len(after) != len(bucket):
                raise RewriteError(f"the bucket of {bucket[0]!r} alone has {len(after)} copies out, not {len(bucket)}")
        else:
            after = (0,) * len(bucket)
        task = problem.tasks[launch]
        return BucketPrice(before, task.duration, task.occupancy, after)


def _bucket_alone(graph: BucketGraph, bucket: tuple[str, ...]) -> fx.GraphModule:
    """A module of the bucket's members only: each member's input a placeholder of its value, its collective
    and wait copied (names kept), the waits its outputs."""
    g = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    waits = []
    for j, name in enumerate(bucket):
        node = graph.node_named[name]
        ph = g.placeholder(f"bucket_input_{j}")
        ph.meta["val"] = node_val(node.args[0])
        env[node.args[0]] = ph
        try:
            env[node] = g.node_copy(node, lambda n: env[n])
        except KeyError:
            raise RewriteError(f"collective {name!r} takes a tensor argument besides its input") from None
        wait = graph.node_named[graph.by_name[name].wait]
        waits.append(g.node_copy(wait, lambda n: env[n]))
    g.output(tuple(waits))
    alone = fx.GraphModule(torch.nn.Module(), g)
    alone.meta.update(getattr(graph.gm, "meta", {}))
    return alone


@dataclass(frozen=True)
class MergedPlan:
    """A plan's `Problem` (`merged_problem`) and, for each bucket, its launch task's name -> the members."""

    problem: Problem
    launch_members: dict[str, tuple[str, ...]]


def merged_problem(problem: Problem, plan: BucketPlan, graph: BucketGraph, pricer: BucketPricer) -> MergedPlan:
    """``problem`` (``graph``'s graph, extracted) with each bucket of ``plan`` merged as the writer writes it
    (module docstring). Raises `RewriteError` where the plan's graph has a cycle, `SolvercastError` where a
    bucket cannot be priced."""
    ids = {task.name: t for t, task in enumerate(problem.tasks)}
    wait_of = problem.wait_of
    # new tasks: ("old", t) keeps task t; ("in"|"launch"|"wait", b) and ("out", b, j) are bucket b's
    member_of: dict[int, tuple[int, int]] = {}  # a member's launch or wait -> (bucket, member index)
    is_launch: set[int] = set()
    prices = []
    for b, bucket in enumerate(plan.buckets):
        prices.append(pricer.price(bucket))
        for j, name in enumerate(bucket):
            c = ids[name]
            if c not in wait_of:
                raise RewriteError(f"bucket member {name!r} has no wait in the problem")
            member_of[c] = member_of[wait_of[c]] = (b, j)
            is_launch.add(c)
    gathers = {b for b, bucket in enumerate(plan.buckets) if graph.by_name[bucket[0]].kind == "all_gather"}

    def source(u: int):  # what an edge out of old task u leaves from
        if u not in member_of:
            return ("old", u)
        b, j = member_of[u]
        if u in is_launch:
            return ("launch", b)
        return ("out", b, j) if b in gathers else ("wait", b)

    def target(v: int):  # what an edge into old task v goes to
        if v not in member_of:
            return ("old", v)
        return ("in", member_of[v][0]) if v in is_launch else ("wait", member_of[v][0])

    preds: dict[tuple, list[tuple]] = {}
    for u, v in problem.edges:
        if u in member_of and v in member_of and member_of[u][0] == member_of[v][0]:
            continue  # within one bucket: its own structure below
        preds.setdefault(target(v), []).append(source(u))
    for b, bucket in enumerate(plan.buckets):
        preds.setdefault(("launch", b), []).append(("in", b))
        preds.setdefault(("wait", b), []).append(("launch", b))
        for j in range(len(bucket)) if b in gathers else ():
            preds.setdefault(("out", b, j), []).append(("wait", b))

    order = _written_order(ids, plan, graph, gathers, preds)
    new_id = {node: i for i, node in enumerate(order)}
    tasks = [_task(node, problem, plan, prices, ids, new_id) for node in order]
    edges = {(new_id[a], new_id[z]) for z, ps in preds.items() for a in ps}

    def user(u: int, produced_by_member: bool):
        if u not in member_of:
            return new_id[("old", u)]
        b, _ = member_of[u]
        if u in is_launch:
            return new_id[("in", b)]  # the members' inputs are read by the copy in
        return new_id[("wait", b)] if produced_by_member and b not in gathers else None

    buffers: list[Buffer] = []
    merged_out: dict[int, list[Buffer]] = {}
    for buf in problem.buffers:
        if buf.producer in is_launch:
            b, j = member_of[buf.producer]
            if b in gathers:  # each member's result is its copy out's
                users = {user(u, True) for u in buf.users if u != buf.producer}
                buffers.append(Buffer(buf.name, buf.size, new_id[("out", b, j)], tuple(users - {None}),
                                      is_output=buf.is_output))
            merged_out.setdefault(b, []).append(buf)
            continue
        users = {user(u, False) for u in buf.users}
        buffers.append(Buffer(buf.name, buf.size, None if buf.producer is None else new_id[("old", buf.producer)],
                              tuple(users - {None}), is_output=buf.is_output, freeable=buf.freeable))
    for b, bucket in enumerate(plan.buckets):
        first, launch, wait = bucket[0], new_id[("launch", b)], new_id[("wait", b)]
        size_in = sum(graph.by_name[name].input_bytes for name in bucket)
        buffers.append(Buffer(f"{first}_bucket_in", size_in, new_id[("in", b)], (launch,)))
        outs = merged_out.get(b, [])
        size_out = sum(buf.size for buf in outs)
        if b in gathers:
            users = (wait,) + tuple(new_id[("out", b, j)] for j in range(len(bucket)))
            buffers.append(Buffer(f"{first}_bucket_out", size_out, launch, users))
        else:
            users = {user(x, True) for buf in outs for x in buf.users if x != buf.producer} | {wait}
            buffers.append(Buffer(f"{first}_bucket_out", size_out, launch, tuple(users - {None}),
                                  is_output=any(buf.is_output for buf in outs)))
    merged = Problem(tasks, tuple(edges), tuple(buffers), problem.machine, problem.preserve_collective_order,
                     problem.name, problem.notes)
    return MergedPlan(merged, {bucket[0]: bucket for bucket in plan.buckets})


def _written_order(ids: dict[str, int], plan: BucketPlan, graph: BucketGraph, gathers: set[int],
                   preds: dict[tuple, list[tuple]]) -> list[tuple]:
    """The new tasks in the order the writer writes their nodes (`written_order`; ``ids``: the old tasks'
    names -> ids): a bucket's copy in and launch where its launch goes, its wait and copies out where its wait
    goes. Raises `RewriteError` on a cycle, or where the order misses what a task needs."""
    order: list[tuple] = []
    for item in written_order(graph, plan):
        if isinstance(item, str):
            if item in ids:
                order.append(("old", ids[item]))
            continue
        what, b = item
        if what == "launch":
            order += [("in", b), ("launch", b)]
        else:
            order += [("wait", b)] + [("out", b, j) for j in range(len(plan.buckets[b]))] * (b in gathers)
    placed: set[tuple] = set()
    for node in order:
        missing = [p for p in preds.get(node, ()) if p not in placed]
        if missing:
            raise RewriteError(f"the bucketed problem places {node} before {missing[0]}: the plan cannot be written")
        placed.add(node)
    return order


def _task(node: tuple, problem: Problem, plan: BucketPlan, prices: list[BucketPrice], ids: dict[str, int],
          new_id: dict) -> Task:
    """The task of a new node: an old task as it was, or one of a bucket's, priced."""
    if node[0] == "old":
        task = problem.tasks[node[1]]
        if task.role == Role.WAIT:
            return dataclasses.replace(task, waits_for=new_id[("old", task.waits_for)])
        return task
    b = node[1]
    bucket, price = plan.buckets[b], prices[b]
    first = problem.tasks[ids[bucket[0]]]
    if node[0] == "in":
        return Task(f"{bucket[0]}_bucket_in", Role.COMPUTE, price.copy_in, op="aten.cat")
    if node[0] == "launch":
        return Task(bucket[0], Role.COMM, price.launch, price.occupancy, op=first.op, group=first.group)
    if node[0] == "wait":
        return Task(f"{bucket[0]}_bucket_wait", Role.WAIT, waits_for=new_id[("launch", b)], op="wait_tensor")
    return Task(f"{bucket[node[2]]}_bucket_out", Role.COMPUTE, price.copy_out[node[2]], op="aten.clone")

