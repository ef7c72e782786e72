"""Run every heuristic, judge each with the simulator, keep the best valid one.

Which heuristics run, and their tie-break order, is the method registry's (`solvercast.methods`)."""

from __future__ import annotations

import sys

from solvercast.errors import InfeasibleBudgetError
from solvercast.methods import Kind, schedule_methods
from solvercast.problem import Problem, format_bytes
from solvercast.schedule import Schedule
from solvercast.simulate import SimResult, validate

from ._common import renamed, budget_bytes
from .iterative_swap import iterative_swap

_SCHEDULERS = schedule_methods()
#: Every method `run_heuristics` may report, in tie-break order (earlier wins at equal makespan and peak:
#: the simplest change first): the registry's original order and heuristics (`solvercast.methods`), then
#: each of them polished by `iterative_swap`.
METHOD_ORDER = tuple(m.name for m in _SCHEDULERS) + tuple(m.name + "+swap" for m in _SCHEDULERS)

_ORIGINAL = tuple(m.name for m in _SCHEDULERS if m.kind == Kind.ORIGINAL)  # always polished by a swap
_BASES = tuple(m.name for m in _SCHEDULERS if m.kind == Kind.HEURISTIC)  # the best few polished too
_SWAPPED_BASES = 2  # iterative_swap is applied to the original order and to this many best other bases


def run_heuristics(problem: Problem, memory_budget: int | float | None = None) -> dict[str, tuple[Schedule, SimResult]]:
    """Every heuristic's schedule and its simulation, keyed by method name (in `METHOD_ORDER`).

    ``Schedule.method`` keeps what the heuristic reported (a fallback it took,
    or ``"!over-budget"``). Every schedule passes `validate` structurally; an
    invalid one would be a bug and raises `InvalidScheduleError`. The budget
    (bytes, float ratio of the original peak, or None for the machine's) is
    given to each heuristic; whether a result is within it is left to the
    caller (see `best_heuristic`).
    """
    budget = budget_bytes(problem, memory_budget)
    out: dict[str, tuple[Schedule, SimResult]] = {}

    def judge(name: str, schedule: Schedule) -> None:
        # validate the structure only: the budget is judged by the caller
        out[name] = (schedule, validate(problem, schedule, memory_budget=sys.maxsize))

    for method in _SCHEDULERS:
        judge(method.name, method.run(problem, memory_budget=budget))

    def fits(name: str) -> bool:
        return budget is None or out[name][1].peak_memory <= budget

    ranked = sorted(_BASES, key=lambda m: (not fits(m), out[m][1].makespan, out[m][1].peak_memory,
                                           METHOD_ORDER.index(m)))
    for base in list(_ORIGINAL) + sorted(ranked[:_SWAPPED_BASES], key=METHOD_ORDER.index):
        judge(base + "+swap", iterative_swap(problem, renamed(out[base][0], base), budget))
    return {name: out[name] for name in METHOD_ORDER if name in out}


def best_heuristic(problem: Problem, memory_budget: int | float | None = None) -> Schedule:
    """The best schedule any heuristic finds: lowest simulated makespan among
    those whose peak is within the budget, ties by lower peak, then by
    `METHOD_ORDER`. ``Schedule.method`` names the method ("original", "list",
    "comm_priority", "comm_priority+swap", ...).

    Raises `InfeasibleBudgetError` when no schedule fits the budget; its
    ``best_peak`` is the smallest peak seen and its ``schedule`` attribute the
    schedule with that peak (ties by makespan, then method order), which a
    caller may still hand to a solver.
    """
    budget = budget_bytes(problem, memory_budget)
    results = run_heuristics(problem, budget)
    order = {name: i for i, name in enumerate(METHOD_ORDER)}
    valid = [(r.makespan, r.peak_memory, order[name], name) for name, (_, r) in results.items()
             if budget is None or r.peak_memory <= budget]
    if valid:
        name = min(valid)[3]
        return renamed(results[name][0], name)
    peak, _, _, name = min((r.peak_memory, r.makespan, order[name], name) for name, (_, r) in results.items())
    error = InfeasibleBudgetError(
        f"no heuristic schedule fits the memory budget {format_bytes(budget)} ({budget} B); the smallest peak "
        f"found is {format_bytes(peak)} ({peak} B), by {name!r}", best_peak=peak)
    error.schedule = renamed(results[name][0], name)
    raise error
