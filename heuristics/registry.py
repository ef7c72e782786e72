"""The heuristics' table: every schedule `run_heuristics` judges, in tie-break order.

Adding a heuristic is one entry here: `best_heuristic` runs it, and the method registry
(`solvercast.pipeline.methods`) offers it to `optimize`, the CLI and the sweeps.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from solvercast.ir.problem import Problem
from solvercast.ir.schedule import Schedule

from .comm_priority import comm_priority_schedule
from .list_scheduling import list_schedule, nondelay_schedule


@dataclass(frozen=True)
class Heuristic:
    name: str
    description: str  # one line, for the CLI's help
    run: Callable[..., Schedule]  # run(problem, memory_budget=None) -> Schedule
    first_pass: str = ""  # the `work.PASS_COST_US` kind of its first pass: run only when the work budget pays for it
    original: bool = False  # the graph's own order: the baseline every report compares against
    selectable: bool = True  # offered on its own by `optimize(method=...)` and the CLI
    swept: bool = True  # among the sweeps' methods


def _original(problem: Problem, memory_budget=None) -> Schedule:
    return Schedule.original(problem)


#: In tie-break order: of two schedules with equal makespan and peak, the earlier entry's wins (the
#: simplest change first).
SCHEDULERS: tuple[Heuristic, ...] = (
    Heuristic("original", "the graph's own order on default streams", _original, original=True),
    Heuristic("comm_priority", "raise collectives, sink waits, fill the gap with independent compute",
              comm_priority_schedule, "comm_pass"),
    Heuristic("raise_comms", "comm-priority order that only raises collectives",
              functools.partial(comm_priority_schedule, raise_comms=True, sink_waits=False, overlap=False),
              "comm_pass", selectable=False, swept=False),
    Heuristic("sink_waits", "comm-priority order that only sinks waits",
              functools.partial(comm_priority_schedule, raise_comms=False, sink_waits=True, overlap=False),
              "comm_pass", selectable=False, swept=False),
    Heuristic("list", "upward-rank list scheduling, stream by earliest finish", list_schedule, "list_pass"),
    Heuristic("nondelay", "earliest-start list scheduling: ready work fills the time collectives take",
              nondelay_schedule, "nondelay_pass"),
)
