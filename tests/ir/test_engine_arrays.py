"""The engine's whole-order memory counts (numpy) and the ready set's budget-free index (a heap), each
against its rule written out plainly: the speed-ups must not change a single number."""

import random

from hypothesis import given, settings, strategies as st

from solvercast import Schedule, simulate
from solvercast.ir.engine import last_holders, memory_over_time, memory_profile, time_peak
from solvercast.heuristics._common import ReadySet
from solvercast.testing import random_problem, random_topological_order


def plain_memory_profile(problem, order):
    """Per step: resident while it runs (its allocations counted before its frees) and after its frees."""
    pos = {t: i for i, t in enumerate(order)}
    resident = problem.initial_resident_bytes
    during, after = [], []
    for k, t in enumerate(order):
        resident += problem.allocated_bytes[t]
        during.append(resident)
        resident -= sum(size for size, holders in problem.releasable if max(pos[h] for h in holders) == k)
        after.append(resident)
    return during, after


def plain_memory_over_time(problem, start, end):
    """Buffers born at their producer's start, freed at the end of their last holder (at least one unit after
    their producer starts); sorted by time, frees first at a time; the running total after each change."""
    events = []
    for size, producer, holders, freed in _lifetimes(problem):
        if producer is not None:
            events.append((start[producer], size))
        if freed:
            free = max([end[h] for h in holders] + [0])
            if producer is not None:
                free = max(free, start[producer] + 1)
            events.append((free, -size))
    resident = problem.initial_resident_bytes
    curve = [(0, resident)]
    for time, delta in sorted(events):
        resident += delta
        curve.append((time, resident))
    return curve


def _lifetimes(problem):
    for b, buf in enumerate(problem.buffers):
        if buf.is_input:
            if problem.is_freed(b):
                yield buf.size, None, problem.buffer_holders[b], True
        else:
            yield buf.size, buf.producer, problem.buffer_holders[b], problem.is_freed(b)


def _random_schedule(seed, n, streams):
    p = random_problem(seed, n, compute_streams=streams, sync_overhead=seed % 3, free_fraction=0.2)
    rng = random.Random(seed)
    order = random_topological_order(p, rng, keep_comm_order=True)
    return p, Schedule(order=order, streams={t: rng.choice(list(p.allowed_streams(t))) for t in range(p.num_tasks)})


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(1, 40), streams=st.integers(1, 3))
def test_memory_counts_in_arrays_match_the_rules_written_out(seed, n, streams):
    p, schedule = _random_schedule(seed, n, streams)
    profile = memory_profile(p, schedule.order)
    during, after = plain_memory_profile(p, schedule.order)
    assert profile.during_step == tuple(during) and profile.after_step == tuple(after)
    peak = max([p.initial_resident_bytes] + during)
    assert profile.peak == peak
    assert profile.peak_step == (during.index(peak) if peak > p.initial_resident_bytes else -1)
    pos = {t: i for i, t in enumerate(schedule.order)}
    assert last_holders(p, schedule.order) == [max(h, key=pos.__getitem__) for _, h in p.releasable]
    r = simulate(p, schedule)
    curve = plain_memory_over_time(p, r.start, r.end)
    assert memory_over_time(p, r.start, r.end) == curve
    assert time_peak(p, r.start, r.end) == max(resident for _, resident in curve)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(1, 40), fill_share=st.sampled_from([0.0, 0.5, 1.0]))
def test_ready_set_without_a_budget_picks_the_first_ready_task_in_priority(seed, n, fill_share):
    """`pick` (and `pick(fill=True)` among the fill-eligible) is the ready task earliest in the priority,
    whatever mix of picks and fill picks issues the tasks."""
    p = random_problem(seed, n)
    rng = random.Random(seed)
    priority = list(range(p.num_tasks))
    rng.shuffle(priority)
    eligible = {t for t in range(p.num_tasks) if rng.random() < fill_share}
    ready = ReadySet(p, priority, None, fill=eligible.__contains__)
    issued = set()
    chain = ready.chain
    chained = {b: a for a, b in chain.items()}

    def is_ready(t):
        return (t not in issued and all(q in issued for q in p.preds[t])
                and (t not in chained or chained[t] in issued))

    while ready:
        fill = rng.random() < 0.5
        candidates = [t for t in priority if is_ready(t) and (not fill or t in eligible)]
        t = ready.pick(fill=fill)
        assert t == (candidates[0] if candidates else -1)
        if t < 0:
            t = ready.pick()
        ready.issue(t)
        issued.add(t)
    assert sorted(ready.order) == list(range(p.num_tasks))
