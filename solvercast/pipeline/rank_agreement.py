"""Ranks that must compute one schedule, checked: where two or more process groups may interleave
(`solvercast.pipeline.solve.schedules_must_agree`), a rank whose search the wall clock ended (a loaded
machine, past the far cap) can launch the groups' collectives in another order than its peers, and the
step hangs. No rank can know the others' clocks, so the ranks compare what they chose: every rank calls
`agree_across_ranks` on its result, the digests are all-gathered over the default process group, and if
they differ every rank takes the same fallback (the original order), which launches the collectives as
the program does. Nothing is exchanged where no process group of two or more ranks is initialized, or its
backend carries no data (the fake backend of tests); ranks must then agree by determinism alone."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable

import torch.distributed as dist

from solvercast.cost.calibrate import ranks_in
from solvercast.pipeline.solve import OptimizeResult, schedules_must_agree

#: backends whose all_gather carries the ranks' data (the fake backend returns nothing)
EXCHANGING_BACKENDS = ("gloo", "nccl")


def schedule_digest(res: OptimizeResult) -> str:
    """What two ranks must share to launch alike: the problem's size, the order and the streams."""
    schedule = res.schedule
    key = (res.problem.num_tasks, schedule.order, sorted(schedule.streams.items()))
    return hashlib.sha256(repr(key).encode()).hexdigest()


def peers() -> int:
    """Ranks of the default process group this rank can exchange with (1: none)."""
    ranks = ranks_in()
    if ranks > 1 and str(dist.get_backend()).lower() not in EXCHANGING_BACKENDS:
        return 1
    return ranks


def agree_across_ranks(res: OptimizeResult, fallback: Callable[[], OptimizeResult]) -> OptimizeResult:
    """``res``, or ``fallback()`` on every rank where the ranks' schedules differ. Every rank of the default
    group must call it (each compiles the same step)."""
    if res.problem is None or res.schedule is None or not schedules_must_agree(res.problem) or peers() < 2:
        return res
    digests: list = [None] * dist.get_world_size()
    dist.all_gather_object(digests, schedule_digest(res))
    if len(set(digests)) == 1:
        return res
    kept = fallback()
    why = (f"ranks chose {len(set(digests))} different schedules (the wall clock ended a search on some): "
           "every rank keeps the original order, which launches the collectives alike")
    kept.report = dataclasses.replace(kept.report, notes=(*kept.report.notes, why))
    return kept
