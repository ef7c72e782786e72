"""`optimize(gm)`: extract, solve, lower, and a report the user can trust."""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch.fx as fx

from solvercast.bounds import lower_bounds
from solvercast.budget import resolve_budget
from solvercast.errors import InfeasibleBudgetError, SolvercastError
from solvercast.extract import extract_problem, graph_name
from solvercast.gc_paused import gc_paused
from solvercast.nodes import schemaless_ops
from solvercast.methods import BY_NAME, Kind, names
from solvercast.problem import Problem
from solvercast.report import Report
from solvercast.schedule import Schedule
from solvercast.simulate import SimResult, simulate, validate
from solvercast.time_budget import MIN_SOLVER_SECONDS, TimePlan, analysis_seconds, can_analyse, plan_time

#: `optimize`'s methods: the registry's selectable entries (`solvercast.methods`)
METHODS = names(Kind.SOLVER, Kind.BEST, Kind.HEURISTIC, Kind.ORIGINAL, selectable=True)
# auto: a monolithic CP-SAT model up to this many tasks (measured: it still improves on the heuristic at
# 3,000 tasks and finds nothing at 10,000: experiments/results/scale.md); beyond, placement then windows
AUTO_CPSAT_MAX_TASKS = 4000


@dataclass
class OptimizeResult:
    # the optimized, lowered module (the input is untouched); the input itself when the time limit could
    # not pay for reading it (``report.analysed`` False: then schedule, problem and simulations are None)
    gm: fx.GraphModule
    schedule: Schedule | None
    report: Report
    problem: Problem | None
    baseline: SimResult | None
    optimized: SimResult | None
    frontier: object = None  # `solvercast.pareto.Frontier` when several memory budgets were given

    def _require_analysis(self) -> None:
        if not self.report.analysed:
            raise SolvercastError(f"nothing to draw: {self.report.fallback}")

    def save_trace(self, path: str) -> None:
        """The predicted baseline and optimized schedules as a Chrome trace (Perfetto, chrome://tracing)."""
        from solvercast.visualize import write_chrome_trace

        self._require_analysis()

        write_chrome_trace(path, self.problem, {"baseline": self.baseline, "optimized": self.optimized},
                           memory_budget=self.report.memory_budget)

    def plot(self, path: str) -> None:
        """A PNG: Gantt chart per stream (baseline above, optimized below) and memory against the budget."""
        from solvercast.visualize import plot_schedules

        self._require_analysis()
        plot_schedules(path, self.problem, {"baseline": self.baseline, "optimized": self.optimized},
                       memory_budget=self.report.memory_budget, frontier=self.frontier)


def _check_arguments(method: str, time_limit: float) -> None:
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    if isinstance(time_limit, bool) or not isinstance(time_limit, (int, float)) or not time_limit > 0:
        raise ValueError(f"time_limit must be > 0 seconds, got {time_limit!r}")


@gc_paused()  # the call allocates an object or more per node: collections would walk the graph again and again
def optimize(
    gm: fx.GraphModule,
    time_limit: float = 10.0,
    memory_budget: int | float | None = None,
    device="h100",
    compute_streams: int = 1,
    method: str = "auto",
    preserve_collective_order: bool = True,
    deterministic: bool = True,
    *,
    comm_ops=None,
    cost_fn=None,
    cost_model=None,
    progress: Callable[[str], None] | None = None,
) -> OptimizeResult:
    """Reorder ``gm`` (and assign streams) to minimize its step time within a memory budget.

    ``memory_budget``: bytes (int), a ratio of the original order's peak
    (float), None (the default: 1.0, never worse than today) or ``math.inf``
    (no budget); or a list of these: `solvercast.pareto.pareto` solves each
    (sharing ``time_limit``) and the first budget's result is returned with
    the frontier in ``res.frontier`` and its report. ``cost_model``: a
    `solvercast.cost.CostModel` to price tasks with instead of ``device``'s
    analytic model (e.g. `solvercast.calibrate` or `solvercast.profiled`'s).

    Returns an `OptimizeResult`; ``res.gm`` is a new module. If no method
    beats the original order, the original order is returned and the report
    says so. The call returns within about ``time_limit``: a limit too short
    to read the graph at all (`solvercast.time_budget.can_analyse`, by its
    node count) returns ``gm`` itself, untouched (its peak unchecked against
    ``memory_budget``), with a report that says so (``res.report.analysed``
    False). Raises `InfeasibleBudgetError` (naming the smallest peak any
    method reached) when nothing fits the budget, `ExtractionError` for graphs
    without shape metadata, `ValueError` for bad arguments.
    """
    _check_arguments(method, time_limit)
    started = time.perf_counter()
    num_nodes = len(gm.graph.nodes)
    if not can_analyse(time_limit, num_nodes):  # too short to read the graph: untouched beats late
        return _unanalysed(gm, num_nodes, time_limit, started, progress)
    if isinstance(memory_budget, (list, tuple)):
        return _optimize_budgets(gm, memory_budget, time_limit, device=device, compute_streams=compute_streams,
                                 method=method, preserve_collective_order=preserve_collective_order,
                                 deterministic=deterministic, comm_ops=comm_ops, cost_fn=cost_fn, cost_model=cost_model,
                                 progress=progress)
    extracted = extract_for_optimize(gm, device=device, compute_streams=compute_streams, comm_ops=comm_ops,
                                     cost_fn=cost_fn, cost_model=cost_model,
                                     preserve_collective_order=preserve_collective_order)
    return optimize_extracted(gm, extracted, time_limit, memory_budget, method, deterministic, started=started,
                              cost_model=cost_model, progress=progress)


@dataclass(frozen=True)
class Extracted:
    """What `optimize` learns from the graph before any budget: the problem (no budget yet), the
    original order's schedule and simulation, and the seconds extraction took. `solvercast.pareto` reuses
    it for every budget."""
    problem: Problem
    original: Schedule
    baseline: SimResult
    seconds: float


def extract_for_optimize(gm: fx.GraphModule, *, device="h100", compute_streams: int = 1, comm_ops=None,
                         cost_fn=None, cost_model=None, preserve_collective_order: bool = True) -> Extracted:
    """`optimize`'s first phase: extract the problem and simulate the original order."""
    t0 = time.perf_counter()
    problem = extract_problem(gm, device=device, compute_streams=compute_streams, comm_ops=comm_ops,
                              cost_fn=cost_fn, preserve_collective_order=preserve_collective_order,
                              cost_model=cost_model)
    original = Schedule.original(problem)
    return Extracted(problem, original, simulate(problem, original), time.perf_counter() - t0)


@gc_paused()  # also for `solvercast.pareto`, which calls it once per budget
def optimize_extracted(gm: fx.GraphModule, extracted: Extracted, time_limit: float = 10.0,
                       memory_budget: int | float | None = None, method: str = "auto", deterministic: bool = True,
                       *, started: float | None = None, cost_model=None,
                       progress: Callable[[str], None] | None = None,
                       warm_starts: Sequence[Schedule] = ()) -> OptimizeResult:
    """`optimize` from an `Extracted` graph (``gm`` is the graph it came from): the rest of the call, under
    one memory budget. ``started``: the `time.perf_counter` reading the ``time_limit`` counts from (the
    call's start, extraction included; default now). ``warm_starts``: schedules of this problem (another
    budget's results: `solvercast.pareto`) that compete with the heuristics for the warm start where they
    hold this budget; a solver or the best-heuristic method then returns one of them when nothing beats it."""
    _check_arguments(method, time_limit)
    requested = method
    start_all = time.perf_counter() if started is None else started
    deadline = start_all + time_limit
    clock = time.perf_counter()

    def tell(msg: str) -> None:  # every progress line says how much of the limit is left
        progress(f"{msg} [{max(0.0, deadline - time.perf_counter()):.1f} s of {time_limit:.3g} s left]")

    say = _quiet if progress is None else tell

    phases: dict[str, float] = {}

    def phase(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        phases[name] = phases.get(name, 0.0) + now - clock
        clock = now

    problem, original, baseline = extracted.problem, extracted.original, extracted.baseline
    if started is not None:  # this call extracted: charge it
        phases["extract"] = extracted.seconds
    budget = resolve_budget(memory_budget, lambda: baseline.peak_memory, default=baseline.peak_memory)
    problem = problem.with_budget(budget)
    if method == "auto":
        method = "cpsat" if problem.num_tasks <= AUTO_CPSAT_MAX_TASKS else "cpsat-windows"
    plan = plan_time(time_limit, problem.num_tasks, problem.machine.compute_streams,
                     solver_follows=BY_NAME[method].kind == Kind.SOLVER)
    bounds = lower_bounds(problem, structural=plan.structural_bounds)  # the report's gap only
    phase("extract")
    say(f"extracted {problem.num_tasks} tasks; baseline makespan {baseline.makespan / 1e3:.1f} us, "
        f"peak {baseline.peak_memory} B, budget {'none' if budget is None else f'{budget} B'}")

    # a method asked for by name runs (an experiment compares it; the MILP refuses what it cannot model)
    at_bound = bounds.makespan if requested == "auto" else None
    schedule, solver_info = _solve(problem, method, plan, deadline, deterministic, say, phase, baseline, at_bound,
                                   warm_starts)
    if method != requested:
        solver_info["auto_choice"] = method

    def is_original(s: Schedule) -> bool:
        return s.order == original.order and not s.streams

    optimized = baseline if is_original(schedule) else validate(problem, schedule, memory_budget=sys.maxsize)
    fallback = solver_info.get("fallback")
    if optimized.makespan >= baseline.makespan and (budget is None or baseline.peak_memory <= budget):
        if not is_original(schedule):
            fallback = (fallback + "; " if fallback else "") + "no method beat the original order: kept it"
        schedule, optimized = original, baseline
        solver_info["method"] = "original"
    solver_info["fallback"] = fallback
    solver_info["schemaless_ops"] = schemaless_ops(gm.graph)
    if hasattr(cost_model, "coverage"):  # measured costs say how many ops fell back to the model
        solver_info["costs"] = cost_model.coverage(gm)

    from solvercast.lower import lower, strip_anchors

    if is_original(schedule):  # what lowering builds without reordering: the input, anchors and dead code gone
        out_gm = strip_anchors(gm)
    else:
        say(f"lowering {solver_info['method']}'s schedule")
        out_gm = lower(gm, problem, schedule, check=False)
    phase("lower")
    phases["total"] = time.perf_counter() - start_all
    report = Report.build(problem, baseline, optimized, bounds, budget, schedule, solver_info, phases, time_limit)
    return OptimizeResult(gm=out_gm, schedule=schedule, report=report, problem=problem, baseline=baseline,
                          optimized=optimized)


def _unanalysed(gm: fx.GraphModule, num_nodes: int, time_limit: float, started: float, progress) -> OptimizeResult:
    """`optimize` when ``time_limit`` cannot pay for reading ``gm``: ``gm`` itself, and a report that says
    so (`Report.unanalysed`); no problem, schedule or simulation."""
    report = Report.unanalysed(graph_name(gm), num_nodes, analysis_seconds(num_nodes), time_limit,
                               {"total": round(time.perf_counter() - started, 4)})
    if progress is not None:
        progress(report.fallback)
    return OptimizeResult(gm=gm, schedule=None, report=report, problem=None, baseline=None, optimized=None)


def _optimize_budgets(gm, budgets, time_limit: float, **options) -> OptimizeResult:
    """`optimize` under each budget (`solvercast.pareto`): the first budget's result, with the frontier."""
    from solvercast.pareto import pareto

    frontier = pareto(gm, budgets, time_limit, **options)
    first = frontier.points[0].result
    first.frontier = frontier
    first.report = dataclasses.replace(first.report, frontier=tuple(frontier.to_dict()))
    return first


def _quiet(msg: str) -> None:
    """`optimize`'s progress when nobody listens."""


def _solve(problem: Problem, method: str, plan: TimePlan, deadline: float, deterministic: bool, say,
           phase, baseline: SimResult, lower_bound: int | None = None,
           warm_starts: Sequence[Schedule] = ()) -> tuple[Schedule, dict]:
    """The chosen method's schedule (always within budget) and what happened. The heuristics run under
    the plan's work budget (``baseline``: the original order's simulation, which they need not repeat);
    the solver gets the plan's deterministic time, capped by the wall clock left before ``deadline``
    (less the predicted lowering). A solver is not run when the best heuristic's makespan is at
    ``lower_bound`` (a makespan no schedule beats): it is optimal already. A schedule of ``warm_starts``
    that holds the budget and beats the best heuristic replaces it as the warm start."""
    from solvercast.heuristics import best_heuristic
    from solvercast.heuristics.work import WorkBudget, work_budget

    info: dict = {"method": method, "time_plan": dataclasses.asdict(plan)}
    budget = problem.machine.memory_budget
    entry = BY_NAME[method]
    work = WorkBudget(limit=plan.heuristic_work)
    info["heuristics_cut"] = work.cut
    if entry.kind in (Kind.ORIGINAL, Kind.HEURISTIC):
        with work_budget(work):
            schedule = entry.run(problem, memory_budget=budget)
        if entry.kind == Kind.HEURISTIC:
            phase("heuristics")
        return _within_budget(problem, schedule, budget), info

    say("running heuristics")
    with work_budget(work):
        try:
            hint = best_heuristic(problem, memory_budget=budget, original_simulation=baseline)
            hint_error = None
        except InfeasibleBudgetError as e:
            hint, hint_error = None, e
    use_solver = entry.kind == Kind.SOLVER
    # its simulation for the progress line, and to skip a solver that cannot beat it
    hint_sim = None if hint is None or not (use_solver or say is not _quiet or warm_starts) else simulate(problem, hint)
    hint_makespan = None if hint_sim is None else hint_sim.makespan
    if hint is not None and say is not _quiet:
        say(f"best heuristic: {hint.method}, makespan {hint_makespan / 1e3:.1f} us"
            + (f" (cut by the time limit: {', '.join(work.cut)})" if work.cut else ""))
    for start in warm_starts:  # a tighter budget's schedule holds this one: the frontier never gets worse
        sim = simulate(problem, start)
        better = hint is None or (sim.makespan, sim.peak_memory) < (hint_makespan, hint_sim.peak_memory)
        if (budget is None or sim.peak_memory <= budget) and better:  # as fast and smaller: the frontier's point
            hint, hint_sim, hint_error = start, sim, None
            hint_makespan = sim.makespan
            say(f"warm start: {hint.method}, makespan {hint_makespan / 1e3:.1f} us")
    phase("heuristics")
    info["heuristic"] = hint.method if hint is not None else None
    if hint is not None and use_solver and lower_bound is not None and hint_makespan <= lower_bound:
        # synthetic 1,000 tasks, budget 1.0: nondelay at the compute bound, and CP-SAT spent 1.2 s to keep it
        info["fallback"] = f"the warm start ({hint.method}) reaches a lower bound: it is optimal, no solver run"
        info["method"] = hint.method
        return hint, info

    wall_left = deadline - time.perf_counter() - plan.lowering_seconds
    # deterministic: the plan's time, the same on every rank; else whatever the wall clock leaves
    solver_time = plan.solver_seconds(work.spent) if deterministic else wall_left
    info["time_plan"].update(heuristic_work_spent=round(work.spent), solver_seconds=round(solver_time, 3))
    if not use_solver or solver_time < MIN_SOLVER_SECONDS or wall_left < MIN_SOLVER_SECONDS:
        if hint is None:
            raise hint_error
        if use_solver:
            info["fallback"] = "no time left for the solver; used the best heuristic"
        info["method"] = hint.method
        return hint, info

    if hint is None and entry.needs_hint:
        raise hint_error  # reduced models keep parts of a heuristic schedule: they need one
    try:
        res = entry.run(problem, hint, solver_time, deterministic, say, deadline=deadline - plan.lowering_seconds)
    except InfeasibleBudgetError as e:
        if e.best_peak is None and hint_error is not None:  # the solver's proof: the heuristics' smallest peak
            e.best_peak = hint_error.best_peak
        raise
    phase("solve")
    info.update(solver=method, solver_status=res.status.value,
                solver_raw_status=res.solver_status, solver_objective=res.objective, solver_bound=res.bound,
                solver_message=res.message, solver_time=res.wall_time)
    if res.stats.get("stopped_by_wall_clock"):
        info["solver_message"] = ((res.message + "; ") if res.message else "") + (
            "the wall clock, not the deterministic limit, ended the search: other ranks may get another schedule")
    if res.schedule is None:
        if hint is None:
            raise InfeasibleBudgetError(
                f"no schedule within the budget of {budget} B was found; {hint_error}", best_peak=hint_error.best_peak)
        info["fallback"] = res.message
        info["method"] = hint.method
        return hint, info
    if res.status.value == "hint_kept":
        info["fallback"] = res.message
        info["method"] = hint.method if hint is not None else info["solver"]
    else:
        info["method"] = info["solver"]
    return res.schedule, info


def _within_budget(problem: Problem, schedule: Schedule, budget: int | None) -> Schedule:
    peak = simulate(problem, schedule).peak_memory
    if budget is not None and peak > budget:
        raise InfeasibleBudgetError(
            f"{schedule.method or 'the schedule'} reaches a peak of {peak} B, over the budget of {budget} B",
            best_peak=peak)
    return schedule


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
      collectives, waits and matmuls is pinned (`solvercast.pin_order`): each
      is wrapped, under its own name, in Inductor's ``control_deps`` on the
      one before it. With ``compute_streams > 1`` on a CUDA graph the streams
      are written in torch.compile's own form (`solvercast.compile_streams`:
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

    def __init__(self, **options):
        import inspect

        known = set(inspect.signature(optimize).parameters) - {"gm"}
        unknown = sorted(set(options) - known)
        if unknown:
            raise TypeError(f"SolvercastPass got unknown option(s) {unknown}; optimize takes {sorted(known)}")
        _check_arguments(options.get("method", "auto"), options.get("time_limit", 10.0))
        self.options = options
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
        # Optimize a copy: wrapping `graph` itself in a GraphModule would steal it from Inductor's module.
        copy_graph = fx.Graph()
        val_map: dict[fx.Node, fx.Node] = {}
        out_val, old_output = copy_graph.graph_copy(graph, val_map, return_output_node=True)
        new_output = copy_graph.output(out_val)
        new_output.meta = dict(old_output.meta)
        root = graph.owning_module if graph.owning_module is not None else torch.nn.Module()
        from solvercast.lower import graph_module  # noqa: PLC0415

        wrapper = graph_module(root, copy_graph)
        result = optimize(wrapper, **options)
        self.last_result = result
        if not result.report.analysed:  # the time limit could not pay for reading it: leave it as it is
            return
        if options.get("compute_streams", 1) != 1:  # streams in torch.compile's own form
            from solvercast.compile_streams import annotate_graph_in_place, dynamo_registry

            stream_index, new_event = dynamo_registry(_on_cuda(graph))
            annotate_graph_in_place(graph, result.problem, result.schedule, stream_index=stream_index,
                                    new_event=new_event)
            # not pinned: whether Inductor keeps a node's stream once it is wrapped in control_deps is
            # unchecked without a GPU (issue 19's owed run), and its reordering may undo this order
            return
        self._reorder_in_place(graph, result, val_map)
        # Inductor would reorder it again (fusion, reorder_for_peak_memory): pin it
        from solvercast.pin_order import pin_order

        pin_order(graph)

    @staticmethod
    def _reorder_in_place(graph: fx.Graph, result: OptimizeResult, val_map: dict) -> None:
        """Move ``graph``'s nodes into the program order of ``result.gm`` (copied from it through ``val_map``)."""
        by_name = {new.name: old for old, new in val_map.items()}
        order: list[fx.Node] = []
        for node in result.gm.graph.nodes:
            if node.op == "output":
                continue
            old = by_name.get(node.name)
            if old is None:
                raise SolvercastError(f"the optimized graph has a node {node.name!r} ({node.target}) that the "
                                      f"input graph lacks; cannot rewrite the fx.Graph in place")
            order.append(old)
        placed = set(order)
        output = next(n for n in reversed(graph.nodes) if n.op == "output")
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

        from solvercast.cost import AnalyticCostModel, CostFnOverrides
        from solvercast.device import get_profile

        if self.options.get("compute_streams", 1) != 1:
            return None  # the compiled graph holds stream and event objects registered while compiling:
            # a cache hit would skip their registration, so Inductor must not cache it (None: bypass)
        h = hashlib.sha256(b"solvercast.SolvercastPass/2\0")
        for key in sorted(self.options):
            value = self.options[key]
            if key == "progress":
                continue
            if key == "cost_fn" and value is not None:
                value = CostFnOverrides(AnalyticCostModel(get_profile(self.options.get("device", "h100"))),
                                        value).cache_key()
            h.update(f"{key}={value!r}\0".encode())
        for package in ("solvercast", "solvercast.heuristics", "solvercast.models"):
            root = Path(importlib.import_module(package).__file__).resolve().parent
            for path in sorted(root.glob("*.py")) + sorted(root.glob("solvers/*.py")):
                h.update(f"{package}/{path.relative_to(root).as_posix()}\0".encode() + path.read_bytes())
        return h.hexdigest()

    def __repr__(self) -> str:
        return f"SolvercastPass({', '.join(f'{k}={v!r}' for k, v in self.options.items())})"
