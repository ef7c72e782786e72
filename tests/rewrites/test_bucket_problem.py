"""A bucket plan's Problem built from the unbucketed one (`solvercast.rewrites.bucket_problem`), judged against
the graph the writer writes for the same plan, extracted: the same tasks that take time or hold storage, the
same prices, and the same step and peak in the original order and under the heuristics."""

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from solvercast.errors import RewriteError
from solvercast.heuristics import best_heuristic
from solvercast.ir.problem import Role
from solvercast.ir.schedule import Schedule
from solvercast.ir.simulate import simulate
from solvercast.models import build, fake_group
from solvercast.pipeline.extracted import extract_for_optimize
from solvercast.rewrites.bucket_problem import BucketPricer, merged_problem
from solvercast.rewrites.bucketing import BucketGraph, BucketPlan, apply_buckets

C10D = torch.ops._c10d_functional
ALL = ("all_gather", "reduce_scatter", "all_reduce")


def _all_kinds():
    """Three of each kind, independent, results read by later compute (one all_gather's result is an output)."""
    group = fake_group(4, tag="bkp")

    def step(x, a, b, c, d, e, f, g, h, i):
        ags = [C10D.wait_tensor(C10D.all_gather_into_tensor(t, 4, group)) for t in (a, b, c)]
        rss = [C10D.wait_tensor(C10D.reduce_scatter_tensor(t @ x, "sum", 4, group)) for t in (d, e, f)]
        ars = [C10D.wait_tensor(C10D.all_reduce(torch.relu(t), "sum", group)) for t in (g, h, i)]
        return ags[0], ags[1] @ x, ags[2].sum() + rss[0].sum(), rss[1] * 2, rss[2].sum() + ars[0], ars[1] @ x, ars[2]

    args = [torch.empty(16, 16)] + [torch.empty(4, 16) for _ in range(3)] + [torch.empty(8, 16) for _ in range(3)] \
        + [torch.empty(8, 16) for _ in range(3)]
    return make_fx(step, tracing_mode="fake")(*args)


def _crossed():
    """Two all_gathers and two all_reduces: each kind one legal bucket, both at once a cycle."""
    group = fake_group(4, tag="bkp")

    def step(a, b):
        ag1, ar1 = C10D.all_gather_into_tensor(a, 4, group), C10D.all_reduce(b, "sum", group)
        g1, r1 = C10D.wait_tensor(ag1), C10D.wait_tensor(ar1)
        g2 = C10D.wait_tensor(C10D.all_gather_into_tensor(r1 * 2, 4, group))
        r2 = C10D.wait_tensor(C10D.all_reduce(g1[:4] + 1, "sum", group))
        return g1, g2, r1, r2

    return make_fx(step, tracing_mode="fake")(torch.randn(4, 4), torch.randn(4, 4))


def _extract(g, freeable_inputs=()):
    return extract_for_optimize(g, freeable_inputs=freeable_inputs)


def _pair(gm, plan, freeable=()):
    """(the merged problem, the written graph's problem) of ``plan``."""
    def extract(g, freeable_inputs=freeable):
        return _extract(g, freeable_inputs)

    graph = BucketGraph(gm)
    merged = merged_problem(extract(gm).problem, plan, graph, BucketPricer(graph, extract))
    return merged, extract(apply_buckets(gm, plan, graph)).problem


def _timed(problem):
    """The tasks that take time or hold storage, as (role, duration), in order; FREE tasks left out."""
    return [(t.role.value, t.duration) for t in problem.tasks if t.role != Role.FREE]


def _plans(gm):
    graph = BucketGraph(gm)
    sizes = sorted(s.input_bytes for s in graph.sites)
    return [graph.greedy({k: cap for k in ALL}) for cap in (2 * sizes[0], 4 * sizes[len(sizes) // 2], 1 << 40)]


@pytest.mark.parametrize("name", ["all kinds", "fsdp_layers", "fsdp_tp", "simple_fsdp backward"])
def test_a_merged_plan_is_the_written_graph_extracted(name):
    gm = {"all kinds": _all_kinds, "fsdp_layers": lambda: build("fsdp_layers", layers=3),
          "fsdp_tp": lambda: build("fsdp_tp", layers=2),
          "simple_fsdp backward": lambda: build("simple_fsdp", layers=2, backward=1)}[name]()
    plans = [p for p in _plans(gm) if p.buckets]
    assert plans, f"{name}: nothing merges"
    for plan in plans:
        merged, written = _pair(gm, plan)
        assert _timed(merged.problem) == _timed(written)
        assert sum(b.size for b in merged.problem.buffers) == sum(b.size for b in written.buffers)
        for schedule_of in (Schedule.original, lambda p: best_heuristic(p)):
            got, want = (simulate(p, schedule_of(p)) for p in (merged.problem, written))
            assert (got.makespan, got.peak_memory) == (want.makespan, want.peak_memory), plan
        assert merged.launch_members == {b[0]: b for b in plan.buckets}


def test_inputs_freed_after_their_last_use_are_freed_after_the_copy_in():
    """A backward's freeable inputs (its tangents and saved activations) feed reduce_scatters: merged, the copy
    in is their last reader, as in the written graph."""
    gm = build("simple_fsdp", layers=2, backward=1)
    freeable = tuple(n.name for n in gm.graph.nodes if n.op == "placeholder")
    plan = _plans(gm)[-1]
    merged, written = _pair(gm, plan, freeable)
    assert any(b.freeable for b in merged.problem.buffers)
    got, want = (simulate(p, Schedule.original(p)) for p in (merged.problem, written))
    assert (got.makespan, got.peak_memory) == (want.makespan, want.peak_memory)


def test_a_plan_whose_buckets_need_each_other_is_refused():
    gm = _crossed()
    graph = BucketGraph(gm)
    both = BucketPlan(tuple(tuple(s.collective for s in sites) for sites in graph.by_key().values()))
    assert len(both.buckets) == 2
    with pytest.raises(RewriteError, match="cycle"):
        merged_problem(_extract(gm).problem, both, graph, BucketPricer(graph, _extract))
    for bucket in both.buckets:  # each alone is fine
        merged, written = _pair(gm, BucketPlan((bucket,)))
        assert _timed(merged.problem) == _timed(written)


def test_buckets_of_one_shape_are_priced_once():
    gm = build("fsdp_layers", layers=4)
    graph = BucketGraph(gm)
    calls = []

    def extract(g, freeable_inputs=()):
        calls.append(g)
        return _extract(g, freeable_inputs)

    pricer = BucketPricer(graph, extract)
    names = [s.collective for s in graph.sites if s.kind == "all_gather"]
    pairs = [tuple(names[i:i + 2]) for i in range(0, len(names) - 1, 2)]
    shapes = {pricer.shape_key(p) for p in pairs}
    for p in pairs:
        pricer.price(p)
    assert len(calls) == len(shapes) < len(pairs)
