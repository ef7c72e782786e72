"""Simulator, validator and bounds on tiny graphs whose answers are derived by hand."""

import pytest
from hypothesis import given, settings, strategies as st

from solvercast import (Buffer, InvalidProblemError, InvalidScheduleError, Machine, Problem, Role, Schedule, Task,
                        lower_bounds, simulate, validate)
from solvercast.testing import random_problem, random_topological_order

C, M, W, F = Role.COMPUTE, Role.COMM, Role.WAIT, Role.FREE


def overlap_problem(sync=0):
    """mm_a(100), mm_b(100) independent; ag(50) -> wait -> use(10) <- mm_a"""
    tasks = (Task("mm_a", C, 100), Task("mm_b", C, 100), Task("ag", M, 50), Task("wait", W, waits_for=2),
             Task("use", C, 10))
    edges = ((2, 3), (3, 4), (0, 4))
    return Problem(tasks, edges, machine=Machine(sync_overhead=sync))


def test_collective_exposed_in_original_order():
    # mm_a 0-100, mm_b 100-200, ag launched after them: 200-250, wait 250, use 250-260
    r = simulate(overlap_problem(), Schedule.original(overlap_problem()))
    assert (r.makespan, r.exposed_comm) == (260, 50)
    assert r.start[2] == 200 and r.end[2] == 250 and r.start[4] == 250


def test_collective_hidden_when_raised():
    # ag launched first: 0-50 under mm_a; wait at 200 once mm_b is done; use 200-210
    p = overlap_problem()
    r = simulate(p, Schedule(order=(2, 0, 1, 3, 4)))
    assert (r.makespan, r.exposed_comm) == (210, 0)


def test_sync_overhead_on_cross_stream_edges():
    # sync 5: raised ag starts at 0 + 5 (launch after the default stream's prior work, here none),
    # ends 55; the wait pays 5 more but mm_b ends at 200 anyway.
    p = overlap_problem(sync=5)
    assert simulate(p, Schedule(order=(2, 0, 1, 3, 4))).makespan == 210
    # original order: ag starts 200 + 5, ends 255, wait at 260, use 260-270
    r = simulate(p, Schedule.original(p))
    assert (r.makespan, r.exposed_comm) == (270, 60)


def two_stream_problem(occupancy):
    """a(100) on stream 0, b(100) on stream 1, c(10) <- a, b on stream 0; sync 5"""
    tasks = (Task("a", C, 100, occupancy), Task("b", C, 100, occupancy), Task("c", C, 10))
    return Problem(tasks, ((0, 2), (1, 2)), machine=Machine(compute_streams=2, sync_overhead=5))


def test_two_streams_overlap_and_pay_sync():
    # half-GPU kernels run side by side: a, b 0-100; c waits for b's event: 105-115
    p = two_stream_problem(0.5)
    r = simulate(p, Schedule(order=(0, 1, 2), streams={1: 1}))
    assert r.start[1] == 0 and r.makespan == 115


def test_occupancy_stops_two_big_matmuls_from_overlapping():
    # full-GPU kernels cannot share it: b waits until a ends (100-200); c: 200 + 5 sync -> 205-215
    p = two_stream_problem(1.0)
    r = simulate(p, Schedule(order=(0, 1, 2), streams={1: 1}))
    assert r.start[1] == 100 and r.makespan == 215


def chain_with_memory():
    """X(100, input) -> t0: A(10) -> t1: B(20) -> t2: C(30, output)"""
    tasks = tuple(Task(f"t{i}", C, 1) for i in range(3))
    buffers = (Buffer("X", 100, None, (0,)), Buffer("A", 10, 0, (1,)), Buffer("B", 20, 1, (2,)),
               Buffer("C", 30, 2, (), is_output=True))
    return Problem(tasks, ((0, 1), (1, 2)), buffers)


def test_memory_timeline_counts_outputs_with_last_used_inputs():
    # during: 110, 130 (A and B coexist), 150 (B and C); after frees: 110, 120, 130
    r = simulate(chain_with_memory(), Schedule.original(chain_with_memory()))
    assert r.memory.during_step == (110, 130, 150)
    assert r.memory_timeline == (110, 120, 130)
    assert r.peak_memory == 150


def test_freeable_input_is_released_after_last_use():
    p = chain_with_memory()
    p = Problem(p.tasks, p.edges, (Buffer("X", 100, None, (0,), freeable=True),) + p.buffers[1:])
    assert simulate(p, Schedule.original(p)).memory_timeline == (10, 20, 30)


def collective_memory_problem():
    """t0: A(10) -> coll(A): O(40) ; t2: D(5), unused ; wait(coll) -> t4: E(1, output)"""
    tasks = (Task("t0", C, 1), Task("coll", M, 10), Task("t2", C, 1), Task("wait", W, waits_for=1),
             Task("t4", C, 1))
    buffers = (Buffer("A", 10, 0, (1,)), Buffer("O", 40, 1, (3, 4)), Buffer("D", 5, 2, ()),
               Buffer("E", 1, 4, (), is_output=True))
    return Problem(tasks, ((0, 1), (1, 3), (3, 4)), buffers)


def test_collective_input_is_held_until_its_wait():
    # A lives until the wait (step 3), so at t2 A + O + D = 55 coexist
    p = collective_memory_problem()
    r = simulate(p, Schedule.original(p))
    assert r.memory.during_step == (10, 50, 55, 50, 41)
    assert r.peak_memory == 55


def test_validate_rejects_each_broken_rule():
    p = overlap_problem()
    with pytest.raises(InvalidScheduleError, match="not topological"):
        validate(p, Schedule(order=(0, 1, 3, 2, 4)))
    with pytest.raises(InvalidScheduleError, match="each of the 5 tasks once"):
        validate(p, Schedule(order=(0, 1, 2, 3)))
    with pytest.raises(InvalidScheduleError, match="may not run on stream"):
        validate(p, Schedule(order=(0, 1, 2, 3, 4), streams={0: 1}))
    q = chain_with_memory()
    validate(q, Schedule.original(q), memory_budget=150)
    with pytest.raises(InvalidScheduleError, match="exceeds the budget"):
        validate(q, Schedule.original(q), memory_budget=149)


def test_validate_keeps_collective_order():
    tasks = (Task("c0", M, 5), Task("c1", M, 5), Task("w0", W, waits_for=0), Task("w1", W, waits_for=1))
    p = Problem(tasks, ((0, 2), (1, 3)))
    with pytest.raises(InvalidScheduleError, match="collective order changed"):
        validate(p, Schedule(order=(1, 0, 2, 3)))
    free = Problem(tasks, ((0, 2), (1, 3)), preserve_collective_order=False)
    validate(free, Schedule(order=(1, 0, 2, 3)))


def test_problem_rejects_bad_construction():
    with pytest.raises(InvalidProblemError, match="goes backwards"):
        Problem((Task("a", C, 1), Task("b", C, 1)), ((1, 0),))
    with pytest.raises(InvalidProblemError, match="needs the edge"):
        Problem((Task("c", M, 1), Task("w", W, waits_for=0)), ())
    with pytest.raises(InvalidProblemError, match="takes no time"):
        Task("w", W, 3, waits_for=0)
    with pytest.raises(InvalidProblemError, match="occupancy"):
        Task("a", C, 1, occupancy=0.0)
    with pytest.raises(InvalidProblemError, match="allocates nothing"):  # a view is an alias, not a storage
        Problem((Task("a", C, 1), Task("v", Role.FREE)), ((0, 1),), (Buffer("V", 100, 1, ()),))
    Problem((Task("a", C, 1), Task("v", Role.FREE)), ((0, 1),), (Buffer("V", 0, 1, ()),))  # empty: fine


def test_bounds_on_hand_built_graph():
    # critical path: ag(50) -> wait -> use(10) = 60 < mm_a -> use = 110; compute work 210; comm 50
    b = lower_bounds(overlap_problem())
    assert (b.critical_path, b.compute, b.comm, b.makespan) == (110, 210, 50, 210)
    # with sync 5 the comm chain pays two forced syncs: 50 + 5 + 10... still below 110
    assert lower_bounds(overlap_problem(sync=5)).critical_path == 110
    # memory: resident X plus the largest step working set (B and C at t2: 50; outputs 30)
    assert lower_bounds(chain_with_memory()).memory == 150


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(1, 40), streams=st.integers(1, 3), sync=st.sampled_from([0, 7]),
       order_seed=st.integers(0, 10**6))
def test_any_topological_order_simulates_within_bounds(seed, n, streams, sync, order_seed):
    import random
    p = random_problem(seed, n, compute_streams=streams, sync_overhead=sync, sync_comm_fraction=0.1,
                       preserve_collective_order=False)
    rng = random.Random(order_seed)
    order = random_topological_order(p, rng)
    stream_of = {t: rng.choice(list(p.allowed_streams(t))) for t in range(n)}
    r = validate(p, Schedule(order=order, streams=stream_of))
    b = lower_bounds(p)
    assert b.makespan <= r.makespan
    assert b.memory <= r.peak_memory
    for u, v in p.edges:
        assert r.end[u] <= r.start[v] or p.tasks[v].role == F
    # one task per stream at a time
    for s in range(p.machine.num_streams):
        spans = sorted((r.start[t], r.end[t]) for t in range(n) if r.streams[t] == s and p.tasks[t].role != F)
        assert all(a[1] <= b_[0] for a, b_ in zip(spans, spans[1:]))
    # compute tasks running at once never exceed the GPU
    compute = [t for t in range(n) if p.machine.is_compute_stream(r.streams[t]) and p.tasks[t].duration]
    for t in compute:
        load = sum(p.tasks[u].occupancy for u in compute if r.start[u] <= r.start[t] < r.end[u])
        assert load <= 1.0 + 1e-9


@pytest.mark.parametrize("streams", [1, 2])
def test_plotted_memory_curve_peaks_at_the_reported_peak(streams):
    from solvercast.runtime.visualize import memory_curve

    for seed in range(20):
        p = random_problem(seed, 30, compute_streams=streams, sync_overhead=3)
        r = simulate(p, Schedule.original(p))
        times, resident = memory_curve(p, r)
        assert max(resident) == r.peak_memory
        assert times == sorted(times)


@settings(max_examples=300, deadline=None)
@given(intervals=st.lists(st.tuples(st.integers(0, 30), st.integers(1, 15),
                                    st.sampled_from([0.05, 0.1, 0.12121212121212122, 0.25, 1 / 3, 0.5, 1.0])),
                          max_size=8),
       est=st.integers(0, 30), duration=st.integers(1, 12),
       occupancy=st.sampled_from([0.05, 0.12121212121212122, 1 / 3, 0.5, 1.0]))
def test_earliest_fit_is_the_first_candidate_whose_window_fits(intervals, est, duration, occupancy):
    """The sweep against its definition: the first of est and the later interval ends at which the load,
    summed afresh at the window's start and at every interval start inside the window, leaves room."""
    from solvercast.ir.engine import OCCUPANCY_SLACK as _OCCUPANCY_SLACK, earliest_fit as _earliest_fit

    active = [(s, s + length, o) for s, length, o in intervals]

    def fits(t):
        points = [t] + [s for s, _, _ in active if t < s < t + duration]
        return all(sum(o for s, e, o in active if s <= p < e) + occupancy <= 1.0 + _OCCUPANCY_SLACK for p in points)

    expected = next(t for t in sorted({est} | {e for _, e, _ in active if e > est}) if fits(t))
    assert _earliest_fit(active, est, duration, occupancy) == expected
