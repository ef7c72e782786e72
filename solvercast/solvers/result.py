"""What a solver returns: the schedule and exactly what happened."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from solvercast.schedule import Schedule
from solvercast.simulate import SimResult


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
