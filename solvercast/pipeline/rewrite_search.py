"""The rewrites `optimize` chooses with the schedule: one protocol, one choice record, one driver.

A rewrite kind is a `Rewrite` registered in `solvercast.pipeline.rewrite_registry.REWRITES`: its name (the
report's line and the key of ``OptimizeResult.rewrites``), how `optimize`'s argument for it reads as its
options (`Rewrite.options`), its search (`Rewrite.search`: the kind's plans, each written, extracted and
scheduled by the heuristics under the budget by a `solvercast.pipeline.plan_judge.PlanJudge`, the
shortest step kept), its share of the time limit (`Rewrite.shares`), and whether the solver judges its
choice again (`Rewrite.solved_both_ways`: the graph with it and the graph without it are both solved and
the shorter kept, for a choice the heuristics' step may misjudge). Every search returns a `RewriteChoice`.

`search_rewrites` runs the registered kinds in order, each on the graph the one before chose and within
its share of the limit plus the work the one before left (a search ends early where no plan is left).
Every search counts its work (`heuristics.work`), never the clock, so every rank chooses the same rewrites.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch.fx as fx

from solvercast.pipeline.extracted import Extracted
from solvercast.pipeline.time_plan import TimePlanTuning

__all__ = ["RewriteShare", "SearchLimits", "RewriteChoice", "Rewrite", "search_rewrites"]


@dataclass(frozen=True)
class RewriteShare:
    """A kind's part of the time limit: ``share`` of it for the whole search, ``plan_share`` of it for each
    plan's heuristics, ``write_seconds_per_task``, what writing one plan's graph costs (counted with its
    extraction), and ``build_seconds_per_task``, what building a plan's problem without writing its graph
    costs, for a kind that judges its plans so (None: every plan is written), with ``price_seconds`` for
    each part of a plan it prices once (a bucket shape), and ``peer_seconds_per_task``, what PyTorch's own pass
    for the kind costs per task where the search judges its answer too (None: it has none), with
    ``peer_seconds`` once (loading torch's pass)."""

    share: float
    plan_share: float
    write_seconds_per_task: float
    build_seconds_per_task: float | None = None
    price_seconds: float = 0.0
    peer_seconds_per_task: float | None = None
    peer_seconds: float = 0.0


@dataclass(frozen=True)
class SearchLimits:
    """What one search may spend, in heuristic work (`heuristics.work`, reference microseconds):
    ``work_limit`` all its plans together (None: no limit), ``plan_work`` each plan's heuristics,
    ``extract_work_per_task`` each plan's writing and extraction per task; ``work_per_second``: the work one
    second pays for (the report's seconds); ``deadline``: a `time.perf_counter` reading after which no plan
    is started (wall clock: only where ranks need not agree); ``build_work_per_task``: each plan's problem
    built without writing its graph, per task (`RewriteShare.build_seconds_per_task`), and ``price_work`` each
    part of one it prices once (`RewriteShare.price_seconds`); ``peer_work_per_task``: PyTorch's pass, per task
    (`RewriteShare.peer_seconds_per_task`), and ``peer_work`` once (`RewriteShare.peer_seconds`)."""

    work_limit: float | None
    plan_work: float | None
    extract_work_per_task: float
    work_per_second: float
    deadline: float = math.inf
    build_work_per_task: float | None = None
    price_work: float = 0.0
    peer_work_per_task: float | None = None
    peer_work: float = 0.0


@dataclass
class RewriteChoice:
    """What a rewrite's search chose and saw: the ``plan`` taken (the kind's own record; empty where the
    graph is left as it is), its graph ``gm`` and ``extracted`` (`Extracted`),
    the heuristics' ``step`` on it and ``original_step`` on the graph the search started from, every plan
    ``tried`` ((plan line, step ns or None when no schedule fit the budget), in order), the ``seconds`` and
    counted ``work_spent``, ``skipped``: why no plan was tried where the graph had some, and ``kind``, the
    rewrite's name. Kinds add
    what their summaries need (`solvercast.pipeline.buckets.BucketChoice`,
    `solvercast.pipeline.decompose.DecomposeChoice`)."""

    plan: Any
    gm: fx.GraphModule
    extracted: Extracted
    step: int | None
    original_step: int | None
    tried: list = field(default_factory=list)
    seconds: float = 0.0
    work_spent: float = 0.0
    skipped: str = ""
    kind: str = ""  # the `Rewrite` whose search chose it (set by `search_rewrites`)

    @property
    def rewritten(self) -> bool:
        """Whether the chosen graph differs from the one the search started from."""
        raise NotImplementedError

    def gain(self) -> str:
        """The report's words for what the chosen plan bought, or "" where nothing was measured."""
        if self.step is None or not self.original_step:
            return ""
        return f"; the heuristics' step {self.original_step / 1e3:,.1f} -> {self.step / 1e3:,.1f} us"

    def summary(self) -> str:
        raise NotImplementedError


@dataclass(frozen=True)
class Rewrite:
    """One rewrite kind (module docstring). ``options(value, cost_model)``: `optimize`'s argument for it
    ("auto", True, False or the kind's options record) as options, None for off; ``search(gm, extracted,
    extract, budget, options, limits, say)``: its `RewriteChoice`; ``shares(tuning)``: its `RewriteShare`
    of the time plan."""

    name: str
    options: Callable[[Any, Any], Any]
    search: Callable[..., RewriteChoice]
    shares: Callable[[TimePlanTuning], RewriteShare]
    solved_both_ways: bool = False


def search_rewrites(rewrites: Sequence[Rewrite], requested: Mapping[str, Any], gm: fx.GraphModule, extracted,
                    extract: Callable, budget: int | None, time_limit: float, tuning: TimePlanTuning,
                    deadline_of: Callable[[float], float], say: Callable[[str], None]) -> list[RewriteChoice]:
    """Each of ``rewrites`` whose ``requested`` options are not None, in order, each on the graph the one
    before chose (module docstring): their choices. ``deadline_of(seconds)``: the wall-clock deadline of a
    search given ``seconds`` (infinite where ranks must agree)."""
    rate = tuning.work_per_second
    choices: list[RewriteChoice] = []
    left = 0.0  # the work the search before left: it stops early where no plan is left to try
    for rewrite in rewrites:
        options = requested.get(rewrite.name)
        if options is None:
            continue
        share = rewrite.shares(tuning)
        work = share.share * time_limit * rate + left
        limits = SearchLimits(
            work_limit=work, plan_work=share.plan_share * time_limit * rate,
            extract_work_per_task=(tuning.extract_seconds_per_task + share.write_seconds_per_task) * rate,
            work_per_second=rate, deadline=deadline_of(work / rate),
            build_work_per_task=None if share.build_seconds_per_task is None else share.build_seconds_per_task * rate,
            price_work=share.price_seconds * rate,
            peer_work_per_task=None if share.peer_seconds_per_task is None else share.peer_seconds_per_task * rate,
            peer_work=share.peer_seconds * rate)
        choice = rewrite.search(gm, extracted, extract, budget, options, limits, say)
        choice.kind = rewrite.name
        choices.append(choice)
        left = max(0.0, work - choice.work_spent)
        gm, extracted = choice.gm, choice.extracted
    return choices
