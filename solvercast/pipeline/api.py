"""`optimize(gm)`: extract, solve, lower, and a report the user can trust."""

from __future__ import annotations

import dataclasses
import functools
import gc
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import torch.fx as fx

from solvercast.cost.device import DeviceProfile, get_profile
from solvercast.cost.model import AnalyticCostModel, CostFnOverrides
from solvercast.errors import SolvercastError
from solvercast.fx.compile_streams import annotate_graph_in_place, dynamo_registry
from solvercast.fx.lower import graph_module
from solvercast.fx.pin_order import pin_order
from solvercast.gc_paused import gc_paused
from solvercast.ir.budget import resolve_budget
from solvercast.ir.problem import collective_order_value
from solvercast.pipeline.pareto import pareto
from solvercast.pipeline.rewrite_registry import REWRITES
from solvercast.pipeline.rewrite_search import search_rewrites
from solvercast.rewrites.bucketing import BucketOptions
from solvercast.rewrites.decompose import DecomposeOptions
from solvercast.pipeline.extracted import extract_for_optimize
from solvercast.pipeline.rank_agreement import agree_across_ranks
from solvercast.pipeline.solve import OptimizeResult, check_arguments, optimize_extracted, unanalysed
from solvercast.fx.input_lifetimes import InputLifetimes, input_lifetimes
from solvercast.pipeline.time_plan import can_analyse
from solvercast.pipeline.tuning import DEFAULT_TUNING, Tuning


#: `optimize`'s ``method`` values: "auto" and the names of `solvercast.pipeline.methods.BY_NAME`
Method = Literal["auto", "cpsat", "cpsat-windows", "cpsat-placement", "prefixes", "milp", "heuristic", "list",
                 "nondelay", "comm_priority", "raise_comms", "sink_waits", "original"]
CollectiveOrder = bool | Literal["auto", "global", "group", "free"]


@gc_paused()  # the call allocates an object or more per node: collections would walk the graph again and again
def optimize(
    gm: fx.GraphModule,
    time_limit: float = 10.0,
    memory_budget: int | float | Sequence[int | float] | None = None,
    device: str | DeviceProfile = "h100",
    compute_streams: int = 1,
    method: Method = "auto",
    preserve_collective_order: CollectiveOrder = "auto",
    deterministic: bool = True,
    *,
    comm_ops=None,
    cost_fn: Callable[[fx.Node], float | None] | None = None,
    cost_model=None,
    progress: Callable[[str], None] | None = None,
    tuning: Tuning | None = None,
    bucketing: bool | Literal["auto"] | BucketOptions = "auto",
    decomposition: bool | Literal["auto"] | DecomposeOptions = "auto",
    freeable_inputs: Literal["auto", "held"] | Iterable[str] = "auto",
    rewrites: Mapping[str, Any] | None = None,
) -> OptimizeResult:
    """Reorder ``gm`` (and assign streams) to minimize its step time within a memory budget.

    Args:
        gm: one step's graph, with shape metadata (``meta["val"]``: make_fx, dynamo, AOTAutograd); not modified.
        time_limit: seconds for the whole call, extraction and lowering included (see Returns).
        memory_budget: bytes (int), a ratio of the original order's peak (float), None (the default: 1.0,
            never above today's peak) or ``math.inf`` (none); or a list of these, each solved in turn
            (`solvercast.pipeline.pareto`, sharing ``time_limit``): the first budget's result is returned with
            the frontier in ``res.frontier``. Peaks count inputs as ``freeable_inputs`` says.
        device: the analytic cost model's device profile, by name (`solvercast.cost.device.get_profile`) or as a
            `DeviceProfile`.
        compute_streams: how many compute streams the schedule may use (1: comm overlaps compute only).
        method: "auto" (CP-SAT on whole graphs up to `solve.AUTO_CPSAT_MAX_TASKS` tasks, windowed CP-SAT above),
            "cpsat", "cpsat-windows", "cpsat-placement", "prefixes" (exact search of program prefixes), "milp"
            (small graphs), "heuristic" (the best heuristic), "list", "nondelay", "comm_priority",
            "raise_comms", "sink_waits" or "original" (`solvercast.pipeline.methods`).
        preserve_collective_order: which collectives keep their original relative order: True or "global"
            (all: safe even if ranks compute different schedules), "group" (each process group's: safe when
            every rank computes one schedule), False or "free" (none), or "auto" (the default: "group" when
            ``deterministic`` and the costs are a function of the graph alone, the analytic model or a
            ``cost_fn``; else "global"). Fences (send, recv, barrier, with_effects) stay ordered with every
            collective in every mode (docs/execution_rules.md, "Collective order").
        deterministic: counted work and the solver's deterministic time instead of the wall clock, so every
            rank computes the same schedule; where ranks that differed could hang (groups free to interleave, a
            split chosen by comparing solves) the clock ends a search only at 3x the limit, and with a gloo or
            NCCL default group every rank must call this, as ranks that still differ all keep the original
            order (`solvercast.pipeline.rank_agreement`). False: wall-clock limits ("auto" order is "global").
        comm_ops: extra ops to treat as communication (`solvercast.fx.extract.extract_problem`).
        cost_fn: ``fn(node) -> seconds or None`` overriding the model's price of a node (None: the model's);
            the same code on every rank, so the schedule stays rank-independent.
        cost_model: a `solvercast.cost.model.CostModel` instead of ``device``'s analytic model (e.g.
            `solvercast.cost.calibrate`'s or `solvercast.cost.profiled`'s measured costs).
        progress: called with a line of text at each phase (the time left in brackets); None: silent.
        tuning: the time plan's and the solvers' shares, rates and window sizes
            (`solvercast.pipeline.tuning.Tuning`, varied with `dataclasses.replace`); None: `DEFAULT_TUNING`.
        bucketing: whether collectives of one kind and group may share a launch, chosen with the schedule
            under the budget (`solvercast.pipeline.buckets`): True, False, a
            `solvercast.rewrites.bucketing.BucketOptions` (which kinds; ``bitwise=True`` only merges whose
            results are bitwise the unmerged ones), or "auto" (the default: on for one budget, off for a list).
        decomposition: whether an all_gather feeding matmuls, or a matmul feeding a reduce_scatter or
            all_reduce, may be split into chunks that overlap each other's matmuls, and plain all_reduces
            written sequence-parallel first (`solvercast.pipeline.decompose`): True, False, a
            `solvercast.rewrites.decompose.DecomposeOptions` (kinds, largest degree, sequence parallelism,
            the inputs alike on every rank), or "auto" (the default: on with modelled costs and one budget;
            off with measured costs, which cannot price the chunks' new ops, or a list of budgets). Chunked
            results are close to the original, not bitwise. Tried after bucketing.
        freeable_inputs: which graph inputs the runtime frees after their last use, for every memory figure
            and the budget (rule M1): "auto" (the default; `solvercast.fx.input_lifetimes`: a torch.compile
            backward, known by its ``tangents_*`` inputs, frees its saved activations and tangents and holds
            its ``primals_*`` and the inputs that reach an all_gather; any other graph's inputs are held by
            its caller; a capture may record the names in ``gm.meta["solvercast_freed_inputs"]``), "held"
            (none), or the names of the freed inputs. The report's ``inputs`` line says which rule was used.
        rewrites: any registered rewrite kind's argument by its name
            (`solvercast.pipeline.rewrite_registry.REWRITES`: "buckets" is ``bucketing``, "decomposition"
            ``decomposition``); a kind not named is "auto".

    Returns:
        An `OptimizeResult`; ``res.gm`` is a new module, ``res.report`` says what was done and why. If no
        method beats the original order, the original order is returned and the report says so. The call
        returns within about ``time_limit``: a limit too short to read the graph at all
        (`solvercast.pipeline.time_plan.can_analyse`, by its node count) returns ``gm`` itself, untouched
        (its peak unchecked against ``memory_budget``), with a report that says so
        (``res.report.analysed`` False).

    Raises:
        InfeasibleBudgetError: nothing fits the budget (it names the smallest peak any method reached).
        ExtractionError: the graph lacks shape metadata.
        ValueError: a bad argument, or rewrites asked for with a list of budgets.
    """
    check_arguments(method, time_limit, preserve_collective_order)
    preserve_collective_order = collective_order(preserve_collective_order, deterministic, cost_model)
    started = time.perf_counter()
    num_nodes = len(gm.graph.nodes)
    tuning = DEFAULT_TUNING if tuning is None else tuning
    if not can_analyse(time_limit, num_nodes, tuning.time_plan):  # too short to read the graph: untouched beats late
        return unanalysed(gm, num_nodes, time_limit, started, progress, tuning.time_plan)
    lifetimes = input_lifetimes(gm, freeable_inputs)
    asked = {"buckets": bucketing, "decomposition": decomposition} | dict(rewrites or {})
    if isinstance(memory_budget, (list, tuple)):
        _refuse_rewrites_for_budget_list({"bucketing": bucketing, "decomposition": decomposition,
                                          **(rewrites or {})})
        res = _optimize_budgets(gm, memory_budget, time_limit, device=device, compute_streams=compute_streams,
                                method=method, preserve_collective_order=preserve_collective_order,
                                deterministic=deterministic, comm_ops=comm_ops, cost_fn=cost_fn, cost_model=cost_model,
                                progress=progress, tuning=tuning, freeable_inputs=lifetimes.freed)
        return _finished(res, lifetimes, started)

    extract = functools.partial(extract_for_optimize, device=device, compute_streams=compute_streams,
                                comm_ops=comm_ops, cost_fn=cost_fn, cost_model=cost_model,
                                preserve_collective_order=preserve_collective_order, freeable_inputs=lifetimes.freed)
    extracted = extract(gm)
    requested = {r.name: r.options(asked.get(r.name, "auto"), cost_model) for r in REWRITES}
    solve = functools.partial(optimize_extracted, gm, extracted, time_limit, memory_budget, started=started,
                              deterministic=deterministic, cost_model=cost_model, progress=progress, tuning=tuning)
    if all(o is None for o in requested.values()) or method == "original":
        res = solve(method)
    else:
        res = _optimize_rewritten(gm, extracted, extract, requested, time_limit, memory_budget, method,
                                  deterministic, started, cost_model, progress, tuning)
    return _finished(agree_across_ranks(res, lambda: solve("original")), lifetimes, started)


def _refuse_rewrites_for_budget_list(asked: Mapping[str, Any]) -> None:
    """Each budget of a list would choose its own rewrites, so none may be asked for by name."""
    named = [name for name, value in asked.items() if value is not False and value != "auto"]
    if named:
        raise ValueError(f"{' and '.join(named)} cannot be chosen with a list of budgets (each budget would "
                         f"choose its own rewrites); pass one budget, or leave {'them' if len(named) > 1 else 'it'} "
                         f"at 'auto' (off for a list)")


def _finished(res: OptimizeResult, lifetimes: InputLifetimes, started: float) -> OptimizeResult:
    """``res`` with its report saying which inputs were counted as freed after their last use, and why, and
    with the whole call's seconds as its total, read last: whatever ran after a solve (the rank agreement,
    a second solve, the searches' garbage) is in it."""
    phases = res.report.phases | {"total": round(time.perf_counter() - started, 4)}
    # (a frontier holds ``res``: its report is replaced in place)
    res.report = dataclasses.replace(res.report, inputs=lifetimes.describe(res.problem), phases=phases)
    return res


def collective_order(requested: bool | str, deterministic: bool, cost_model) -> bool | str:
    """``preserve_collective_order`` as `optimize` uses it: "auto" is "group" where every rank computes the
    same schedule (a deterministic search on costs that are a function of the graph: the analytic model, or
    a ``cost_fn``, the same code on every rank), else "global" (measured costs differ from rank to rank; a
    wall-clock search stops at different points), the one order safe when ranks disagree."""
    if requested != "auto":
        return requested
    same_everywhere = cost_model is None or isinstance(cost_model, AnalyticCostModel)
    return "group" if deterministic and same_everywhere else "global"


def _optimize_rewritten(gm, extracted, extract, requested: dict, time_limit: float, memory_budget, method: str,
                        deterministic: bool, started: float, cost_model, progress, tuning: Tuning) -> OptimizeResult:
    """`optimize` with the rewrites chosen by the heuristics' step under the budget: each kind of
    `REWRITES` whose ``requested`` options are not None (`search_rewrites`: buckets, then collective-matmul
    decomposition on the bucketed graph), each within its share of the time limit; then the chosen graph
    ordered by ``method``. Where a kind the solver judges again (`Rewrite.solved_both_ways`) rewrote the
    graph, the graph without it is solved too and the shorter kept. The report's baseline stays the input
    graph's original order."""
    original = extracted
    baseline = extracted.baseline
    budget = resolve_budget(memory_budget, lambda: baseline.peak_memory, default=baseline.peak_memory)
    say = (lambda msg: None) if progress is None else progress

    def deadline_of(seconds: float) -> float:  # deterministic: counted work alone ends a search
        return math.inf if deterministic else time.perf_counter() + seconds

    choices = search_rewrites(REWRITES, requested, gm, extracted, extract, budget, time_limit, tuning.time_plan,
                              deadline_of, say)
    phases = {c.kind: round(c.seconds, 4) for c in choices}
    notes = tuple((c.kind, c.summary()) for c in choices)
    kept = {c.kind: c for c in choices if c.rewritten}
    if kept:
        # the plans tried are garbage in cycles (FX graphs), kept while the collector is paused: collected
        # here, inside the time limit the solves below keep, not by the caller's first allocation after
        # the call (1.6 s on fw_64_2d's plans). The youngest generation holds everything the call allocated;
        # a full collection would walk the process's older heap too (it cost the test suite a minute)
        gc.collect(0)

    def solve(graph, ex, limit: float, spent: float, must_agree: bool = False) -> OptimizeResult:
        return optimize_extracted(graph, ex, limit, math.inf if budget is None else budget, method, deterministic,
                                  started=started, cost_model=cost_model, progress=progress, tuning=tuning,
                                  must_agree=must_agree, spent_seconds=spent, least_heuristic_seconds=least)

    # what the searches took of the limit: their counted work where ranks must agree, else the clock; the
    # solve plans with what is left (planned with the whole limit it overran it by the searches' share)
    used = sum(c.work_spent for c in choices)
    # the chosen graph's heuristics get at least the work each plan got in its search: the step the search
    # judged it by is reached again (the searches' counted work is above their wall time on a quiet machine)
    least = max((r.shares(tuning.time_plan).plan_share for r in REWRITES if r.name in {c.kind for c in choices}),
                default=0.0) * time_limit
    elapsed = used / tuning.time_plan.work_per_second if deterministic else \
        time.perf_counter() - started - extracted.seconds  # (the plan counts the extraction in its fixed costs)

    last = choices[-1] if choices else None
    solved_both_ways = {r.name for r in REWRITES if r.solved_both_ways}
    if last is not None and last.kind in kept and last.kind in solved_both_ways:
        # judged by the heuristics, the solver may order the graph without it better (it did on fsdp_tp's
        # backward): both are solved, the rewritten one in half the time left, and the shorter kept.
        # Deterministic, the time used is the searches' counted work, not the clock: which graph is kept decides
        # the launches, and every rank must take the same (a clock read here split a reduce_scatter on one rank,
        # not another); for the same reason neither solve may be cut by the clock on one rank only
        before = choices[-2] if len(choices) > 1 else None
        plain_gm, plain_ex = (before.gm, before.extracted) if before is not None else (gm, extracted)
        half = elapsed + max(0.0, time_limit - elapsed) / 2
        res = solve(last.gm, last.extracted, half, elapsed, must_agree=True)
        plain = solve(plain_gm, plain_ex, time_limit, half, must_agree=True)
        if plain.optimized is not None and (res.optimized is None or plain.optimized.makespan <= res.optimized.makespan):
            notes = tuple((kind, f"declined once solved: {_step_us(plain)} without it against {_step_us(res)} "
                                 f"with it ({text})") if kind == last.kind else (kind, text) for kind, text in notes)
            res = plain
            del kept[last.kind]
    else:
        res = solve(last.gm if last is not None else gm, last.extracted if last is not None else extracted,
                    time_limit, elapsed)
    # (a rewritten graph's solve ran to half the time left: the call's limit is the caller's; its total the
    # whole call's, set by `optimize` last)
    report = dataclasses.replace(res.report, phases=res.report.phases | phases, time_limit=time_limit, rewrites=notes)
    if not kept:
        return dataclasses.replace(res, report=report)
    report = dataclasses.replace(
        report, baseline_makespan=baseline.makespan, baseline_exposed_comm=baseline.exposed_comm,
        baseline_peak_memory=baseline.peak_memory, memory_budget=budget)
    return dataclasses.replace(res, report=report, baseline=baseline, baseline_problem=original.problem, rewrites=kept)


def _step_us(res: OptimizeResult) -> str:
    return "no schedule" if res.optimized is None else f"{res.optimized.makespan / 1e3:,.1f} us"


def _optimize_budgets(gm, budgets, time_limit: float, **options) -> OptimizeResult:
    """`optimize` under each budget (`solvercast.pipeline.pareto`): the first budget's result, with the frontier."""
    frontier = pareto(gm, budgets, time_limit, **options)
    first = frontier.points[0].result
    first.frontier = frontier
    first.report = dataclasses.replace(first.report, frontier=tuple(frontier.to_dict()))
    return first


def _on_cuda(graph: fx.Graph):
    """The CUDA device of the graph's first tensor input, or None."""
    for node in graph.find_nodes(op="placeholder"):
        val = node.meta.get("val")
        if getattr(val, "device", None) is not None and val.device.type == "cuda":
            return val.device
    return None


class SolvercastPass:
    """``optimize`` as a graph pass for pipelines and for ``torch.compile``.

    Options are `optimize`'s keyword arguments; the last `OptimizeResult` is
    kept on ``.last_result`` and ``.calls`` counts invocations.

    * ``pass_(gm)`` with an ``fx.GraphModule`` returns ``optimize(gm, **options).gm``
      (a new module; ``gm`` is untouched).
    * ``pass_(graph)`` with an ``fx.Graph`` is Inductor's post-grad hook
      (``torch._inductor.config.post_grad_custom_pre_pass`` /
      ``post_grad_custom_post_pass``): the graph is optimized through a copy
      and then reordered IN PLACE to the optimized program order; returns None.
      With ``compute_streams=1`` the node order changes, no op is added; nodes
      that ``optimize`` dropped as dead are kept, just before the output.
      Inductor's scheduler would reorder its kernels again, so the order of
      collectives and waits among the matmuls is pinned (`solvercast.fx.pin_order`):
      each link that data does not already make is a ``control_deps`` wrapper
      (the node under its own name); ``pin=False`` leaves the order to
      Inductor's scheduler (the reordered graph, unpinned). With ``compute_streams > 1`` on a CUDA graph the streams
      are written in torch.compile's own form (`solvercast.fx.compile_streams`:
      stream annotations, one event and one wait per cross-stream consumer,
      control_deps), which Inductor's scheduler reads; on a CPU graph
      (Inductor's multi-stream code needs a CUDA device guard) it falls back
      to one stream, with a warning.

    Inductor only caches compiled graphs whose custom passes are
    ``CustomGraphPass`` instances with a ``uuid()``: constructing a
    SolvercastPass registers the class as a virtual subclass of
    ``torch._inductor.custom_graph_pass.CustomGraphPass`` (lazily, since
    importing ``torch._inductor`` costs seconds), and `uuid` hashes the
    options together with solvercast's sources.
    """

    _registered = False

    def __init__(self, pin: bool = True, **options):
        import inspect

        known = set(inspect.signature(optimize).parameters) - {"gm"}
        unknown = sorted(set(options) - known)
        if unknown:
            raise TypeError(f"SolvercastPass got unknown option(s) {unknown}; optimize takes {sorted(known)}")
        check_arguments(options.get("method", "auto"), options.get("time_limit", 10.0),
                        options.get("preserve_collective_order", "auto"))
        self.options = options
        self.pin = bool(pin)
        self.last_result: OptimizeResult | None = None
        self.calls = 0
        if not SolvercastPass._registered:
            try:
                from torch._inductor.custom_graph_pass import CustomGraphPass

                CustomGraphPass.register(SolvercastPass)
            except Exception:  # pragma: no cover - other torch versions: works, just bypasses the cache
                pass
            SolvercastPass._registered = True

    def __call__(self, gm):
        self.calls += 1
        if isinstance(gm, fx.GraphModule):
            self.last_result = optimize(gm, **self.options)
            return self.last_result.gm
        if isinstance(gm, fx.Graph):
            self._optimize_graph_in_place(gm)
            return None
        raise TypeError(f"SolvercastPass expects an fx.GraphModule or an fx.Graph, got {type(gm).__name__}")

    def _optimize_graph_in_place(self, graph: fx.Graph) -> None:
        import warnings

        import torch

        options = dict(self.options)
        if options.get("compute_streams", 1) != 1 and not _on_cuda(graph):
            warnings.warn("SolvercastPass on the fx.Graph (torch.compile) of a non-CUDA graph schedules a single "
                          "compute stream (Inductor opens side streams inside a CUDA device guard); compute_streams "
                          "is set to 1", stacklevel=3)
            options["compute_streams"] = 1
        if options.get("compute_streams", 1) != 1:
            # the stream annotation maps the schedule onto the graph's own nodes, so its schedule is of those:
            # rewrites are written into the graph on the one-stream path only
            options["bucketing"] = options["decomposition"] = False
        # Optimize a copy: wrapping `graph` itself in a GraphModule would steal it from Inductor's module.
        copy_graph = fx.Graph()
        val_map: dict[fx.Node, fx.Node] = {}
        out_val, old_output = copy_graph.graph_copy(graph, val_map, return_output_node=True)
        new_output = copy_graph.output(out_val)
        new_output.meta = dict(old_output.meta)
        root = graph.owning_module if graph.owning_module is not None else torch.nn.Module()

        # inside Inductor its passes are loaded on every rank: PyTorch's bucket answers cost no load here
        tuning = options.get("tuning") or DEFAULT_TUNING
        options["tuning"] = dataclasses.replace(
            tuning, time_plan=dataclasses.replace(tuning.time_plan, bucket_pytorch_seconds=0.0))
        wrapper = graph_module(root, copy_graph)
        result = optimize(wrapper, **options)
        self.last_result = result
        if not result.report.analysed:  # the time limit could not pay for reading it: leave it as it is
            return
        if options.get("compute_streams", 1) != 1:  # streams in torch.compile's own form

            stream_index, new_event = dynamo_registry(_on_cuda(graph))
            annotate_graph_in_place(graph, result.problem, result.schedule, stream_index=stream_index,
                                    new_event=new_event)
            # not pinned: whether Inductor keeps a node's stream once it is wrapped in control_deps is
            # unchecked without a GPU (experiments' GPU check), and its reordering may undo this order
            return
        self._reorder_in_place(graph, result, val_map)
        # Inductor would reorder it again (fusion, reorder_for_peak_memory): pin it
        if self.pin:
            pin_order(graph)

    @staticmethod
    def _reorder_in_place(graph: fx.Graph, result: OptimizeResult, val_map: dict) -> None:
        """Move ``graph``'s nodes into the program order of ``result.gm`` (copied from it through ``val_map``).
        With rewrites (buckets, decomposed sites), their nodes are added to ``graph``, every node reads what it
        reads in ``result.gm``, and the nodes they replaced are erased."""
        by_name = {new.name: old for old, new in val_map.items()}
        bucketed = result.buckets is not None or result.decomposition is not None
        order: list[fx.Node] = []
        output = next(n for n in reversed(graph.nodes) if n.op == "output")
        for node in result.gm.graph.nodes:
            if node.op == "output":
                if bucketed:
                    output.args = fx.map_arg(node.args, lambda n: by_name[n.name])
                continue
            old = by_name.get(node.name)
            if old is None and bucketed and node.op == "call_function":  # a rewrite's node
                with graph.inserting_before(output):
                    old = graph.create_node("call_function", node.target, fx.map_arg(node.args, lambda n: by_name[n.name]),
                                            fx.map_arg(node.kwargs, lambda n: by_name[n.name]), name=node.name)
                old.meta = dict(node.meta)
                by_name[node.name] = old
            elif old is None:
                raise SolvercastError(f"the optimized graph has a node {node.name!r} ({node.target}) that the "
                                      f"input graph lacks; cannot rewrite the fx.Graph in place")
            elif bucketed:  # read the rewrites' results where the replaced nodes' were read
                old.args = fx.map_arg(node.args, lambda n: by_name[n.name])
                old.kwargs = fx.map_arg(node.kwargs, lambda n: by_name[n.name])
            order.append(old)
        placed = set(order)
        if bucketed:  # the nodes the rewrites replaced (absent from result.gm): nothing reads them now
            kept = {n.name for n in result.gm.graph.nodes}
            replaced = {old for new, old in by_name.items() if new not in kept and old.op == "call_function"}
            for node in reversed([n for n in graph.nodes if n in replaced and n not in placed]):
                graph.erase_node(node)
        order += [n for n in graph.nodes if n not in placed and n is not output]  # dead nodes: last
        for node in order:
            output.prepend(node)
        graph.lint()

    def uuid(self) -> str | None:
        """A stable id for Inductor's cache key: the options (not ``progress``; a ``cost_fn`` by its
        `CostFnOverrides.cache_key`, never by its address) and the sources of every solvercast package
        (``heuristics`` and ``models`` live in other folders of a source checkout). None with
        ``compute_streams > 1``: Inductor then bypasses its cache."""
        import hashlib
        import importlib
        from pathlib import Path

        if self.options.get("compute_streams", 1) != 1:
            return None  # the compiled graph holds stream and event objects registered while compiling:
            # a cache hit would skip their registration, so Inductor must not cache it (None: bypass)
        h = hashlib.sha256(b"solvercast.SolvercastPass/2\0")
        if not self.pin:
            h.update(b"pin=False\0")
        for key in sorted(self.options):
            value = self.options[key]
            if key == "progress":
                continue
            if key == "preserve_collective_order" and value != "auto":
                value = collective_order_value(value)  # True and "global" are one option
            if key == "cost_fn" and value is not None:
                value = CostFnOverrides(AnalyticCostModel(get_profile(self.options.get("device", "h100"))),
                                        value).cache_key()
            h.update(f"{key}={value!r}\0".encode())
        for package in ("solvercast", "solvercast.heuristics", "solvercast.models"):
            root = Path(importlib.import_module(package).__file__).resolve().parent
            for path in sorted(root.rglob("*.py")):  # every module: any of them can change the graph written
                h.update(f"{package}/{path.relative_to(root).as_posix()}\0".encode() + path.read_bytes())
        return h.hexdigest()

    def __repr__(self) -> str:
        options = ({} if self.pin else {"pin": False}) | self.options
        return f"SolvercastPass({', '.join(f'{k}={v!r}' for k, v in options.items())})"
