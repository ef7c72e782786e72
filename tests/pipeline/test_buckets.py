"""The bucket search (`solvercast.pipeline.buckets`): after one cap per kind, it halves the buckets the
step waits on. The rewrite itself (legality, cost, lowering, values) is tested in
tests/rewrites/test_bucketing.py."""

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from solvercast.graph.fxmeta import node_val
from solvercast.ir.problem import Role
from solvercast.models import fake_group
from solvercast.pipeline.buckets import choose_buckets, exposed_buckets, halve, launch_members
from solvercast.pipeline.plan_judge import PlanJudge
from solvercast.pipeline.extracted import extract_for_optimize
from solvercast.rewrites.bucketing import BUCKET_MEMBERS, BucketGraph, BucketOptions, BucketPlan, apply_buckets

C10D = torch.ops._c10d_functional
DIM = 64


def _backward_chain(layers: int = 8, ranks: int = 8):
    """A backward's shape: each layer's weight gradient is reduce-scattered while the chain goes on."""
    group = fake_group(ranks, tag=f"bkrs{ranks}")

    def step(g, *ws):
        grads = []
        for w in ws:
            grads.append(C10D.wait_tensor(C10D.reduce_scatter_tensor(g.t() @ g, "sum", ranks, group)))
            g = torch.relu(g @ w)
        return grads

    args = [torch.empty(DIM, DIM)] + [torch.empty(DIM, DIM) for _ in range(layers)]
    return make_fx(step, tracing_mode="fake")(*args)


def _cost(node):
    """50 us a matmul; a reduce_scatter 60 us of latency plus 60 us per gradient it carries: a bucket of
    two pays one latency less than two launches but takes longer than a layer's compute."""
    if node.op != "call_function":
        return None
    if "aten.mm" in str(node.target):
        return 50e-6
    if "reduce_scatter" in str(node.target):
        return (60 + 60 * node_val(node.args[0]).numel() / DIM ** 2) * 1e-6
    return None


def _extract(gm, freeable_inputs=()):
    return extract_for_optimize(gm, cost_fn=_cost, freeable_inputs=freeable_inputs)


def test_halve_cuts_a_bucket_where_half_its_bytes_are_launched():
    group = fake_group(4, tag="bkh")

    def step(a, b, c, d):
        return [C10D.wait_tensor(C10D.reduce_scatter_tensor(t, "sum", 4, group)) for t in (a, b, c, d)]

    gm = make_fx(step, tracing_mode="fake")(torch.empty(4, 24), torch.empty(4, 4), torch.empty(4, 4),
                                            torch.empty(4, 8))
    graph = BucketGraph(gm)
    a, b, c, d = (s.collective for s in graph.sites)
    # 96 + 16 + 16 + 32 elements: the first input alone is over half, so it launches alone
    assert halve(BucketPlan(((a, b, c, d),)), (a, b, c, d), graph).buckets == ((b, c, d),)
    # 16 + 16 | 32: the other bucket untouched, a half of one collective launches alone
    plan = BucketPlan(((b, c, d),))
    assert halve(plan, (b, c, d), graph).buckets == ((b, c),)
    assert halve(BucketPlan(((a, b), (c, d))), (c, d), graph).buckets == ((a, b),)


def test_exposed_buckets_are_the_waits_the_compute_stream_idles_before():
    gm = _backward_chain()
    graph = BucketGraph(gm)
    names = [s.collective for s in graph.sites]
    bucketed = apply_buckets(gm, BucketPlan(tuple(zip(names[::2], names[1::2]))), graph)
    problem, schedule, sim = PlanJudge(None, None, 0).judge(_extract(bucketed))
    exposed = exposed_buckets(launch_members(bucketed), problem, schedule, sim)
    assert exposed, "the last bucket launches after the last gradient: the step waits on it"
    assert [x for x, _ in exposed] == sorted((x for x, _ in exposed), reverse=True)
    # each figure, counted again from the simulation: the wait's start less the compute stream's last end
    members_of = {n.name: n.meta for n in bucketed.graph.nodes}
    for idle, members in exposed:
        launch = next(t for t, task in enumerate(problem.tasks)
                      if members_of[task.name].get(BUCKET_MEMBERS) == members)
        wait = problem.wait_of[launch]
        before = schedule.order[:schedule.order.index(wait)]
        free = max(sim.end[t] for t in before if sim.streams[t] == 0 and problem.tasks[t].role != Role.FREE)
        assert idle == sim.start[wait] - free > 0


def test_the_search_halves_the_buckets_the_step_waits_on_and_keeps_the_shortest_step():
    gm = _backward_chain()
    found = choose_buckets(gm, _extract(gm), _extract, None, BucketOptions(), work_limit=None,
                           extract_work_per_task=0.0, say=lambda _: None)
    halved = [line for line, _ in found.tried if "halved" in line]
    assert halved, "after the caps, the search halves the buckets the step waits on"
    # the first halving cuts every bucket the best one-cap plan waits on (all at once where there are several)
    uniform = [(step, line) for line, step in found.tried if "halved" not in line]
    best_line = min(uniform)[1]
    graph = BucketGraph(gm)
    caps_plan = next(plan for plan in (graph.greedy({"reduce_scatter": DIM * DIM * 4 * k}) for k in (2, 4, 8))
                     if plan.describe(graph.by_name) == best_line)
    bucketed = apply_buckets(gm, caps_plan, graph)
    waits = [members for _, members in exposed_buckets(launch_members(bucketed),
                                                       *PlanJudge(None, None, 0).judge(_extract(bucketed)))]
    expected = caps_plan
    for members in waits:
        expected = halve(expected, members, graph)
    what = f"{len(waits)} buckets halved: " if len(waits) > 1 else f"{waits[0][0]}'s bucket halved: "
    assert halved[0] == what + expected.describe(graph.by_name)
    assert found.step == min(step for _, step in found.tried)


def test_the_decomposition_search_gets_the_work_the_bucket_search_left(monkeypatch):
    import solvercast.pipeline.buckets as bucket_search
    import solvercast.pipeline.decompose as decompose_search
    from solvercast import optimize
    from solvercast.pipeline.tuning import DEFAULT_TUNING

    seen = {}

    def buckets(*args, **kwargs):
        seen["buckets"] = choice = choose_buckets(*args, **kwargs)
        return choice

    def decomposition(*args, **kwargs):
        seen["decomposition"] = kwargs
        return real(*args, **kwargs)

    real = decompose_search.choose_decomposition
    monkeypatch.setattr(bucket_search, "choose_buckets", buckets)
    monkeypatch.setattr(decompose_search, "choose_decomposition", decomposition)
    optimize(_backward_chain(), time_limit=5, memory_budget=float("inf"), cost_fn=_cost)
    plan = DEFAULT_TUNING.time_plan
    own, bucket_share = (share * 5 * plan.work_per_second for share in (plan.decompose_share, plan.bucket_share))
    left = bucket_share - seen["buckets"].work_spent
    assert 0 < seen["buckets"].work_spent and left > 0  # a small graph: the bucket search ran out of plans first
    assert seen["decomposition"]["work_limit"] == own + left
    assert seen["decomposition"]["plan_work"] == plan.decompose_plan_share * 5 * plan.work_per_second


def test_the_rewrite_searches_never_start_a_plan_their_work_cannot_pay_for():
    """Each plan counts its writing and extraction per task and its heuristics' share. Whatever the limit, the
    bucket search spends no more than it (it used to start one more plan whatever was left); a limit that
    pays for less than the unbucketed graph's step and one plan tries nothing and says so; one that pays for
    several plans tries some. The decomposition search alike."""
    from solvercast.pipeline.decompose import choose_decomposition
    from solvercast.rewrites.decompose import DecomposeOptions
    from tests.rewrites.test_decompose import _gather_matmul_scatter

    per_task, plan_work = 100.0, 1000.0
    for search, gm, options in ((choose_buckets, _backward_chain(), BucketOptions()),
                                (choose_decomposition, _gather_matmul_scatter(), DecomposeOptions())):
        extracted = _extract(gm)
        one_plan = per_task * extracted.problem.num_tasks + plan_work  # the unbucketed graph's size: the least
        for plans in (0.5, 1.5, 2.5, 4, 6, 12):
            limit = plans * one_plan
            found = search(gm, extracted, _extract, None, options, work_limit=limit, extract_work_per_task=per_task,
                           say=lambda _: None, plan_work=plan_work)
            if plans < 2:
                assert found.tried == [] and "not searched" in found.summary()
            if plans >= 6:
                assert found.tried
            if search is choose_buckets:
                assert found.work_spent <= limit


def test_plans_judged_on_their_built_problems_choose_what_written_plans_choose():
    """The search judging each plan on its problem built from the unbucketed one (`bucket_problem`) tries the
    same plans, finds the same steps and keeps the same plan as the search that writes and extracts every
    plan; only the kept plan is written (one write more in the list of plans tried)."""
    gm = _backward_chain()
    args = (gm, _extract(gm), _extract, None, BucketOptions())
    written = choose_buckets(*args, work_limit=None, extract_work_per_task=0.0, say=lambda _: None)
    built = choose_buckets(*args, work_limit=None, extract_work_per_task=0.0, say=lambda _: None,
                           merge_work_per_task=0.0)
    assert built.tried[:-1] == written.tried and built.tried[-1] == ("written: " + written.plan.describe(
        built.graph.by_name), written.step)
    assert (built.plan, built.step) == (written.plan, written.step) and written.plan.buckets
    assert [t.duration for t in built.extracted.problem.tasks] == [t.duration for t in written.extracted.problem.tasks]
