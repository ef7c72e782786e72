"""Heuristics: hand-built graphs whose answers are derived by hand, random DAGs
(validity, budgets, incremental memory), and the model zoo."""

import random
import sys

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from solvercast import (Buffer, InfeasibleBudgetError, Machine, Problem, Role, Schedule, Task,
                        lower_bounds, simulate, validate)
from solvercast.heuristics import (METHOD_ORDER, Timeline, best_heuristic, comm_priority_schedule, held_budget,
                                   iterative_swap, list_schedule, nondelay_schedule, run_heuristics,
                                   upward_ranks)
from solvercast.ir.engine import memory_profile, simulated_peak
from solvercast.testing import random_problem, random_topological_order

from tests.support import reference_times

C, M, W, F = Role.COMPUTE, Role.COMM, Role.WAIT, Role.FREE
ANY = sys.maxsize  # a budget validate can never exceed: checks structure only


# ---- hand-built graphs ----------------------------------------------------------------------------

def wait_then_compute():
    """c(100) -> w -> u(10); x(100) independent. Original order c, w, x, u:
    c 0-100, w blocks the stream until 100, x 100-200, u 200-210: makespan 210."""
    tasks = (Task("c", M, 100), Task("w", W, waits_for=0), Task("x", C, 100), Task("u", C, 10))
    return Problem(tasks, ((0, 1), (1, 3)))


def test_wait_sinks_past_independent_compute():
    """Swap: c cannot rise (first). Sinking w: the work between c and w is 0 < 100;
    x does not depend on w -> swap (c, x, w, u); now 100 >= 100: hidden, stop.
    Timeline: c 0-100 under x 0-100, w at 100, u 100-110."""
    p = wait_then_compute()
    assert simulate(p, Schedule.original(p)).makespan == 210
    s = iterative_swap(p, Schedule.original(p))
    assert s.order == (0, 2, 1, 3) and s.method == "original+swap"
    assert validate(p, s).makespan == 110
    # sink_waits scores (never, 1 for waits, id): after c, ready are w (never, 1, 1) and x (never, 0, 2): x first
    s = comm_priority_schedule(p, raise_comms=False, sink_waits=True, overlap=False)
    assert s.order == (0, 2, 1, 3) and s.method == "sink_waits"


def compute_then_collective():
    """x(100); c(50) -> w -> u(10). Original x 0-100, c launched after x: 100-150, u 150-160."""
    tasks = (Task("x", C, 100), Task("c", M, 50), Task("w", W, waits_for=1), Task("u", C, 10))
    return Problem(tasks, ((1, 2), (2, 3)))


def test_collective_rises_above_independent_compute():
    """Raising c: nothing between c and w (0 < 50); x is not an input of c -> swap
    (c, x, w, u); now 100 >= 50: hidden, stop. c 0-50 under x 0-100, u 100-110."""
    p = compute_then_collective()
    assert simulate(p, Schedule.original(p)).makespan == 160
    s = iterative_swap(p, Schedule.original(p))
    assert s.order == (1, 0, 2, 3)
    assert validate(p, s).makespan == 110
    # raise_comms: score_0(c) = 0 beats x (never): c first; then x (id 0) before w (id 2)
    s = comm_priority_schedule(p, raise_comms=True, sink_waits=False, overlap=False)
    assert s.order == (1, 0, 2, 3) and s.method == "raise_comms"


def test_collective_rise_groups_its_producer_and_stops_when_hidden_or_at_a_collective():
    """Order c0(5), w0, x(100), a(1), c(50), w, u with a -> c -> w -> u and c0 -> w0.
    Raising c alone: a is c's input -> group [a, c]; x is independent -> [a, c] moves
    above it; now x (100 >= 50) hides c: stop. Order c0, w0, a, c, x, w, u.
    With c(500) the group keeps rising past w0 (independent) and stops at c0
    (collective order): c0, a, c, w0, x, w, u.
    Both passes on c(500): then w0 sinks past x (the only work after c0 is a(1) < 5):
    c0, a, c, x, w0, w, u."""
    tasks = (Task("c0", M, 5), Task("w0", W, waits_for=0), Task("x", C, 100), Task("a", C, 1),
             Task("c", M, 50), Task("w", W, waits_for=4), Task("u", C, 10))
    p = Problem(tasks, ((0, 1), (3, 4), (4, 5), (5, 6)))
    assert iterative_swap(p, Schedule.original(p), sink_waits=False).order == (0, 1, 3, 4, 2, 5, 6)
    long = Problem(tasks[:4] + (Task("c", M, 500),) + tasks[5:], p.edges)
    assert iterative_swap(long, Schedule.original(long), sink_waits=False).order == (0, 3, 4, 1, 2, 5, 6)
    s = iterative_swap(long, Schedule.original(long))
    assert s.order == (0, 3, 4, 2, 1, 5, 6)
    assert validate(long, s).makespan < simulate(long, Schedule.original(long)).makespan


def budget_problem():
    """Tasks: a(1) makes A(100) for c; c(1000) makes O(10) read by u (and held by w);
    w waits for c; x1, x2 make X1(50), X2(80), unused (freed at once); u makes U(1, output).
    Original order a, c, w, x1, x2, u; resident while each step runs:
    a 100, c 110, w 110 (frees A: a collective's input lives until its wait), x1 60, x2 90, u 11.
    Peak 110."""
    tasks = (Task("a", C, 1), Task("c", M, 1000), Task("w", W, waits_for=1), Task("x1", C, 10), Task("x2", C, 10),
             Task("u", C, 10))
    buffers = (Buffer("A", 100, 0, (1,)), Buffer("O", 10, 1, (2, 5)), Buffer("X1", 50, 3), Buffer("X2", 80, 4),
               Buffer("U", 1, 5, is_output=True))
    return Problem(tasks, ((0, 1), (1, 2), (2, 5)), buffers)


def test_budget_problem_memory_by_hand():
    p = budget_problem()
    assert memory_profile(p, range(6)).during_step == (100, 110, 110, 60, 90, 11)


def test_wait_sink_stops_exactly_at_the_budget():
    """c is never hidden (1000 > 20). Sinking w past x1 keeps A alive during x1:
    110 + 50 = 160; past x2 too: 110 + 80 = 190. With budget 160 (or 189) w stops
    after x1; with 190 it passes x2, groups with its consumer u and reaches the end."""
    p = budget_problem()
    for budget, order, peak in ((160, (0, 1, 3, 2, 4, 5), 160), (189, (0, 1, 3, 2, 4, 5), 160),
                                (190, (0, 1, 3, 4, 2, 5), 190), (10**6, (0, 1, 3, 4, 2, 5), 190)):
        s = iterative_swap(p, Schedule.original(p), budget)
        assert s.order == order, budget
        assert validate(p, s, memory_budget=budget).peak_memory == peak
        assert held_budget(s)
    # budget 159: not even x1; no budget at all: the input's own peak (110) is the limit
    assert iterative_swap(p, Schedule.original(p), 159).order == tuple(range(6))
    assert iterative_swap(p, Schedule.original(p)).order == tuple(range(6))
    # the machine's budget is used when none is given
    assert iterative_swap(p.with_budget(160), Schedule.original(p)).order == (0, 1, 3, 2, 4, 5)


def two_chains():
    """p(50) -> q(50) and r(60) -> s(10), independent. p makes P(100) for q, r makes R(100) for s;
    q, s make 1-byte outputs. Ranks: p 100, r 70, q 50, s 10."""
    tasks = (Task("p", C, 50), Task("q", C, 50), Task("r", C, 60), Task("s", C, 10))
    buffers = (Buffer("P", 100, 0, (1,)), Buffer("Q", 1, 1, is_output=True), Buffer("R", 100, 2, (3,)),
               Buffer("S", 1, 3, is_output=True))
    return Problem(tasks, ((0, 1), (2, 3)), buffers)


def test_nondelay_fills_the_collective_with_ready_compute():
    # c launched at 0 (runs 0-100); x can start at 0 while w could only end at 100, so x goes first:
    # x 0-100, w at 100, u 100-110
    p = wait_then_compute()
    s = nondelay_schedule(p)
    assert s.order == (0, 2, 1, 3) and s.method == "nondelay"
    assert simulate(p, s).makespan == 110
    # list_schedule's static rank order issues w (rank 10 + u) ... x has rank 100: also first here;
    # the difference shows when the wait's consumer chain outranks the filler:
    tasks = (Task("c", M, 100), Task("w", W, waits_for=0), Task("x", C, 50), Task("u", C, 60))
    q = Problem(tasks, ((0, 1), (1, 3)))
    assert simulate(q, list_schedule(q)).makespan == 210  # c, w, u 100-160, x 160-210
    assert simulate(q, nondelay_schedule(q)).makespan == 160  # c, x 0-50, w at 100, u 100-160


def test_nondelay_drains_memory_before_it_runs_out():
    # x1 -> X1(60) -> y1 -> Y1(40, output), the same for x2/y2; budget 150. By start time alone (x's
    # outrank y's) the pass issues x1, x2 (120 B live) and then neither y fits (160 B): stuck. Above
    # a soft limit of 0.7 * 150 = 105 B it prefers the task that adds least net of what it frees
    # (y1: +40 - 60), so x1, y1, x2, y2 holds the budget.
    from solvercast.heuristics.list_scheduling import _nondelay_pass

    tasks = (Task("x1", C, 10), Task("x2", C, 10), Task("y1", C, 10), Task("y2", C, 10))
    bufs = (Buffer("X1", 60, 0, (2,)), Buffer("X2", 60, 1, (3,)),
            Buffer("Y1", 40, 2, (), is_output=True), Buffer("Y2", 40, 3, (), is_output=True))
    p = Problem(tasks, ((0, 2), (1, 3)), bufs)
    assert _nondelay_pass(p, upward_ranks(p), 150, 150)[1]  # stuck: broke the budget
    s = nondelay_schedule(p, 150)
    r = validate(p, s, memory_budget=150)
    assert s.method == "nondelay" and s.order == (0, 2, 1, 3) and r.makespan == 40


def test_nondelay_defers_the_fillers_a_dead_end_blames(monkeypatch):
    # b1 -> B1(40) -> b2 -> B2(40) -> d <- A(50) <- a; budget 100. By rank a (100 + d) goes first, then b1
    # (90 B live) and b2 would need 130: stuck, with A and B1 allocated and unread. The retry holds
    # a and b1 back until they are at most NONDELAY_DEFER_WINDOW (0 here) past the first unissued
    # task of the original order: b1, b2 (80 B, then B1 freed), a (90 B), d (91 B).
    import solvercast.heuristics.list_scheduling as ls

    tasks = (Task("b1", C, 10), Task("b2", C, 10), Task("a", C, 100), Task("d", C, 10))
    bufs = (Buffer("B1", 40, 0, (1,)), Buffer("B2", 40, 1, (3,)), Buffer("A", 50, 2, (3,)),
            Buffer("D", 1, 3, (), is_output=True))
    p = Problem(tasks, ((0, 1), (1, 3), (2, 3)), bufs)
    ranks = upward_ranks(p)
    assert ranks[2] > ranks[0]
    schedule, over, culprits = ls._nondelay_pass(p, ranks, 100, 100)
    assert over and schedule.order[:2] == (2, 0) and culprits == {0, 2}
    monkeypatch.setattr(ls, "NONDELAY_DEFER_WINDOW", 0)
    schedule, over, _ = ls._nondelay_pass(p, ranks, 100, 100, deferred=frozenset(culprits))
    assert not over and schedule.order == (0, 1, 2, 3)
    assert validate(p, schedule, memory_budget=100).peak_memory == 91
    # held-back tasks are still issued when nothing else fits: deferring everything changes nothing
    assert ls._nondelay_pass(p, ranks, 100, 100, deferred=frozenset(range(4)))[0].order == (0, 1, 2, 3)


@pytest.mark.parametrize("streams", [1, 2])
def test_nondelay_scan_counts_only_tasks_that_fit(streams):
    """x holds X (100 B) until z; NONDELAY_SCAN + 1 tasks of 100 B outrank s (1 B), s -> z; budget 150.
    None of the big ones fits next to X, s does: the scan must reach it however many it passes over
    (with several streams whether a task fits is decided per stream, after it was counted)."""
    from solvercast.heuristics.list_scheduling import NONDELAY_SCAN, _nondelay_pass

    k = NONDELAY_SCAN + 1
    tasks = [Task("x", C, 1)] + [Task(f"big{i}", C, 100) for i in range(k)] + [Task("s", C, 1), Task("z", C, 1)]
    s_id, z_id = k + 1, k + 2
    edges = [(0, i) for i in range(1, k + 1)] + [(0, s_id), (s_id, z_id)]
    bufs = ([Buffer("X", 100, 0, (z_id,))] + [Buffer(f"B{i}", 100, i, ()) for i in range(1, k + 1)]
            + [Buffer("S", 1, s_id, (z_id,)), Buffer("Z", 1, z_id, (), is_output=True)])
    p = Problem(tuple(tasks), tuple(edges), tuple(bufs), Machine(compute_streams=streams))
    schedule, over, _ = _nondelay_pass(p, upward_ranks(p), 150, 150)
    assert not over and schedule.order[:3] == (0, s_id, z_id)
    assert validate(p, schedule, memory_budget=150).peak_memory == 102


def test_nondelay_retry_gets_past_the_fsdp_dead_end():
    # FSDP at a budget of the original peak: filling idle time casts parameters for all-gathers that
    # the collective order keeps back (and the loss), and the pass runs out of memory at the turn to
    # the backward. Deferring what the dead end blames holds the budget in the next pass.
    from solvercast.fx.extract import extract_problem
    from solvercast.heuristics.list_scheduling import _nondelay_pass
    from solvercast.models import build

    p = extract_problem(build("fsdp_layers", layers=3))
    budget = simulated_peak(p, Schedule.original(p))
    ranks = upward_ranks(p)
    _, over, culprits = _nondelay_pass(p, ranks, budget, budget)
    assert over and culprits
    assert all(p.tasks[t].role == C and p.allocated_bytes[t] for t in culprits)
    schedule, over, _ = _nondelay_pass(p, ranks, budget, budget, deferred=frozenset(culprits))
    assert not over
    assert validate(p, schedule, memory_budget=budget).makespan < simulate(p, Schedule.original(p)).makespan


def test_list_schedule_by_rank_and_memory():
    """No budget: p, r (70 > 50), q, s; r runs while P is alive: 100 + 100 = 200.
    Budget 150: after p (100 resident) r would need 200 > 150 but q fits (101), so q goes first,
    freeing P; then r, s: peak 102."""
    p = two_chains()
    assert upward_ranks(p) == [100, 50, 70, 10]
    s = list_schedule(p)
    assert s.order == (0, 2, 1, 3) and s.method == "list"
    assert simulate(p, s).peak_memory == 201
    s = list_schedule(p, 150)
    assert s.order == (0, 1, 2, 3) and s.method == "list"
    assert validate(p, s, memory_budget=150).peak_memory == 102


def test_list_schedule_reports_a_budget_it_cannot_hold():
    """Budget 50 is below p's own 100 bytes: every attempt fails, the lowest-peak one comes back marked."""
    p = two_chains()
    s = list_schedule(p, 50)
    assert not held_budget(s) and s.method.endswith("!over-budget")
    assert simulate(p, s).peak_memory == 102
    validate(p, s, memory_budget=ANY)


def test_list_schedule_uses_a_second_stream():
    """Two independent half-GPU kernels a, b (100 each) then c(10) <- a, b; sync 5.
    a -> stream 0 (0-100); b finishes first on stream 1 (0-100, occupancy 0.5 + 0.5);
    c on stream 0 waits for b's event: 105-115, as simulate says."""
    tasks = (Task("a", C, 100, 0.5), Task("b", C, 100, 0.5), Task("c", C, 10))
    p = Problem(tasks, ((0, 2), (1, 2)), machine=Machine(compute_streams=2, sync_overhead=5))
    s = list_schedule(p)
    assert s.streams == {0: 0, 1: 1, 2: 0}
    assert validate(p, s).makespan == 115


def test_overlap_fills_the_collective_with_needed_compute_first():
    """c(100) -> w -> u; x1..x3 (40 each) independent, x3 also feeds c2 (a later collective).
    comm_priority: c (score 0) first; c2 needs x3, so x3 scores 1 and is filled in first,
    then x1 (40 + 40 < 100), x2 (120 >= 100: covered); then c2 launches, w waits, u."""
    tasks = (Task("x1", C, 40), Task("x2", C, 40), Task("x3", C, 40), Task("c", M, 100), Task("w", W, waits_for=3),
             Task("u", C, 10), Task("c2", M, 10), Task("w2", W, waits_for=6))
    p = Problem(tasks, ((3, 4), (4, 5), (2, 6), (6, 7)))
    s = comm_priority_schedule(p)
    assert s.order == (3, 2, 0, 1, 6, 4, 5, 7)
    validate(p, s)


# ---- the incremental timeline agrees with simulate --------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(1, 40), streams=st.integers(1, 3), sync=st.sampled_from([0, 7]))
def test_timeline_replays_exactly_like_simulate(seed, n, streams, sync):
    """The engine's placement, used step by step (as list schedulers do) and through `simulate`,
    gives the times of the plainly written reference (oracle.reference_times)."""
    p = random_problem(seed, n, compute_streams=streams, sync_overhead=sync, sync_comm_fraction=0.1)
    rng = random.Random(seed)
    order = random_topological_order(p, rng, keep_comm_order=True)
    stream_of = {t: rng.choice(list(p.allowed_streams(t))) for t in range(n)}
    r = simulate(p, Schedule(order=order, streams=stream_of))
    assert (r.start, r.end) == reference_times(p, Schedule(order=order, streams=stream_of))
    timeline = Timeline(p)
    for t in order:
        predicted = timeline.start_on(t, stream_of[t])
        timeline.place(t, stream_of[t])
        assert timeline.start[t] == predicted
    assert tuple(timeline.start) == r.start and tuple(timeline.end) == r.end
    # knowing every stream in advance only forgets intervals sooner: same times, same peak
    schedule = Schedule(order=order, streams=stream_of)
    replay = Timeline(p, schedule.stream_list(p))
    for t in order:
        replay.place(t, stream_of[t])
    assert tuple(replay.start) == r.start
    assert simulated_peak(p, schedule) == r.peak_memory


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(1, 40), streams=st.integers(2, 3), sync=st.sampled_from([0, 7]))
def test_memory_over_time_grows_with_the_schedule_like_simulate(seed, n, streams, sync):
    """TimeMemory, fed task by task, ends with simulate's time-based curve: the same peak, and the same
    most-resident-from-then-on at every task's start."""
    from solvercast.ir.engine import TimeMemory
    from solvercast.ir.engine import memory_over_time

    p = random_problem(seed, n, compute_streams=streams, sync_overhead=sync, free_fraction=0.2)
    rng = random.Random(seed)
    order = random_topological_order(p, rng, keep_comm_order=True)
    stream_of = {t: rng.choice(list(p.allowed_streams(t))) for t in range(n)}
    r = simulate(p, Schedule(order=order, streams=stream_of))
    curve = memory_over_time(p, r.start, r.end)

    def final_from(time):
        before = [resident for at, resident in curve if at <= time]
        return max([before[-1]] + [resident for at, resident in curve if at > time])

    timeline = Timeline(p)
    memory = TimeMemory(p, timeline)
    for t in order:
        timeline.place(t, stream_of[t])
        memory.place(t)
    assert memory.peak_from(-1) == max(resident for _, resident in curve)
    assert r.peak_memory == max(memory.peak_from(-1), r.memory.peak)  # several streams: the larger view
    assert all(memory.peak_from(r.start[t]) == final_from(r.start[t]) for t in range(n))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), n=st.integers(1, 40), streams=st.integers(2, 3),
       fraction=st.sampled_from([0.3, 0.7, 1.0]))
def test_a_nondelay_pass_that_never_got_stuck_holds_the_budget_over_time(seed, n, streams, fraction):
    from solvercast.heuristics.list_scheduling import _nondelay_pass

    p = random_problem(seed, n, compute_streams=streams, sync_overhead=7, sync_comm_fraction=0.1)
    original_peak = simulate(p, Schedule.original(p)).peak_memory
    budget = int(lower_bounds(p).memory + fraction * (original_peak - lower_bounds(p).memory))
    schedule, over, _ = _nondelay_pass(p, upward_ranks(p), budget, budget)
    if not over:
        assert validate(p, schedule, memory_budget=budget).peak_memory <= budget


# ---- random DAGs: validity and budgets --------------------------------------------------------------

def all_heuristics(p, budget):
    original = Schedule.original(p)
    cp = comm_priority_schedule(p, memory_budget=budget)
    return {
        "list": list_schedule(p, budget),
        "nondelay": nondelay_schedule(p, budget),
        "comm_priority": cp,
        "raise_comms": comm_priority_schedule(p, True, False, False, memory_budget=budget),
        "sink_waits": comm_priority_schedule(p, False, True, False, memory_budget=budget),
        "overlap_only": comm_priority_schedule(p, False, False, True, memory_budget=budget),
        "original+swap": iterative_swap(p, original, budget),
        "comm_priority+swap": iterative_swap(p, cp, budget),
    }


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), n=st.integers(1, 40), streams=st.integers(1, 2), sync=st.sampled_from([0, 7]),
       fraction=st.sampled_from([0.0, 0.3, 0.7, 1.0, 1.0]), preserve=st.sampled_from([True, True, False]))
def test_every_heuristic_is_valid_and_holds_the_budget(seed, n, streams, sync, fraction, preserve):
    p = random_problem(seed, n, compute_streams=streams, sync_overhead=sync, sync_comm_fraction=0.1,
                       preserve_collective_order=preserve)
    original_peak = simulate(p, Schedule.original(p)).peak_memory
    low = lower_bounds(p).memory
    budget = int(low + fraction * (original_peak - low))
    for name, s in all_heuristics(p, budget).items():
        r = validate(p, s, memory_budget=ANY)  # order, streams, collective order
        assert held_budget(s) == (r.peak_memory <= budget), (name, s.method, r.peak_memory, budget)
        if budget >= original_peak:
            validate(p, s, memory_budget=budget)
    try:
        best = best_heuristic(p, budget)
    except InfeasibleBudgetError as e:
        assert budget < original_peak and e.best_peak > budget
        assert simulate(p, e.schedule).peak_memory == e.best_peak
        assert e.best_peak == min(r.peak_memory for _, r in run_heuristics(p, budget).values())
    else:
        r = validate(p, best, memory_budget=budget)
        assert best.method in METHOD_ORDER
        assert r.makespan <= simulate(p, Schedule.original(p)).makespan or budget < original_peak


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(1, 40), streams=st.integers(1, 2))
def test_unconstrained_heuristics_are_valid_and_best_is_never_worse_than_original(seed, n, streams):
    p = random_problem(seed, n, compute_streams=streams, sync_overhead=3, sync_comm_fraction=0.1)
    for s in all_heuristics(p, None).values():
        assert held_budget(s)
        validate(p, s)
    best = best_heuristic(p)
    results = run_heuristics(p)
    assert validate(p, best).makespan == min(r.makespan for _, r in results.values())
    assert validate(p, best).makespan <= results["original"][1].makespan
    assert best_heuristic(p).order == best.order  # deterministic


def test_best_heuristic_raises_with_the_lowest_peak_schedule():
    p = two_chains()
    with pytest.raises(InfeasibleBudgetError) as info:
        best_heuristic(p, 50)
    assert info.value.best_peak == 102
    assert simulate(p, info.value.schedule).peak_memory == 102
    assert info.value.schedule.method in METHOD_ORDER


def test_float_budget_is_a_ratio_of_the_original_peak():
    p = budget_problem()  # original peak 110
    assert iterative_swap(p, Schedule.original(p), 2.0).order == (0, 1, 3, 4, 2, 5)  # 220 B


# ---- iterative swap: incremental memory equals a full recomputation after every swap ----------------

@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(2, 60), streams=st.integers(1, 2),
       fraction=st.sampled_from([None, 1.0, 1.2, 2.0]), start=st.sampled_from(["original", "random", "cp"]))
def test_iterative_swap_tracks_memory_incrementally(seed, n, streams, fraction, start):
    p = random_problem(seed, n, compute_streams=streams, free_fraction=0.2)
    if start == "original":
        schedule = Schedule.original(p)
    elif start == "cp":
        schedule = comm_priority_schedule(p)
    else:
        schedule = Schedule(order=random_topological_order(p, random.Random(seed), keep_comm_order=True))
    input_peak = memory_profile(p, schedule.order).peak
    budget = None if fraction is None else int(fraction * input_peak)
    limit = input_peak if budget is None else max(budget, input_peak)
    swaps = []

    def check(state):
        order = state.order()
        profile = memory_profile(p, order)
        assert tuple(state.during()) == profile.during_step
        assert tuple(state.after()) == profile.after_step
        assert state.peak() == profile.peak <= limit
        swaps.append(1)

    s = iterative_swap(p, schedule, budget, on_swap=check)
    validate(p, s, memory_budget=ANY)
    assert memory_profile(p, s.order).peak <= limit


def test_incremental_memory_check_sees_real_swaps():
    """The hypothesis test above is only meaningful if swaps happen: count them on fixed seeds."""
    swaps = 0

    def count(state):
        nonlocal swaps
        assert tuple(state.during()) == memory_profile(p, state.order()).during_step
        swaps += 1

    for seed in range(20):
        p = random_problem(seed, 60)
        iterative_swap(p, Schedule.original(p), 10**9, on_swap=count)
    assert swaps > 100


def test_iterative_swap_move_cap():
    p = random_problem(3, 200)
    moves = []
    iterative_swap(p, Schedule.original(p), 10**9, max_moves=5, on_swap=lambda s: moves.append(1))
    assert len(moves) == 5


# ---- speed (a smoke check; experiments/tuning/heuristics.py speed measures) --------------------------------

def test_large_graph_is_fast_enough():
    import time

    p = random_problem(0, 5000)
    t0 = time.perf_counter()
    for s in (list_schedule(p), comm_priority_schedule(p), iterative_swap(p, Schedule.original(p))):
        validate(p, s)
    assert time.perf_counter() - t0 < 10


# ---- the model zoo ----------------------------------------------------------------------------------

def _model_names():
    try:
        from solvercast.models import list_models
    except ImportError:
        return [pytest.param(None, marks=pytest.mark.skip(reason="solvercast.models has no list_models yet"))]
    return list(list_models())


_PROBLEMS = {}


def zoo_problem(name):
    if name not in _PROBLEMS:
        from solvercast.fx.extract import extract_problem
        from solvercast.models import build

        _PROBLEMS[name] = extract_problem(build(name))
    return _PROBLEMS[name]


@pytest.mark.parametrize("name", _model_names())
def test_every_heuristic_is_valid_on_zoo_models(name):
    p = zoo_problem(name)
    original = simulate(p, Schedule.original(p))
    budget = original.peak_memory
    for method, s in all_heuristics(p, budget).items():
        validate(p, s, memory_budget=budget)
        assert held_budget(s), method
    best = best_heuristic(p, budget)
    assert validate(p, best, memory_budget=budget).makespan <= original.makespan


@pytest.mark.parametrize("name", ["tp_block", "tp_mlp", "fsdp_layers"])
def test_comm_priority_never_slower_than_original_on_zoo_models(name):
    names = _model_names()
    if name not in names:
        pytest.skip(f"model {name!r} not in solvercast.models yet")
    p = zoo_problem(name)
    assert simulate(p, comm_priority_schedule(p)).makespan <= simulate(p, Schedule.original(p)).makespan


@settings(max_examples=100, deadline=None)
@given(changes=st.lists(st.tuples(st.integers(0, 50), st.integers(-100, 100)), max_size=60),
       queries=st.lists(st.integers(-1, 55), min_size=1, max_size=5), block=st.sampled_from([1, 2, 3, 64]))
def test_memory_curve_in_blocks_answers_like_a_full_sweep(changes, queries, block):
    """_Curve (sorted blocks with sums and highs) against summing the sorted changes from scratch."""
    from solvercast.ir.engine import _Curve

    curve = type("SmallBlocks", (_Curve,), {"BLOCK": block})(1000)
    for k, (time, delta) in enumerate(changes):
        curve.add(time, delta)
        done = sorted(changes[:k + 1])
        for q in queries:
            resident = 1000 + sum(d for t, d in done if t <= q)
            running, peak = resident, resident
            for t, d in done:
                if t > q:
                    running += d
                    peak = max(peak, running)
            assert curve.peak_from(q) == peak


def test_a_freeable_input_that_is_an_output_stays_in_both_memory_rules():
    """Graph outputs stay until the end, freeable input or not, over time as over program steps (the
    time rule used to free it after its last reader while the step rule kept it): I (100 B) read by a
    (10 ns), A (5 B) an output."""
    from solvercast.ir.engine import TimeMemory, memory_over_time, memory_profile

    p = Problem((Task("a", C, 10),), (), (Buffer("I", 100, None, (0,), is_output=True, freeable=True),
                                          Buffer("A", 5, 0, (), is_output=True)),
                machine=Machine(compute_streams=2))
    timeline = Timeline(p)
    memory = TimeMemory(p, timeline)
    timeline.place(0, 0)
    memory.place(0)
    r = simulate(p, Schedule.original(p))
    assert memory_over_time(p, r.start, r.end)[-1][1] == memory.peak_from(10) == 105
    assert memory_profile(p, [0]).after_step[-1] == 105
