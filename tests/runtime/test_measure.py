"""`solvercast.runtime.measure`: lowered modules run with collectives that really run asynchronously.

On CPU a collective is a job on its process group's worker thread (fill its output, sleep out its
duration) and its wait joins the job, so overlap is real; every check compares two runs measured
side by side (no absolute time is asserted). The graphs (make_fx on fake tensors)::

    overlap:  ag = all_gather(w) ; y = chain of matmuls on x (hides ag) ; wait(ag) ; y @ ag.T
    groups:   ar1 = all_reduce(x, a) ; ar2 = all_reduce(x, b) ; wait(ar1) + wait(ar2)
"""

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from solvercast import Schedule, extract_problem, simulate
from solvercast.fx.lower import lower
from solvercast.runtime.measure import MeasureError, measure, measure_side_by_side, run_asynchronously
from solvercast.models import fake_group
from solvercast.graph.local_run import random_inputs, run_local

C10D = torch.ops._c10d_functional
SMALL = {"layers": 1, "hidden": 128, "seq": 32, "batch": 2, "dtype": "float32"}


def _comm_names(problem):
    return [problem.tasks[c].name for c in problem.comm_tasks]


def _durations(problem, ns):
    return {name: ns for name in _comm_names(problem)}


@pytest.mark.parametrize("model", ["tp_block", "sp_block", "moe_block", "fsdp_layers"])
def test_values_equal_run_local(model, zoo_graph):
    """Every stand-in (all_reduce, all_gather, reduce_scatter, all_to_all) writes LocalCollectives' values
    into its real output buffer, on the worker thread, and the lowered schedule computes the same."""
    params = dict(SMALL, ffn=128) if model == "moe_block" else SMALL
    gm = zoo_graph(model, **params)
    args = random_inputs(gm, seed=3)
    problem = extract_problem(gm)
    ref = run_local(gm, [a.clone() for a in args])
    from solvercast.heuristics import comm_priority_schedule

    low = lower(gm, problem, comm_priority_schedule(problem))
    for module in (gm, low):
        out = run_asynchronously(module, [a.clone() for a in args], _durations(problem, 100_000))
        assert len(out) == len(ref)
        for o, r in zip(out, ref):
            assert torch.equal(o, r)


def test_coalesced_and_in_place_all_reduce_values():
    group = fake_group(2)

    def step(x, y):
        a, b = C10D.all_reduce_coalesced([x, y], "sum", group)
        z = x.clone()
        C10D.all_reduce_(z, "sum", group)
        return C10D.wait_tensor(a) + C10D.wait_tensor(b) + C10D.wait_tensor(z)

    gm = make_fx(step, tracing_mode="fake")(torch.empty(8, 8), torch.empty(8, 8))
    args = [torch.randn(8, 8), torch.randn(8, 8)]
    durations = {n.name: 1_000_000 for n in gm.graph.nodes if "all_reduce" in str(n.target)}
    assert len(durations) == 2
    assert all(torch.equal(o, r) for o, r in zip(run_asynchronously(gm, args, durations), run_local(gm, args)))


@pytest.mark.parametrize("model", ["tp_block", "fsdp_layers"])
def test_measured_peak_equals_the_memory_model(model, zoo_graph):
    """The storages a step creates, alive at once, against `simulate`'s peak above the inputs, for the
    original order and a reordered one (collectives hold their inputs and outputs until their waits)."""
    from solvercast.heuristics import comm_priority_schedule

    gm = zoo_graph(model, **SMALL)
    problem = extract_problem(gm)
    args = random_inputs(gm)
    for schedule in (Schedule.original(problem), comm_priority_schedule(problem)):
        module = lower(gm, problem, schedule)
        m = measure(module, args, problem=problem, iters=1, warmup=0)
        assert m.collectives == len(problem.comm_tasks)
        assert m.peak_bytes == simulate(problem, schedule).peak_memory - problem.initial_resident_bytes


def _overlap_graph():
    group = fake_group(2)

    def step(x, w):
        ag = C10D.all_gather_into_tensor(w, 2, group)
        y = x
        for _ in range(6):
            y = torch.tanh(y @ x)
        return y @ C10D.wait_tensor(ag).T

    return make_fx(step, tracing_mode="fake")(torch.empty(384, 384), torch.empty(192, 384))


def test_overlapped_order_measures_faster_than_serial():
    """The same graph in two orders: the wait right after the launch (serial: compute + comm) or after
    the matmuls (overlapped: max(compute, comm)), with the collective as long as the compute."""
    gm = _overlap_graph()
    problem = extract_problem(gm)
    args = [torch.randn(384, 384) * 384 ** -0.5, torch.randn(192, 384)]
    (ag,) = problem.comm_tasks
    wait = problem.wait_of[ag]
    original = Schedule.original(problem)
    order = list(original.order)
    order.remove(wait)
    order.insert(order.index(ag) + 1, wait)
    serial = lower(gm, problem, Schedule(order=tuple(order)))
    overlapped = lower(gm, problem, original)
    compute = measure(gm, args, durations={problem.tasks[ag].name: 0}, iters=5, warmup=1, peak=False).step_ns
    durations = {problem.tasks[ag].name: compute}
    s, o = measure_side_by_side([serial, overlapped], args, [durations] * 2, iters=7, warmup=1, peak=False)
    assert o.step_ns < 0.8 * s.step_ns, (o.steps_ns, s.steps_ns)  # ideal 0.5


def test_one_group_serialises_two_groups_overlap():
    """Two collectives launched back to back: one worker per process group, as NCCL runs one
    communicator's collectives in launch order and different communicators side by side."""
    def graph(ga, gb):
        def step(x):
            a = C10D.all_reduce(x, "sum", ga)
            b = C10D.all_reduce(x, "sum", gb)
            return C10D.wait_tensor(a) + C10D.wait_tensor(b)
        return make_fx(step, tracing_mode="fake")(torch.empty(4, 4))

    duration = 40_000_000
    times = {}
    for label, (ga, gb) in {"one": (fake_group(2, tag="m1"),) * 2,
                            "two": (fake_group(2, tag="m1"), fake_group(2, tag="m2"))}.items():
        gm = graph(ga, gb)
        names = [n.name for n in gm.graph.nodes if n.target is C10D.all_reduce.default]
        times[label] = measure(gm, [torch.randn(4, 4)], durations=dict.fromkeys(names, duration),
                               iters=3, warmup=0, peak=False).step_ns
    assert times["one"] >= 2 * duration  # sleeps in sequence: a bound, not a timing
    assert times["two"] < 0.8 * times["one"], times


def test_refuses_what_it_cannot_stand_in_for():
    gm = _overlap_graph()
    with pytest.raises(MeasureError, match="no duration"):
        measure(gm, [torch.randn(384, 384), torch.randn(192, 384)], durations={}, iters=1)
    with pytest.raises(ValueError, match="iters"):
        measure(gm, [], durations={}, iters=0)


@pytest.mark.gpu
def test_cuda_streams_overlap_and_values():
    """On CUDA: a collective spins on its group's side stream; the overlapped order measures faster."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA: the collectives' side streams and the spin kernel are CUDA's")
    gm = _overlap_graph()
    problem = extract_problem(gm)
    args = [(torch.randn(384, 384) * 384 ** -0.5).cuda(), torch.randn(192, 384).cuda()]
    (ag,) = problem.comm_tasks
    name = problem.tasks[ag].name
    ref = run_local(gm, [a.cpu() for a in args])
    out = run_asynchronously(gm, args, {name: 1_000_000})
    for o, r in zip(out, ref):
        torch.testing.assert_close(o.cpu(), r)
    compute = measure(gm, args, durations={name: 0}, iters=20).step_ns
    longer = measure(gm, args, durations={name: 4 * compute}, iters=20).step_ns
    assert longer >= 3 * compute  # the spin ran for its duration
    wait = problem.wait_of[ag]
    order = list(Schedule.original(problem).order)
    order.remove(wait)
    order.insert(order.index(ag) + 1, wait)
    serial = lower(gm, problem, Schedule(order=tuple(order)))
    durations = {name: compute}
    s = measure(serial, args, durations=durations, iters=20).step_ns
    o = measure(gm, args, durations=durations, iters=20).step_ns
    assert o < 0.8 * s, (o, s)
