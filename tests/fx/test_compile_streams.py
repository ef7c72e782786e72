"""`solvercast.fx.compile_streams`: multi-stream schedules in torch.compile's form (stream annotations,
``torch.ops.streams`` events, control_deps), checked on the graph's structure and, on CPU, through
Inductor's code generation; running the generated code needs CUDA (Inductor's multi-stream wrapper
opens its streams inside a CUDA device guard), so that test skips without it.

Graph of the small tests (make_fx, fake tensors)::

    a = relu(x @ w1) ; b = relu(x @ w2) (on stream 1: hides beside a) ; a + b
"""

import itertools
import operator

import pytest
import torch
import torch._dynamo.variables.streams  # noqa: F401  (registers torch.ops.streams)
import torch.fx as fx
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils._python_dispatch import TorchDispatchMode

from solvercast import Role, Schedule, SolvercastPass, extract_problem
from solvercast.fx.compile_streams import lower_for_compile, stream_of_node
from solvercast.heuristics import list_schedule
from solvercast.graph.local_run import random_inputs, run_local

STREAM_OPS = torch.ops.streams
SYNC = {STREAM_OPS.record_event.default, STREAM_OPS.wait_event.default, STREAM_OPS.record_stream.default}


def _step(x, w1, w2):
    return torch.relu(x @ w1) + torch.relu(x @ w2)


def _graph():
    return make_fx(_step, tracing_mode="fake")(*(torch.empty(64, 64) for _ in range(3)))


def _side_mm_schedule(problem):
    mm = [t for t, task in enumerate(problem.tasks) if task.name.startswith("mm")]
    return Schedule(order=Schedule.original(problem).order, streams={mm[1]: 1}), mm


def _counters():
    events = itertools.count(100)
    return (lambda s: s), (lambda: next(events))


def _subgraph_op(gm, ctrl: fx.Node):
    sub = getattr(gm, ctrl.args[1].target)
    return next(n.target for n in sub.graph.nodes if n.op == "call_function")


def _syncs(gm):
    """(event, stream, node) of every record and every wait, looking inside control_deps."""
    records, waits = [], []
    for n in gm.graph.nodes:
        target = n.target
        if target is torch.ops.higher_order.control_deps:
            target = _subgraph_op(gm, n)
            sub = getattr(gm, n.args[1].target)
            args = next(m.args for m in sub.graph.nodes if m.op == "call_function")
        else:
            args = n.args
        if target is STREAM_OPS.record_event.default:
            records.append((args[0], args[1], n))
        elif target is STREAM_OPS.wait_event.default:
            waits.append((args[0], args[1], n))
    return records, waits


class _NoStreamOps(TorchDispatchMode):
    """CPU has no events: run the graph with the stream ops as no-ops (their order is what is tested)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in SYNC:
            return None
        return func(*args, **(kwargs or {}))


def test_every_consumer_has_its_own_event_and_wait():
    """mm_1 on stream 1 -> record(e1) after it; relu_1 on stream 0 waits e1 and reads mm_1 through the
    wait's control_deps; stream 1 waits for stream 0 before mm_1 (fork); stream 0 waits for stream 1
    before the output (join). No event is waited on twice."""
    gm = _graph()
    problem = extract_problem(gm, compute_streams=2)
    schedule, mm = _side_mm_schedule(problem)
    low = lower_for_compile(gm, problem, schedule, stream_index=lambda s: s, new_event=_counters()[1])
    plan = low.meta["solvercast_streams"]
    records, waits = _syncs(low)
    assert plan.events == len(records) == len(waits) == plan.waits == 3  # edge mm_1 -> relu_1, fork, join
    assert len({e for e, _, _ in records}) == len(records)
    assert sorted(e for e, _, _ in waits) == sorted(e for e, _, _ in records)
    side = [n for n in low.graph.nodes if stream_of_node(n) == 1 and n.op == "call_function"
            and n.target is torch.ops.aten.mm.default]
    assert [n.name for n in side] == [problem.tasks[mm[1]].name]
    mm1 = side[0]
    # the record of mm_1's event is ordered after mm_1 (control_deps on it), on stream 1
    rec = [r for r in records if r[2].args[0] == (mm1,)]
    assert len(rec) == 2 and all(s == 1 for _, s, _ in rec)  # the edge's record and the join's
    # relu_1 reads mm_1 only through a getitem of its own wait's control_deps
    relu1 = next(n for n in low.graph.nodes if n.name == "relu_1")
    (inp,) = relu1.all_input_nodes
    assert inp.target is operator.getitem and inp.args[0].target is torch.ops.higher_order.control_deps
    assert _subgraph_op(low, inp.args[0]) is STREAM_OPS.wait_event.default
    assert inp.args[0].args[2] is mm1
    # the allocator keeps mm_1 for the stream that reads it
    assert any(n.target is STREAM_OPS.record_stream.default and n.args[0] is mm1 for n in low.graph.nodes)
    # the output reads through the join's wait (stream 0)
    (out,) = next(n for n in low.graph.nodes if n.op == "output").all_input_nodes
    assert out.target is operator.getitem and _subgraph_op(low, out.args[0]) is STREAM_OPS.wait_event.default


@pytest.mark.parametrize("model", ["tp_block", "fsdp_layers"])
def test_values_equal_the_original(model, zoo_graph):
    """A list schedule on two streams, written in compile form, computes the original's values when run
    in node order (stream ops as no-ops: CPU has no events), and every cross-stream edge has a wait."""
    gm = zoo_graph(model, layers=1, hidden=128, seq=32, batch=2, dtype="float32")
    problem = extract_problem(gm, compute_streams=2)
    schedule = list_schedule(problem)
    assert any(s == 1 for s in schedule.streams.values())
    low = lower_for_compile(gm, problem, schedule, stream_index=lambda s: s, new_event=_counters()[1])
    plan = low.meta["solvercast_streams"]
    assert plan.events == plan.waits > 0 and plan.side_tasks > 0
    args = random_inputs(gm, seed=2)
    ref = run_local(gm, [a.clone() for a in args])
    with _NoStreamOps():
        out = run_local(low, [a.clone() for a in args])
    assert len(out) == len(ref) and all(torch.equal(a, b) for a, b in zip(out, ref))
    # every task on stream 1 carries the annotation; every task on stream 0 carries none
    streams = schedule.stream_list(problem)
    names = {n.name: n for n in low.graph.nodes}
    for t, task in enumerate(problem.tasks):
        if task.role == Role.COMPUTE and task.name in names and streams[t] == 1:
            assert stream_of_node(names[task.name]) == 1, task.name


@pytest.mark.filterwarnings("ignore:dynamo_pgo force disabled")
def test_inductor_reads_the_streams_on_cpu():
    """Inductor's scheduler puts the side-stream matmul in a ``with stream1:`` block and emits every
    wait_event. Its CPU wrapper never defines the stream variables (they are opened in a CUDA device
    guard), so the code does not run on CPU: the run either fails on that name or, on a torch that
    fixed it, must equal eager."""
    from unittest import mock

    from torch._inductor.custom_graph_pass import CustomGraphPass
    from torch._inductor.graph import GraphLowering

    from solvercast.fx.compile_streams import annotate_graph_in_place, dynamo_registry

    class Streams(CustomGraphPass):
        def __call__(self, graph):
            problem = extract_problem(graph.owning_module, compute_streams=2)
            schedule, _ = _side_mm_schedule(problem)
            index, event = dynamo_registry(torch.device("cpu"))
            self.plan = annotate_graph_in_place(graph, problem, schedule, stream_index=index, new_event=event)

        def uuid(self):
            return None

    streams = Streams()
    codes = []
    args = [torch.randn(64, 64) for _ in range(3)]
    torch._dynamo.reset()
    with mock.patch.object(torch._inductor.config, "post_grad_custom_post_pass", streams), \
            mock.patch.object(GraphLowering, "save_output_code", lambda code: codes.append(code), create=True):
        try:
            out = torch.compile(_step)(*args)
            ran = True
        except Exception as e:  # the CPU wrapper's missing stream variables
            assert "stream" in str(e), e
            ran = False
    torch._dynamo.reset()
    assert codes, "Inductor generated no code"
    code = codes[-1]
    assert "with stream1:" in code
    block = code.split("with stream1:")[1].split("with default_stream:")[0]
    assert "extern_kernels.mm" in block  # the side-stream matmul runs in the side stream's block
    assert code.count("torch.ops.streams.wait_event") == streams.plan.waits
    assert code.count("torch.ops.streams.record_event") == streams.plan.events
    if ran:
        torch.testing.assert_close(out, _step(*args))


@pytest.mark.gpu
@pytest.mark.filterwarnings("ignore:dynamo_pgo force disabled")
def test_solvercast_pass_with_two_streams_under_torch_compile_on_cuda():
    """SolvercastPass(compute_streams=2) as Inductor's post-grad pass on a CUDA graph: the generated
    code runs and equals eager."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA: Inductor opens its side streams inside a CUDA device guard")
    from unittest import mock

    p = SolvercastPass(time_limit=2, compute_streams=2)
    assert p.uuid() is None
    args = [torch.randn(1024, 1024, device="cuda") for _ in range(3)]
    torch._dynamo.reset()
    with mock.patch.object(torch._inductor.config, "post_grad_custom_post_pass", p):
        compiled = torch.compile(_step)
        for _ in range(3):
            torch.testing.assert_close(compiled(*args), _step(*args))
    torch._dynamo.reset()
    assert p.calls >= 1 and p.last_result is not None


def test_solvercast_pass_writes_compile_streams_for_a_cuda_graph(monkeypatch):
    """The post-grad hook on a CUDA graph (fake tensors: no GPU needed to trace or schedule) with
    compute_streams=2: the graph is rewritten in place in compile form (stream indices from dynamo's
    registry, here replaced by counters since no CUDA runtime is at hand), and uuid() is None."""
    import warnings

    from torch._subclasses.fake_tensor import FakeTensorMode

    import solvercast.pipeline.api as cs  # SolvercastPass calls the registry it imported

    with FakeTensorMode():
        args = [torch.empty(256, 256, device="cuda") for _ in range(3)]
    gm = make_fx(_step, tracing_mode="fake")(*args)
    monkeypatch.setattr(cs, "dynamo_registry", lambda device: _counters())
    p = SolvercastPass(time_limit=1, compute_streams=2)
    assert p.uuid() is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback to one stream
        assert p(gm.graph) is None
    res = p.last_result
    side = {res.problem.tasks[t].name for t, s in enumerate(res.schedule.stream_list(res.problem))
            if s == 1 and res.problem.tasks[t].role == Role.COMPUTE}
    assert side, "the two independent matmuls should be split over the two streams"
    assert {n.name for n in gm.graph.nodes if stream_of_node(n) == 1 and n.target in
            (torch.ops.aten.mm.default, torch.ops.aten.relu.default)} == side
    records, waits = _syncs(gm)
    assert len(records) == len(waits) >= 2 and len({e for e, _, _ in records}) == len(records)
    gm.graph.lint()
