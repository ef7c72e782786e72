"""The answer every method returns: a host program order and a stream per task."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from solvercast.ir.problem import Problem


@dataclass(frozen=True)
class Schedule:
    """``order``: every task id once, in host program order.
    ``streams``: task id -> stream; tasks left out run on their default stream
    (`Problem.default_stream`). ``method`` names who produced it."""

    order: tuple[int, ...]
    streams: Mapping[int, int] = field(default_factory=dict)
    method: str = ""

    def __post_init__(self):
        object.__setattr__(self, "order", tuple(int(t) for t in self.order))
        object.__setattr__(self, "streams", {int(t): int(s) for t, s in dict(self.streams).items()})

    @classmethod
    def original(cls, problem: Problem) -> "Schedule":
        """The graph's own order, every task on its default stream."""
        return cls(order=tuple(range(problem.num_tasks)), method="original")

    def stream_list(self, problem: Problem) -> list[int]:
        """Stream of every task, defaults filled in."""
        streams = list(problem.default_streams)
        for t, s in self.streams.items():
            if 0 <= t < len(streams):  # as before: a stream named for no task is ignored here
                streams[t] = s
        return streams

    def positions(self) -> dict[int, int]:
        return {t: i for i, t in enumerate(self.order)}
