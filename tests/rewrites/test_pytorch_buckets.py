"""PyTorch's answers as candidates of the bucket search (`solvercast.rewrites.pytorch_buckets`): its FSDP
pre-buckets and its overlap scheduler's buckets and order, read as plans of our sites and written by our
writer, keep every rank's values; a torch that cannot give them gives none and says why; the search is never
behind the answer it judged."""

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from solvercast.graph.local_run import random_inputs, run_ranks
from solvercast.models import build, fake_group
from solvercast.pipeline.buckets import choose_buckets, order_edges
from solvercast.pipeline.extracted import extract_for_optimize
from solvercast.rewrites.bucketing import BucketGraph, BucketOptions, apply_buckets
from solvercast.rewrites.pytorch_buckets import problem_prices, pytorch_bucket_plan, pytorch_overlap, reordered

C10D = torch.ops._c10d_functional
RANKS = 4
# (one process group over every rank: `run_ranks` gives each collective its true result across them)
MODELS = [("fsdp_layers", dict(layers=3)), ("simple_fsdp", dict(layers=2, batch=4))]


def _graph(gm):
    extracted = extract_for_optimize(gm)
    return extracted, BucketGraph(gm, order_edges=order_edges(extracted.problem))


def _same_on_every_rank(gm, other) -> None:
    rank_args = [random_inputs(gm, seed=r) for r in range(RANKS)]
    for expected, got in zip(run_ranks(gm, rank_args), run_ranks(other, rank_args), strict=True):
        for a, b in zip(expected, got, strict=True):
            assert (a is None and b is None) or torch.equal(a, b)


def _plan_of_sites(plan, graph) -> None:
    position = {s.collective: i for i, s in enumerate(graph.sites)}
    for bucket in plan.buckets:
        assert len(bucket) >= 2 and all(name in position for name in bucket)
        assert [position[n] for n in bucket] == sorted(position[n] for n in bucket)
        assert len({graph.by_name[n].key for n in bucket}) == 1
    graph.check(plan)


@pytest.mark.parametrize("model,params", MODELS)
def test_pytorch_s_overlap_answer_is_an_order_and_a_plan_that_keep_every_rank_s_values(model, params):
    """Its order lists every node once, each after what it needs by our dependencies (aliases, in-place writes
    included); its buckets are sites of one key; written in that order by our writer, every rank computes
    what it computed before, bit for bit."""
    gm = build(model, world_size=RANKS, **params)
    extracted, graph = _graph(gm)
    got, why = pytorch_overlap(gm, problem_prices(extracted.problem, gm), graph)
    assert got is not None, why
    plan, order = got
    assert plan.buckets, f"{model}: PyTorch merged nothing"
    _plan_of_sites(plan, graph)
    assert sorted(order) == sorted(n.name for n in gm.graph.nodes)
    at = {name: i for i, name in enumerate(order)}
    assert all(at[m.name] < at[n.name] for n, needs in graph.needs.items() for m in needs)
    base = reordered(gm, order)
    assert [n.name for n in base.graph.nodes] == order
    _same_on_every_rank(gm, apply_buckets(base, plan, BucketGraph(base)))


@pytest.mark.parametrize("model,params", MODELS[:1])  # (torch finds no FSDP group in simple_fsdp's graph)
def test_pytorch_s_fsdp_buckets_are_a_plan_of_our_sites_that_keeps_the_values(model, params):
    gm = build(model, world_size=RANKS, **params)
    _, graph = _graph(gm)
    plan, why = pytorch_bucket_plan(gm, graph)
    assert plan is not None and plan.buckets, why
    _plan_of_sites(plan, graph)
    _same_on_every_rank(gm, apply_buckets(gm, plan, graph))


def test_a_torch_whose_passes_fail_gives_no_answer_says_why_and_the_search_goes_on(monkeypatch):
    from torch._inductor.fx_passes import fsdp as torch_fsdp
    from torch._inductor.fx_passes import overlap_scheduling

    def moved(*args, **kwargs):
        raise AttributeError("moved in this torch")

    monkeypatch.setattr(overlap_scheduling, "schedule_overlap_bucketing", moved)
    monkeypatch.setattr(torch_fsdp, "identify_fsdp_groups", moved)
    gm = build("fsdp_tp", layers=2, world_size=RANKS, backward=1)
    extracted, graph = _graph(gm)
    for answer in (pytorch_overlap(gm, problem_prices(extracted.problem, gm), graph), pytorch_bucket_plan(gm, graph)):
        assert answer[0] is None and "moved in this torch" in answer[1]
    said: list[str] = []
    found = choose_buckets(gm, extracted, extract_for_optimize, None, BucketOptions(), work_limit=None,
                           extract_work_per_task=0.0, say=said.append, pytorch_work_per_task=0.0)
    assert sum("moved in this torch" in line for line in said) == 2
    assert found.tried and not any("PyTorch" in line for line, _ in found.tried)


def test_the_search_keeps_a_step_no_longer_than_pytorch_s_answer_and_skips_the_pass_it_cannot_pay_for():
    gm = build("fsdp_tp", layers=2, world_size=RANKS, backward=1)
    extracted, _ = _graph(gm)
    args = (gm, extracted, extract_for_optimize, None, BucketOptions())
    found = choose_buckets(*args, work_limit=None, extract_work_per_task=0.0, say=lambda _: None,
                           pytorch_work_per_task=0.0)
    theirs = [step for line, step in found.tried if line.startswith("PyTorch's overlap scheduler")]
    assert len(theirs) == 1 and theirs[0] is not None
    assert found.step <= theirs[0]
    said: list[str] = []
    limit = 1e6  # a second's work: the pass at a second a node is not paid for
    skipped = choose_buckets(*args, work_limit=limit, extract_work_per_task=0.0, say=said.append,
                             pytorch_work_per_task=1e6)
    assert not any(line.startswith("PyTorch") for line, _ in skipped.tried)
    loading = choose_buckets(*args, work_limit=limit, extract_work_per_task=0.0, say=said.append,
                             pytorch_work_per_task=0.0, pytorch_work=2 * limit)  # loading torch's passes alone
    assert any("PyTorch's answers not tried" in line for line in said)
    assert not any(line.startswith("PyTorch") for line, _ in loading.tried)


def _scatters_of_two_sizes():
    group = fake_group(RANKS, tag="ptprice")

    def step(a, b):
        return [C10D.wait_tensor(C10D.reduce_scatter_tensor(t, "sum", RANKS, group)) for t in (a, b)]

    return make_fx(step, tracing_mode="fake")(torch.empty(64, 16), torch.empty(192, 16))


def test_prices_of_a_bucket_pay_the_fixed_cost_once():
    """Two reduce_scatters priced 60 us plus 60 us per 64 rows: a bucket sized as their sum is priced 60 us
    plus 60 us per 64 rows, the line through the two, not the sum of the two prices; a node's own size is
    its own price."""
    gm = _scatters_of_two_sizes()

    def cost(node):
        if "reduce_scatter" in str(node.target):
            return (60 + 60 * node.args[0].meta["val"].shape[0] / 64) * 1e-6
        return None

    problem = extract_for_optimize(gm, cost_fn=cost).problem
    price = problem_prices(problem, gm)
    small, large = [n for n in gm.graph.nodes if "reduce_scatter" in str(n.target)]
    wire = {n: sum(v.numel() * v.element_size() for v in (n.args[0].meta["val"], n.meta["val"])) for n in (small, large)}
    assert price(small) == pytest.approx(0.120) and price(large, wire[large]) == pytest.approx(0.240)
    assert price(small, wire[small] + wire[large]) == pytest.approx(0.300)  # 60 us + 4 x 60 us


def test_prices_read_a_coalesced_collective_s_list_of_inputs():
    group = fake_group(RANKS, tag="ptcoalesced")

    def step(a, b):
        return [C10D.wait_tensor(t) for t in C10D.all_reduce_coalesced([a, b], "sum", group)]

    gm = make_fx(step, tracing_mode="fake")(torch.empty(64, 16), torch.empty(32, 16))
    problem = extract_for_optimize(gm).problem
    price = problem_prices(problem, gm)
    (node,) = [n for n in gm.graph.nodes if "coalesced" in str(n.target)]
    duration = {t.name: t.duration for t in problem.tasks}[node.name] / 1e6
    assert price(node) == pytest.approx(duration)
    assert price(node, 2 * (64 + 32) * 16 * 4) == pytest.approx(duration)  # its own size: its own price


def test_the_overlap_answer_holds_in_a_process_whose_world_is_not_the_graph_s(monkeypatch):
    """A process that joined another world (a test run that built a model on a fake world of its own): the
    graph's groups are none of its, yet torch's scheduler still answers."""
    def unregistered(*args, **kwargs):
        raise ValueError("Group is not registered, please create group with torch.distributed.new_group API")

    gm = build("fsdp_layers", world_size=RANKS, layers=2)
    extracted, graph = _graph(gm)
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_world_size", unregistered)
    monkeypatch.setattr(torch.distributed, "get_rank", unregistered)
    got, why = pytorch_overlap(gm, problem_prices(extracted.problem, gm), graph)
    assert got is not None and got[0].buckets, why


def test_the_report_says_what_became_of_pytorch_s_answers():
    """Judged: each one's step in the buckets line; not paid for: why."""
    gm = build("fsdp_layers", world_size=RANKS, layers=2)
    extracted, _ = _graph(gm)
    args = (gm, extracted, extract_for_optimize, None, BucketOptions())
    judged = choose_buckets(*args, work_limit=None, extract_work_per_task=0.0, say=lambda _: None,
                            pytorch_work_per_task=0.0)
    steps = [step for line, step in judged.tried if line.startswith("PyTorch's overlap")]
    assert f"PyTorch's answers: overlap scheduler's order and buckets {steps[0] / 1e3:,.1f} us" in judged.summary()
    skipped = choose_buckets(*args, work_limit=1e6, extract_work_per_task=0.0, say=lambda _: None,
                             pytorch_work_per_task=0.0, pytorch_work=2e6)
    assert "PyTorch's answers: not tried (about" in skipped.summary()
