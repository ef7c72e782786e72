"""Choosing collective-matmul decomposition with the schedule: into how many chunks each all_gather ->
matmul, matmul -> reduce_scatter and matmul -> all_reduce site is split (`solvercast.rewrites.decompose`) is decided by the step
time the schedule reaches under the memory budget, never by a fixed threshold.

Sites of one signature (kind, sizes, dtype, group: a model's layers) take one degree. The search starts
from no decomposition and takes the signatures in turn, most communicated bytes first, each an equal share
of the work left: it tries the signature's degrees 2, 4, 8 with the others at their current choice, keeps
the best step and stops climbing once a degree is worse than the one before or over the budget. Each
plan's graph is extracted and scheduled by the heuristics (`solvercast.pipeline.plan_judge`); where no
plan shortens the step, the graph is left as it is. The plan is a function of the graph, the options and
the deterministic work limits, so every rank builds the same chunks.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch.fx as fx

from solvercast.pipeline.plan_judge import PlanJudge
from solvercast.rewrites.decompose import (DecomposeOptions, DecomposePlan, MatmulSite, apply_decomposition,
                                           matmul_sites)


@dataclass
class DecomposeChoice:
    """The plan taken, its graph and what the search saw. ``tried``: (plan line, step ns or None when no
    schedule fit the budget), in the order tried."""

    plan: DecomposePlan
    gm: fx.GraphModule
    extracted: object  # `solvercast.pipeline.solve.Extracted` of ``gm``
    sites: dict[str, MatmulSite]
    step: int | None  # the heuristics' step on the chosen plan's graph
    original_step: int | None  # ... on the input graph
    tried: list = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> str:
        """One line for the report: what was split, what it bought, and the numerics."""
        if not self.plan.degrees:
            return f"no decomposition: none of {len(self.tried)} plans tried shortened the step" if self.tried \
                else "no decomposition: no collective-matmul site"
        gain = "" if self.step is None or not self.original_step else \
            f"; the heuristics' step {self.original_step / 1e3:,.1f} -> {self.step / 1e3:,.1f} us"
        return (f"{self.plan.describe(self.sites)} ({len(self.tried)} plans tried{gain}); chunked matmuls and "
                "collectives may sum in another order (close, not bitwise)")


def choose_decomposition(gm: fx.GraphModule, undecomposed, extract: Callable, budget: int | None,
                         options: DecomposeOptions, work_limit: float | None, extract_work_per_task: float,
                         say: Callable[[str], None], deadline: float = float("inf")) -> DecomposeChoice:
    """The plan whose graph the heuristics schedule fastest within ``budget`` bytes (None: no budget).
    ``undecomposed``: ``gm``'s `Extracted`; ``extract(gm)``: the `Extracted` of a decomposed graph; the work
    limits as `solvercast.pipeline.buckets.choose_buckets` takes them."""
    started = time.perf_counter()
    sites = {s.collective: s for s in matmul_sites(gm, options)}
    groups: dict[tuple, list[MatmulSite]] = {}
    for s in sites.values():
        groups.setdefault(s.signature, []).append(s)
    if not groups:
        return DecomposeChoice(DecomposePlan(), gm, undecomposed, sites, None, None,
                               seconds=time.perf_counter() - started)
    order = list(sites)
    signatures = sorted(groups, key=lambda g: (-sum(s.comm_bytes for s in groups[g]), order.index(groups[g][0].collective)))
    judge = PlanJudge(budget, work_limit, extract_work_per_task)
    base_step = judge.step(undecomposed)
    best = DecomposeChoice(DecomposePlan(), gm, undecomposed, sites, base_step, base_step)
    chosen: dict[tuple, int] = {}
    for n, signature in enumerate(signatures):
        # each signature gets an equal share of the work left
        limit = None if work_limit is None else judge.spent + (work_limit - judge.spent) / (len(signatures) - n)
        previous = best.step
        degrees = sorted(set.intersection(*(set(s.degrees) for s in groups[signature])))
        for degree in degrees:
            if time.perf_counter() > deadline or (limit is not None and judge.spent >= limit):
                break
            trial = chosen | {signature: degree}
            plan = DecomposePlan.of({s.collective: trial[s.signature] for s in sites.values() if s.signature in trial})
            graph = apply_decomposition(gm, plan, sites)
            extracted = extract(graph)
            step = judge.step(extracted)
            best.tried.append((plan.describe(sites), step))
            say(f"decomposition: {plan.describe(sites)}: step "
                + ("over the budget" if step is None else f"{step / 1e3:,.1f} us"))
            if step is not None and (best.step is None or step < best.step):
                best.plan, best.gm, best.extracted, best.step = plan, graph, extracted, step
                chosen[signature] = degree
            if step is None or (previous is not None and step >= previous):
                break  # more chunks cost more launches and copies: past the best degree it only gets worse
            previous = step
    best.seconds = time.perf_counter() - started
    return best
