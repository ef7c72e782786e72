"""The list heuristics keep exactly the collective order the problem's mode asks for (`comm_chain`): on the
two-group problem (tests/support/problems.py) `best_heuristic` reaches the per-group optimum, which launches
the second group's collective first, and keeps the order within one group::

    x -> ag (group 0) -> w_ag --------> z
         rs (group 1) -> w_rs -> y ---^
"""

import pytest

from solvercast import validate
from solvercast.heuristics import best_heuristic
from solvercast.heuristics.iterative_swap import iterative_swap
from solvercast import Schedule
from tests.support import brute_force, two_group_collectives


@pytest.mark.parametrize("mode, same", [(True, False), ("group", False), ("group", True), (False, True)])
def test_best_heuristic_reaches_the_optimum_of_the_mode(mode, same):
    p = two_group_collectives(mode, same_group=same)
    best, _ = brute_force(p)
    schedule = best_heuristic(p)
    assert validate(p, schedule).makespan == best


@pytest.mark.parametrize("mode, raised", [(True, False), ("group", True), (False, True)])
def test_a_raised_collective_passes_one_of_another_group_only_where_the_mode_allows(mode, raised):
    """`iterative_swap` raises rs (group 1) above ag (group 0) to hide it, except under the global order."""
    p = two_group_collectives(mode)
    order = iterative_swap(p, Schedule.original(p), sink_waits=False).order
    validate(p, Schedule(order=order))
    assert (order.index(2) < order.index(1)) == raised
