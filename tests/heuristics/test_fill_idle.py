"""heuristics.fill_idle: moves of later compute tasks into the default stream's stalls."""

import pytest

from solvercast import Buffer, Machine, Problem, Role, Schedule, Task, simulate, validate
from solvercast.heuristics import fill_idle
from solvercast.testing import random_problem


def _stalled(budget=None):
    """ag(50) -> wait -> use(10), then mm(30), which depends on nothing: in the original order stream 0
    idles 0-50 at the wait, use runs 50-60 and mm 60-90. mm moved before the wait runs 0-30 in the stall:
    makespan 60. Buffers: ag's output (100 B, freed after use) and mm's (100 B, a graph output), so mm
    moved early holds both at once (200 B) where the original order never holds more than 100 B."""
    tasks = (Task("ag", Role.COMM, 50), Task("wait", Role.WAIT, waits_for=0), Task("use", Role.COMPUTE, 10),
             Task("mm", Role.COMPUTE, 30))
    buffers = (Buffer("gathered", 100, 0, (1, 2)), Buffer("out", 100, 3, (), is_output=True))
    return Problem(tasks, ((0, 1), (1, 2)), buffers, machine=Machine(memory_budget=budget))


def test_a_later_task_fills_the_stall_at_a_wait():
    p = _stalled()
    original = Schedule.original(p)
    assert simulate(p, original).makespan == 90
    filled, stats = fill_idle(p, original)
    assert filled.order == (0, 3, 1, 2) and simulate(p, filled).makespan == 60
    assert stats == {"simulations": 1, "moves": 1, "stopped_by_wall_clock": False} and filled.method.endswith("+fill")
    validate(p, filled)


def test_no_move_breaks_the_budget():
    """With 150 B the move that fills the stall would hold 200 B: the schedule stays as it was."""
    p = _stalled(budget=150)
    original = Schedule.original(p)
    assert simulate(p, original).peak_memory == 100
    filled, stats = fill_idle(p, original)
    assert filled is original and stats == {"simulations": 1, "moves": 0, "stopped_by_wall_clock": False}


def test_the_simulations_are_capped():
    p = _stalled()
    original = Schedule.original(p)
    filled, stats = fill_idle(p, original, max_simulations=0)
    assert filled is original and stats == {"simulations": 0, "moves": 0, "stopped_by_wall_clock": False}


def test_a_passed_deadline_stops_the_moves():
    p = _stalled()
    original = Schedule.original(p)
    filled, stats = fill_idle(p, original, deadline=0.0)  # long past
    assert filled is original and stats == {"simulations": 0, "moves": 0, "stopped_by_wall_clock": True}


@pytest.mark.parametrize("seed", range(30))
def test_random_programs_stay_valid_within_budget_and_never_get_longer(seed):
    """Valid (`validate`, budget included), never longer, deterministic, and no single move into a stall
    left that gains (checked here by enumerating them independently of `fill_idle`'s loop)."""
    p = random_problem(seed, 24, sync_overhead=3, comm_fraction=0.25)
    original = Schedule.original(p)
    budget = int(simulate(p, original).peak_memory * 1.05)
    p = p.with_budget(budget)
    filled, stats = fill_idle(p, original)
    sim = validate(p, filled)
    assert sim.makespan <= simulate(p, original).makespan
    assert fill_idle(p, original)[0].order == filled.order
    order = list(filled.order)
    for step, t in enumerate(order):
        for later in range(step + 1, len(order)):
            u = order[later]
            if p.tasks[u].role != Role.COMPUTE or not set(p.preds[u]) <= set(order[:step]):
                continue
            moved = Schedule(order=tuple(order[:step] + [u] + order[step:later] + order[later + 1:]),
                             streams=filled.streams)
            other = simulate(p, moved)
            assert other.makespan >= sim.makespan or other.peak_memory > budget, (seed, step, later)


def test_some_random_programs_gain():
    """The property test above could pass with a `fill_idle` that never moves anything: here it must."""
    gains = 0
    for seed in range(30):
        p = random_problem(seed, 24, sync_overhead=3, comm_fraction=0.25)
        original = Schedule.original(p)
        filled, stats = fill_idle(p, original)
        gains += simulate(p, filled).makespan < simulate(p, original).makespan
        assert (stats["moves"] > 0) == (filled is not original)
    assert gains >= 5


def test_a_spent_work_budget_stops_the_moves():
    """Inside a work budget (heuristics.work) that pays for no trial move, none is tried, and the report's
    list of what was cut says so."""
    from solvercast.heuristics.work import WorkBudget, work_budget

    p = _stalled()
    original = Schedule.original(p)
    with work_budget(WorkBudget(limit=0.0)) as budget:
        filled, stats = fill_idle(p, original)
    assert filled is original and stats["simulations"] == 0 and budget.cut == ["fill_idle's further moves"]
