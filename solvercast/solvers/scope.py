"""What part of a problem a CP-SAT model decides: the whole of it, or a window of an incumbent's program.

A windowed model (large-neighbourhood search, solvers/large.py) decides only the tasks at positions
``lo:hi`` of an incumbent schedule. Tasks before the window (the *past*) keep the incumbent's times,
streams and program times as constants: `simulate` times a task from what comes before it in program
order, so no reorder of the window moves them, and the window's tasks start after the past is done with
each stream. Tasks after the window (the *future*) are left out: buffers they hold live past the window,
and the objective sees only the window (`solve_model` judges the whole schedule with `simulate`).

`Scope` answers every question the model asks about that split, so the model's methods read the same for
a whole problem (nothing past, nothing left out) and for a window.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from solvercast.ir.problem import Problem, Role
from solvercast.ir.schedule import Schedule
from solvercast.ir.simulate import SimResult


@dataclass(frozen=True)
class Scope:
    past: tuple[int, ...] = ()  # constants: the incumbent's first tasks, in its order
    window: tuple[int, ...] | None = None  # decided; None: every task
    future: tuple[int, ...] = ()  # left out: the incumbent's last tasks, in its order
    incumbent: Schedule | None = None
    sim: SimResult | None = None  # the incumbent's simulation (of the problem the model is built on)
    frontier: dict[int, int] = field(default_factory=dict)  # stream -> when the past leaves it free
    past_set: frozenset[int] = frozenset()
    future_set: frozenset[int] = frozenset()

    @classmethod
    def whole(cls) -> Scope:
        """Every task decided."""
        return cls()

    @classmethod
    def of_window(cls, problem: Problem, schedule: Schedule, sim: SimResult, lo: int, hi: int) -> Scope:
        """Decide only positions ``lo:hi`` of ``schedule`` (``sim``: its simulation)."""
        order = tuple(schedule.order)
        past = order[:lo]
        frontier: dict[int, int] = {}
        for t in past:
            if problem.tasks[t].role == Role.FREE:
                continue
            frontier[sim.streams[t]] = max(frontier.get(sim.streams[t], 0), sim.end[t])
            if t in problem.wait_of:
                frontier[0] = max(frontier.get(0, 0), sim.launch[t])
        return cls(past, order[lo:hi], order[hi:], schedule, sim, frontier, frozenset(past), frozenset(order[hi:]))

    @property
    def windowed(self) -> bool:
        return self.window is not None

    def decided(self, problem: Problem) -> list[int]:
        """The tasks the model decides, in id order (whole) or the incumbent's order (window)."""
        return list(range(problem.num_tasks)) if self.window is None else list(self.window)

    def is_past(self, t: int) -> bool:
        return t in self.past_set

    def left_out(self, t: int) -> bool:
        return t in self.future_set

    def decides(self, t: int) -> bool:
        return t not in self.past_set and t not in self.future_set

    def earliest_on(self, streams) -> int:
        """When the past leaves the first of ``streams`` free (0 for a whole problem)."""
        return min(self.frontier.get(k, 0) for k in streams)

    def freed_before(self, problem: Problem, b: int) -> bool:
        """Buffer ``b`` is freed before the window (every holder in the past), so not modelled. A buffer
        that is never freed (a graph output) stays resident through the window wherever its holders are.
        With several compute streams memory is counted over time, and a task of the past may still run
        on one stream while the window starts on another: freed before only if the past's holders end
        before any stream is free for the window."""
        holders = problem.buffer_holders[b]
        if not (self.past and problem.is_freed(b) and holders <= self.past_set):
            return False
        if problem.machine.compute_streams == 1:
            return True  # memory over program order: the past's positions all come before the window's
        return self.incumbent_end(holders) <= self.earliest_on(range(problem.machine.num_streams))

    def held_after(self, holders: frozenset[int]) -> frozenset[int]:
        """The holders left out: the buffer lives past the window (until the incumbent frees it)."""
        return holders & self.future_set

    def incumbent_end(self, tasks) -> int:
        """When the incumbent's last of ``tasks`` ends."""
        return max(self.sim.end[u] for u in tasks)
