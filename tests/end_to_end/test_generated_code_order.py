"""The pass's order reaches Inductor's generated code: models compiled on CPU with `SolvercastPass`
as the post-grad custom pass (fake process group: real tensors, no communication), and in the output
code (``run_and_get_code``) the collectives, waits and matmuls come in the order the pass chose,
forward and backward.

Inductor fuses the pointwise ops around them, but each collective, wait and ``aten.mm`` stays one
call (``torch.ops._c10d_functional.*``, ``extern_kernels.mm``), so the sequence of their kinds in the
code is compared with that of the pass's order. Left alone, Inductor's scheduler moves them
(``reorder_for_peak_memory`` sinks collectives and hoists matmuls; a fused kernel takes its first
member's place and pulls up what the others read): `solvercast.fx.pin_order` chains them with ``control_deps``.

A small FSDP step (three weights gathered by an autograd all_gather, their gradients
reduce-scattered in the backward) runs by default; its order fails without the pinning (Inductor put
every matmul first in the backward). The zoo's DTensor models take about 30 s each: ``llama_tp`` at
one layer runs by default, the FSDP models are heavy.
"""

import copy
import inspect
import re

import pytest
import torch
import torch.distributed._functional_collectives as funcol
from torch.fx.experimental.proxy_tensor import make_fx

from solvercast import SolvercastPass
from solvercast.models import describe, fake_group
from solvercast.models._capture import fake_mesh
from solvercast.models._tracing import parse_dtype
from solvercast.models.llama import make_step, mesh_dims
from solvercast.graph.nodes import NodeKind, classify
from solvercast.fx.pin_order import REALIZE, chain_edges, pin_order, pinned_nodes
from solvercast.graph.local_run import LocalCollectives, random_inputs, run_local

GROUP = fake_group(2)
C10D = torch.ops._c10d_functional

_CODE_CALL = re.compile(r"_c10d_functional\.(\w+)\.default\(|extern_kernels\.(mm)\(")


def _is_control_deps(node) -> bool:
    return node.op == "call_function" and getattr(node.target, "name", lambda: None)() == "control_deps"


def _unwrapped(node):
    """The op a ``control_deps`` node (`solvercast.fx.pin_order`) runs: its subgraph's one call."""
    if _is_control_deps(node):
        subgraph = getattr(node.graph.owning_module, node.args[1].target)
        return next(n for n in subgraph.graph.nodes if n.op == "call_function")
    return node


def _kind(node) -> str | None:
    node = _unwrapped(node)
    info = classify(node)
    if info.kind is NodeKind.COLLECTIVE:
        return info.collective.name
    if info.kind is NodeKind.WAIT:
        return "wait"
    if node.target is torch.ops.aten.mm.default:
        return "mm"
    return None


def _kinds(graph) -> list[str]:
    return [k for k in map(_kind, graph.nodes) if k]


def _code_kinds(code: str) -> list[str]:
    names = {"all_gather_into_tensor": "all_gather", "reduce_scatter_tensor": "reduce_scatter",
             "all_reduce": "all_reduce", "all_reduce_": "all_reduce", "wait_tensor": "wait", "mm": "mm"}
    out = []
    for line in code.splitlines():
        if line.lstrip().startswith("#"):
            continue
        m = _CODE_CALL.search(line)
        if m:
            out.append(names[m.group(1) or m.group(2)])
    return out


_KERNEL_DEF = re.compile(r"^\s*(\w+) = async_compile\.(cpp_pybinding|cpp|triton)\(", re.M)
_EXTERN_CALL = re.compile(r"\bextern_kernels\.\w+\(")
_BUFFER = re.compile(r"\bempty_strided(_\w+)?\(")


def _code_counts(code: str) -> dict[str, int]:
    """Generated kernels (``async_compile`` definitions: one per kernel Inductor writes), extern kernel
    calls and ``empty_strided`` allocations (materialized buffers) in one output code, comments skipped."""
    lines = "\n".join(line for line in code.splitlines() if not line.lstrip().startswith("#"))
    return {"generated": len(_KERNEL_DEF.findall(lines)), "extern": len(_EXTERN_CALL.findall(lines)),
            "buffers": len(_BUFFER.findall(lines))}


def _recording(solver_pass, graphs: list):
    """A custom post-grad pass that runs ``solver_pass`` and appends (the graph's kinds before it, after
    it) to ``graphs``."""
    from torch._inductor.custom_graph_pass import CustomGraphPass

    class Recorded(CustomGraphPass):
        def __call__(self, graph):
            before = _kinds(graph)
            solver_pass(graph)
            graphs.append((before, _kinds(graph)))

        def uuid(self):
            return solver_pass.uuid()

    return Recorded()


def _compile_with_pass(name: str, solver_pass=None, **params):
    """Model ``name`` compiled (forward and backward) with ``solver_pass`` (default: a
    ``SolvercastPass(time_limit=1)``): (the graphs' kinds before and after the pass, the output codes)."""
    solver_pass = SolvercastPass(time_limit=1) if solver_pass is None else solver_pass
    p = {**describe(name)["defaults"], **params}
    p["dtype"] = parse_dtype(p["dtype"])
    graphs = []  # (original kinds, the pass's kinds) per compiled graph
    from torch._inductor.utils import run_and_get_code

    dims = mesh_dims(name, p)
    with fake_mesh([s for _, s in dims], [n for n, _ in dims]) as mesh:
        torch.manual_seed(0)
        model, x = make_step(name, p, mesh)
        torch._dynamo.reset()
        try:
            with torch._inductor.config.patch(post_grad_custom_post_pass=_recording(solver_pass, graphs),
                                              force_disable_caches=True):
                compiled = torch.compile(model, fullgraph=True, dynamic=False)
                _, codes = run_and_get_code(lambda: compiled(x).sum().backward())
        finally:
            torch._dynamo.reset()
    return graphs, codes


def _compile_graph_module(gm, graph_pass, device: str = "cpu"):
    """A traced zoo model (an aten GraphModule, no autograd) compiled as one graph with ``graph_pass`` as
    the post-grad custom pass, its placeholders fed random tensors on ``device``: (the graph's kinds before
    and after the pass, the output codes)."""
    from torch._inductor.utils import run_and_get_code

    args = random_inputs(gm, seed=0, device=device)
    graphs = []
    torch._dynamo.reset()
    try:
        with torch._inductor.config.patch(post_grad_custom_post_pass=_recording(graph_pass, graphs),
                                          force_disable_caches=True):
            compiled = torch.compile(gm, fullgraph=True, dynamic=False)
            _, codes = run_and_get_code(lambda: compiled(*args))
    finally:
        torch._dynamo.reset()
    return graphs, codes


def _check(graphs, codes):
    assert len(graphs) == 2 and len(codes) == 2  # forward and backward
    moved = False
    for (before, chosen), code in zip(graphs, codes):
        assert _code_kinds(code) == chosen
        moved |= before != chosen
    assert moved, "the pass kept the graph's order: the test could not tell Inductor's order from ours"


_all_gather = getattr(funcol, "all_gather_single_autograd", None) or funcol.all_gather_tensor_autograd


def fsdp_step(x, w1, w2, w3):
    """Three FSDP layers: each weight's shard is gathered (its gradient reduce-scattered in the backward)::

        forward:  per layer ag(w) -> wait -> mm -> relu ; sum
        backward: per layer mm (grad input), mm (grad weight) -> reduce_scatter -> wait

    The pass raises the all_gathers and sinks the waits below the next matmul; unpinned, Inductor's
    reorder_for_peak_memory put every backward matmul first.
    """
    h = x
    for w in (w1, w2, w3):
        h = torch.relu(h @ _all_gather(w, 0, GROUP))
    return h.sum()


def _fsdp_inputs():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 32, generator=g).requires_grad_()
    return [x] + [(torch.randn(16, 32, generator=g) / 6).requires_grad_() for _ in range(3)]


def _compile_step(step, args):
    """``step(*args).backward()`` compiled with the pass: (the graphs' kinds, the output codes, and the
    compiled forward as Inductor made it, to call with ``step``'s arguments outside Dynamo)."""
    from torch._inductor.compile_fx import compile_fx
    from torch._inductor.utils import run_and_get_code

    graphs, compiled = [], []

    def backend(gm, example_inputs):
        compiled.append(([n.name for n in gm.graph.nodes if n.op == "placeholder"], compile_fx(gm, example_inputs)))
        return compiled[-1][1]

    torch._dynamo.reset()
    try:
        with torch._inductor.config.patch(post_grad_custom_post_pass=_recording(SolvercastPass(time_limit=1), graphs),
                                          force_disable_caches=True):
            fn = torch.compile(step, backend=backend, fullgraph=True)
            _, codes = run_and_get_code(lambda: fn(*args).backward())
    finally:
        torch._dynamo.reset()
    (placeholders, forward), = compiled
    position = {f"l_{name}_": i for i, name in enumerate(inspect.signature(step).parameters)}

    def run(*values):  # Dynamo orders the graph's inputs by first use, not as step's parameters
        return forward(*[values[position[name]] for name in placeholders])[0]

    return graphs, codes, run


@pytest.mark.filterwarnings("ignore:dynamo_pgo force disabled")
def test_small_fsdp_step_keeps_the_pass_order_and_the_values():
    args = _fsdp_inputs()
    graphs, codes, compiled = _compile_step(fsdp_step, args)
    _check(graphs, codes)
    # the values, forward and gradients, with deterministic stand-ins for the collectives
    eager, pinned = _fsdp_inputs(), _fsdp_inputs()
    with LocalCollectives():
        expected = fsdp_step(*eager)
        expected.backward()
        got = compiled(*pinned)
        got.backward()
    assert torch.allclose(got, expected, rtol=1e-4, atol=1e-4)
    for a, b in zip(pinned, eager):
        assert b.grad is not None and b.grad.abs().max() > 0
        assert torch.allclose(a.grad, b.grad, rtol=1e-4, atol=1e-4)


def _graph_with_a_hidden_all_reduce():
    """``mm -> ar -> mm_1 (independent) -> wait -> relu -> mm_2 ; add`` (make_fx on fake tensors)."""

    def step(x, w1, w2, w3):
        r = C10D.all_reduce(x @ w1, "sum", GROUP)
        b = x @ w2
        return torch.relu(C10D.wait_tensor(r)) @ w3 + b

    x = torch.randn(8, 16)
    return make_fx(step, tracing_mode="fake")(x, torch.randn(16, 16), torch.randn(16, 16), torch.randn(16, 16))


def test_pin_order_chains_collectives_waits_and_matmuls_and_keeps_the_values():
    gm = _graph_with_a_hidden_all_reduce()
    original = copy.deepcopy(gm)
    order = [n.name for n in gm.graph.nodes if n.op != "get_attr"]
    chain = [n.name for n in pinned_nodes(gm.graph)]
    assert chain == ["mm", "all_reduce", "mm_1", "wait_tensor", "mm_2"]
    # the all_reduce reads mm and mm_2 reads the wait: data orders them, no edge; the independent mm_1
    # and the wait need one each
    edges = [("all_reduce", "mm_1"), ("mm_1", "wait_tensor")]
    assert [(a.name, b.name) for a, b in chain_edges(gm.graph)] == edges
    assert len(chain_edges(gm.graph, implied=True)) == len(chain) - 1
    assert pin_order(gm.graph) == len(edges)
    assert gm.graph.find_nodes(op="call_function", target=C10D.all_reduce.default)[0].meta[REALIZE]  # the wait reads it
    nodes, was = {n.name: n for n in gm.graph.nodes}, {n.name: n for n in original.graph.nodes}
    assert [n.name for n in gm.graph.nodes if n.op != "get_attr"] == order  # nothing moved, nothing lost
    for name in chain:  # each wrapped node depends on the one before it, and runs its own op
        wrapped = [before for before, after in edges if after == name]
        assert _is_control_deps(nodes[name]) == bool(wrapped)
        if wrapped:
            assert nodes[name].args[0] == (nodes[wrapped[0]],)
            assert _unwrapped(nodes[name]).target is was[name].target
    gm.recompile()
    args = random_inputs(original, seed=1)
    assert all(torch.equal(a, b) for a, b in zip(run_local(original, args), run_local(gm, args)))


def test_pin_order_leaves_a_graph_without_two_pinned_nodes():
    gm = make_fx(lambda x: torch.relu(x) @ x, tracing_mode="fake")(torch.randn(4, 4))
    code = gm.code
    assert pin_order(gm.graph) == 0
    gm.recompile()
    assert gm.code == code


@pytest.mark.filterwarnings("ignore:dynamo_pgo force disabled")
def test_llama_tp_order_reaches_the_generated_code():
    _check(*_compile_with_pass("llama_tp", layers=1))


@pytest.mark.heavy
@pytest.mark.filterwarnings("ignore:dynamo_pgo force disabled")
@pytest.mark.parametrize("name", ["simple_fsdp", "fsdp_tp"])
def test_fsdp_models_order_reaches_the_generated_code(name):
    _check(*_compile_with_pass(name, layers=1))


class _EveryLinkPinned:
    """The pass unpinned, then every pinned node wrapped on the one before it (``implied``, ``matmuls``)."""

    def __init__(self):
        self.inner = SolvercastPass(time_limit=1, pin=False)

    def __call__(self, graph):
        self.inner(graph)
        pin_order(graph, implied=True, matmuls=True)

    def uuid(self):
        return self.inner.uuid() + "every-link"


@pytest.mark.filterwarnings("ignore:dynamo_pgo force disabled")
def test_pinning_adds_no_kernel_or_buffer_and_keeps_the_order():
    """tp_mlp (mm -> gelu -> mm -> all_reduce -> wait -> add): pinned as the pass pins, the output code has
    the kernels and buffers of the unpinned pass (data orders every link: nothing is wrapped); wrapping
    every link instead costs a kernel (the post-grad reinplacing pass does not look into the wrapped
    all_reduce, whose lowering then copies its input into a new buffer first)."""
    from solvercast.models import build

    gm = build("tp_mlp", layers=1)
    counts, kept = {}, {}
    for setting, graph_pass in [("pinned", SolvercastPass(time_limit=1)),
                                ("unpinned", SolvercastPass(time_limit=1, pin=False)),
                                ("every link", _EveryLinkPinned())]:
        graphs, codes = _compile_graph_module(copy.deepcopy(gm), graph_pass)
        (_, chosen), = graphs
        (code,) = codes
        counts[setting], kept[setting] = _code_counts(code), _code_kinds(code) == chosen
    assert counts["pinned"] == counts["unpinned"]
    assert kept["pinned"] and kept["every link"]
    assert counts["every link"]["generated"] == counts["pinned"]["generated"] + 1


@pytest.mark.heavy
@pytest.mark.filterwarnings("ignore:dynamo_pgo force disabled")
@pytest.mark.parametrize("name", ["simple_fsdp", "fsdp_tp"])
def test_fsdp_models_pinned_have_the_unpinned_kernels(name):
    """In the backward of these two the matmuls after a wait read a pointwise value (silu times the
    up projection) that Inductor, left alone, computes in one kernel with silu_backward: pinned, it is
    realized outside the wrapped matmul, so the kernels are the unpinned pass's, in the pass's order."""
    counts = {}
    for setting, graph_pass in [("pinned", SolvercastPass(time_limit=1)),
                                ("unpinned", SolvercastPass(time_limit=1, pin=False))]:
        graphs, codes = _compile_with_pass(name, solver_pass=graph_pass, layers=1)
        counts[setting] = sum(_code_counts(code)["generated"] for code in codes)
        if setting == "pinned":
            _check(graphs, codes)
    assert counts["pinned"] == counts["unpinned"]
