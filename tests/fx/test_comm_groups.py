"""One comm stream per process group: collectives of two groups (two NCCL communicators) run at the
same time; two of one group run one after the other. Extraction gives each collective its group's
comm stream, `simulate` and every method honour it, and the lowered graph keeps the values.

The graph (make_fx on fake tensors; groups ``a`` and ``b`` or ``a`` twice)::

    ar1 = all_reduce(x @ w, a) ; ar2 = all_reduce(x @ v, b) ; mm3 = x @ u ; wait(ar1) ; wait(ar2) ; add
"""

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from solvercast import Role, Schedule, extract_problem, optimize, simulate, validate
from solvercast.models import fake_group
from solvercast.graph.local_run import random_inputs, run_local

C10D = torch.ops._c10d_functional


def _step(group_a: str, group_b: str):
    def step(x, w, v, u):
        ar1 = C10D.all_reduce(x @ w, "sum", group_a)
        ar2 = C10D.all_reduce(x @ v, "sum", group_b)
        mm3 = x @ u
        return C10D.wait_tensor(ar1) + C10D.wait_tensor(ar2) + mm3
    return step


def _graph(two_groups: bool):
    a = fake_group(2, tag="a")
    b = fake_group(2, tag="b") if two_groups else a
    args = [torch.empty(512, 512) for _ in range(4)]
    return make_fx(_step(a, b), tracing_mode="fake")(*args)


def _collectives(problem):
    return [t for t, task in enumerate(problem.tasks) if task.role == Role.COMM]


def test_extraction_gives_each_group_its_comm_stream():
    two = extract_problem(_graph(True))
    one = extract_problem(_graph(False))
    assert two.machine.comm_streams == 2 and one.machine.comm_streams == 1
    c1, c2 = _collectives(two)
    assert (two.tasks[c1].group, two.tasks[c2].group) == (0, 1)
    assert two.allowed_streams(c1) == (1,) and two.allowed_streams(c2) == (2,)
    # a schedule that puts a collective on the other group's stream is refused
    bad = Schedule(order=tuple(range(two.num_tasks)), streams={c1: 2})
    with pytest.raises(Exception, match="may not run on stream"):
        validate(two, bad)


def test_collectives_of_two_groups_overlap_and_of_one_group_do_not():
    for two_groups in (True, False):
        p = extract_problem(_graph(two_groups))
        c1, c2 = _collectives(p)
        sim = simulate(p, Schedule.original(p))
        overlap = sim.start[c2] < sim.end[c1]
        assert overlap == two_groups, (two_groups, sim.start[c1], sim.end[c1], sim.start[c2])
    # the same two collectives, costed alike: two communicators finish the step earlier
    makespans = [simulate(p, Schedule.original(p)).makespan for p in map(extract_problem, map(_graph, (True, False)))]
    assert makespans[0] < makespans[1]


@pytest.mark.parametrize("method", ["list", "nondelay", "comm_priority", "heuristic", "cpsat", "milp"])
def test_every_method_keeps_each_collective_on_its_group_stream(method):
    gm = _graph(True)
    res = optimize(gm, time_limit=2, method=method, memory_budget=float("inf"))
    p = res.problem
    streams = res.schedule.stream_list(p)
    for c in _collectives(p):
        assert streams[c] == p.comm_stream(c)
    validate(p, res.schedule)
    c1, c2 = _collectives(p)
    assert res.optimized.start[c2] < res.optimized.end[c1]  # the two communicators still overlap
    args = random_inputs(gm, seed=1)
    for a, b in zip(run_local(gm, args), run_local(res.gm, args)):
        assert torch.equal(a, b)
