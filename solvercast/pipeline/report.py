"""Baseline vs optimized, in figures `simulate` produced, with bounds and gaps."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from solvercast.ir.bounds import Bounds
from solvercast.ir.budget import budget_label
from solvercast.ir.problem import Problem, format_bytes
from solvercast.ir.schedule import Schedule
from solvercast.ir.simulate import SimResult


def _us(ns: int | None) -> str:
    return "-" if ns is None else f"{ns / 1e3:,.1f} us"


@dataclass(frozen=True)
class Report:
    problem: str
    tasks: int
    compute_streams: int
    comm_streams: int
    baseline_makespan: int
    optimized_makespan: int
    baseline_exposed_comm: int
    optimized_exposed_comm: int
    baseline_peak_memory: int
    optimized_peak_memory: int
    memory_budget: int | None  # None: no budget
    bounds: dict
    gap: float  # (optimized - best bound) / best bound
    method: str  # what produced the returned schedule
    heuristic: str | None  # the best heuristic (the solver's warm start)
    solver: str | None
    solver_status: str | None
    solver_bound: int | None
    best_bound: int  # the higher of the solver's bound and lower_bounds
    fallback: str | None  # why a heuristic or the original order was returned, if one was
    solver_message: str | None
    time_limit: float
    phases: dict = field(default_factory=dict)  # seconds per phase, and "total"
    # ops priced without an op schema (by bytes moved alone; FLOPs unknown), name -> count
    schemaless_ops: dict = field(default_factory=dict)
    # waits on collectives an earlier graph launched (graph inputs), taken as finished at the start
    earlier_collectives: list = field(default_factory=list)
    # with several budgets (`solvercast.pipeline.pareto`): one row per budget, `Frontier.to_dict`
    frontier: tuple = ()
    # what the time plan gave each phase (`solvercast.pipeline.time_plan.TimePlan`), and what the heuristics'
    # work budget cut (`heuristics.work`)
    time_plan: dict = field(default_factory=dict)
    heuristics_cut: list = field(default_factory=list)
    # where costs came from, when measured (`solvercast.cost.calibrate`, `solvercast.cost.profiled`): how many ops
    # the measurements covered and how many fell back to the analytic model
    costs: str | None = None
    # what extraction derived or assumed about the graph (`Problem.notes`), one line each
    notes: tuple = ()
    # which collectives kept their original order: "global", "group" (within each process group) or "free"
    collective_order: str | None = None
    # each rewrite kind's search that ran, in order: (its name, its summary: what it chose, whether results stay
    # bitwise, what the plans tried gave; `solvercast.pipeline.rewrite_search.RewriteChoice.summary`)
    rewrites: tuple[tuple[str, str], ...] = ()
    # False when the time limit could not pay for reading the graph: the module came back untouched, and
    # every figure above is None (`Report.unanalysed`)
    analysed: bool = True
    # which graph inputs the memory figures count as freed after their last use, and the rule that chose them
    # (`solvercast.fx.input_lifetimes`)
    inputs: str | None = None

    @classmethod
    def unanalysed(cls, name: str, num_nodes: int, needed: float, time_limit: float, phases: dict) -> "Report":
        """The report of a call whose ``time_limit`` could not pay for the ``needed`` seconds that reading
        a graph of ``num_nodes`` nodes and handing back a copy take (`solvercast.pipeline.time_plan.can_analyse`):
        the input is returned as it is, and nothing about it is known."""
        return cls(
            problem=name, tasks=num_nodes, compute_streams=0, comm_streams=0, baseline_makespan=None,
            optimized_makespan=None, baseline_exposed_comm=None, optimized_exposed_comm=None,
            baseline_peak_memory=None, optimized_peak_memory=None, memory_budget=None, bounds={}, gap=None,
            method="original", heuristic=None, solver=None, solver_status=None, solver_bound=None,
            best_bound=None, solver_message=None, time_limit=time_limit, phases=phases, analysed=False,
            fallback=(f"not analysed: reading {num_nodes} nodes and copying them back takes about {needed:.1f} s, "
                      f"more than the {time_limit:g} s limit; the module is returned untouched, its peak against the "
                      f"memory budget unchecked (a limit of "
                      f"{needed:.1f} s or more has it analysed)"))

    @classmethod
    def build(cls, problem: Problem, baseline: SimResult, optimized: SimResult, bounds: Bounds, budget: int,
              schedule: Schedule, info: dict, phases: dict, time_limit: float) -> "Report":
        solver_bound = info.get("solver_bound")
        best_bound = max(bounds.makespan, solver_bound or 0)
        return cls(
            problem=problem.name, tasks=problem.num_tasks, compute_streams=problem.machine.compute_streams,
            comm_streams=problem.machine.comm_streams,
            baseline_makespan=baseline.makespan, optimized_makespan=optimized.makespan,
            baseline_exposed_comm=baseline.exposed_comm, optimized_exposed_comm=optimized.exposed_comm,
            baseline_peak_memory=baseline.peak_memory, optimized_peak_memory=optimized.peak_memory,
            memory_budget=budget, bounds=bounds.to_dict(),
            gap=(optimized.makespan - best_bound) / best_bound if best_bound else 0.0,
            method=info.get("method", schedule.method), heuristic=info.get("heuristic"), solver=info.get("solver"),
            solver_status=info.get("solver_status"), solver_bound=solver_bound, best_bound=best_bound,
            fallback=info.get("fallback"), solver_message=info.get("solver_message"), time_limit=time_limit,
            phases={k: round(v, 4) for k, v in phases.items()}, schemaless_ops=dict(info.get("schemaless_ops", {})),
            earlier_collectives=list(info.get("earlier_collectives", [])),
            time_plan=dict(info.get("time_plan", {})), heuristics_cut=list(info.get("heuristics_cut", [])),
            costs=info.get("costs"), notes=tuple(problem.notes), collective_order=problem.collective_order)

    def rewrite(self, name: str) -> str | None:
        """The summary of the rewrite kind ``name``'s search, None where it did not run."""
        return dict(self.rewrites).get(name)

    @property
    def buckets(self) -> str | None:
        """Which collectives share a launch (`solvercast.pipeline.buckets`); None when bucketing was off."""
        return self.rewrite("buckets")

    @property
    def decomposition(self) -> str | None:
        """Which collective-matmul sites were split (`solvercast.pipeline.decompose`); None when off."""
        return self.rewrite("decomposition")

    @property
    def speedup(self) -> float | None:
        if not self.analysed:
            return None
        return self.baseline_makespan / self.optimized_makespan if self.optimized_makespan else 1.0

    def to_dict(self) -> dict:
        """JSON-ready."""
        d = asdict(self)
        d["speedup"] = self.speedup
        d["rewrites"] = dict(self.rewrites)
        d["buckets"], d["decomposition"] = self.buckets, self.decomposition
        return d

    def __str__(self) -> str:
        def pct(new, old):
            return "" if not old else f"{(new - old) / old:+.1%}"

        if not self.analysed:
            return (f"solvercast report: {self.problem} ({self.tasks} nodes), not analysed\n"
                    f"  fallback         {self.fallback}\n"
                    "  time             " + ", ".join(f"{k} {v:.2f} s" for k, v in self.phases.items())
                    + f" (limit {self.time_limit:g} s)")
        rows = [
            ("", "baseline", "optimized", "change"),
            ("makespan", _us(self.baseline_makespan), _us(self.optimized_makespan),
             pct(self.optimized_makespan, self.baseline_makespan)),
            ("exposed comm", _us(self.baseline_exposed_comm), _us(self.optimized_exposed_comm),
             pct(self.optimized_exposed_comm, self.baseline_exposed_comm)),
            ("peak memory", format_bytes(self.baseline_peak_memory), format_bytes(self.optimized_peak_memory),
             pct(self.optimized_peak_memory, self.baseline_peak_memory)),
        ]
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        lines = [f"solvercast report: {self.problem} ({self.tasks} tasks, {self.compute_streams} compute + "
                 f"{self.comm_streams} comm streams)"]
        lines += ["  " + "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
                  for r in rows]
        b = self.bounds
        lines += [
            "  memory budget    none" if self.memory_budget is None else
            f"  memory budget    {format_bytes(self.memory_budget)} (optimized uses "
            f"{self.optimized_peak_memory / max(1, self.memory_budget):.1%})",
            f"  lower bounds     critical path {_us(b['critical_path'])}, compute {_us(b['compute'])}, "
            f"comm {_us(b['comm'])}, sequencing {_us(b['sequencing'])}, windows {_us(b.get('windows'))}, "
            f"exposure {_us(b.get('exposure'))}, memory {format_bytes(b['memory'])}",
            f"  best bound       {_us(self.best_bound)}"
            + (f" (solver's own: {_us(self.solver_bound)})" if self.solver_bound is not None else "")
            + f"; gap {self.gap:.2%}",
            f"  method           {self.method}" + (f" (warm start: {self.heuristic})" if self.heuristic else ""),
        ]
        if self.solver:
            lines.append(f"  solver           {self.solver}: {self.solver_status}"
                         + (f" - {self.solver_message}" if self.solver_message else ""))
        if self.fallback:
            lines.append(f"  fallback         {self.fallback}")
        if self.schemaless_ops:
            lines.append("  costed by bytes  " + ", ".join(f"{k} x{v}" for k, v in self.schemaless_ops.items())
                         + " (no op schema, FLOPs unknown: trace with make_fx or torch.export for aten ops)")
        if self.earlier_collectives:
            n = len(self.earlier_collectives)
            lines.append(f"  earlier graphs   {n} wait{'s' if n > 1 else ''} on a collective an earlier graph launched "
                         f"({', '.join(self.earlier_collectives[:3])}{', ...' if n > 3 else ''}): taken as finished "
                         "when this graph starts, as PyTorch's overlap scheduler takes them")
        if self.collective_order:
            lines.append(f"  collective order {self.collective_order}: "
                         + {"global": "every collective launches in its original order",
                            "group": "the collectives of each process group launch in their original order",
                            "free": "collectives launch in any order"}.get(self.collective_order, ""))
        if self.inputs:
            lines.append(f"  inputs           {self.inputs}")
        lines += [f"  {name:<16} {summary}" for name, summary in self.rewrites]
        if self.costs:
            lines.append(f"  costs            {self.costs}")
        lines += [f"  note             {n}" for n in self.notes]
        if self.heuristics_cut:
            lines.append("  time cut         " + ", ".join(self.heuristics_cut)
                         + " (the heuristics' share of the time limit did not pay for them)")
        lines.append("  time             " + ", ".join(f"{k} {v:.2f} s" for k, v in self.phases.items())
                     + f" (limit {self.time_limit:g} s)")
        if self.frontier:
            lines.append(format_frontier(self.frontier, self.baseline_makespan, self.baseline_peak_memory))
        return "\n".join(lines)


def format_frontier(rows, baseline_makespan: int, baseline_peak: int) -> str:
    """The memory/time trade-off as a table: one row per budget (`Frontier.to_dict`)."""
    lines = [f"  memory/time trade-off (baseline {_us(baseline_makespan)} at {format_bytes(baseline_peak)}):",
             f"    {'budget':>10}  {'makespan':>12}  {'change':>7}  {'peak':>11}  {'gap':>6}  method (status)"]
    for row in rows:
        label = budget_label(row["budget"], row["ratio"])
        change = (row["makespan"] - baseline_makespan) / baseline_makespan if baseline_makespan else 0.0
        lines.append(f"    {label:>10}  {_us(row['makespan']):>12}  {change:>+7.1%}  "
                     f"{format_bytes(row['peak_memory']):>11}  {row['gap']:>6.2%}  {row['method']}"
                     + (f" ({row['solver_status']})" if row["solver_status"] else "")
                     + ("  [dominated]" if row["dominated"] else ""))
    return "\n".join(lines)
