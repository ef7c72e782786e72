"""Lowering a Schedule back into FX (solvercast.fx.lower) and the anchor ops (solvercast.graph.ops)."""

from __future__ import annotations

import random
from collections import defaultdict

import pytest
import torch
import torch.fx as fx
from torch.fx.experimental.proxy_tensor import make_fx

from solvercast import InvalidScheduleError, Role, Schedule, extract_problem, validate
from solvercast.graph import ops
from solvercast.fx.lower import LoweringError, anchor_nodes, lower, strip_anchors
from solvercast.graph.local_run import random_inputs, run_local as run
from solvercast.models import build, list_models

C10D = torch.ops._c10d_functional
WAIT = C10D.wait_tensor.default

CASES = [(name, {}) for name in list_models()] + [("tp_block", {"layers": 4})]  # defaults + a multi-layer one
STRUCTURE_CASES = CASES + [("fsdp_layers", {"layers": 3}), ("synthetic", {"tasks": 400, "seed": 5})]


def _case_id(case) -> str:
    name, params = case
    return name + "".join(f"-{k}{v}" for k, v in params.items())


# ---- helpers: schedules, inputs, deterministic local collectives --------------------------------

def random_schedule(problem, seed: int, streams: bool = True) -> Schedule:
    """A random topological order (collectives keep their order) with random allowed streams."""
    rng = random.Random(seed)
    n = problem.num_tasks
    indeg = [len(p) for p in problem.preds]
    comms = list(problem.comm_tasks)
    next_comm = 0
    ready = [t for t in range(n) if indeg[t] == 0]
    order = []
    while ready:
        cands = [t for t in ready if problem.tasks[t].role != Role.COMM or
                 not problem.preserve_collective_order or comms[next_comm] == t]
        t = rng.choice(cands)
        ready.remove(t)
        order.append(t)
        if problem.tasks[t].role == Role.COMM:
            next_comm += 1
        for s in problem.succs[t]:
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    chosen = {t: rng.choice(list(problem.allowed_streams(t))) for t in range(n)} if streams else {}
    sched = Schedule(order, chosen, method=f"random{seed}")
    validate(problem, sched)
    return sched


def real_inputs(gm: fx.GraphModule, seed: int = 0) -> list[torch.Tensor]:
    return random_inputs(gm, seed)


def assert_identical(a: list, b: list) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        if x is None or y is None:  # a graph output that is no tensor (a DTensor graph's mesh slot)
            assert x is None and y is None
            continue
        assert x.dtype == y.dtype and x.shape == y.shape
        torch.testing.assert_close(x, y, rtol=0, atol=0, equal_nan=True)  # bit for bit


def task_names(gm: fx.GraphModule) -> list[str]:
    return [n.name for n in gm.graph.nodes if n.op not in ("placeholder", "get_attr", "output")]


# ---- a replay of the bracket rules: every read and dependency synchronized? ---------------------

def check_stream_program(low: fx.GraphModule, problem, schedule: Schedule) -> dict:
    """Replay ``low`` under the anchor semantics (solvercast.graph.ops) and check:
    each task runs on the stream lowering promises, every dependency of the
    problem and every value read across streams is covered by an event wait,
    stream 0 is current outside brackets and at the end, and stream 0 has
    waited for all side-stream work before returning. Returns kernel counts."""
    streams = schedule.stream_list(problem)
    by_name = {task.name: t for t, task in enumerate(problem.tasks)}
    cur = 0
    seq: dict[int, int] = defaultdict(int)
    known: dict[int, dict[int, int]] = defaultdict(dict)
    token_clock: dict[fx.Node, dict[int, int]] = {}
    kernel: dict[int, tuple[int, int]] = {}  # task -> (stream, seq)
    where: dict[fx.Node, set] = {}  # value -> kernels whose results it holds
    in_bracket = False

    def covered(s: int, producer) -> bool:
        r, q = producer
        return r == s or known[s].get(r, -1) >= q

    def merge(s: int, clock: dict[int, int]) -> None:
        for r, q in clock.items():
            known[s][r] = max(known[s].get(r, -1), q)

    for node in low.graph.nodes:
        if node.op in ("placeholder", "get_attr"):
            where[node] = {(0, 0)}
            continue
        if node.op == "output":
            assert cur == 0 and not in_bracket
            for v in node.all_input_nodes:
                for prod in where[v]:
                    assert covered(0, prod), f"output {v.name} read on stream 0 before {prod} is known"
            for s, q in seq.items():
                assert known[0].get(s, -1) >= q or s == 0, f"stream 0 returns before side stream {s} is joined"
            continue
        if node.target is ops.wait_and_bind:
            x, s, toks = node.args
            assert s == cur or not in_bracket, "a bracket switches stream only once"
            cur = s
            in_bracket = s != 0
            for tok in toks:
                merge(s, token_clock[tok])
            where[node] = where[x]
            continue
        if node.target is ops.record:
            x, s = node.args
            assert s == cur, f"{node.name}: record on stream {s} while stream {cur} is current"
            clock = dict(known[s])
            clock[s] = seq[s]
            token_clock[node] = clock
            cur = 0
            in_bracket = False
            where[node] = where[x]
            continue
        t = by_name.get(node.name)
        role = problem.tasks[t].role if t is not None else Role.FREE
        if role == Role.FREE:
            # views launch nothing; only the getitem a record of a multi-output node reads sits in a bracket
            assert t is None or (cur == 0 and not in_bracket), f"FREE node {node.name} inside a bracket"
            where[node] = set().union(*(where[i] for i in node.all_input_nodes)) if node.all_input_nodes else set()
            continue
        # a kernel launched on the current stream
        if problem.is_async_comm(t):
            expected = 0
        elif not any(isinstance(i.meta.get("val"), torch.Tensor) for i in node.all_input_nodes):
            expected = 0
        else:
            expected = streams[t]
        assert cur == expected, f"{node.name} runs on stream {cur}, scheduled on {expected}"
        task = problem.tasks[t]
        for i in node.all_input_nodes:
            if role == Role.WAIT:
                continue
            for prod in where[i]:
                assert prod == "async" or covered(cur, prod), f"{node.name} reads {i.name} before {prod} is known"
        for p in problem.sync_preds[t]:
            if role == Role.WAIT and p == task.waits_for:
                continue
            if problem.is_async_comm(p):
                p = problem.wait_of[p]
            assert covered(cur, kernel[p]), f"{node.name} runs before its dependency {problem.tasks[p].name}"
        seq[cur] += 1
        kernel[t] = (cur, seq[cur])
        where[node] = {"async"} if problem.is_async_comm(t) else {(cur, seq[cur])}
        if role == Role.WAIT:
            where[node] = {(cur, seq[cur])}
    return dict(seq)


def check_lowered(gm, low, problem, schedule) -> None:
    low.graph.lint()
    nodes = list(low.graph.nodes)
    n_head = sum(n.op in ("placeholder", "get_attr") for n in nodes)
    assert all(n.op in ("placeholder", "get_attr") for n in nodes[:n_head]) and nodes[-1].op == "output"
    # tasks in the schedule's program order (the zoo graphs have no dead code)
    expected = [problem.tasks[t].name for t in schedule.order]
    got = [name for name in task_names(low) if name in {t.name for t in problem.tasks}]
    assert got == expected
    check_stream_program(low, problem, schedule)


# ---- anchor ops ------------------------------------------------------------------------------------

def test_anchor_schemas_declare_aliases():
    """wait_and_bind returns an alias of its input; a record token aliases nothing (it must not keep
    its tensor alive: the fuzzer's class 4). Both survive dead-code elimination."""
    schema = ops.wait_and_bind._schema
    x = schema.arguments[0]
    assert x.alias_info is not None and not x.alias_info.is_write
    assert set(schema.returns[0].alias_info.before_set) == set(x.alias_info.before_set)
    record = ops.record._schema
    assert record.arguments[0].alias_info is None and record.returns[0].alias_info is None
    for op in ops.ANCHOR_OPS:
        assert torch.fx.node.Node.is_impure(_call_node(op))


def _call_node(op):
    g = fx.Graph()
    x = g.placeholder("x")
    args = (x, 1) if op is ops.record else (x, 1, [])
    return g.call_function(op, args)


def test_anchor_ops_on_cpu_are_aliases():
    x = torch.randn(4, 6)
    tok = ops.record(x, 1)
    assert tok.numel() == 0 and tok.untyped_storage().nbytes() == 0  # holds nothing of x
    y = ops.wait_and_bind(x, 1, [tok])
    assert y is not x and y.data_ptr() == x.data_ptr() and torch.equal(x, y)
    y.mul_(2)  # an alias, not a copy
    assert torch.equal(x, y)
    xt = x.t()  # non-contiguous input
    assert ops.record(xt, 0).numel() == 0 and ops.wait_and_bind(xt, 0, []).stride() == xt.stride()
    # autograd passes straight through
    a = torch.randn(3, requires_grad=True)
    (ops.wait_and_bind(a, 1, [ops.record(a, 0)]) * 3).sum().backward()
    assert torch.equal(a.grad, torch.full((3,), 3.0))


def _anchored(a, b):
    y = a @ b
    tok = ops.record(y, 1)
    z = ops.wait_and_bind(y, 0, [tok])
    w = ops.wait_and_bind(a, 1, [])
    ops.record(w, 1)  # result unused: must survive dead-code elimination
    z.mul_(2)  # mutation through the alias reaches y
    return z + 1, y, w * 3


@pytest.mark.filterwarnings("ignore::FutureWarning")  # torch.export's own pytree deprecation notice
def test_anchor_ops_trace_functionalize_and_export():
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    ref = _anchored(a.clone(), b)
    gm = make_fx(_anchored, tracing_mode="fake")(a, b)
    assert sum(ops.is_anchor(n.target) for n in gm.graph.nodes) == 4
    gm.graph.eliminate_dead_code()
    assert sum(ops.is_anchor(n.target) for n in gm.graph.nodes) == 4
    assert_identical(list(gm(a.clone(), b)), list(ref))
    # fake values: wait_and_bind aliases its input's storage (what extract_problem reads), a token is
    # a 0-byte storage of its own
    vals = {n.name: n.meta["val"] for n in gm.graph.nodes if "val" in n.meta}
    assert vals["wait_and_bind"].untyped_storage()._cdata == vals["mm"].untyped_storage()._cdata
    assert vals["record"].untyped_storage()._cdata != vals["mm"].untyped_storage()._cdata
    assert vals["record"].untyped_storage().nbytes() == 0

    from torch.func import functionalize

    fgm = make_fx(functionalize(_anchored), tracing_mode="fake")(a, b)
    assert sum(n.target is ops.wait_and_bind for n in fgm.graph.nodes) == 2
    assert not any(n.target is torch.ops.aten.mul_.Tensor for n in fgm.graph.nodes)
    assert_identical(list(fgm(a.clone(), b)), list(ref))

    class M(torch.nn.Module):
        def forward(self, a, b):
            return _anchored(a, b)

    ep = torch.export.export(M(), (a, b))
    assert_identical(list(ep.module()(a.clone(), b)), list(ref))
    ep = ep.run_decompositions()
    assert sum(n.target is ops.wait_and_bind for n in ep.graph.nodes) == 2
    assert_identical(list(ep.module()(a.clone(), b)), list(ref))


@pytest.mark.gpu
def test_cuda_runtime_streams_and_events():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    torch.cuda.synchronize()
    base = torch.cuda.current_stream()
    x = torch.randn(512, 512, device="cuda")
    b = ops.wait_and_bind(x, 1, [ops.record(x, 0)])
    side = ops.get_stream(1)
    assert side != base and torch.cuda.current_stream() == side
    y = b @ b
    tok = ops.record(y, 1)
    assert torch.cuda.current_stream() == base  # the bracket closed
    assert hasattr(tok, "_solvercast_event")
    z = ops.wait_and_bind(y, 0, [tok])
    assert torch.cuda.current_stream() == base
    torch.testing.assert_close(z, x @ x)

    # a lowered model on two compute streams, repeated to shake out races
    gm = build("tp_mlp", layers=2, dtype="float32")
    problem = extract_problem(gm, compute_streams=2)
    args = [a.cuda() for a in real_inputs(gm)]
    ref = run(gm, args)
    for seed in range(3):
        low = lower(gm, problem, random_schedule(problem, seed))
        for _ in range(3):
            out = run(low, args)
            assert torch.cuda.current_stream() == base
            torch.cuda.synchronize()
            for o, r in zip(out, ref):
                torch.testing.assert_close(o, r)


# ---- lowering --------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_original_schedule_gives_original_graph(case, zoo_graph):
    gm = zoo_graph(case[0], **case[1])
    for streams in (1, 2):
        problem = extract_problem(gm, compute_streams=streams)
        low = lower(gm, problem, Schedule.original(problem))
        assert low is not gm and low.graph is not gm.graph
        assert low.code == gm.code
        assert not anchor_nodes(low)


def test_input_module_untouched():
    gm = build("tp_block", layers=2)
    before = gm.code
    names = [n.name for n in gm.graph.nodes]
    problem = extract_problem(gm, compute_streams=2)
    low = lower(gm, problem, random_schedule(problem, 7))
    assert anchor_nodes(low) and low.code != before
    assert gm.code == before and [n.name for n in gm.graph.nodes] == names
    assert not anchor_nodes(gm)
    assert not set(low.graph.nodes) & set(gm.graph.nodes)
    assert low.meta["solvercast"] == gm.meta["solvercast"]


@pytest.mark.parametrize("case", STRUCTURE_CASES, ids=_case_id)
def test_random_schedules_structure(case, zoo_graph):
    gm = zoo_graph(case[0], **case[1])
    problem = extract_problem(gm, compute_streams=2)
    for seed in range(4):
        schedule = random_schedule(problem, seed)
        check_lowered(gm, lower(gm, problem, schedule), problem, schedule)
    # a reordering on default streams needs no anchors at all
    schedule = random_schedule(problem, 99, streams=False)
    low = lower(gm, problem, schedule)
    assert not anchor_nodes(low)
    check_lowered(gm, low, problem, schedule)


def _heuristic_schedules(problem):
    try:
        from solvercast import heuristics
    except ImportError:
        return []
    out = []
    for fn in ("comm_priority_schedule", "list_schedule"):
        if hasattr(heuristics, fn):
            out.append(getattr(heuristics, fn)(problem))
    return out


_REFS: dict[str, tuple[list, list]] = {}


def _reference(case, zoo_graph):
    key = _case_id(case)
    if key not in _REFS:
        gm = zoo_graph(case[0], **case[1])
        args = real_inputs(gm)
        _REFS[key] = (args, run(gm, args))
    return _REFS[key]


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_lowered_outputs_identical(case, zoo_graph):
    gm = zoo_graph(case[0], **case[1])
    args, ref = _reference(case, zoo_graph)
    problem = extract_problem(gm, compute_streams=2)
    schedules = [random_schedule(problem, 1)] + _heuristic_schedules(problem)
    for schedule in schedules:
        low = lower(gm, problem, schedule)
        check_stream_program(low, problem, schedule)
        assert_identical(run(low, args), ref)


@pytest.mark.parametrize("case", CASES[: len(list_models())], ids=_case_id)
def test_lowered_graph_retraces_and_extracts(case, zoo_graph):
    gm = zoo_graph(case[0], **case[1])
    problem = extract_problem(gm, compute_streams=2)
    schedule = random_schedule(problem, 3)
    low = lower(gm, problem, schedule)
    args, ref = _reference(case, zoo_graph)

    # make_fx re-traces it (fake tensors), anchors and all
    retraced = make_fx(low, tracing_mode="fake")(*args)
    assert sum(ops.is_anchor(n.target) for n in retraced.graph.nodes) == len(anchor_nodes(low))
    assert_identical(run(retraced, args), ref)

    # extract_problem reads it: anchors are FREE, memory is the same
    lp = extract_problem(low, compute_streams=2)
    roles = {t.name: t.role for t in lp.tasks}
    assert all(roles[n.name] == Role.FREE for n in anchor_nodes(low))
    assert sum(b.size for b in lp.buffers) == sum(b.size for b in problem.buffers)
    assert sorted(b.size for b in lp.buffers) == sorted(b.size for b in problem.buffers)
    real = lambda p: sorted((t.name, t.role, t.duration) for t in p.tasks if t.role != Role.FREE)  # noqa: E731
    assert real(lp) == real(problem)
    assert lp.comm_tasks and len(lp.comm_tasks) == len(problem.comm_tasks)

    # and lowering the lowered graph again strips the old anchors first
    again = lower(low, lp, Schedule.original(lp))
    assert not anchor_nodes(again)
    assert again.code == strip_anchors(low).code
    assert_identical(run(again, args), ref)


def _mutating(a, b, c):
    y = a @ b
    r = y.relu()
    y.mul_(2)  # written after a read on (maybe) another stream
    z = y + r
    c.add_(1)  # an input mutated in place
    s = torch.zeros(4)  # a factory op: no tensor input
    return z, r.sum() + s.sum(), c * 1


@pytest.mark.parametrize("sync_comm", [False, True], ids=["plain", "relu-as-sync-comm"])
def test_mutations_factory_ops_and_sync_comm(sync_comm):
    a, b, c = torch.randn(4, 4), torch.randn(4, 4), torch.randn(4)
    gm = make_fx(_mutating, tracing_mode="fake")(a, b, c)
    # with comm_ops, relu is a synchronous comm op: it may run on the comm stream (2), in a bracket
    problem = extract_problem(gm, compute_streams=2, comm_ops=[torch.ops.aten.relu.default] if sync_comm else None)
    assert any(t.role == Role.COMM for t in problem.tasks) == sync_comm
    c_ref = c.clone()
    ref = list(gm(a, b, c_ref))
    on_comm_stream = 0
    for seed in range(12):
        schedule = random_schedule(problem, seed)
        low = lower(gm, problem, schedule)
        kernels = check_stream_program(low, problem, schedule)
        on_comm_stream += kernels.get(2, 0)
        c_low = c.clone()
        assert_identical(list(low(a, b, c_low)), ref)
        assert torch.equal(c_low, c_ref)
        from torch.func import functionalize

        c_fun = c.clone()
        fgm = make_fx(functionalize(low), tracing_mode="fake")(a, b, c.clone())
        assert_identical(list(fgm(a, b, c_fun)), ref)
        assert torch.equal(c_fun, c_ref)
    assert (on_comm_stream > 0) == sync_comm


def test_mismatched_inputs_are_rejected():
    gm = build("tp_mlp", layers=1)
    other = build("tp_mlp", layers=2)
    problem = extract_problem(other)
    with pytest.raises(LoweringError):
        lower(gm, problem, Schedule.original(problem))
    problem = extract_problem(gm)
    with pytest.raises(InvalidScheduleError):
        lower(gm, problem, Schedule(tuple(reversed(range(problem.num_tasks)))))
    with pytest.raises(InvalidScheduleError):
        lower(gm, problem, Schedule(tuple(range(problem.num_tasks)), {0: 5}))


def test_writer_of_a_collective_input_waits_for_the_launch():
    """x = a @ b; h = all_reduce(x); x.add_(1) on stream 1; wait(h). The write must come after the
    collective is launched on stream 0 (the functional all_reduce copies x there), so add_ binds a token
    recorded right after the all_reduce."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from solvercast import Schedule, extract_problem, validate
    from solvercast.fx.lower import lower
    from solvercast.models import fake_group

    group = fake_group(4)
    c10d = torch.ops._c10d_functional

    def f(a, b):
        x = a @ b
        h = c10d.all_reduce(x, "sum", group)
        y = x.add_(1)
        return c10d.wait_tensor(h), y

    gm = make_fx(f, tracing_mode="fake")(torch.randn(4, 4), torch.randn(4, 4))
    p = extract_problem(gm, compute_streams=2)
    ids = {t.name: i for i, t in enumerate(p.tasks)}
    schedule = Schedule((0, 1, 2, 3), {ids["add_"]: 1})
    validate(p, schedule)
    lowered = lower(gm, p, schedule)
    nodes = {n.name: n for n in lowered.graph.nodes}
    bound = nodes["add_"].args[0]
    assert bound.target is torch.ops.solvercast.wait_and_bind.default
    tokens = bound.args[2]
    assert any(tok.args[0] is nodes["all_reduce"] for tok in tokens)
