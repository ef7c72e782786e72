"""Aliasing re-derived from op schemas on graphs traced with real tensors (make_fx without fake mode),
where every value, views and in-place results included, has a storage of its own in ``meta["val"]``:
a storage is followed through in-place coalesced collectives (``Tensor(a!)[]`` arguments and returns),
their getitems and waits, split views, in-place and out= writes, and legacy c10d collectives.

Each program is checked twice: the dependency the aliasing needs is a path in the problem's edges, and
every order the edges allow (random topological orders, and one that runs the latest ready task
first) computes the original's values."""

import random
import subprocess
import sys

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from solvercast import Schedule, extract_problem, lower, optimize
from solvercast.graph.local_run import run_local
from solvercast.graph.nodes import classify
from solvercast.models import fake_group
from solvercast.testing import random_topological_order

C = torch.ops._c10d_functional
G = fake_group(2)


def _reaches(problem, a: int, b: int) -> bool:
    seen, stack = {a}, [a]
    while stack:
        t = stack.pop()
        if t == b:
            return True
        for s in problem.succs[t]:
            if s not in seen:
                seen.add(s)
                stack.append(s)
    return False


def _latest_ready_first(problem) -> list[int]:
    """The topological order that always runs the ready task latest in graph order: readers jump ahead
    of every write the edges do not hold them behind."""
    indeg = [len(p) for p in problem.preds]
    ready = [t for t in range(problem.num_tasks) if indeg[t] == 0]
    order = []
    while ready:
        t = max(ready)
        ready.remove(t)
        order.append(t)
        for s in problem.succs[t]:
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    return order


def _run(gm, args):
    a = [x.clone() for x in args]
    return run_local(gm, a) + a  # outputs and (written) inputs


def _wrong_orders(gm, problem, args, seeds: int = 20) -> list[str]:
    ref = _run(gm, args)
    orders = {"latest-first": _latest_ready_first(problem)}
    orders.update({f"random{s}": random_topological_order(problem, random.Random(s)) for s in range(seeds)})
    wrong = []
    for name, order in orders.items():
        got = _run(lower(gm, problem, Schedule(order=order)), args)
        if not all(torch.equal(r, g) for r, g in zip(ref, got)):
            wrong.append(name)
    res = optimize(gm, time_limit=1, method="heuristic", bucketing=False, decomposition=False)
    if not all(torch.equal(r, g) for r, g in zip(ref, _run(res.gm, args))):
        wrong.append("heuristic")
    return wrong


def _write_to_the_wait(how: str):
    """base = cat(a, b); part = split(base, 4)[1]; all_reduce_coalesced_([part, c * 2]) -> wait(...)[0] = w;
    then ``how`` writes w (rows of base), and base.reshape(-1, 8) @ m reads base: the write comes first."""

    def f(a, b, c, m):
        base = torch.cat([a, b], 1)
        part = torch.split(base, 4)[1]
        cs = C.all_reduce_coalesced_([part, c * 2], "sum", G)
        w = C.wait_tensor(cs[0])
        C.wait_tensor(cs[1])
        if how == "in_place":
            w.mul_(0.5)
        elif how == "through_a_split_of_the_wait":
            torch.split(w, 2)[1].sigmoid_()
        else:  # out=
            torch.mul(w, 0.5, out=w)
        return (base.reshape(-1, 8) @ m,)

    return f


@pytest.mark.parametrize("how", ["in_place", "through_a_split_of_the_wait", "out"])
def test_a_write_through_an_in_place_coalesced_collective_on_a_split_view_precedes_a_reader_of_the_base(how):
    """cat -> split[1] -> all_reduce_coalesced_ -> getitem -> wait -> a write of the wait (``how``: mul_,
    sigmoid_ of a split of it, mul out=; base's rows) -> view(base) -> mm: mm stays after the write."""
    args = [torch.randn(8, 4), torch.randn(8, 4), torch.randn(4, 8), torch.randn(8, 3)]
    gm = make_fx(_write_to_the_wait(how))(*[x.clone() for x in args])  # real tensors
    p = extract_problem(gm)
    writer = {"in_place": "mul_", "through_a_split_of_the_wait": "sigmoid_", "out": "mul"}[how]
    idx = {t.name: i for i, t in enumerate(p.tasks)}
    assert _reaches(p, idx[writer], idx["mm"])
    assert _wrong_orders(gm, p, args) == []


def _two_writes_through_the_wait(a, b, c):
    """base = cat(a, b); all_reduce_coalesced_([split(base, 4)[1], c * 2]) -> wait = w;
    w.sigmoid_() then base.reshape(-1, 8).add_(1): two writes of one storage keep their order."""
    base = torch.cat([a, b], 1)
    part = torch.split(base, 4)[1]
    cs = C.all_reduce_coalesced_([part, c * 2], "sum", G)
    w = C.wait_tensor(cs[0])
    C.wait_tensor(cs[1])
    w.sigmoid_()
    base.reshape(-1, 8).add_(1)
    return (base * 1,)


def test_two_writes_through_aliases_of_an_in_place_coalesced_collective_keep_their_order():
    args = [torch.randn(8, 4), torch.randn(8, 4), torch.randn(4, 8)]
    gm = make_fx(_two_writes_through_the_wait)(*[x.clone() for x in args])
    p = extract_problem(gm)
    idx = {t.name: i for i, t in enumerate(p.tasks)}
    assert _reaches(p, idx["sigmoid_"], idx["add_"])
    assert _wrong_orders(gm, p, args) == []


def test_an_in_place_coalesced_result_is_its_inputs_storage_element_by_element():
    """The returned list of all_reduce_coalesced_ aliases its ``Tensor(a!)[]`` argument: element i is
    the i-th input's buffer (no buffer of its own), also through getitem and wait."""

    def f(x, y):
        xs, ys = x * 1, y * 1
        cs = C.all_reduce_coalesced_([xs, ys], "sum", G)
        wx, wy = C.wait_tensor(cs[0]), C.wait_tensor(cs[1])
        return wx.add_(1), wy.add_(2)

    gm = make_fx(f)(torch.randn(4), torch.randn(6))
    node = next(n for n in gm.graph.nodes if "coalesced" in str(n.target))
    assert classify(node).aliases == (tuple(node.args[0]),)
    p = extract_problem(gm)
    assert sorted(b.name for b in p.buffers) == ["mul", "mul_1", "x_1", "y_1"]


def _matmul_of_a_batch(x, w):
    """x @ w of a 3-d x: view -> mm -> _unsafe_view, a view whose schema declares no alias."""
    return (torch.relu(x @ w),)


def _problem_summary(gm):
    """Roles, buffers and every ordered pair the edges imply, by task name."""
    p = extract_problem(gm)
    names = [t.name for t in p.tasks]
    after = set()
    for a in range(p.num_tasks):
        after.update((names[a], names[b]) for b in range(p.num_tasks) if b != a and _reaches(p, a, b))
    return ([(t.name, t.role) for t in p.tasks],
            sorted((b.name, b.size, b.producer, b.is_output) for b in p.buffers), after)


@pytest.mark.parametrize("program", ["in_place", "through_a_split_of_the_wait", "out", "two_writes", "batch_matmul"])
def test_a_real_trace_extracts_to_the_problem_of_a_fake_trace(program):
    """Where a fake trace shares storages between a tensor and its aliases, the schemas alone give the
    same roles, buffers and orders on a trace with real tensors."""
    if program == "two_writes":
        fn, args = _two_writes_through_the_wait, [torch.randn(8, 4), torch.randn(8, 4), torch.randn(4, 8)]
    elif program == "batch_matmul":
        fn, args = _matmul_of_a_batch, [torch.randn(2, 3, 4), torch.randn(4, 5)]
    else:
        fn, args = _write_to_the_wait(program), [torch.randn(8, 4), torch.randn(8, 4), torch.randn(4, 8),
                                                 torch.randn(8, 3)]
    real = make_fx(fn)(*[x.clone() for x in args])
    fake = make_fx(fn, tracing_mode="fake")(*[x.clone() for x in args])
    assert [(n.name, n.target) for n in real.graph.nodes] == [(n.name, n.target) for n in fake.graph.nodes]
    assert _problem_summary(real) == _problem_summary(fake)


_LEGACY = r"""
import random, torch, torch.distributed as dist
from torch.fx.experimental.proxy_tensor import make_fx
from torch.testing._internal.distributed.fake_pg import FakeStore
from solvercast import Schedule, extract_problem, lower
from solvercast.testing import random_topological_order

dist.init_process_group("fake", rank=0, world_size=2, store=FakeStore())

def step(x, w):
    y = x @ w
    v = y.t()
    dist.all_reduce(y)  # make_fx records c10d.allreduce_ and reads y through its result from here on
    y.add_(1)
    z = v * 2  # reads y through a view made before the collective
    y.mul_(3)
    return z, y

args = [torch.randn(4, 4), torch.randn(4, 4)]
gm = make_fx(step)(*[a.clone() for a in args])
p = extract_problem(gm)
ref = gm(*[a.clone() for a in args])
wrong = 0
for seed in range(20):
    low = lower(gm, p, Schedule(order=random_topological_order(p, random.Random(seed))))
    wrong += not all(torch.equal(r, g) for r, g in zip(ref, low(*[a.clone() for a in args])))
print(wrong, sorted(b.name for b in p.buffers))

def gather(x, w):
    outs = [torch.zeros(4, 4), torch.zeros(4, 4)]
    s = outs[1].sum()
    dist.all_gather(outs, x @ w)  # c10d.allgather_([[outs...]], ...): a Tensor[][] it writes and returns
    return s, outs[1] + 1

gm = make_fx(gather)(*[a.clone() for a in args])
p = extract_problem(gm)
idx = {t.name: i for i, t in enumerate(p.tasks)}
print((idx["sum_1"], idx["allgather_"]) in p.edges, sorted(b.name for b in p.buffers))
"""


def test_a_legacy_collective_returns_the_tensors_it_writes():
    """c10d.allreduce_([y]) -> (Tensor[], Work) returns y without declaring it: y.add_ through the
    result stays before a reader of y's earlier view, and the result is no buffer of its own; the
    nested list allgather_ writes is written (a sum of an output before it stays before it). In a
    fresh process: the legacy ops need the fake default process group, which the test process must
    not own."""
    proc = subprocess.run([sys.executable, "-c", _LEGACY], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert lines[-2] == "0 ['mm', 'mul', 'w_1', 'x_1']"
    assert lines[-1] == "True ['add', 'mm', 'sum_1', 'w_1', 'x_1', 'zeros', 'zeros_1']"


def test_the_fuzzed_program_that_lost_two_dependencies_through_aliases_keeps_its_values():
    """Traced with real tensors, one compute stream, rewrites off: every output as the original computes it."""
    from tests.support.fuzzed import program

    f, shapes = program("alias_coalesced")
    gen = torch.Generator().manual_seed(0)
    inputs = [torch.randn(*s, generator=gen) / max(1.0, s[-1] ** 0.25) for s in shapes]
    gm = make_fx(f)(*[x.clone() for x in inputs])
    res = optimize(gm, time_limit=1, method="heuristic", bucketing=False, decomposition=False)
    for want, got in zip(run_local(gm, [x.clone() for x in inputs]), run_local(res.gm, [x.clone() for x in inputs]),
                         strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("mode", ["fake", "real"])
def test_an_in_place_write_to_a_coalesced_result_stays_after_every_wait_of_its_collective(mode):
    """A wait on one result of a coalesced collective writes all of its results again (gloo copies them out at
    each wait: a sigmoid_ on the first result between the two waits came out undone on every rank), so a
    write to any result keeps its place after each wait."""
    group = fake_group(4, tag="ar")

    def step(a, b):
        h = torch.ops._c10d_functional.reduce_scatter_tensor_coalesced([a @ a, b @ b], "sum", 4, group)
        w0 = torch.ops._c10d_functional.wait_tensor(h[0])
        w1 = torch.ops._c10d_functional.wait_tensor(h[1])
        w0.sigmoid_()
        return w0, w1

    gm = make_fx(step, tracing_mode=mode)(torch.randn(8, 8), torch.randn(8, 8))
    problem = extract_problem(gm)
    index = {t.name: i for i, t in enumerate(problem.tasks)}
    waits = [n for n in index if n.startswith("wait_tensor")]
    assert len(waits) == 2 and all(_reaches(problem, index[w], index["sigmoid_"]) for w in waits)
