"""Deterministic work budgets for the heuristics.

`optimize` promises two things a wall clock cannot give at once: to return within its ``time_limit``, and
to return the same schedule on every rank. Ranks run at different speeds, so a heuristic that read the
clock could stop at a different point on each and hand them different collective orders (a hang).
Heuristics count work instead: every pass over the problem charges its task count times the measured
cost per task of that kind of pass (`PASS_COST_US`, microseconds on the reference 2-core machine), and
the portfolio (`run_heuristics`) and the multi-pass heuristics skip what the budget cannot pay for. The
count depends only on the problem and the budget, so every rank stops at the same point; `optimize`
turns its time limit into a budget (`solvercast.pipeline.time_plan.plan_time`, `TimePlan.heuristic_work`), and its report lists what was cut.

Outside a `work_budget` block nothing is limited (direct calls, tests, experiments).
"""

from __future__ import annotations

import contextvars
from contextlib import contextmanager
from dataclasses import dataclass, field

from solvercast.ir.problem import Problem

#: Cost of one pass per task, in microseconds, with one compute stream, measured at 10,000 tasks (work
#: counts beside wall times: experiments/results/heuristic_portfolio.md and heuristics_speed.md, its
#: portfolio section); `simulate` covers `simulated_peak` and `validate`; the swap's is rounded up for its
#: fixed per-call setup.
PASS_COST_US = {
    "simulate": 6.0,
    "comm_pass": 10.0,
    "list_pass": 12.0,
    "nondelay_pass": 20.0,
    "swap": 5.0,
    # one trial move of `fill_idle` (a `simulate` of the order with one task moved): 0.75-0.94 us a task
    # at 573-10,000 tasks, one compute stream (results/fill_idle.md), with a margin
    "fill_move": 1.5,
}
#: With several compute streams a pass tracks occupancy and memory over time: this many times dearer
#: per extra compute stream (same measurement)
EXTRA_STREAM_FACTOR = 1.5


def pass_cost(problem: Problem, kind: str, passes: float = 1.0) -> float:
    """Reference microseconds that ``passes`` passes of ``kind`` over ``problem`` cost."""
    streams = problem.machine.compute_streams
    return passes * PASS_COST_US[kind] * problem.num_tasks * (1.0 + EXTRA_STREAM_FACTOR * (streams - 1))


@dataclass
class WorkBudget:
    """``limit`` reference microseconds of heuristic work (None: unlimited); ``spent`` so far; ``cut``: what
    was skipped for want of budget, in words, for the report."""

    limit: float | None
    spent: float = 0.0
    cut: list[str] = field(default_factory=list)

    def affords(self, problem: Problem, kind: str, passes: float = 1.0, **more: float) -> bool:
        cost = pass_cost(problem, kind, passes) + sum(pass_cost(problem, k, n) for k, n in more.items())
        return self.limit is None or self.spent + cost <= self.limit


_CURRENT: contextvars.ContextVar[WorkBudget | None] = contextvars.ContextVar("solvercast_work_budget", default=None)


@contextmanager
def work_budget(budget: WorkBudget):
    """Run the heuristics called inside the block under ``budget``."""
    token = _CURRENT.set(budget)
    try:
        yield budget
    finally:
        _CURRENT.reset(token)


def charge(problem: Problem, kind: str, passes: float = 1.0) -> None:
    """Count ``passes`` passes of ``kind`` against the current budget (if any)."""
    budget = _CURRENT.get()
    if budget is not None:
        budget.spent += pass_cost(problem, kind, passes)


def affords(problem: Problem, kind: str, passes: float = 1.0, **more: float) -> bool:
    """Whether the current budget (if any) can pay for ``passes`` more passes of ``kind`` and, together
    with them, the passes in ``more`` (kind=passes, e.g. ``simulate=2``)."""
    budget = _CURRENT.get()
    return budget is None or budget.affords(problem, kind, passes, **more)


def note_cut(what: str) -> None:
    """Record, for the report, that ``what`` was skipped for want of budget."""
    budget = _CURRENT.get()
    if budget is not None:
        budget.cut.append(what)
