"""What a solver returns: the schedule and exactly what happened, decided the same way for every solver
(`best_valid` among its solutions, `Outcome`: the warm start unless `simulate` says the solver beat it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from solvercast.errors import InvalidScheduleError
from solvercast.ir.problem import Problem
from solvercast.ir.schedule import Schedule
from solvercast.ir.simulate import SimResult, validate
from solvercast.solvers.common import shifted_tasks


class SolveStatus(str, Enum):
    OPTIMAL = "optimal"  # proven optimal (in the solver's model)
    FEASIBLE = "feasible"  # improved on the warm start, not proven optimal
    HINT_KEPT = "hint_kept"  # found nothing better than the warm start: the warm start is returned
    NO_SOLUTION = "no_solution"  # nothing found in time and no warm start to fall back on
    INFEASIBLE = "infeasible"  # proven: no schedule holds the memory budget


@dataclass(frozen=True)
class SolveResult:
    schedule: Schedule | None  # None only for NO_SOLUTION / INFEASIBLE
    status: SolveStatus
    simulated: SimResult | None  # `simulate` of the schedule: the figures that count
    objective: int | None  # the solver's own makespan (ns), before re-simulation
    bound: int | None  # the solver's proven lower bound on makespan (ns)
    wall_time: float  # seconds spent in the solver call
    solver_status: str = ""  # the backend's own status name
    message: str = ""  # why the hint was kept, why nothing was found, ...
    stats: dict = field(default_factory=dict)

    @property
    def makespan(self) -> int | None:
        return None if self.simulated is None else self.simulated.makespan


def potential(problem: Problem, sim: SimResult, left_shift: bool = False) -> tuple[int, ...]:
    """What a solution must lower to replace the hint: the makespan, then (left_shift) the sum of the
    starts of the tasks a window shifts (`shifted_tasks`) and of the launch points: what the window model
    minimizes after its makespan."""
    if not left_shift:
        return (sim.makespan,)
    return (sim.makespan, sum(sim.start[t] for t in shifted_tasks(problem)) + sum(sim.launch.values()))


def best_valid(problem: Problem, candidates: list[Schedule], budget: int | None, left_shift: bool = False,
               ) -> tuple[Schedule | None, SimResult | None, dict[int, InvalidScheduleError]]:
    """The candidate that `validate` accepts with the lowest `potential` (first wins ties), its
    simulation, and the errors of the rejected ones by index. A solver's model is not the simulator
    (several streams, scaling, rounding): the final solution may break the budget, and an earlier one,
    or one read off another way, may simulate faster."""
    best, best_sim, errors = None, None, {}
    for i, candidate in enumerate(candidates):
        try:
            sim = validate(problem, candidate, memory_budget=budget)
        except InvalidScheduleError as e:  # the model and the simulator disagree on this one
            errors[i] = e
            continue
        if best_sim is None or potential(problem, sim, left_shift) < potential(problem, best_sim, left_shift):
            best, best_sim = candidate, sim
    return best, best_sim, errors


@dataclass(frozen=True)
class Outcome:
    """One solver call's common facts, and the results every solver returns the same way: the solver's
    schedule only when `simulate` says it beats the warm start, else the warm start, saying why."""

    hint: Schedule | None
    hint_sim: SimResult | None
    wall_time: float
    solver_status: str
    stats: dict

    def no_solution(self, no_schedule: str, kept: str) -> SolveResult:
        """Nothing found in time: NO_SOLUTION (``no_schedule`` says so) without a hint, else the hint."""
        if self.hint is None:
            return SolveResult(None, SolveStatus.NO_SOLUTION, None, None, None, self.wall_time, self.solver_status,
                               no_schedule, self.stats)
        return self._hint(SolveStatus.HINT_KEPT, None, None, kept)

    def invalid(self, whose: str, error: Exception, objective: int | None, bound: int | None) -> SolveResult:
        """Every solution failed `validate`: the hint, saying ``whose`` schedule failed and how."""
        return self._hint(SolveStatus.HINT_KEPT, objective, bound,
                          f"{whose} schedule failed validation ({error}); kept the warm start")

    def better_of(self, problem: Problem, schedule: Schedule, sim: SimResult, *, proven: bool, hint_proven: bool,
                  objective: int | None, bound: int | None, left_shift: bool = False,
                  proved_hint: str, kept_hint: str, message: str = "") -> SolveResult:
        """The solver's ``schedule`` if its `potential` is below the hint's (OPTIMAL when ``proven``, else
        FEASIBLE, with ``message``), else the hint: OPTIMAL with ``proved_hint`` when ``hint_proven``,
        HINT_KEPT with ``kept_hint`` otherwise."""
        if self.hint_sim is not None and (potential(problem, sim, left_shift)
                                          >= potential(problem, self.hint_sim, left_shift)):
            if hint_proven:
                return self._hint(SolveStatus.OPTIMAL, objective, bound, proved_hint)
            return self._hint(SolveStatus.HINT_KEPT, objective, bound, kept_hint)
        solved = SolveStatus.OPTIMAL if proven else SolveStatus.FEASIBLE
        return SolveResult(schedule, solved, sim, objective, bound, self.wall_time, self.solver_status, message,
                           self.stats)

    def _hint(self, status: SolveStatus, objective: int | None, bound: int | None, message: str) -> SolveResult:
        return SolveResult(self.hint, status, self.hint_sim, objective, bound, self.wall_time, self.solver_status,
                           message, self.stats)
