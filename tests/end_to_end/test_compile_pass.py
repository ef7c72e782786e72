"""SolvercastPass as a gm -> gm callable and as a torch.compile (Inductor) post-grad custom pass on CPU.

The compiled function contains a functional collective (``_c10d_functional.all_reduce`` + ``wait_tensor``)
on the fake process group of `solvercast.models.fake_group`: Inductor compiles it on CPU and the fake
group runs it eagerly too (no communication: the fake "sum" leaves the tensor as it is), so compiled and
eager outputs can be compared.
"""

import pytest
import torch
import torch.fx as fx

from solvercast import SolvercastPass
from solvercast.models import build, fake_group

GROUP = fake_group(2)
C10D = torch.ops._c10d_functional


def step(x, w1, w2, w3):
    # program order is bad on purpose: the independent matmul x @ w2 comes after the wait,
    # so the all_reduce is exposed; the scheduler can hide it behind that matmul.
    a = x @ w1
    r = C10D.wait_tensor(C10D.all_reduce(a, "sum", GROUP))
    c = torch.relu(r) @ w3
    b = torch.tanh(x @ w2)
    return c + b


def inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(64, 128, generator=g), torch.randn(128, 256, generator=g),
            torch.randn(128, 256, generator=g), torch.randn(256, 256, generator=g))


def test_pass_is_an_inductor_custom_graph_pass_with_a_stable_uuid():
    from torch._inductor.custom_graph_pass import CustomGraphPass

    p = SolvercastPass(time_limit=1)
    assert isinstance(p, CustomGraphPass)  # else Inductor bypasses its FX graph cache
    assert p.uuid() == SolvercastPass(time_limit=1).uuid()
    assert p.uuid() == SolvercastPass(time_limit=1, progress=print).uuid()  # progress does not change results
    assert p.uuid() != SolvercastPass(time_limit=2).uuid()


def test_the_uuid_changes_when_any_module_of_the_three_packages_changes(monkeypatch):
    """Inductor serves a cached graph while the key is the same: an upgrade that changes any source file of
    solvercast, its heuristics or its models must change it."""
    import importlib
    from pathlib import Path

    files = sorted({path.resolve() for package in ("solvercast", "solvercast.heuristics", "solvercast.models")
                    for path in Path(importlib.import_module(package).__file__).resolve().parent.rglob("*.py")})
    assert len(files) > 60 and any("rewrites" in p.parts for p in files) and any("ir" in p.parts for p in files)
    key = SolvercastPass(time_limit=1).uuid()
    read = Path.read_bytes
    for changed in files:
        monkeypatch.setattr(Path, "read_bytes", lambda self, c=changed: read(self) + (b"#" if self == c else b""))
        assert SolvercastPass(time_limit=1).uuid() != key, changed
    monkeypatch.setattr(Path, "read_bytes", read)
    assert SolvercastPass(time_limit=1).uuid() == key


@pytest.mark.filterwarnings("ignore:dynamo_pgo force disabled")
def test_runs_as_torch_compile_post_grad_pass_on_cpu():
    p = SolvercastPass(time_limit=1)
    lowered = []  # the node order Inductor goes on with, recorded by a pass after ours

    from torch._inductor.custom_graph_pass import CustomGraphPass

    class ThenRecord(CustomGraphPass):  # one pass object: older torch takes no list of passes here
        def __call__(self, graph):
            p(graph)  # the pinned nodes become control_deps nodes of the same name, each after its subgraph
            lowered.append([n.name for n in graph.nodes if n.op != "get_attr"])

        def uuid(self):
            return p.uuid()

    args = inputs()
    expected = step(*args)
    torch._dynamo.reset()
    # caches off: a cache hit (same uuid, same graph) would skip the pass
    with torch._inductor.config.patch(post_grad_custom_post_pass=ThenRecord(), force_disable_caches=True):
        compiled = torch.compile(step, backend="inductor", fullgraph=True)
        out = compiled(*args)
    torch._dynamo.reset()

    assert p.calls == 1 and p.last_result is not None
    res = p.last_result
    names = {t.name for t in res.problem.tasks}
    assert any("all_reduce" in n for n in names) and any("wait_tensor" in n for n in names)
    assert res.report.optimized_makespan <= res.report.baseline_makespan
    assert res.report.optimized_makespan == res.optimized.makespan
    assert lowered == [[n.name for n in res.gm.graph.nodes]]  # Inductor's graph now has the optimized order
    assert res.report.optimized_peak_memory <= res.report.memory_budget
    assert torch.allclose(out, expected, rtol=1e-4, atol=1e-4)
    # the same compiled function on other values
    other = inputs(1)
    assert torch.allclose(compiled(*other), step(*other), rtol=1e-4, atol=1e-4)


def test_graph_input_is_reordered_in_place_to_the_optimized_order():
    from torch.fx.experimental.proxy_tensor import make_fx

    gm = make_fx(step, tracing_mode="fake")(*inputs())
    graph = gm.graph
    names_before = {n.name for n in graph.nodes}
    p = SolvercastPass(time_limit=1, compute_streams=2)
    with pytest.warns(UserWarning, match="single compute stream"):
        assert p(graph) is None
    # same nodes (the pinned ones wrapped in control_deps, under their names: solvercast.fx.pin_order), same owner
    assert {n.name for n in graph.nodes if n.op != "get_attr"} == names_before and gm.graph is graph
    graph.lint()
    optimized = [n.name for n in p.last_result.gm.graph.nodes]
    assert [n.name for n in graph.nodes if n.name in optimized] == optimized
    assert p.last_result.report.optimized_makespan < p.last_result.report.baseline_makespan  # the wait moved
    gm.recompile()
    args = inputs(2)
    assert torch.allclose(gm(*args), step(*args), rtol=1e-5, atol=1e-5)


def test_graph_module_input_returns_an_equivalent_module():
    gm = build("tp_block", layers=1)
    code = gm.code
    p = SolvercastPass(time_limit=1)
    out = p(gm)
    assert isinstance(out, fx.GraphModule) and out is not gm and gm.code == code
    assert p.calls == 1 and p.last_result.gm is out
    assert p.last_result.report.optimized_makespan <= p.last_result.report.baseline_makespan
    torch.manual_seed(0)
    args = [torch.randn(n.meta["val"].shape, dtype=n.meta["val"].dtype) for n in gm.graph.nodes
            if n.op == "placeholder"]
    for a, b in zip(gm(*args), out(*args)):
        assert torch.equal(a, b)


def test_graph_the_limit_cannot_read_is_left_as_it_is():
    """A time limit below `analysis_seconds`: the fx.Graph is neither reordered nor pinned."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from solvercast.pipeline.time_plan import analysis_seconds

    gm = make_fx(step, tracing_mode="fake")(*inputs())
    before = [(n.name, n.target) for n in gm.graph.nodes]
    p = SolvercastPass(time_limit=analysis_seconds(len(gm.graph.nodes)) / 2)
    assert p(gm.graph) is None
    assert not p.last_result.report.analysed
    assert [(n.name, n.target) for n in gm.graph.nodes] == before


WIDE = fake_group(16, tag="compile-buckets")


def sixteen_all_reduces(x, *ws):
    """Sixteen small all_reduces over 16 ranks, each paying its latency steps, then one matmul."""
    outs = [C10D.wait_tensor(C10D.all_reduce(w, "sum", WIDE)) for w in ws]
    return x @ torch.cat(outs)


@pytest.mark.filterwarnings("ignore:dynamo_pgo force disabled")
def test_buckets_chosen_inside_torch_compile_keep_the_values():
    """The pass's buckets are written into Inductor's graph in place (new nodes, the replaced collectives
    erased); the compiled function computes what the eager one does."""
    import math

    g = torch.Generator().manual_seed(0)
    args = [torch.randn(8, 64, generator=g)] + [torch.randn(4, 32, generator=g) for _ in range(16)]
    expected = sixteen_all_reduces(*args)
    p = SolvercastPass(time_limit=2, memory_budget=math.inf)
    torch._dynamo.reset()
    with torch._inductor.config.patch(post_grad_custom_post_pass=p, force_disable_caches=True):
        out = torch.compile(sixteen_all_reduces, backend="inductor", fullgraph=True)(*args)
    torch._dynamo.reset()
    res = p.last_result
    assert res.buckets is not None and res.buckets.plan.merged >= 2
    assert res.report.optimized_makespan < res.report.baseline_makespan
    assert torch.equal(out, expected)


TP = fake_group(8, tag="compile-decompose")


def tensor_parallel_mlp(x, w1, w2):
    """A sequence-parallel MLP on 8 ranks: the sequence shard all-gathered into the first matmul, the second
    matmul's product reduce-scattered back to shards."""
    rows = C10D.wait_tensor(C10D.all_gather_into_tensor(x, 8, TP))
    h = torch.relu(rows @ w1)
    return C10D.wait_tensor(C10D.reduce_scatter_tensor(h @ w2, "sum", 8, TP))


@pytest.mark.filterwarnings("ignore:dynamo_pgo force disabled")
def test_decomposition_chosen_inside_torch_compile_keeps_the_values():
    """The pass splits the all_gather -> matmul and matmul -> reduce_scatter pairs into chunks written into
    Inductor's graph in place; the compiled function computes what the eager one does (the fake group's
    collectives are deterministic: an all_gather repeats its input, a reduce_scatter keeps the first block)."""
    import math

    g = torch.Generator().manual_seed(0)
    args = [torch.randn(512, 1024, generator=g), torch.randn(1024, 2048, generator=g) / 32,
            torch.randn(2048, 1024, generator=g) / 45]
    expected = tensor_parallel_mlp(*args)
    p = SolvercastPass(time_limit=4, memory_budget=math.inf, bucketing=False)
    torch._dynamo.reset()
    with torch._inductor.config.patch(post_grad_custom_post_pass=p, force_disable_caches=True):
        out = torch.compile(tensor_parallel_mlp, backend="inductor", fullgraph=True)(*args)
    torch._dynamo.reset()
    res = p.last_result
    assert res.decomposition is not None and res.decomposition.plan.degrees, res.report.decomposition
    assert res.report.optimized_makespan < res.report.baseline_makespan
    torch.testing.assert_close(out, expected)


def test_inside_inductor_pytorch_s_bucket_answers_cost_no_load(monkeypatch):
    """Inductor's passes are loaded wherever its post-grad hook runs (on every rank): the time plan counts no
    load for PyTorch's bucket answers there, and keeps the caller's other tuning."""
    import dataclasses

    from torch.fx.experimental.proxy_tensor import make_fx

    from solvercast.pipeline import api
    from solvercast.pipeline.tuning import DEFAULT_TUNING

    seen = []
    real = api.optimize
    mine = dataclasses.replace(DEFAULT_TUNING, time_plan=dataclasses.replace(DEFAULT_TUNING.time_plan, bucket_share=0.5))
    pass_ = SolvercastPass(time_limit=1, tuning=mine)
    monkeypatch.setattr(api, "optimize", lambda gm, **options: seen.append(options["tuning"]) or real(gm, **options))
    pass_(make_fx(step, tracing_mode="fake")(*inputs()).graph)
    assert DEFAULT_TUNING.time_plan.bucket_pytorch_seconds > 0
    (tuning,) = seen
    assert tuning.time_plan == dataclasses.replace(mine.time_plan, bucket_pytorch_seconds=0.0)
