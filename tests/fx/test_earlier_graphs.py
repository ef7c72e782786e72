"""Graphs that are one step of several: a wait on a collective an earlier graph launched (a backward
graph's input), and a collective whose wait is in a later graph (an un-waited output)."""

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from solvercast import Role, extract_problem, optimize
from solvercast.graph.local_run import random_inputs, run_local
from solvercast.models import fake_group

_c10d = torch.ops._c10d_functional


def _backward_like():
    """rs (input: a reduce_scatter the forward launched) -> wait -> mul ; x -> mm(w) ; ag = all_gather(x) -> wait"""
    group = fake_group(2)

    def f(rs, x, w):
        g = _c10d.wait_tensor(rs)
        ag = _c10d.all_gather_into_tensor(x, 2, group)
        y = x @ w
        return g * 2, y, _c10d.wait_tensor(ag)

    return make_fx(f, tracing_mode="fake")(torch.randn(4, 8), torch.randn(4, 8), torch.randn(8, 8))


def test_a_wait_on_a_graph_input_is_read_as_finished_at_the_start():
    """The wait is read, not refused: a free task whose output is the input's storage (the collective is
    taken as finished when this graph starts, as PyTorch's overlap scheduler and autoparallel's simulator
    take it); the report says so; the lowered module computes the same values."""
    gm = _backward_like()
    p = extract_problem(gm)
    roles = {t.name: t.role for t in p.tasks}
    assert roles["wait_tensor"] == Role.FREE and roles["wait_tensor_1"] == Role.WAIT
    assert not any(b.name == "wait_tensor" for b in p.buffers)  # no allocation: the input's storage
    res = optimize(gm, time_limit=2)
    assert res.report.earlier_collectives == ["wait_tensor"]
    assert "1 wait on a collective an earlier graph launched" in str(res.report)
    args = random_inputs(gm)
    assert all(torch.equal(a, b) for a, b in zip(run_local(res.gm, args), run_local(gm, args)))


def test_a_collective_waited_in_a_later_graph_is_launched_and_held():
    """x -> all_reduce (its wait in the next graph: returned un-waited) ; x -> mm(w). The collective is a
    task of the problem, its buffer an output held to the end; the lowered module keeps it."""
    group = fake_group(2)

    def f(x, w):
        return _c10d.all_reduce(x, "sum", group), x @ w

    gm = make_fx(f, tracing_mode="fake")(torch.randn(4, 8), torch.randn(8, 8))
    p = extract_problem(gm)
    roles = {t.name: t.role for t in p.tasks}
    assert roles["all_reduce"] == Role.COMM
    assert {b.name: b.is_output for b in p.buffers}["all_reduce"]
    res = optimize(gm, time_limit=2)
    assert any(n.name == "all_reduce" for n in res.gm.graph.nodes)
