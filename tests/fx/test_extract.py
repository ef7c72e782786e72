"""FX -> Problem: classification, buffers, errors, and agreement with PyTorch's FX memory estimator."""

import copy
import operator

import pytest
import torch
import torch.fx as fx
from torch._inductor.fx_passes.memory_estimator import MemoryTracker
from torch.fx.experimental.proxy_tensor import make_fx

from solvercast import ExtractionError, Role, Schedule, extract_problem, simulate
from solvercast.models import build, fake_group, list_models
from solvercast.graph.nodes import NodeKind, classify

_c10d = torch.ops._c10d_functional


def tiny_graph():
    """x(4x8) -> ag = all_gather(x) ; mm = x @ w ; wait(ag) -> view ; relu(mm) -> out"""
    group = fake_group(2)

    def f(x, w):
        ag = _c10d.all_gather_into_tensor(x, 2, group)
        mm = x @ w
        ag = _c10d.wait_tensor(ag)
        return ag.view(-1), torch.relu(mm)

    return make_fx(f, tracing_mode="fake")(torch.randn(4, 8), torch.randn(8, 8))


def test_tiny_graph_tasks_roles_and_buffers():
    gm = tiny_graph()
    before = gm.code
    p = extract_problem(gm)
    assert gm.code == before  # input untouched
    roles = {t.name: t.role for t in p.tasks}
    assert roles == {"all_gather_into_tensor": Role.COMM, "mm": Role.COMPUTE, "wait_tensor": Role.WAIT,
                     "view": Role.FREE, "relu": Role.COMPUTE}
    sizes = {b.name: b.size for b in p.buffers}
    # fp32: x 4*8*4 = 128 B, w 8*8*4 = 256 B, gathered 8*8*4 = 256 B, mm 4*8*4 = 128 B, relu 128 B
    assert sizes == {"x_1": 128, "w_1": 256, "all_gather_into_tensor": 256, "mm": 128, "relu": 128}
    by_name = {b.name: b for b in p.buffers}
    assert by_name["all_gather_into_tensor"].is_output  # returned through the wait and the view
    assert by_name["relu"].is_output and not by_name["mm"].is_output
    ids = {t.name: i for i, t in enumerate(p.tasks)}
    assert p.wait_of == {ids["all_gather_into_tensor"]: ids["wait_tensor"]}
    assert p.resident_bytes == 128 + 256
    assert all(t.duration > 0 for t in p.tasks if t.role in (Role.COMPUTE, Role.COMM))


def test_mutation_is_ordered_after_readers_and_the_collective_wait():
    group = fake_group(2)

    def f(x):
        ar = _c10d.all_reduce(x, "sum", group)
        y = x * 2
        ar = _c10d.wait_tensor(ar)
        x.add_(1)
        return ar + x, y

    gm = make_fx(f, tracing_mode="fake")(torch.randn(8))
    p = extract_problem(gm)
    ids = {t.name: i for i, t in enumerate(p.tasks)}
    assert p.tasks[ids["add_"]].role == Role.COMPUTE
    assert {ids["all_reduce"], ids["mul"], ids["wait_tensor"]} <= set(p.preds[ids["add_"]])
    assert ids["add_"] in p.preds[ids["add"]]  # read after write
    assert len(p.buffers) == 4  # x (written in place: no new buffer), all_reduce, mul, add


@pytest.mark.parametrize("name", list_models())
def test_every_model_extracts(name):
    gm = build(name)
    p = extract_problem(gm)
    call_nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    assert p.num_tasks == len(call_nodes)
    assert [t.name for t in p.tasks] == [n.name for n in call_nodes]
    collectives = [n for n in call_nodes if classify(n).kind is NodeKind.COLLECTIVE]
    assert len(p.wait_of) == len(collectives) > 0
    r = simulate(p, Schedule.original(p))
    assert r.makespan > 0 and r.peak_memory >= p.resident_bytes


def estimator_peak(gm):
    """Peak from torch's MemoryTracker over the original order, on a copy of the graph adjusted for the two
    places where our memory model deliberately differs from it:
    1. A wait returns its collective's buffer (DESIGN: aliases are not allocations). In fake mode
       wait_tensor returns a fresh storage, so the estimator would count the collective's output twice at the
       wait. We give the wait its collective's value.
    2. A collective's input is held until its wait (the library reads it until completion); the estimator
       frees it after the collective. We make the wait read the collective's inputs too.
    Inputs stay resident (is_releasable) and CPU storage is counted (device_filter), as the issue asks."""
    gm = copy.deepcopy(gm)
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is _c10d.wait_tensor.default:
            coll = node.args[0]
            node.meta["val"] = coll.meta["val"]
            node.args = node.args + tuple(coll.all_input_nodes)
    tracker = MemoryTracker(gm.graph, is_releasable=lambda n: n.op not in ("placeholder", "get_attr"),
                            device_filter=lambda device: True)
    for node in gm.graph.nodes:
        tracker.schedule_node(node)
    return tracker.peak_memory


@pytest.mark.parametrize("name,params", [(n, {}) for n in list_models()] + [
    ("tp_block", {"layers": 3}), ("fsdp_layers", {"layers": 4}), ("moe_block", {"layers": 2})])
def test_peak_matches_pytorch_memory_estimator(name, params):
    gm = build(name, **params)
    p = extract_problem(gm)
    assert simulate(p, Schedule.original(p)).peak_memory == estimator_peak(gm)


def test_error_node_without_meta_val():
    gm = fx.symbolic_trace(lambda x: torch.relu(x) + 1)
    with pytest.raises(ExtractionError, match=r"node 'x'.*has no meta\['val'\].*make_fx"):
        extract_problem(gm)


def test_error_graph_not_in_dependency_order():
    gm = tiny_graph()
    relu = next(n for n in gm.graph.nodes if n.name == "relu")
    mm = next(n for n in gm.graph.nodes if n.name == "mm")
    mm.prepend(relu)  # relu now reads mm before mm is computed: a cycle in node order
    with pytest.raises(ExtractionError, match="'relu' reads 'mm'.*not a DAG"):
        extract_problem(gm)


def test_error_shape_that_cannot_be_known():
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    gm = tiny_graph()
    shape_env = ShapeEnv()
    with FakeTensorMode(shape_env=shape_env):
        unknown = torch.empty(shape_env.create_unbacked_symint(), 8)
    next(n for n in gm.graph.nodes if n.name == "relu").meta["val"] = unknown
    with pytest.raises(ExtractionError, match="'relu'.*size cannot be known"):
        extract_problem(gm)


def test_an_unbacked_size_the_user_gave_a_value_sizes_its_buffer():
    """A data-dependent size (an unbacked symbol, as an all_to_all's split sizes read with .item()) has no hint:
    extraction refuses to guess it; once the user gives it a value (`give_size_hint`, torch's
    ``var_to_hint_override``), the buffer is sized with that value."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    from solvercast.graph.fxmeta import give_size_hint

    gm = tiny_graph()
    shape_env = ShapeEnv()
    rows = shape_env.create_unbacked_symint()
    with FakeTensorMode(shape_env=shape_env):
        unknown = torch.empty(rows, 8)
    next(n for n in gm.graph.nodes if n.name == "relu").meta["val"] = unknown
    with pytest.raises(ExtractionError, match="'relu'.*size cannot be known"):
        extract_problem(gm)
    give_size_hint(rows, 6)
    sizes = {b.name: b.size for b in extract_problem(gm).buffers}
    assert sizes["relu"] == 6 * 8 * 4
    with pytest.raises(ValueError, match="not a plain symbolic size"):
        give_size_hint(rows * 2, 12)


def test_a_wait_on_a_waited_value_waits_for_nothing():
    """wait(wait(all_gather(x))), as autoparallel's DeepSeek-V3 graphs hold: the second wait is free and reads
    the first; the collective keeps its one wait."""
    group = fake_group(2)

    def f(x):
        ag = _c10d.wait_tensor(_c10d.all_gather_into_tensor(x, 2, group))
        return _c10d.wait_tensor(ag) + 1

    p = extract_problem(make_fx(f, tracing_mode="fake")(torch.randn(4, 8)))
    ids = {t.name: i for i, t in enumerate(p.tasks)}
    assert p.tasks[ids["wait_tensor_1"]].role == Role.FREE
    assert p.wait_of == {ids["all_gather_into_tensor"]: ids["wait_tensor"]}
    assert ids["wait_tensor"] in p.preds[ids["wait_tensor_1"]]
    simulate(p, Schedule.original(p))


def test_an_input_nothing_reads_needs_no_value():
    """A repro module may pass ints nobody reads; with no meta['val'] they are skipped, not an error."""
    gm = tiny_graph()
    unused = gm.graph.placeholder("unused_int")
    next(iter(gm.graph.nodes)).prepend(unused)
    gm.recompile()
    assert "val" not in unused.meta
    same_problem(extract_problem(gm), extract_problem(tiny_graph()))


def test_freeable_inputs_must_name_inputs():
    with pytest.raises(ExtractionError, match="freeable_inputs names no graph input"):
        extract_problem(tiny_graph(), freeable_inputs=["nope"])
    p = extract_problem(tiny_graph(), freeable_inputs=["x_1"])
    assert p.resident_bytes == 256


def test_writes_through_out_keyword_and_tensor_lists_are_ordered():
    """buf = clone(a); r = sum(buf); mm(a, b, out=buf); sum(buf): the mm writes buf (out=), so it must come
    after the first sum and before the second; same for all_reduce_coalesced_ writing a list in place."""

    def f(a, b):
        buf = a.clone()
        r = buf.sum()
        torch.mm(a, b, out=buf)
        return r, buf.sum()

    gm = make_fx(f, tracing_mode="fake")(torch.randn(4, 4), torch.randn(4, 4))
    p = extract_problem(gm)
    ids = {t.name: i for i, t in enumerate(p.tasks)}
    assert ids["sum_1"] in p.preds[ids["mm"]] and ids["mm"] in p.preds[ids["sum_2"]]

    group = fake_group(2)

    def g(x, y):
        sx = x.sum()
        torch.ops._c10d_functional.all_reduce_coalesced_([x, y], "sum", group)
        return sx, x + y

    gm = make_fx(g, tracing_mode="fake")(torch.randn(4), torch.randn(4))
    p = extract_problem(gm)
    ids = {t.name: i for i, t in enumerate(p.tasks)}
    coll = next(i for i, t in enumerate(p.tasks) if "coalesced" in t.op)
    assert ids["sum_1"] in p.preds[coll] and coll in p.preds[ids["add"]]


def test_ops_returning_none_or_scalars_from_data():
    """foreach_add_ returns None (no meta['val']): extracted as a writer; item() reads tensor data on the
    GPU, so it is a compute task, not a stream-less view."""

    def f(a, b):
        torch._foreach_add_([a], [b])
        return a.sum().item() + 1, a * 2

    gm = make_fx(f, tracing_mode="fake")(torch.randn(4), torch.randn(4))
    p = extract_problem(gm)
    roles = {t.name: t.role for t in p.tasks}
    foreach = next(n for n in roles if "foreach" in n)
    assert roles[foreach] == Role.COMPUTE
    scalar = next(n for n in roles if "item" in n or "local_scalar" in n)
    assert roles[scalar] == Role.COMPUTE


def reshape_graph():
    """reshape/contiguous of a permuted tensor (copies) and of a contiguous one (a view), fake-propagated."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    aten = torch.ops.aten
    g = fx.Graph()
    x = g.placeholder("x")
    p = g.call_function(aten.permute.default, (x, [1, 0]))
    copied = g.call_function(aten.reshape.default, (p, [-1]))
    viewed = g.call_function(aten.reshape.default, (x, [-1]))
    flat = g.call_function(aten.flatten.using_ints, (p,))
    made = g.call_function(aten.contiguous.default, (p,))
    kept = g.call_function(aten.contiguous.default, (x,))
    s = g.call_function(aten.add.Tensor, (copied, viewed))
    t = g.call_function(aten.add.Tensor, (flat, aten_sum := g.call_function(aten.sum.default, (made,))))
    g.output((s, t, g.call_function(aten.sum.default, (kept,)), aten_sum))
    gm = fx.GraphModule(torch.nn.Module(), g)
    mode = FakeTensorMode()
    FakeTensorProp(gm, mode).propagate(mode.from_tensor(torch.randn(64, 32)))
    return gm


def test_a_reshape_that_copies_is_a_task_that_allocates():
    """The schema of reshape/flatten/contiguous declares an alias, but they copy when the input's strides
    allow no view. Judged by the fake tensors themselves (a copy has its own storage) and by PyTorch's
    memory estimator; a reshape-like node was always a free view before."""
    gm = reshape_graph()
    p = extract_problem(gm)
    role = {t.name: t.role for t in p.tasks}
    buffers = {b.name: b.size for b in p.buffers}
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in (torch.ops.aten.reshape.default,
                                                          torch.ops.aten.flatten.using_ints,
                                                          torch.ops.aten.contiguous.default):
            val, src = node.meta["val"], node.args[0].meta["val"]
            copies = val.untyped_storage()._cdata != src.untyped_storage()._cdata
            assert (role[node.name] == Role.COMPUTE) == copies, node.name
            assert (buffers.get(node.name) == val.numel() * val.element_size()) == copies, node.name
    assert sum(r == Role.COMPUTE for r in role.values()) == 3 + 4  # the three copies, two adds, two sums
    assert simulate(p, Schedule.original(p)).peak_memory == estimator_peak(gm)


# ---- nodes without meta["val"]: values derived from the graph ------------------------------------

def multi_output_graph():
    """mm -> split -> var_mean (getitem nodes of two multi-output ops), then an all_gather the original
    order waits on at once, fake-traced."""
    group = fake_group(2)

    def f(x, w, v):
        a, b = torch.split(x @ w, 64, dim=1)
        var, mean = torch.var_mean(a, dim=0)
        c = torch.relu(b) @ v
        ag = _c10d.wait_tensor(_c10d.all_gather_into_tensor(x, 2, group))
        return ag.sum(0)[:64] * mean + var, c

    return make_fx(f, tracing_mode="fake")(torch.randn(64, 128), torch.randn(128, 128), torch.randn(64, 64))


def without_vals(gm, drop):
    """A copy of ``gm`` whose nodes that ``drop`` picks lose meta['val'], and their names."""
    gm = copy.deepcopy(gm)
    dropped = [n.name for n in gm.graph.nodes if drop(n)]
    for n in gm.graph.nodes:
        if n.name in dropped:
            del n.meta["val"]
    assert dropped
    return gm, dropped


def same_problem(p, q):
    assert p.tasks == q.tasks  # names, roles, durations, ops
    assert p.edges == q.edges
    assert p.buffers == q.buffers


def is_getitem(n):
    return n.target is operator.getitem


def test_getitems_without_values_take_their_source_element():
    gm = multi_output_graph()
    stripped, dropped = without_vals(gm, is_getitem)
    assert len(dropped) == 4
    p = extract_problem(stripped)
    same_problem(extract_problem(gm), p)
    assert p.notes == ("values derived for 4 nodes without meta['val'] (getitem of their source: 4)",)
    assert [n.name for n in stripped.graph.nodes if n.op != "output" and "val" not in n.meta] == dropped
    assert extract_problem(gm).notes == ()


def test_other_nodes_without_values_come_from_fake_tensor_prop():
    gm = multi_output_graph()
    # the mm, and the split together with its getitems (their source has no value either)
    stripped, dropped = without_vals(gm, lambda n: n.name in ("mm", "split", "relu") or is_getitem(n))
    before = stripped.code
    p = extract_problem(stripped)
    same_problem(extract_problem(gm), p)
    assert p.notes == ("values derived for 7 nodes without meta['val'] (getitem of their source: 2, "
                       "FakeTensorProp: 5)",)
    # extraction never changes its input: the values stay missing, the code the same
    assert stripped.code == before
    assert [n.name for n in stripped.graph.nodes if n.op != "output" and "val" not in n.meta] == dropped


def test_values_missing_from_a_trace_with_real_tensors_come_from_a_new_fake_mode():
    def f(x, w):
        a, b = torch.split(x @ w, 4, dim=1)
        return torch.relu(b).view(-1), a * 2

    gm = make_fx(f, tracing_mode="real")(torch.randn(4, 8), torch.randn(8, 8))
    stripped, _ = without_vals(gm, lambda n: n.name in ("mm", "split", "view") or is_getitem(n))
    p = extract_problem(stripped)
    same_problem(extract_problem(gm), p)
    assert p.notes == ("values derived for 5 nodes without meta['val'] (FakeTensorProp: 5)",)


def test_optimize_a_graph_without_values_computes_the_same_values():
    from solvercast import optimize
    from solvercast.fx.lower import lower
    from solvercast.graph.local_run import random_inputs, run_local

    gm = multi_output_graph()
    stripped, _ = without_vals(gm, lambda n: n.name == "mm" or is_getitem(n))
    args = random_inputs(gm, seed=1)
    ref = run_local(gm, [a.clone() for a in args])

    def same_values(lowered):
        out = run_local(lowered, [a.clone() for a in args])
        assert len(out) == len(ref) and all(torch.allclose(o, r) for o, r in zip(out, ref))

    res = optimize(stripped, time_limit=2, method="comm_priority", memory_budget=float("inf"))
    assert res.report.method == "comm_priority"  # the all_gather moves first: lowered, not the input
    assert "values derived for 5 nodes" in str(res.report)
    same_values(res.gm)
    # two streams: the relu and the mm after it on stream 1, which reads a getitem without a value
    p = extract_problem(stripped, compute_streams=2)
    ids = {t.name: i for i, t in enumerate(p.tasks)}
    lowered = lower(stripped, p, Schedule(tuple(range(p.num_tasks)), {ids["relu"]: 1, ids["mm_1"]: 1}))
    assert "wait_and_bind" in lowered.code
    same_values(lowered)
    # the lowered module has every value, and extracts to the same problem as the intact graph's lowering
    assert all("val" in n.meta for n in lowered.graph.nodes if n.op != "output")
    same_problem(extract_problem(lower(gm, p, Schedule(tuple(range(p.num_tasks)), {ids["relu"]: 1, ids["mm_1"]: 1})),
                                 compute_streams=2), extract_problem(lowered, compute_streams=2))
    assert "val" not in next(n for n in stripped.graph.nodes if n.name == "mm").meta


def test_a_value_that_cannot_be_derived_is_an_error_that_says_what_was_tried():
    gm = multi_output_graph()
    stripped, _ = without_vals(gm, lambda n: n.name in ("x_1", "mm"))
    with pytest.raises(ExtractionError, match=r"node 'x_1'.*has no meta\['val'\], and none could be derived.*"
                                              r"FakeTensorProp.*: graph input 'x_1' has no value"):
        extract_problem(stripped)

    def data_dependent(t):  # no fake implementation can know the size
        return t[t > 0]

    g = fx.Graph()
    x = g.placeholder("x")
    y = g.call_function(torch.ops.aten.relu.default, (x,))
    z = g.call_function(data_dependent, (y,))
    g.output((z,))
    bad = fx.GraphModule(torch.nn.Module(), g)
    with torch._subclasses.fake_tensor.FakeTensorMode():
        x.meta["val"] = torch.empty(4)
        y.meta["val"] = torch.empty(4)
    with pytest.raises(ExtractionError, match=r"node 'data_dependent'.*FakeTensorProp over a copy of the graph: "
                                              r"it failed at 'data_dependent': DynamicOutputShape"):
        extract_problem(bad)
