"""Fill the default stream's idle time: move a later compute task into a stall.

The default stream idles where its next task in program order waits for a collective (its wait, or the
input of a synchronous collective): `simulate.idle_points`. A compute task later in the program whose
predecessors all come before that stalled task could run in the stall: `fill_idle` tries moving each such
task (in program order) to just before the stalled one, keeps the first move that makes the schedule
shorter within the memory limit (judged by `simulate`), and starts over from the largest stall, until no
move gains or ``max_simulations`` (or the work budget of `heuristics.work`) are spent. Moving a task
earlier past tasks that do not depend on it keeps the order topological, and compute tasks never change the
collective order.

The windows of solvers/prefixes.py and solvers/large.py search every order of a stretch of positions; this
move spans the whole order with one task: on fsdp_tp 2 layers CP-SAT's windows stop at 278.94 us at 10 s
(275.95 at 30 s), where five such moves, 19 simulations, reach 273.86 us, the cut bound
(experiments/results/fill_idle.md).
"""

from __future__ import annotations

import time

from solvercast.ir.problem import Problem, Role
from solvercast.ir.schedule import Schedule
from solvercast.ir.simulate import idle_points, simulate

from ._common import budget_bytes
from .work import affords, charge, note_cut


def fill_idle(problem: Problem, schedule: Schedule, memory_budget: int | float | None = None, *,
              max_simulations: int | None = None, deadline: float | None = None) -> tuple[Schedule, dict]:
    """``schedule`` improved by moves into its stalls (module docstring), and stats: the simulations
    spent, the moves kept, and whether the wall clock passed ``deadline`` (a `time.perf_counter` reading:
    a cap for callers with one, such as `solve_cpsat`; the heuristics count simulations instead).

    Memory limit: ``memory_budget`` (bytes, a float ratio of the original order's peak, or None for the
    machine's budget); a schedule over it to begin with is never made worse (its peak is the limit). Streams
    are kept; ``method`` gains ``"+fill"`` when a move was kept."""
    budget = budget_bytes(problem, memory_budget)
    best = simulate(problem, schedule)
    charge(problem, "simulate")
    limit = None if budget is None else max(budget, best.peak_memory)
    order = list(schedule.order)
    spent = moves = 0
    gained = True
    while gained:
        gained = False
        for _, step in idle_points(problem, Schedule(order=tuple(order)), best):
            before = set(order[:step])
            for later in range(step + 1, len(order)):
                t = order[later]
                if problem.tasks[t].role != Role.COMPUTE or not before.issuperset(problem.preds[t]):
                    continue
                late = deadline is not None and time.perf_counter() > deadline
                if late or (max_simulations is not None and spent >= max_simulations):
                    return _result(schedule, order, moves), _stats(spent, moves, late)
                if not affords(problem, "fill_move"):  # inside a work budget (heuristics.work) that is spent
                    note_cut("fill_idle's further moves")
                    return _result(schedule, order, moves), _stats(spent, moves, False)
                candidate = order[:step] + [t] + order[step:later] + order[later + 1:]
                sim = simulate(problem, Schedule(order=tuple(candidate), streams=schedule.streams))
                charge(problem, "fill_move")
                spent += 1
                if sim.makespan < best.makespan and (limit is None or sim.peak_memory <= limit):
                    order, best, gained = candidate, sim, True
                    moves += 1
                    break
            if gained:
                break
    return _result(schedule, order, moves), _stats(spent, moves, False)


def _stats(simulations: int, moves: int, late: bool) -> dict:
    return {"simulations": simulations, "moves": moves, "stopped_by_wall_clock": late}


def _result(schedule: Schedule, order: list[int], moves: int) -> Schedule:
    if not moves:
        return schedule
    return Schedule(order=tuple(order), streams=schedule.streams, method=f"{schedule.method or 'schedule'}+fill")
