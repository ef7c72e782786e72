"""PyTorch's answers as plans of the bucket search (`solvercast.pipeline.buckets`), so that it judges them
beside its own: the buckets of Inductor's FSDP pre-bucketing (`pytorch_bucket_plan`), and the buckets and
order of its overlap scheduler, ``schedule_overlap_bucketing`` as Inductor runs it (`pytorch_overlap`, with
`reordered` putting a graph in that order).

Only the grouping and the order are read, never torch's written graph: our writer writes the buckets
(`solvercast.rewrites.bucketing.apply_buckets`) and the order is kept only where our own dependencies (data,
aliases, in-place writes) allow, so the graph that runs is one our analysis vouches for, and it is the same
on every rank (torch's all_gather merge bakes the rank into the graph). The FSDP pre-bucketing groups
consecutive FSDP collectives of one group up to a cap sized to saturate the group's bandwidth by torch's
NCCL model; the overlap scheduler is priced with the caller's costs (`problem_prices`). These are private
torch functions: on a torch without them, or where they fail on a graph, there is no answer and the reason
says why; the search goes on with its own plans.
"""

from __future__ import annotations

import contextlib
import copy
import heapq
from collections import defaultdict
from unittest import mock

import torch
import torch.fx as fx

from solvercast.graph.collectives import collective_kind_and_group
from solvercast.graph.fxmeta import node_val, val_bytes
from solvercast.rewrites.bucketing import BucketGraph, BucketPlan

__all__ = ["pytorch_bucket_plan", "pytorch_overlap", "problem_prices", "reordered"]


def pytorch_bucket_plan(gm: fx.GraphModule, graph: BucketGraph) -> tuple[BucketPlan | None, str]:
    """(the plan, "") or (None, why there is none). The plan keeps each of torch's buckets' members that are
    sites of ``graph`` (the kinds its options allow), in graph order, without the buckets that would need one
    another (`BucketGraph.without_cycles`)."""
    try:
        from torch._inductor.fx_passes import bucketing as torch_bucketing
        from torch._inductor.fx_passes import fsdp as torch_fsdp

        groups, group_size = torch_fsdp.identify_fsdp_groups(gm)
        if not groups or group_size is None:
            return None, "PyTorch finds no FSDP all_gather"
        cap_mb = torch_fsdp.compute_pre_bucket_cap_mb(group_size)

        def cap(_bucket_index: int) -> float:
            return cap_mb

        found = [*torch_bucketing.bucket_all_gather_by_mb(gm, cap, filter_wait_node=torch_fsdp.is_fsdp_all_gather_wait,
                                                          mode="default"),
                 *torch_bucketing.bucket_reduce_scatter_by_mb(
                     gm, cap, filter_wait_node=torch_fsdp.is_fsdp_reduce_scatter_wait, mode="default")]
    except Exception as e:  # private API: a torch that moved it, or a graph it cannot read, has no plan
        return None, f"PyTorch's FSDP bucketing is unavailable here ({type(e).__name__}: {e})"
    position = {s.collective: i for i, s in enumerate(graph.sites)}
    buckets = []
    for bucket in found:
        members = sorted((n.name for n in bucket if n.name in position), key=position.__getitem__)
        if len({graph.by_name[m].key for m in members}) == 1:  # (torch's group key is finer than ours or equal)
            buckets.append(tuple(members))
    plan = graph.without_cycles(BucketPlan(tuple(sorted((b for b in buckets if len(b) >= 2),
                                                        key=lambda b: position[b[0]]))))
    if not plan.buckets:
        return None, "PyTorch's FSDP bucketing merges none of the collectives a bucket may take here"
    return plan, ""


def problem_prices(problem, gm: fx.GraphModule):
    """``price_ms(node, override_bytes)`` as PyTorch's scheduler asks it, from ``problem``'s durations (the
    caller's costs): a task's node its duration, any other node 0; a collective sized as a bucket of
    ``override_bytes`` (its input plus output bytes) its own duration plus the bytes it adds at the slope of
    a line fitted to the problem's collectives of its kind and group size (their fixed cost is paid once)."""
    ms = {t.name: t.duration / 1e6 for t in problem.tasks}
    points: dict[tuple, list[tuple[int, float]]] = defaultdict(list)
    info: dict[str, tuple[tuple, int]] = {}
    for node in gm.graph.nodes:
        if node.name not in ms or node.op != "call_function":
            continue
        try:
            kind, group_size, _ = collective_kind_and_group(node)
        except ValueError:  # not a collective
            continue
        wire = val_bytes(fx.node.map_arg(node.args[0], node_val)) + val_bytes(node_val(node))  # (a coalesced op: lists)
        info[node.name] = ((kind, group_size), wire)
        points[(kind, group_size)].append((wire, ms[node.name]))
    slope = {}
    for key, pts in points.items():
        n = len(pts)
        mean_b, mean_t = sum(b for b, _ in pts) / n, sum(t for _, t in pts) / n
        var = sum((b - mean_b) ** 2 for b, _ in pts)
        fitted = sum((b - mean_b) * (t - mean_t) for b, t in pts) / var if var > 0 else 0.0
        # without two sizes (or with a negative fit) the bytes scale the one price: no fixed cost is assumed
        slope[key] = fitted if fitted > 0 else (mean_t / mean_b if mean_b > 0 else 0.0)

    def price_ms(node: fx.Node, override_bytes: int | None = None) -> float:
        if override_bytes is None or node.name not in info:
            return ms.get(node.name, 0.0)
        key, wire = info[node.name]
        return max(ms[node.name] + slope[key] * (override_bytes - wire), 0.0)

    return price_ms


def pytorch_overlap(gm: fx.GraphModule, price_ms, graph: BucketGraph):
    """PyTorch's ``schedule_overlap_bucketing`` (bucketing on, as Inductor runs it) on a copy of ``gm``, every
    node priced by ``price_ms(node, override_bytes)`` (milliseconds): (its buckets as a `BucketPlan` of
    ``graph``'s sites, its order as ``gm``'s node names), or (None, why). Only the grouping and the order are
    read, never torch's written graph."""
    try:
        from torch._inductor.fx_passes import bucketing as torch_bucketing
        from torch._inductor.fx_passes import node_runtime_estimation as nre
        from torch._inductor.fx_passes import overlap_scheduling as ovs
    except ImportError as e:
        return None, f"this torch has no overlap scheduler ({e})"
    members: dict[str, tuple[str, ...]] = {}  # a bucket's launch (torch's node name) -> our collectives
    wait_of: dict[str, str] = {}  # a bucket's launch -> its wait (torch's names)
    process = torch_bucketing.process_collective_bucket

    def recorded(g, bucket_nodes, *args, **kwargs):
        names = tuple(m for n in bucket_nodes for m in members.pop(n.name, (n.name,)))
        new_nodes, replacements = process(g, bucket_nodes, *args, **kwargs)
        for n in new_nodes:
            if n.op == "call_function" and n.target is torch.ops._c10d_functional.wait_tensor.default:
                members[n.args[0].name], wait_of[n.args[0].name] = names, n.name
        return new_nodes, replacements

    try:
        work = copy.deepcopy(gm)  # (a graph holding a process group object may not copy)
        with contextlib.ExitStack() as stack:
            stack.enter_context(mock.patch.object(torch_bucketing, "process_collective_bucket", recorded))
            stack.enter_context(mock.patch.object(ovs, "estimate_roofline_runtime_ms", lambda n: price_ms(n, None)))
            for fn in ("_log_collective_benchmarks", "_log_compute_estimations"):  # logging: they need a real group
                stack.enter_context(mock.patch.object(nre, fn, lambda *a, **k: None))
            # its analytical path reads the world size and traces a merge with a rank index, neither of which the
            # graph's order or buckets depend on (torch's written graph is not kept): a group this process has
            # not joined (a traced graph's, or no process group at all) reads as world size 1, rank 0
            for fn, alone in (("get_world_size", 1), ("get_rank", 0)):
                stack.enter_context(mock.patch.object(torch.distributed, fn, _or_alone(getattr(torch.distributed, fn),
                                                                                       alone)))
            out = ovs.schedule_overlap_bucketing(
                work, collective_bucketing=True, insert_overlap_deps=False, custom_runtime_estimation=price_ms,
                collective_estimator="analytical", compute_estimator="analytical", enable_fusion_regions=False,
                max_memory_increase_gb=None, max_memory_increase_ratio=0.0)
    except Exception as e:  # private API: a torch that moved it, or a graph it cannot take
        return None, f"PyTorch's overlap scheduler failed here ({type(e).__name__}: {e})"
    at = {n.name: i for i, n in enumerate(out.graph.nodes)}
    place: dict[str, float] = {}
    original = graph.node_named
    for launch, names in members.items():
        if launch in at:  # each member at its bucket's launch, each member's wait at the bucket's wait
            for name in names:
                place[name] = at[launch]
                for user in original[name].users:
                    place[user.name] = at[wait_of[launch]]
    nodes = list(gm.graph.nodes)
    for node in reversed(nodes):  # a node torch erased (a cast it folded into a bucket): just before its first user
        if node.name not in place:
            place[node.name] = at.get(node.name, min((place[u.name] for u in node.users), default=len(at)) - 0.5)
    index = {n: i for i, n in enumerate(nodes)}
    needs = graph.needs
    users: dict[fx.Node, list[fx.Node]] = {n: [] for n in nodes}
    missing = {n: len(set(needs[n])) for n in nodes}
    for n in nodes:
        for m in set(needs[n]):
            users[m].append(n)
    ready = [(place[n.name], index[n], n) for n in nodes if missing[n] == 0]
    heapq.heapify(ready)
    order = []
    while ready:  # torch's places, kept wherever our own dependencies (aliases, in-place writes) allow
        _, _, n = heapq.heappop(ready)
        order.append(n.name)
        for u in users[n]:
            missing[u] -= 1
            if missing[u] == 0:
                heapq.heappush(ready, (place[u.name], index[u], u))
    buckets = [tuple(sorted(names, key=graph.position.__getitem__)) for names in members.values()
               if len(names) >= 2 and all(name in graph.position for name in names)]
    plan = BucketPlan(tuple(sorted(buckets, key=lambda b: graph.position[b[0]])))
    return (plan, order), ""


def _or_alone(fn, alone: int):
    """``fn`` (a `torch.distributed` query), or ``alone`` where this process has no such group."""
    def query(*args, **kwargs):
        if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
            return alone
        try:
            return fn(*args, **kwargs)
        except (ValueError, RuntimeError):  # a group this process is not in
            return alone
    return query


def reordered(gm: fx.GraphModule, order: list[str]) -> fx.GraphModule:
    """A copy of ``gm`` with its nodes in ``order`` (every node's name once, inputs first)."""
    by_name = {n.name: n for n in gm.graph.nodes}
    graph = fx.Graph()
    env: dict = {}
    for name in order:
        env[by_name[name]] = graph.node_copy(by_name[name], lambda n: env[n])
    out = fx.GraphModule(gm, graph)
    out.meta.update(getattr(gm, "meta", {}))
    return out
