"""The memory/time trade-off: one solve per memory budget, and the frontier they trace.

`pareto(gm, [1.0, 1.02, 1.05, math.inf])` runs `optimize` once per budget (the time limit shared
equally) and returns a `Frontier`: per budget, the makespan and peak `simulate` gives the returned
schedule, its gap to the best bound and the solver's status, and which points no other point
dominates. `optimize(gm, memory_budget=[...])` does the same and returns the first budget's result with
the frontier attached (``res.frontier``; the report prints it, ``res.plot`` draws it).
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field

from solvercast.ir.budget import budget_label, resolve_budget
from solvercast.pipeline.report import format_frontier
from solvercast.pipeline.extracted import extract_for_optimize
from solvercast.pipeline.solve import optimize_extracted



@dataclass(frozen=True)
class FrontierPoint:
    asked: int | float | None  # the budget as given: bytes, a ratio of the original peak, math.inf
    budget: int | None  # bytes (None: no budget)
    makespan: int  # ns, by `simulate`
    peak_memory: int  # bytes, by `simulate`
    gap: float  # to the best bound of that solve
    method: str
    solver_status: str | None
    dominated: bool = False  # another point is no slower and no larger, and better in one
    result: object = field(default=None, repr=False, compare=False)  # its `OptimizeResult`

    @property
    def ratio(self) -> float | None:
        """The budget asked as a ratio of the original peak, if it was one."""
        return _ratio(self.asked)


def _ratio(asked) -> float | None:
    """A budget as asked, as a ratio of the original peak if it is one (a finite float)."""
    return asked if isinstance(asked, float) and math.isfinite(asked) else None


@dataclass(frozen=True)
class Frontier:
    points: tuple[FrontierPoint, ...]  # in the order the budgets were given
    baseline_makespan: int
    baseline_peak: int

    def optimal(self) -> tuple[FrontierPoint, ...]:
        """The points no other point dominates, by peak."""
        return tuple(sorted((p for p in self.points if not p.dominated), key=lambda p: p.peak_memory))

    def to_dict(self) -> list[dict]:
        """JSON-ready rows; ``ratio`` is the budget asked as a ratio of the original peak, if it was one."""
        return [{"budget": p.budget, "ratio": p.ratio, "makespan": p.makespan, "peak_memory": p.peak_memory, "gap": p.gap,
                 "method": p.method, "solver_status": p.solver_status, "dominated": p.dominated}
                for p in self.points]

    def __str__(self) -> str:
        return format_frontier(self.to_dict(), self.baseline_makespan, self.baseline_peak)


def _mark_dominated(points: list[FrontierPoint]) -> tuple[FrontierPoint, ...]:
    import dataclasses

    out = []
    for p in points:
        dominated = any((q.makespan <= p.makespan and q.peak_memory <= p.peak_memory)
                        and (q.makespan < p.makespan or q.peak_memory < p.peak_memory) for q in points)
        out.append(dataclasses.replace(p, dominated=dominated))
    return tuple(out)


def _labelled(progress, label: str):
    """``progress`` with each line saying which budget it is about (several budgets' lines follow each other)."""
    return lambda msg: progress(f"budget {label}: {msg}")


def pareto(gm, memory_budgets, time_limit: float = 10.0, **options) -> Frontier:
    """Optimize ``gm`` under each of ``memory_budgets`` (each as `optimize` reads one: bytes, a ratio of
    the original peak, ``math.inf`` or None for no budget), ``time_limit / len(memory_budgets)`` seconds
    each (the first share also pays for extracting the graph, which is done once); ``options`` are
    `optimize`'s. Returns the `Frontier`. Raises ValueError for an empty list; an infeasible budget raises
    `InfeasibleBudgetError` as `optimize` does. The budgets are solved tightest first, and each solve may start
    from the tighter ones' schedules (they hold its budget): a looser budget never gets a slower schedule."""
    budgets = list(memory_budgets)
    if not budgets:
        raise ValueError("pareto needs at least one memory budget")
    share = time_limit / len(budgets)
    solve_options = {k: options.pop(k) for k in ("method", "deterministic", "progress", "tuning") if k in options}
    started = time.perf_counter()
    extracted = extract_for_optimize(gm, **options)
    peak = extracted.baseline.peak_memory
    in_bytes = [resolve_budget(asked, lambda: peak, default=peak) for asked in budgets]  # bad input: before solving
    # tightest first, each warm-started also from the tighter ones' schedules (they hold its budget): a looser
    # budget is never slower (fsdp_layers 4 layers, 5 s each: 1.0 x found 242.6 us, 1.02 x and none kept 244.7)
    by_tightness = sorted(range(len(budgets)), key=lambda i: math.inf if in_bytes[i] is None else in_bytes[i])
    points: list[FrontierPoint | None] = [None] * len(budgets)
    progress = solve_options.pop("progress", None)
    for rank, i in enumerate(by_tightness):
        tighter = [dataclasses.replace(p.result.schedule, method=f"{p.method} at {budget_label(p.budget, p.ratio)}")
                   for p in points if p is not None]
        label = budget_label(in_bytes[i], _ratio(budgets[i]))
        res = optimize_extracted(gm, extracted, share, budgets[i], started=started if rank == 0 else None,
                                 cost_model=options.get("cost_model"), warm_starts=tighter,
                                 progress=None if progress is None else _labelled(progress, label), **solve_options)
        r = res.report
        points[i] = FrontierPoint(asked=budgets[i], budget=r.memory_budget, makespan=r.optimized_makespan,
                                  peak_memory=r.optimized_peak_memory, gap=r.gap, method=r.method,
                                  solver_status=r.solver_status, result=res)
    first = points[0].result.report
    return Frontier(_mark_dominated(points), first.baseline_makespan, first.baseline_peak_memory)
