"""Run every heuristic, judge each with the simulator, keep the best valid one.

Which heuristics run, and their tie-break order, is the heuristics' table's (`registry.SCHEDULERS`)."""

from __future__ import annotations

import sys

from solvercast.errors import InfeasibleBudgetError
from solvercast.gc_paused import gc_paused
from solvercast.ir.problem import Problem, format_bytes
from solvercast.ir.schedule import Schedule
from solvercast.ir.simulate import SimResult, validate

from ._common import renamed, budget_bytes
from .iterative_swap import iterative_swap
from .registry import SCHEDULERS
from .work import affords, charge, note_cut

#: Every method `run_heuristics` may report, in tie-break order (earlier wins at equal makespan and peak:
#: the simplest change first): the table's original order and heuristics (`registry.SCHEDULERS`), then
#: each of them polished by `iterative_swap`.
METHOD_ORDER = tuple(m.name for m in SCHEDULERS) + tuple(m.name + "+swap" for m in SCHEDULERS)

_ORIGINAL = tuple(m.name for m in SCHEDULERS if m.original)  # always judged, and polished by a swap
_BASES = tuple(m.name for m in SCHEDULERS if not m.original)  # the best few polished too
_SWAPPED_BASES = 2  # iterative_swap is applied to the original order and to this many best other bases

#: The order heuristics run in under a work budget (`heuristics.work`), by measured value per cost
#: (experiments/results/heuristic_portfolio.md: how often each is the best, its mean excess over the best,
#: its work): what comes last is cut first. One compute stream: comm_priority costs a seventh of nondelay
#: and is often close; with several, nondelay wins almost always and list is second.
PORTFOLIO = {
    1: ("comm_priority", "nondelay", "list", "sink_waits", "raise_comms"),
    2: ("nondelay", "list", "comm_priority", "sink_waits", "raise_comms"),
}
#: the kind of pass each heuristic starts with: it is run only when the budget pays for one, and a judging
#: simulation
_FIRST_PASS = {m.name: m.first_pass for m in SCHEDULERS if not m.original}


@gc_paused()  # the passes allocate a tuple or more per task: collections would walk the caller's heap (its FX graph)
def run_heuristics(problem: Problem, memory_budget: int | float | None = None, *,
                   original_simulation: SimResult | None = None) -> dict[str, tuple[Schedule, SimResult]]:
    """Every heuristic's schedule and its simulation, keyed by method name (in `METHOD_ORDER`).

    ``Schedule.method`` keeps what the heuristic reported (a fallback it took,
    or ``"!over-budget"``). Every schedule passes `validate` structurally; an
    invalid one would be a bug and raises `InvalidScheduleError`. The budget
    (bytes, float ratio of the original peak, or None for the machine's) is
    given to each heuristic; whether a result is within it is left to the
    caller (see `best_heuristic`).

    Under a work budget (`heuristics.work.work_budget`) the heuristics run in `PORTFOLIO` order and
    each only when the budget pays for its first pass; the original order is always judged. What is
    skipped is recorded on the budget (``cut``). ``original_simulation``: the original order's
    `simulate` when the caller has it (`optimize` simulated it for its baseline): not simulated again.
    """
    budget = budget_bytes(problem, memory_budget)
    out: dict[str, tuple[Schedule, SimResult]] = {}

    def judge(name: str, schedule: Schedule) -> None:
        # validate the structure only: the budget is judged by the caller
        charge(problem, "simulate")
        out[name] = (schedule, validate(problem, schedule, memory_budget=sys.maxsize))

    by_name = {m.name: m for m in SCHEDULERS}
    for name in _ORIGINAL:
        if original_simulation is not None:
            out[name] = (by_name[name].run(problem, memory_budget=budget), original_simulation)
        else:
            judge(name, by_name[name].run(problem, memory_budget=budget))
    portfolio = PORTFOLIO[min(problem.machine.compute_streams, 2)]
    for name in portfolio + tuple(m for m in _BASES if m not in portfolio):
        # its first pass, its own check of the result and our judging simulation, paid for together
        if not affords(problem, _FIRST_PASS[name], simulate=2):
            note_cut(name)
            continue
        judge(name, by_name[name].run(problem, memory_budget=budget))

    def fits(name: str) -> bool:
        return budget is None or out[name][1].peak_memory <= budget

    ran = [m for m in _BASES if m in out]
    ranked = sorted(ran, key=lambda m: (not fits(m), out[m][1].makespan, out[m][1].peak_memory,
                                        METHOD_ORDER.index(m)))
    # the best bases first: under a work budget they are the ones polished
    for base in sorted(ranked[:_SWAPPED_BASES], key=METHOD_ORDER.index) + list(_ORIGINAL):
        if not affords(problem, "swap", simulate=2):
            note_cut(base + "+swap")
            continue
        judge(base + "+swap", iterative_swap(problem, renamed(out[base][0], base), budget))
    return {name: out[name] for name in METHOD_ORDER if name in out}


def best_heuristic(problem: Problem, memory_budget: int | float | None = None, *,
                   original_simulation: SimResult | None = None) -> Schedule:
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
    results = run_heuristics(problem, budget, original_simulation=original_simulation)
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
