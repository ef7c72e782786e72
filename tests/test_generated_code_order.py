"""The pass's order reaches Inductor's generated code: the zoo's DTensor models compiled on CPU with
`SolvercastPass` as the post-grad custom pass (fake default process group: real tensors, no
communication), and in the output code (`run_and_get_code`) the collectives, waits and matmuls come
in the order the pass chose, forward and backward.

Inductor fuses the pointwise ops around them, but each collective, wait and ``aten.mm`` stays one
call (``torch.ops._c10d_functional.*``, ``extern_kernels.mm``), so the sequence of their kinds in the
code is compared with that of the pass's order. It differs from the graph's own order (checked), so
the comparison would see Inductor moving them back (``reorder_for_peak_memory`` or its comm passes).
"""

import re

import pytest
import torch

from solvercast import SolvercastPass
from solvercast.models import describe
from solvercast.models._capture import fake_mesh
from solvercast.models._tracing import parse_dtype
from solvercast.models.llama import make_step, mesh_dims
from solvercast.nodes import NodeKind, classify

_CODE_CALL = re.compile(r"_c10d_functional\.(\w+)\.default\(|extern_kernels\.(mm)\(")


def _unwrapped(node):
    """The op a ``control_deps`` node (`solvercast.pin_order`) runs: its subgraph's one call."""
    if node.op == "call_function" and getattr(node.target, "name", lambda: None)() == "control_deps":
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


def _compile_with_pass(name: str, **params):
    p = {**describe(name)["defaults"], **params}
    p["dtype"] = parse_dtype(p["dtype"])
    solver_pass = SolvercastPass(time_limit=1)
    graphs = []  # (original kinds, the pass's kinds) per compiled graph

    from torch._inductor.custom_graph_pass import CustomGraphPass

    class Recorded(CustomGraphPass):
        def __call__(self, graph):
            before = [k for k in map(_kind, graph.nodes) if k]
            solver_pass(graph)
            graphs.append((before, [k for k in map(_kind, graph.nodes) if k]))

        def uuid(self):
            return solver_pass.uuid()

    from torch._inductor.utils import run_and_get_code

    dims = mesh_dims(name, p)
    with fake_mesh([s for _, s in dims], [n for n, _ in dims]) as mesh:
        torch.manual_seed(0)
        model, x = make_step(name, p, mesh)
        torch._dynamo.reset()
        try:
            with torch._inductor.config.patch(post_grad_custom_post_pass=Recorded(), force_disable_caches=True):
                compiled = torch.compile(model, fullgraph=True, dynamic=False)
                _, codes = run_and_get_code(lambda: compiled(x).sum().backward())
        finally:
            torch._dynamo.reset()
    return graphs, codes


def _check(name: str, **params):
    graphs, codes = _compile_with_pass(name, **params)
    assert len(graphs) == 2 and len(codes) == 2  # forward and backward
    moved = False
    for (before, chosen), code in zip(graphs, codes):
        assert _code_kinds(code) == chosen
        moved |= before != chosen
    assert moved, "the pass kept the graph's order: the test could not tell Inductor's order from ours"


@pytest.mark.filterwarnings("ignore:dynamo_pgo force disabled")
def test_llama_tp_order_reaches_the_generated_code():
    _check("llama_tp", layers=1)


@pytest.mark.heavy
@pytest.mark.xfail(strict=True, reason="issue 15, not done: Inductor moves the FSDP models' collectives and waits "
                   "away from the pass's order (not reorder_for_peak_memory: also seen with it off); pinning the order "
                   "with control deps as overlap_scheduling's insert_overlap_deps does is not implemented")
@pytest.mark.filterwarnings("ignore:dynamo_pgo force disabled")
@pytest.mark.parametrize("name", ["simple_fsdp", "fsdp_tp"])
def test_fsdp_models_order_reaches_the_generated_code(name):
    _check(name, layers=1)
