"""`Problem.preserve_collective_order`'s three modes: which orders `validate` accepts, which chains each
keeps, and that the lower bounds stay at or below the brute-force optimum under each mode.

The two-group problem (tests/support/problems.py)::

    x -> ag (group 0) -> w_ag --------> z
         rs (group 1) -> w_rs -> y ---^
"""

import dataclasses

import pytest

from solvercast import InvalidScheduleError, Schedule, lower_bounds, simulate, validate
from solvercast.errors import InvalidProblemError
from solvercast.solvers.cuts import not_applicable
from solvercast.testing import random_problem
from tests.support import brute_force, collective_order_ok, two_group_collectives

ACROSS = (2, 0, 1, 4, 5, 3, 6)  # rs launched before x and ag: a cross-group reordering


@pytest.mark.parametrize("value, stored, name", [(True, True, "global"), ("global", True, "global"),
                                                  ("group", "group", "group"), (False, False, "free"),
                                                  ("free", False, "free")])
def test_accepted_values_are_stored_in_one_form(value, stored, name):
    p = two_group_collectives(value)
    assert p.preserve_collective_order == stored and p.collective_order == name
    assert p == two_group_collectives(stored)


@pytest.mark.parametrize("value", ["per_group", "Group", 1.5, None, 2])
def test_other_values_are_rejected_naming_the_modes(value):
    with pytest.raises(InvalidProblemError, match="'group'"):
        two_group_collectives(value)


def test_chains_per_mode():
    assert two_group_collectives(True).comm_chains == ((1, 2),)
    assert two_group_collectives("group").comm_chains == ((1,), (2,))
    assert two_group_collectives("group", same_group=True).comm_chains == ((1, 2),)
    assert two_group_collectives(False).comm_chains == ()
    assert two_group_collectives("group").comm_order_pairs == ()


def test_validate_accepts_a_cross_group_reordering_only_under_the_group_mode():
    schedule = Schedule(order=ACROSS)
    validate(two_group_collectives("group"), schedule)
    validate(two_group_collectives(False), schedule)
    with pytest.raises(InvalidScheduleError, match="collective order changed"):
        validate(two_group_collectives(True), schedule)


def test_validate_rejects_a_reordering_inside_one_group():
    with pytest.raises(InvalidScheduleError, match="in its process group"):
        validate(two_group_collectives("group", same_group=True), Schedule(order=ACROSS))
    validate(two_group_collectives("group", same_group=True), Schedule.original(two_group_collectives()))


def test_the_group_mode_is_strictly_better_here_and_the_global_optimum_keeps_the_order():
    """By brute force: the best global-order schedule keeps ag first; the per-group mode's best launches rs
    first and is shorter; with both collectives in one group the per-group mode is the global one."""
    best_global, _ = brute_force(two_group_collectives(True))
    best_group, across = brute_force(two_group_collectives("group"))
    assert best_group < best_global
    assert brute_force(two_group_collectives("group", same_group=True))[0] == \
        brute_force(two_group_collectives(True, same_group=True))[0] > brute_force(
            two_group_collectives(False, same_group=True))[0]
    assert across.order.index(2) < across.order.index(1)
    assert simulate(two_group_collectives("group"), across).makespan == best_group


def test_cut_bounds_apply_under_the_global_order_only():
    assert not_applicable(two_group_collectives(True)) is None
    assert "group" in not_applicable(two_group_collectives("group"))
    assert not_applicable(two_group_collectives(False)) is not None


@pytest.mark.parametrize("mode", [True, "group", False])
@pytest.mark.parametrize("comm_streams", [1, 2])
def test_bounds_stay_at_or_below_the_optimum_under_each_mode(mode, comm_streams):
    """Random 8-task problems with collectives of two groups (30 or more): every bound of `lower_bounds`
    at or below the brute-force optimum of the problem's own mode, without a budget and at the original
    order's peak. (The global order's bounds are above the per-group optimum on several of these, so a bound
    valid only for the global order fails here.)"""
    checked = 0
    for seed in range(80):
        p = random_problem(seed, 8, comm_streams=comm_streams, comm_fraction=0.35, groups=2,
                           preserve_collective_order=mode, sync_overhead=seed % 3 * 4)
        if len({p.tasks[c].group for c in p.comm_tasks}) < 2:
            continue
        checked += 1
        for budget in (None, simulate(p, Schedule.original(p)).peak_memory):
            q = dataclasses.replace(p, machine=dataclasses.replace(p.machine, memory_budget=budget))
            best, schedule = brute_force(q)
            assert collective_order_ok(q, schedule.order)
            assert lower_bounds(q).makespan <= best, (seed, budget, lower_bounds(q).to_dict(), best)
    assert checked >= 30
