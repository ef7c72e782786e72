"""solvercast.graph.nodes: what each FX node is, on tiny graphs traced with make_fx on fake tensors."""

from __future__ import annotations

import operator

import pytest
import torch
import torch.fx as fx
from torch.fx.experimental.proxy_tensor import make_fx

from solvercast import extract_problem
from solvercast.graph.collectives import COLLECTIVE_KINDS, REGISTRY
from solvercast.graph.nodes import NodeKind, classify, costs_nothing, is_task
from solvercast.models import fake_group
from tests.support import collective_graph

C10D = torch.ops._c10d_functional
GROUP = fake_group(4)


def _trace(f, *args) -> fx.GraphModule:
    return make_fx(f, tracing_mode="fake")(*args)


def _by_name(gm) -> dict[str, fx.Node]:
    return {n.name: n for n in gm.graph.nodes}


def test_inputs_output_compute_view_getitem_and_metadata():
    """x, w -> mm -> t (view) ; var_mean -> getitem x2 ; sym_size(x) -> new_zeros -> output
    (traced with symbolic sizes, so that reading a size is a node)"""

    def f(x, w):
        y = (x @ w).t()
        var, mean = torch.var_mean(x, dim=0)
        return y, var, mean, x.new_zeros(x.shape[0])

    gm = make_fx(f, tracing_mode="symbolic")(torch.randn(4, 8), torch.randn(8, 8))
    kinds = {n.name: classify(n).kind for n in gm.graph.nodes}
    assert kinds["x_1"] is kinds["w_1"] is NodeKind.INPUT
    assert kinds["output"] is NodeKind.OUTPUT
    assert kinds["mm"] is NodeKind.COMPUTE
    assert kinds["t"] is NodeKind.VIEW
    assert kinds["var_mean"] is NodeKind.COMPUTE
    assert [kinds[k] for k in ("getitem", "getitem_1")] == [NodeKind.GETITEM] * 2
    sym = [n for n in gm.graph.nodes if n.target is torch.ops.aten.sym_size.int]
    assert sym and all(classify(n).kind is NodeKind.METADATA for n in sym)
    assert [is_task(n) for n in gm.graph.nodes if n.op != "call_function"] == [False] * 3
    # the cost model's schema rule: views and getitem cost nothing, metadata queries are priced
    assert costs_nothing(classify(_by_name(gm)["t"])) and costs_nothing(classify(_by_name(gm)["getitem"]))
    assert not costs_nothing(classify(_by_name(gm)["mm"])) and not costs_nothing(classify(sym[0]))


def test_unsafe_view_is_a_view_though_its_schema_does_not_say_so():
    gm = _trace(lambda a, b: a @ b, torch.randn(2, 3, 4, 5), torch.randn(5, 6))
    views = [n for n in gm.graph.nodes if n.target is torch.ops.aten._unsafe_view.default]
    assert views and all(classify(n).kind is NodeKind.VIEW for n in views)


def test_in_place_op_names_the_argument_it_writes():
    """x -> mul ; add_(x, mul) writes x ; copy_(out=y... ) writes its self"""

    def f(x, y):
        m = x * 2
        x.add_(m)
        torch.ops.aten.copy_(y, m)
        return x, y

    gm = _trace(f, torch.randn(4), torch.randn(4))
    nodes = _by_name(gm)
    add_, copy_ = nodes["add_"], nodes["copy_"]
    assert classify(add_).kind is NodeKind.COMPUTE
    assert classify(add_).mutated_args == ("self",) and classify(add_).writes == (nodes["x_1"],)
    assert classify(copy_).writes == (nodes["y_1"],)
    assert classify(nodes["mul"]).writes == () and classify(nodes["mul"]).mutated_args == ()


def test_foreach_in_place_writes_every_tensor_of_its_list():
    def f(a, b):
        torch._foreach_add_([a, b], [b, a])
        return a, b

    gm = _trace(f, torch.randn(4), torch.randn(4))
    nodes = _by_name(gm)
    foreach = next(n for n in gm.graph.nodes if "foreach" in n.name)
    assert classify(foreach).writes == (nodes["a_1"], nodes["b_1"])


EXPECTED_KIND = {
    C10D.all_reduce.default: "all_reduce",
    C10D.all_gather_into_tensor.default: "all_gather",
    C10D.reduce_scatter_tensor.default: "reduce_scatter",
    C10D.all_to_all_single.default: "all_to_all",
    C10D.broadcast.default: "broadcast",
    C10D.all_reduce_coalesced.default: "all_reduce",
    C10D.all_gather_into_tensor_coalesced.default: "all_gather",
    C10D.reduce_scatter_tensor_coalesced.default: "reduce_scatter",
    C10D.all_reduce_.default: "all_reduce",
}


def test_each_collective_kind_its_group_and_its_waits():
    """every kind in its functional, in-place and coalesced forms (test_cost's graph), each launch waited on"""
    gm = collective_graph(GROUP)
    seen = set()
    for node in gm.graph.nodes:
        info = classify(node)
        if node.target in EXPECTED_KIND:
            assert info.kind is NodeKind.COLLECTIVE
            assert info.collective.name == EXPECTED_KIND[node.target]
            assert info.group_name == GROUP and info.distributed
            seen.add(info.collective.name)
        elif node.target is C10D.wait_tensor.default:
            assert info.kind is NodeKind.WAIT and info.collective is None and info.distributed
        else:
            assert info.kind not in (NodeKind.COLLECTIVE, NodeKind.WAIT) and not info.distributed
    assert seen == set(COLLECTIVE_KINDS)
    in_place = next(n for n in gm.graph.nodes if n.target is C10D.all_reduce_.default)
    assert classify(in_place).mutated_args == ("input",)
    assert classify(in_place).writes == (in_place.args[0],)


def test_registry_has_one_record_per_kind_and_each_op_in_one_record():
    assert [k.name for k in REGISTRY] == list(COLLECTIVE_KINDS)
    ops = [op for k in REGISTRY for op in k.ops]
    assert len(ops) == len(set(ops))


def test_getitem_of_a_coalesced_collective_leads_extract_to_its_collective():
    """all_reduce_coalesced -> getitem, getitem -> wait, wait: the first wait completes the collective"""
    gm = collective_graph(GROUP)
    p = extract_problem(gm)
    ids = {t.name: i for i, t in enumerate(p.tasks)}
    coalesced = ids["all_reduce_coalesced"]
    getitems = [n for n in gm.graph.nodes
                if classify(n).kind is NodeKind.GETITEM and n.args[0].name == "all_reduce_coalesced"]
    assert len(getitems) == 2 and all(n.target is operator.getitem for n in getitems)
    first_wait = next(iter(getitems[0].users))
    assert p.wait_of[coalesced] == ids[first_wait.name]


@pytest.mark.parametrize("op", ["call_module", "call_method"])
def test_opaque_nodes(op):
    g = fx.Graph()
    x = g.placeholder("x")
    node = g.create_node(op, "relu" if op == "call_method" else "sub", (x,))
    g.output(node)
    assert classify(node).kind is NodeKind.OPAQUE
    assert costs_nothing(classify(node)) and is_task(node)


def test_packet_targets_of_symbolic_traced_graphs_are_their_overloads():
    """symbolic_trace + FakeTensorProp names a functional collective by its packet
    (`_c10d_functional.all_reduce`, no `.default`): it was costed as a compute kernel, its wait too."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    from solvercast import Role, extract_problem
    from solvercast.models import fake_group

    group = fake_group(2)
    c10d = torch.ops._c10d_functional

    def f(x, w):
        return c10d.wait_tensor(c10d.all_reduce(x @ w, "sum", group)) + 1

    gm = torch.fx.symbolic_trace(f)
    mode = FakeTensorMode()
    FakeTensorProp(gm, mode).propagate(mode.from_tensor(torch.randn(8, 8)), mode.from_tensor(torch.randn(8, 8)))
    by_name = {n.name: n for n in gm.graph.nodes}
    info = classify(by_name["all_reduce"])
    assert info.kind is NodeKind.COLLECTIVE and info.collective.name == "all_reduce" and info.group_name == group
    assert classify(by_name["wait_tensor"]).kind is NodeKind.WAIT
    roles = {t.name: t.role for t in extract_problem(gm).tasks}
    assert roles["all_reduce"] == Role.COMM and roles["wait_tensor"] == Role.WAIT


def test_the_report_lists_ops_priced_without_a_schema_and_modules_are_refused():
    """symbolic_trace graphs name Python callables (operator.matmul) and modules: the first are
    priced by bytes alone (a matmul far too low), and the report says which; the second cost 0 ns
    silently, and are refused with what to do instead."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    from solvercast import ExtractionError, optimize

    def f(x, w):
        return (x @ w) + 1

    gm = torch.fx.symbolic_trace(f)
    mode = FakeTensorMode()
    FakeTensorProp(gm, mode).propagate(mode.from_tensor(torch.randn(8, 8)), mode.from_tensor(torch.randn(8, 8)))
    report = optimize(gm, time_limit=1).report
    assert report.schemaless_ops == {"_operator.add": 1, "_operator.matmul": 1}
    assert "costed by bytes  _operator.add x1, _operator.matmul x1" in str(report)
    traced = make_fx(f, tracing_mode="fake")(torch.randn(8, 8), torch.randn(8, 8))
    assert optimize(traced, time_limit=1).report.schemaless_ops == {}

    module = torch.fx.symbolic_trace(torch.nn.Sequential(torch.nn.Linear(4, 4)))
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    FakeTensorProp(module, mode).propagate(mode.from_tensor(torch.randn(2, 4)))
    with pytest.raises(ExtractionError, match="call_module.*make_fx"):
        optimize(module, time_limit=1)
