"""Every exact solver keeps exactly the collective order its problem's mode asks for: on the two-group
problem (tests/support/problems.py) each reaches the brute-force optimum of the mode, which under the
per-group mode launches the second group's collective first (shorter than any global-order schedule),
and with both collectives in one group keeps them in order::

    x -> ag (group 0) -> w_ag --------> z
         rs (group 1) -> w_rs -> y ---^
"""

import pytest

from solvercast import Schedule, validate
from solvercast.pipeline.portfolio import solve_cpsat
from solvercast.solvers.milp import solve_milp
from solvercast.solvers.prefixes import search_prefixes
from tests.support import brute_force, two_group_collectives

CASES = [(mode, same) for mode in (True, "group", False) for same in (False, True)]


def _optimum(mode, same):
    return brute_force(two_group_collectives(mode, same_group=same))[0]


def test_the_cases_differ():
    """The per-group optimum is below the global one with two groups and equal to it with one."""
    assert _optimum("group", False) < _optimum(True, False)
    assert _optimum("group", True) == _optimum(True, True) > _optimum(False, True)


@pytest.mark.parametrize("solve", [solve_cpsat, solve_milp], ids=["cpsat", "milp"])
@pytest.mark.parametrize("mode, same", CASES)
def test_solver_reaches_the_optimum_of_the_mode(solve, mode, same):
    p = two_group_collectives(mode, same_group=same)
    res = solve(p, time_limit=5)
    validate(p, res.schedule)
    assert res.simulated.makespan == _optimum(mode, same)


@pytest.mark.parametrize("mode, same", CASES)
def test_prefix_search_reaches_the_optimum_of_the_mode(mode, same):
    p = two_group_collectives(mode, same_group=same)
    found = search_prefixes(p)
    assert found.complete and found.makespan == _optimum(mode, same)
    validate(p, Schedule(order=found.order, streams=found.streams))
