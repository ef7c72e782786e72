"""Choosing buckets with the schedule: which collectives share a launch is decided by the step time the
schedule reaches under the memory budget, never by a fixed size.

The search walks plans (`solvercast.rewrites.bucketing.BucketGraph.greedy`: consecutive collectives of one
kind and group share a launch up to a byte cap per kind). For each kind in turn (most bytes first, the caps
chosen for earlier kinds kept) it lays out the distinct plans of caps 2, 4, 8, ... times the kind's median
collective, tries every other one (stopping at one over the budget), then the neighbours of the best until
none is left. One cap makes every bucket alike, but the step does not wait on every bucket alike: a
backward's last reduce_scatters have no compute left to hide behind, and a large bucket holds memory the
next layer needs. So the search then halves every bucket whose wait leaves the compute stream idle in the
best plan's schedule (`exposed_buckets`, `halve`), again while that shortens the step; where it does not, it
halves them one at a time, longest wait first, keeping the halves that shorten it. Each kind's caps get work
in proportion to the time its collectives take unbucketed, the halving as much as an average kind. Each
plan's graph is extracted and scheduled by the heuristics (the solver's warm starts) under the caller's
budget, and the plan with the shortest step is kept. The budget is bytes of the unbucketed graph's peak, so
a plan that holds more memory than the budget allows is never taken. The solver then orders the chosen
plan's graph (`solvercast.pipeline.solve.optimize_extracted`).

The plan is a function of the graph, the options and the deterministic work limits, so every rank
builds the same buckets.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch.fx as fx

from solvercast.errors import SolvercastError
from solvercast.ir.problem import Problem
from solvercast.ir.schedule import Schedule
from solvercast.ir.simulate import SimResult, idle_points
from solvercast.pipeline.extracted import extracted_problem
from solvercast.pipeline.plan_judge import PlanJudge
from solvercast.pipeline.rewrite_search import Rewrite, RewriteChoice, RewriteShare, SearchLimits
from solvercast.rewrites.bucketing import (BITWISE_KINDS, BUCKET_MEMBERS, BucketGraph, BucketOptions, BucketPlan,
                                          apply_buckets)
from solvercast.rewrites.bucket_problem import BucketPricer, merged_problem
from solvercast.rewrites.pytorch_buckets import problem_prices, pytorch_bucket_plan, pytorch_overlap, reordered

#: how the plan lines of PyTorch's answers begin
PYTORCH = "PyTorch's "

#: each kind's caps, as multiples of its median collective's input bytes (1: no merge)
CAP_MULTIPLES = (2, 4, 8, 16, 32, 64, 128, 256)


@dataclass
class BucketChoice(RewriteChoice):
    """`RewriteChoice` of the bucket search: ``plan`` a `BucketPlan`, ``graph`` the `BucketGraph` its buckets
    are of."""

    graph: BucketGraph | None = None
    pytorch: list[str] = field(default_factory=list)  # why PyTorch's answers were not judged, where they were not

    @property
    def rewritten(self) -> bool:
        return bool(self.plan.buckets)

    def pytorch_line(self) -> str:
        """What became of PyTorch's answers: each one's step, or why it has none ("" where none was asked for)."""
        judged = [f"{line.split(':')[0].removeprefix(PYTORCH)} "
                  f"{'over the budget' if step is None else f'{step / 1e3:,.1f} us'}"
                  for line, step in self.tried if line.startswith(PYTORCH)]
        said = judged + self.pytorch
        return "; PyTorch's answers: " + ", ".join(said) if said else ""

    def launch_members(self) -> dict[str, tuple[str, ...]]:
        """Each bucket's launch (its node's name in the bucketed graph) -> the collectives it launches."""
        return launch_members(self.gm)

    def summary(self) -> str:
        """One line for the report: what was merged, whether the results stay bitwise, what it bought."""
        sites = self.graph.by_name
        if not self.plan.buckets:
            if self.skipped:
                return f"no buckets: {self.skipped}"
            return (f"no buckets: none of {len(self.tried)} plans tried shortened the step" if self.tried
                    else "no buckets: no two collectives may share a launch") + self.pytorch_line()
        kinds = {sites[b[0]].kind for b in self.plan.buckets}
        bitwise = all(k in BITWISE_KINDS for k in kinds)
        return (f"{self.plan.describe(sites)} ({len(self.tried)} plans tried{self.gain()}); "
                + ("bitwise identical results" if bitwise else
                   "reduce_scatter/all_reduce buckets may sum in another order (not bitwise; "
                   "BucketOptions(bitwise=True) forbids them)") + self.pytorch_line())


def order_edges(problem: Problem) -> list[tuple[str, str]]:
    """``problem``'s edges as (earlier, later) task-name pairs: the orders a `BucketGraph` of its graph keeps."""
    names = [t.name for t in problem.tasks]
    return [(names[a], names[b]) for a, b in problem.edges]


def choose_buckets(gm: fx.GraphModule, unbucketed, extract: Callable, budget: int | None, options: BucketOptions,
                   work_limit: float | None, extract_work_per_task: float, say: Callable[[str], None],
                   deadline: float = float("inf"), plan_work: float | None = None,
                   work_per_second: float = 1.0e6, merge_work_per_task: float | None = None,
                   price_work: float = 0.0, pytorch_work_per_task: float | None = None,
                   pytorch_work: float = 0.0) -> BucketChoice:
    """The plan whose graph the heuristics schedule fastest within ``budget`` bytes (None: no budget).
    ``unbucketed``: ``gm``'s `Extracted`; ``extract(gm, freeable_inputs=...)``: the `Extracted` of a
    bucketed graph (as `solvercast.pipeline.extracted.extract_for_optimize`, bound to the caller's costs);
    ``work_limit``: the heuristic work (`heuristics.work`, reference microseconds) all plans together may
    spend, each plan's extraction counted as ``extract_work_per_task`` per task: no plan is tried once it
    is spent (None: no limit); ``plan_work``: the heuristic work each plan gets (`PlanJudge`).
    ``merge_work_per_task``: the work per task of a plan's problem built from the unbucketed one
    (`solvercast.rewrites.bucket_problem`), which is how plans are judged when it is given: the plan kept is
    then written and extracted once, and judged again there (its write paid for before the search starts),
    and each bucket shape priced counts ``price_work``. None: every plan is written and extracted.
    ``deadline``: a `time.perf_counter` reading after which no plan is tried (wall clock: pass it only where
    ranks need not agree); ``work_per_second``: the work one second pays for (the report's seconds).
    With ``options.pytorch``, PyTorch's answers are judged first (`solvercast.rewrites.pytorch_buckets`): its
    overlap scheduler's buckets written in its order and its FSDP pre-buckets as a plan, where ``work_limit``
    pays for loading torch's passes (``pytorch_work``) and the overlap pass at ``pytorch_work_per_task`` a
    node (None: never run)."""
    started = time.perf_counter()
    graph = BucketGraph(gm, options, order_edges=order_edges(unbucketed.problem))
    kinds = _mergeable_kinds(graph)
    if not kinds:  # nothing may merge: no plan, and no heuristic run to compare it with
        return BucketChoice(BucketPlan(), gm, unbucketed, None, None, seconds=time.perf_counter() - started,
                            graph=graph)
    judge = PlanJudge(budget, work_limit, extract_work_per_task, plan_work, build_work_per_task=merge_work_per_task)
    # a plan's graph: each merged collective adds at most an input view, a result's getitem, copy and view
    tasks = unbucketed.problem.num_tasks + 4 * len(graph.sites)
    write_once = 0.0 if merge_work_per_task is None else extract_work_per_task * tasks  # the kept plan's write
    if work_limit is not None and not judge.affords(work_limit - write_once, tasks, plans=2):
        # (the unbucketed graph's step and one plan)
        return BucketChoice(BucketPlan(), gm, unbucketed, None, None, seconds=time.perf_counter() - started,
                            skipped=judge.unaffordable(work_limit, tasks, work_per_second), graph=graph)
    judge.spent += write_once
    base_step = judge.step(unbucketed, built=True)  # (extracted already: only its heuristics are new work)
    best = BucketChoice(BucketPlan(), gm, unbucketed, base_step, base_step, graph=graph)
    pricer = None if merge_work_per_task is None else BucketPricer(graph, extract)
    search = _BucketSearch(gm, unbucketed, graph, extract, pricer, price_work, judge, best, tasks, work_limit,
                           deadline, say)
    if options.pytorch:  # PyTorch's answers, judged as every plan is: the floor the search starts from
        search.try_pytorch(pytorch_work, pytorch_work_per_task, work_per_second)
    # each kind's caps take a share of the work in proportion to the time its collectives take unbucketed (a
    # kind of little comm has little to save), the halving after them as much as an average kind; what an
    # earlier part leaves goes to the later ones
    weights = _part_weights(unbucketed.problem, graph, kinds)
    for n, kind in enumerate(kinds):
        search.limit = judge.share(work_limit, sum(weights[n:]) / weights[n])
        search.search_caps(kind)
    search.limit = work_limit
    search.halve_exposed()
    search.write_best()
    if not best.tried:
        best.skipped = judge.unaffordable(work_limit, tasks, work_per_second)
    best.seconds, best.work_spent = time.perf_counter() - started, judge.spent
    return best


def _mergeable_kinds(graph: BucketGraph) -> list[str]:
    """The kinds with two sites or more (one site merges with nothing), most bytes first."""
    bytes_of = {k: sum(s.input_bytes for s in graph.sites if s.kind == k) for k in {s.kind for s in graph.sites}
                if sum(s.kind == k for s in graph.sites) >= 2}
    return sorted(bytes_of, key=lambda k: (-bytes_of[k], k))


def _part_weights(problem: Problem, graph: BucketGraph, kinds: list[str]) -> list[float]:
    """The work weight of each kind's caps (the time its collectives take unbucketed, at least 1), then of the
    halving (an average kind's)."""
    comm_time = {kind: 0 for kind in kinds}
    for task in problem.tasks:
        site = graph.by_name.get(task.name)
        if site is not None and site.kind in comm_time:
            comm_time[site.kind] += task.duration
    weights = [max(comm_time[kind], 1) for kind in kinds]
    weights.append(sum(weights) / len(kinds))
    return weights


class _BucketSearch:
    """`choose_buckets`' search: each plan it judges, kept in ``best`` (a `BucketChoice`) when its step is the
    shortest so far; ``limit`` the work the part under way may reach."""

    def __init__(self, gm: fx.GraphModule, unbucketed, graph: BucketGraph, extract: Callable,
                 pricer: BucketPricer | None, price_work: float, judge: PlanJudge, best: BucketChoice, tasks: int,
                 work_limit: float | None, deadline: float, say: Callable[[str], None]):
        self.gm, self.unbucketed, self.graph, self.extract, self.pricer = gm, unbucketed, graph, extract, pricer
        self.price_work = price_work  # the work each bucket shape priced counts for
        self.judge, self.best = judge, best
        self.tasks, self.work_limit, self.deadline, self.say = tasks, work_limit, deadline, say
        self.limit = work_limit
        # the best plan's (launch -> members, problem, schedule, simulation): where its step waits
        self.best_judged = None
        self.caps: dict[str, int] = {}

    def spent(self) -> bool:
        # a part's share ends the part; no plan starts that the whole search cannot pay for
        return time.perf_counter() > self.deadline or (self.limit is not None and self.judge.spent >= self.limit) \
            or not self.judge.affords(self.work_limit, self.tasks)

    def trial(self, plan: BucketPlan, what: str = "") -> int | None:
        """Judge ``plan`` (on its problem built from the unbucketed one where every bucket can be priced, else
        on its graph written and extracted); keep it when its step is the shortest so far. Its step (None:
        over the budget, or rejected)."""
        best, graph = self.best, self.graph
        line = what + plan.describe(graph.by_name)
        bucketed = None
        try:
            if self._priced(plan):
                merged = merged_problem(self.unbucketed.problem, plan, graph, self.pricer)
                members, extracted = merged.launch_members, extracted_problem(merged.problem)
            else:
                bucketed = apply_buckets(self.gm, plan, graph)
                extracted, members = self.extract(bucketed), launch_members(bucketed)
        except SolvercastError as e:  # a candidate the graph cannot take is rejected, never the caller's error
            best.tried.append((line, None))
            self.say(f"buckets: {line}: rejected ({e})")
            return None
        return self._judged(line, plan, bucketed, extracted, members)

    def _judged(self, line: str, plan: BucketPlan, bucketed: fx.GraphModule | None, extracted,
                members: dict[str, tuple[str, ...]]) -> int | None:
        """``plan``'s step on ``extracted`` (its graph ``bucketed``, None where its problem was built), kept
        when the shortest so far."""
        best = self.best
        judged = self.judge.judge(extracted, built=bucketed is None)
        step = None if judged is None else judged[2].makespan
        best.tried.append((line, step))
        self.say(f"buckets: {line}: step " + ("over the budget" if step is None else f"{step / 1e3:,.1f} us"))
        if step is not None and (best.step is None or step < best.step):
            best.plan, best.gm, best.extracted, best.step = plan, bucketed, extracted, step
            self.best_judged = (members, *judged)
        return step

    def try_pytorch(self, fixed_work: float, work_per_task: float | None, work_per_second: float) -> None:
        """PyTorch's answers: its overlap scheduler's buckets written in its order (`pytorch_overlap`), judged
        on the written graph, and its FSDP pre-buckets as a plan, where the work left pays for loading torch's
        passes (``fixed_work``), the overlap pass (``work_per_task`` a node) and two plans' writes and
        heuristics."""
        judge, tasks = self.judge, self.tasks
        if work_per_task is None:
            return
        pass_work = work_per_task * len(self.gm.graph.nodes)  # (torch walks the graph's nodes)
        cost = fixed_work + pass_work + 2 * (judge.extract_work_per_task * tasks + (judge.plan_work or 0.0))
        if time.perf_counter() > self.deadline or (self.work_limit is not None and
                                                   judge.spent + cost > self.work_limit):
            why = f"not tried (about {cost / work_per_second:.1f} s, more than the search's share left)"
            self.best.pytorch.append(why)
            self.say(f"buckets: PyTorch's answers {why}")
            return
        seconds = (fixed_work + pass_work) / work_per_second
        self.say(f"buckets: running PyTorch's overlap scheduler (about {seconds:.1f} s, loading it included)")
        judge.spent += fixed_work + pass_work
        got, why = pytorch_overlap(self.gm, problem_prices(self.unbucketed.problem, self.gm), self.graph)
        if got is None:
            self.best.pytorch.append(why)
            self.say(f"buckets: {why}")
        else:
            self._trial_overlap(*got)
        plan, why = pytorch_bucket_plan(self.gm, self.graph)
        if plan is None:
            self.best.pytorch.append(why)
            self.say(f"buckets: {why}")
        elif not self.spent():
            self.trial(plan, f"{PYTORCH}FSDP buckets: ")

    def _trial_overlap(self, plan: BucketPlan, order: list[str]) -> None:
        """The overlap scheduler's ``plan`` written on ``gm`` in its ``order``, judged."""
        base = reordered(self.gm, order)
        # (the same nodes: the same orders to keep)
        graph = BucketGraph(base, self.graph.options, order_edges=order_edges(self.unbucketed.problem))
        why = ""
        try:
            plan = graph.without_cycles(plan)
            bucketed = apply_buckets(base, plan, graph)
        except SolvercastError as e:
            bucketed, why = None, str(e)
        self.trial_written(bucketed, plan, f"{PYTORCH}overlap scheduler's order and buckets: ", why)

    def trial_written(self, bucketed: fx.GraphModule | None, plan: BucketPlan, what: str, why: str = "") -> None:
        """`trial` of a graph already written (None: rejected, ``why``)."""
        best = self.best
        line = what + plan.describe(self.graph.by_name)
        if bucketed is None:
            best.tried.append((line, None))
            self.say(f"buckets: {line}: rejected ({why})")
            return
        self._judged(line, plan, bucketed, self.extract(bucketed), launch_members(bucketed))

    def _priced(self, plan: BucketPlan) -> bool:
        """Whether every bucket of ``plan`` has a price (`BucketPricer`): its problem can be built."""
        if self.pricer is None:
            return False
        known = len(self.pricer.prices)
        try:
            for bucket in plan.buckets:
                self.pricer.price(bucket)
        except SolvercastError as e:
            self.say(f"buckets: a bucket of {bucket[0]!r} cannot be priced alone ({e}); its plans are written")
            return False
        finally:
            self.judge.spent += self.price_work * (len(self.pricer.prices) - known)
        return True

    def write_best(self) -> None:
        """The kept plan judged on its problem only: write and extract its graph, and judge it there (the
        problem equals the written graph's, tests/rewrites/test_bucket_problem.py; should it not, the
        written graph's step decides, and a plan no shorter than none is dropped)."""
        best = self.best
        if not best.plan.buckets or best.gm is not None:
            return
        line = "written: " + best.plan.describe(self.graph.by_name)
        try:
            bucketed = apply_buckets(self.gm, best.plan, self.graph)
            extracted = self.extract(bucketed)
        except SolvercastError as e:
            step, why = None, f"rejected ({e})"
        else:
            step = self.judge.step(extracted)
            why = "over the budget" if step is None else f"{step / 1e3:,.1f} us"
        best.tried.append((line, step))
        self.say(f"buckets: {line}: step {why}")
        if step is None or step >= best.original_step:
            best.plan, best.gm, best.extracted, best.step = BucketPlan(), self.gm, self.unbucketed, best.original_step
        else:
            best.gm, best.extracted, best.step = bucketed, extracted, step

    def cap_ladder(self, kind: str) -> list[tuple[int, BucketPlan]]:
        """The distinct plans of ``kind``'s growing caps, the caps chosen for earlier kinds kept (greedy is
        cheap)."""
        sizes = sorted(s.input_bytes for s in self.graph.sites if s.kind == kind)
        median, total = sizes[len(sizes) // 2], sum(sizes)
        ladder: list[tuple[int, BucketPlan]] = []
        for multiple in CAP_MULTIPLES:
            cap = median * multiple
            plan = self.graph.greedy(self.caps | {kind: cap})
            if plan.buckets and plan != (ladder[-1][1] if ladder else self.best.plan):
                ladder.append((cap, plan))
            if cap >= total:
                break
        return ladder

    def try_rung(self, kind: str, cap: int, plan: BucketPlan) -> int | None:
        """`trial` of ``plan``, ``kind``'s cap becoming ``cap`` when it is kept."""
        taken = self.best.plan
        step = self.trial(plan)
        if self.best.plan is not taken:
            self.caps[kind] = cap
        return step

    def search_caps(self, kind: str) -> None:
        """Coarse to fine: every other rung of ``kind``'s ladder (a cap over the budget ends it: larger ones
        hold more), then the neighbours of the best rung until none is left or the work is spent."""
        ladder = self.cap_ladder(kind)
        steps: dict[int, int | None] = {}
        for i in range(1 if len(ladder) > 1 else 0, len(ladder), 2):
            if self.spent():
                break
            steps[i] = self.try_rung(kind, *ladder[i])
            if steps[i] is None:
                break
        while not self.spent():
            fits = [i for i, step in steps.items() if step is not None]
            centre = min(fits, key=steps.__getitem__) if fits else 0
            near = [j for j in (centre - 1, centre + 1, centre) if 0 <= j < len(ladder) and j not in steps]
            if not near:
                break
            steps[near[0]] = self.try_rung(kind, *ladder[near[0]])

    def halve_exposed(self) -> None:
        """One cap per kind makes every bucket alike, but the step waits on some more than others: halve every
        bucket the best plan's schedule waits on at once, and while that shortens the step do it again; where
        it does not, halve them one at a time, longest wait first."""
        best = self.best
        halved: set[tuple[str, ...]] = set()  # buckets halved alone (and judged)
        together = True
        while self.best_judged is not None and not self.spent():
            waits = [members for _, members in exposed_buckets(*self.best_judged) if members not in halved]
            if not waits:
                break
            chosen = waits if together and len(waits) > 1 else waits[:1]
            plan = best.plan
            for members in chosen:
                plan = halve(plan, members, self.graph)
            if len(chosen) == 1:
                halved.add(chosen[0])
            taken = best.plan
            self.trial(plan, f"{len(chosen)} buckets halved: " if len(chosen) > 1
                       else f"{chosen[0][0]}'s bucket halved: ")
            together = best.plan is not taken


def launch_members(bucketed: fx.GraphModule) -> dict[str, tuple[str, ...]]:
    """Each bucket's launch in ``bucketed`` (its node's name) -> the collectives it launches."""
    return {n.name: n.meta[BUCKET_MEMBERS] for n in bucketed.graph.nodes if BUCKET_MEMBERS in n.meta}


def exposed_buckets(members: dict[str, tuple[str, ...]], problem: Problem, schedule: Schedule,
                    sim: SimResult) -> list[tuple[int, tuple[str, ...]]]:
    """(idle ns of the compute stream just before the bucket's wait, its members) for each bucket whose wait
    the step waits on, longest first; ``members``: each bucket's launch task's name -> its members
    (`launch_members` of a bucketed graph), ``problem`` the bucketed graph's, ``sim`` ``schedule``'s
    simulation."""
    idle_before = {schedule.order[pos]: idle for idle, pos in idle_points(problem, schedule, sim)}
    wait_of = problem.wait_of
    found = [(idle_before.get(wait_of[t], 0), members[task.name]) for t, task in enumerate(problem.tasks)
             if task.name in members and t in wait_of]
    return sorted((f for f in found if f[0] > 0), key=lambda f: -f[0])


def halve(plan: BucketPlan, members: tuple[str, ...], graph: BucketGraph) -> BucketPlan:
    """``plan`` with the bucket ``members`` cut in two where its input bytes are half launched (a half of
    one collective launches alone)."""
    sizes = [graph.by_name[name].input_bytes for name in members]
    total = sum(sizes)
    cut, launched = len(members) - 1, 0
    for i, size in enumerate(sizes[:-1]):
        launched += size
        if 2 * launched >= total:
            cut = i + 1
            break
    halves = (members[:cut], members[cut:])
    return BucketPlan(tuple(part for bucket in plan.buckets
                            for part in (halves if bucket == members else (bucket,))))


def _rewrite_search(gm: fx.GraphModule, extracted, extract: Callable, budget: int | None, options: BucketOptions,
                    limits: SearchLimits, say: Callable[[str], None]) -> BucketChoice:
    return choose_buckets(gm, extracted, extract, budget, options, work_limit=limits.work_limit,
                          extract_work_per_task=limits.extract_work_per_task, say=say, deadline=limits.deadline,
                          plan_work=limits.plan_work, work_per_second=limits.work_per_second,
                          merge_work_per_task=limits.build_work_per_task, price_work=limits.price_work,
                          pytorch_work_per_task=limits.peer_work_per_task, pytorch_work=limits.peer_work)


def bucket_options(bucketing: bool | str | BucketOptions, cost_model=None) -> BucketOptions | None:
    """``optimize``'s ``bucketing`` argument for one budget as options (None: off; "auto": on)."""
    if isinstance(bucketing, BucketOptions):
        return bucketing
    if bucketing == "auto":
        return BucketOptions()
    if isinstance(bucketing, bool):
        return BucketOptions() if bucketing else None
    raise ValueError(f"bucketing must be True, False, 'auto' or a BucketOptions, got {bucketing!r}")


#: the bucket search as a rewrite kind (`solvercast.pipeline.rewrite_registry.REWRITES`)
BUCKETS = Rewrite("buckets", bucket_options, _rewrite_search,
                  lambda t: RewriteShare(t.bucket_share, t.bucket_plan_share, t.bucket_write_seconds_per_task,
                                         t.bucket_merge_seconds_per_task, t.bucket_price_seconds,
                                         t.bucket_pytorch_seconds_per_task, t.bucket_pytorch_seconds))
