"""Choosing collective-matmul decomposition with the schedule: into how many chunks each all_gather ->
matmul, matmul -> reduce_scatter and matmul -> all_reduce site is split (`solvercast.rewrites.decompose`) is decided by the step
time the schedule reaches under the memory budget, never by a fixed threshold.

Sites of one signature (kind, sizes, dtype, group: a model's layers) take one degree. The search starts
from no decomposition. First, the signatures that repeat (a model's layers) climb together: every one at
its largest degree up to 2, then 4, then 8, while the step shortens (a layer's all_gather and
reduce_scatter chunks overlap each other's matmuls, so one signature split alone shows little of what all
of them split buy). Then it takes the signatures in turn, most communicated bytes first, each an equal
share of the work left, with the others at their current choice: a signature the climb split tries the
degree a step up, a step down, then none (its best degree alone is seldom far from the layers' together:
on `fw_64_2d` one reduce_scatter signature gains at x8 and the attention's gathers at x2); one left whole
climbs its degrees from the lowest, stopping at the first that does not shorten the step or is over the
budget. The best step is kept. Each
plan's graph is extracted and scheduled by the heuristics (`solvercast.pipeline.plan_judge`); where no
plan shortens the step, the graph is left as it is. The plan is a function of the graph, the options and
the deterministic work limits, so every rank builds the same chunks.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch.fx as fx

from solvercast.cost.model import AnalyticCostModel
from solvercast.errors import SolvercastError
from solvercast.graph.nodes import NodeKind, classify
from solvercast.pipeline.plan_judge import PlanJudge
from solvercast.pipeline.rewrite_search import Rewrite, RewriteChoice, RewriteShare, SearchLimits
from solvercast.rewrites.decompose import (DecomposeOptions, DecomposePlan, MatmulSite, apply_decomposition,
                                           matmul_sites)
from solvercast.rewrites.sequence_parallel import SPSite, apply_sequence_parallel, sp_sites


@dataclass
class DecomposeChoice(RewriteChoice):
    """`RewriteChoice` of the decomposition search: ``plan`` a `DecomposePlan` of ``sites``, and the
    all_reduces written ``sequence_parallel`` before the split."""

    sites: dict[str, MatmulSite] = field(default_factory=dict)
    sequence_parallel: tuple[str, ...] = ()

    @property
    def rewritten(self) -> bool:
        return bool(self.plan.degrees or self.sequence_parallel)

    def summary(self) -> str:
        """One line for the report: what was split, what it bought, and the numerics."""
        if not self.rewritten:
            if self.skipped:
                return f"no decomposition: {self.skipped}"
            return f"no decomposition: none of {len(self.tried)} plans tried shortened the step" if self.tried \
                else "no decomposition: no collective-matmul or sequence-parallel site"
        sp = (f"sequence parallel: {len(self.sequence_parallel)} all_reduces as reduce_scatter + all_gather; "
              if self.sequence_parallel else "")
        return (f"{sp}{self.plan.describe(self.sites)} ({len(self.tried)} plans tried{self.gain()}); chunked "
                "matmuls and collectives may sum in another order (close, not bitwise)")


def choose_decomposition(gm: fx.GraphModule, undecomposed, extract: Callable, budget: int | None,
                         options: DecomposeOptions, work_limit: float | None, extract_work_per_task: float,
                         say: Callable[[str], None], deadline: float = float("inf"),
                         plan_work: float | None = None, work_per_second: float = 1.0e6) -> DecomposeChoice:
    """The plan whose graph the heuristics schedule fastest within ``budget`` bytes (None: no budget).
    ``undecomposed``: ``gm``'s `Extracted`; ``extract(gm)``: the `Extracted` of a rewritten graph; the work
    limits as `solvercast.pipeline.buckets.choose_buckets` takes them (``plan_work``: each plan's
    heuristics). With ``options.sequence_parallel``, the graph with its all_reduces written sequence-parallel
    is a second starting point, searched alike with an equal share of the work."""
    started = time.perf_counter()
    judge = PlanJudge(budget, work_limit, extract_work_per_task, plan_work)
    reduced = _sp_group(gm) if options.sequence_parallel else []
    sites = {s.collective: s for s in matmul_sites(gm, options)}
    starts = [((), gm, undecomposed, sites)]
    if not sites and not reduced:
        return DecomposeChoice(DecomposePlan(), gm, undecomposed, None, None, seconds=time.perf_counter() - started,
                               sites=sites)
    tasks = undecomposed.problem.num_tasks
    if not judge.affords(work_limit, tasks, plans=2):  # the undecomposed graph's step and one plan
        return DecomposeChoice(DecomposePlan(), gm, undecomposed, None, None, seconds=time.perf_counter() - started,
                               skipped=judge.unaffordable(work_limit, tasks, work_per_second), sites=sites)
    base_step = judge.step(undecomposed)
    best = DecomposeChoice(DecomposePlan(), gm, undecomposed, base_step, base_step, sites=sites)
    if reduced and judge.affords(work_limit, tasks, plans=2):  # the start's own extraction, and a plan from it
        try:
            sp_gm = apply_sequence_parallel(gm, reduced, options.replicated_inputs)
            starts.append((tuple(s.collective for s in reduced), sp_gm, extract(sp_gm),
                           {s.collective: s for s in matmul_sites(sp_gm, options)}))
        except SolvercastError as e:  # the start the graph cannot take is left out, never the caller's error
            say(f"decomposition: sequence parallel ({len(reduced)} all_reduces): rejected ({e})")
    for n, (sp, start_gm, start_extracted, start_sites) in enumerate(starts):
        limit = judge.share(work_limit, len(starts) - n)
        _search(best, sp, start_gm, start_extracted, start_sites, options, judge, extract, say, limit, deadline,
                work_limit)
    best.seconds, best.work_spent = time.perf_counter() - started, judge.spent
    return best


def _sp_group(gm: fx.GraphModule) -> list[SPSite]:
    """The all_reduces the sequence-parallel start rewrites: those of the most common (rows, group); none in a
    graph with fences (its all_gathers are placed where full rows are read, which may be past a fence)."""
    if any(n.op == "call_function" and classify(n).kind in (NodeKind.FENCE, NodeKind.EFFECT) for n in gm.graph.nodes):
        return []
    by_key: dict[tuple, list[SPSite]] = {}
    for s in sp_sites(gm):
        by_key.setdefault((s.rows, s.group_size, s.group_name), []).append(s)
    return max(by_key.values(), key=len) if by_key else []


def _search(best: DecomposeChoice, sp: tuple, gm: fx.GraphModule, extracted, sites: dict[str, MatmulSite],
            options: DecomposeOptions, judge: PlanJudge, extract: Callable, say: Callable[[str], None],
            limit: float | None, deadline: float, search_limit: float | None) -> None:
    """Degrees for ``gm``'s ``sites`` (the repeated signatures together, then signatures in turn, most bytes
    first, each an equal share of the work up to ``limit``; no plan started that ``search_limit``, the whole
    search's, cannot pay for), ``best`` updated in place with any plan shorter than it."""
    groups: dict[tuple, list[MatmulSite]] = {}
    for s in sites.values():  # in graph order: a group's first site is its earliest
        groups.setdefault(s.signature, []).append(s)
    first = {g: i for i, g in enumerate(groups)}
    signatures = sorted(groups, key=lambda g: (-sum(s.comm_bytes for s in groups[g]), first[g]))
    rank = {g: i for i, g in enumerate(signatures)}
    prefix = f"sequence parallel ({len(sp)} all_reduces); " if sp else ""

    enough = float("inf") if best.original_step is None else best.original_step * (1.0 - options.min_gain)

    def judged(plan: DecomposePlan, graph, ex) -> int | None:
        step = judge.step(ex)
        best.tried.append((prefix + plan.describe(sites), step))
        say(f"decomposition: {prefix}{plan.describe(sites)}: step "
            + ("over the budget" if step is None else f"{step / 1e3:,.1f} us"))
        if step is not None and step <= enough and (best.step is None or step < best.step):
            best.plan, best.gm, best.extracted, best.step, best.sites, best.sequence_parallel = \
                plan, graph, ex, step, sites, sp
        return step

    def tried(trial: dict[tuple, int]) -> int | None:
        # sites of the signatures with most bytes first: where two sites split one matmul, theirs is split
        preferred = sorted((s for s in sites.values() if s.signature in trial), key=lambda s: rank[s.signature])
        plan = DecomposePlan.applicable({s.collective: trial[s.signature] for s in preferred}, sites)
        try:
            graph = apply_decomposition(gm, plan, sites)
            ex = extract(graph)
        except SolvercastError as e:  # a candidate the graph cannot take is rejected, never the caller's error
            best.tried.append((prefix + plan.describe(sites), None))
            say(f"decomposition: {prefix}{plan.describe(sites)}: rejected ({e})")
            return None
        return judged(plan, graph, ex)

    tasks = extracted.problem.num_tasks

    def out_of(share: float | None) -> bool:
        # a part's share ends the part; no plan starts that the whole search cannot pay for
        return time.perf_counter() > deadline or (share is not None and judge.spent >= share) \
            or not judge.affords(search_limit, tasks)

    current = judged(DecomposePlan(), gm, extracted) if sp else best.original_step
    allowed = {g: sorted(set.intersection(*(set(s.degrees) for s in groups[g]))) for g in signatures}
    chosen: dict[tuple, int] = {}
    repeated = [g for g in signatures if len(groups[g]) > 1]
    previous = current  # the climb together first (at most one plan a degree); the one by one gets what it leaves
    for top in sorted({d for g in repeated for d in allowed[g]}):
        if not repeated or out_of(limit):
            break
        trial = {g: max(d for d in allowed[g] if d <= top) for g in repeated if allowed[g] and allowed[g][0] <= top}
        step = tried(trial)
        if step is not None and (current is None or step < current):
            current, chosen = step, trial
        if step is None or (previous is not None and step >= previous):
            break  # more chunks cost more launches and copies: past the best degree it only gets worse
        previous = step
    for n, signature in enumerate(signatures):
        # each signature gets an equal share of the work left
        share = judge.share(limit, len(signatures) - n)
        start = chosen.get(signature, 1)
        # from the climb's degree: a step up, a step down, then whole (one signature's best degree is seldom
        # far from all signatures' together); from whole: up the degrees
        degrees = allowed[signature] if start == 1 else \
            [d for d in allowed[signature] if d > start][:1] + [d for d in allowed[signature] if d < start][-1:] + [1]
        for degree in degrees:
            if out_of(share):
                break
            trial = {g: d for g, d in (chosen | {signature: degree}).items() if d > 1}
            step = tried(trial)
            if step is not None and (current is None or step < current):
                current, chosen = step, trial
            elif start == 1 and degree > chosen.get(signature, 1):
                break  # more chunks cost more launches and copies: past the best degree it only gets worse


def _rewrite_search(gm: fx.GraphModule, extracted, extract: Callable, budget: int | None, options: DecomposeOptions,
                    limits: SearchLimits, say: Callable[[str], None]) -> DecomposeChoice:
    return choose_decomposition(gm, extracted, extract, budget, options, work_limit=limits.work_limit,
                                extract_work_per_task=limits.extract_work_per_task, say=say,
                                deadline=limits.deadline, plan_work=limits.plan_work,
                                work_per_second=limits.work_per_second)


def decompose_options(decomposition: bool | str | DecomposeOptions, cost_model=None) -> DecomposeOptions | None:
    """``optimize``'s ``decomposition`` argument for one budget as options (None: off). "auto": on with modelled
    costs (none given, or the analytic model), off with measured ones: a chunk's new ops have no measurement
    and would be priced by the model beside measured originals, which biases the choice."""
    if isinstance(decomposition, DecomposeOptions):
        return decomposition
    if decomposition == "auto":
        decomposition = cost_model is None or isinstance(cost_model, AnalyticCostModel)
    if isinstance(decomposition, bool):
        return DecomposeOptions() if decomposition else None
    raise ValueError(f"decomposition must be True, False, 'auto' or a DecomposeOptions, got {decomposition!r}")


#: the decomposition search as a rewrite kind (`solvercast.pipeline.rewrite_registry.REWRITES`): the heuristics'
#: step judges a split, and the solver may order the graph without it better (it did on fsdp_tp's backward), so
#: both graphs are solved and the shorter kept
DECOMPOSITION = Rewrite("decomposition", decompose_options, _rewrite_search,
                        lambda t: RewriteShare(t.decompose_share, t.decompose_plan_share,
                                               t.decompose_write_seconds_per_task),
                        solved_both_ways=True)
