"""The rewrite kinds `optimize` chooses with the schedule, in the order they run (`solvercast.pipeline.rewrite_search`).
A new kind is its module (a `Rewrite`) and one entry here."""

from __future__ import annotations

from solvercast.pipeline.buckets import BUCKETS
from solvercast.pipeline.decompose import DECOMPOSITION

__all__ = ["REWRITES"]

#: buckets first: a split is judged on the bucketed graph, the step it would otherwise run
REWRITES = (BUCKETS, DECOMPOSITION)

