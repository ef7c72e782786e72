"""The method registry: every way solvercast can schedule a problem, in one table.

`optimize` (its ``method`` check and its dispatch), the CLI (``--method`` help) and
`experiments/benchmarks/sweep.py` (its methods) all read `REGISTRY`: adding a solver is one entry here.
The heuristics' entries come from their own table (`solvercast.heuristics.registry`, which `best_heuristic`
runs in its tie-break order): adding a heuristic is one entry there.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from solvercast.heuristics import best_heuristic
from solvercast.heuristics.registry import SCHEDULERS
from solvercast.pipeline.portfolio import solve_cpsat
from solvercast.pipeline.tuning import DEFAULT_TUNING, Tuning
from solvercast.solvers.large import solve_placement, solve_placement_then_windows
from solvercast.solvers.milp import solve_milp
from solvercast.solvers.prefixes import solve_prefixes


class Kind(str, Enum):
    ORIGINAL = "original"  # the graph's own order: the baseline every report compares against
    HEURISTIC = "heuristic"  # one heuristic: run(problem, memory_budget=...) -> Schedule
    BEST = "best"  # every ORIGINAL and HEURISTIC entry (and iterative swap), the best kept (`best_heuristic`)
    # run(problem, hint, time_limit, deterministic, say, deadline=None, tuning=DEFAULT_TUNING) -> SolveResult,
    # from the best heuristic; ``deadline`` (a `time.perf_counter` reading) caps the call by the wall clock;
    # ``tuning``: `solvercast.pipeline.tuning.Tuning`
    SOLVER = "solver"


@dataclass(frozen=True)
class Method:
    name: str
    kind: Kind
    description: str  # one line, for the CLI's help
    run: Callable | None  # None only for "auto", which `optimize` resolves to another solver by graph size
    selectable: bool = True  # offered on its own by `optimize(method=...)` and the CLI
    swept: bool = True  # in `experiments/benchmarks/sweep.py`'s methods (auto and the reduced models are not compared there)
    needs_hint: bool = False  # a solver that keeps parts of a heuristic schedule: no hint, no answer


def _best(problem, memory_budget=None):
    return best_heuristic(problem, memory_budget=memory_budget)


def _cpsat(problem, hint, time_limit, deterministic, say, deadline=None, tuning: Tuning = DEFAULT_TUNING):
    say(f"solving with CP-SAT ({time_limit:.1f} s{', deterministic' if deterministic else ''})")
    return solve_cpsat(problem, time_limit=time_limit, memory_budget=problem.machine.memory_budget, hint=hint,
                       deterministic=deterministic, progress=say, deadline=deadline, tuning=tuning)


def _cpsat_placement(problem, hint, time_limit, deterministic, say, deadline=None, tuning: Tuning = DEFAULT_TUNING):
    say(f"solving with CP-SAT, compute order fixed ({time_limit:.1f} s)")
    return solve_placement(problem, hint, time_limit, problem.machine.memory_budget, deterministic=deterministic,
                           progress=say, deadline=deadline, tuning=tuning.cpsat)


def _cpsat_windows(problem, hint, time_limit, deterministic, say, deadline=None, tuning: Tuning = DEFAULT_TUNING):
    return solve_placement_then_windows(problem, hint, time_limit, problem.machine.memory_budget,
                                        deterministic=deterministic, progress=say, deadline=deadline,
                                        tuning=tuning.windows, cpsat_tuning=tuning.cpsat)


def _prefixes(problem, hint, time_limit, deterministic, say, deadline=None, tuning: Tuning = DEFAULT_TUNING):
    say(f"searching program prefixes exactly ({time_limit:.1f} s{', counted' if deterministic else ''})")
    return solve_prefixes(problem, time_limit, problem.machine.memory_budget, hint, deterministic=deterministic,
                          deadline=deadline, progress=say, tuning=tuning.prefixes)


def _milp(problem, hint, time_limit, deterministic, say, deadline=None, tuning: Tuning = DEFAULT_TUNING):
    # HiGHS and CBC have only a wall-clock limit (and no tuning record)
    limit = time_limit if deadline is None else max(0.01, min(time_limit, deadline - time.perf_counter()))
    say(f"solving with MILP ({limit:.1f} s)")
    return solve_milp(problem, time_limit=limit, memory_budget=problem.machine.memory_budget, hint=hint)


#: In tie-break order within a kind: of two heuristic schedules with equal makespan and peak, the earlier
#: entry's wins (the simplest change first).
REGISTRY: tuple[Method, ...] = tuple(
    Method(h.name, Kind.ORIGINAL if h.original else Kind.HEURISTIC, h.description, h.run, h.selectable, h.swept)
    for h in SCHEDULERS) + (
    Method("heuristic", Kind.BEST, "the best of every heuristic (with iterative swap), judged by simulate", _best),
    Method("auto", Kind.SOLVER, "cpsat up to solve.AUTO_CPSAT_MAX_TASKS tasks, cpsat-windows beyond", None,
           swept=False),
    Method("cpsat", Kind.SOLVER, "one CP-SAT model of the whole graph, warm-started by the best heuristic", _cpsat),
    Method("cpsat-placement", Kind.SOLVER, "CP-SAT with the heuristic's compute order fixed (large graphs)",
           _cpsat_placement, swept=False, needs_hint=True),
    Method("cpsat-windows", Kind.SOLVER, "placement, then CP-SAT over windows of the program (large graphs)",
           _cpsat_windows, swept=False, needs_hint=True),
    Method("prefixes", Kind.SOLVER, "exact search over program prefixes, one compute stream (up to ~100 tasks)",
           _prefixes),
    Method("milp", Kind.SOLVER, "a MILP through PuLP (HiGHS or CBC), for small graphs", _milp),
)

BY_NAME: dict[str, Method] = {m.name: m for m in REGISTRY}


def names(*kinds: Kind, selectable: bool | None = None, swept: bool | None = None) -> tuple[str, ...]:
    """Names of the entries of these kinds, in the order of ``kinds``, then `REGISTRY`'s; optionally only
    those (not) selectable or (not) swept."""
    return tuple(m.name for k in kinds for m in REGISTRY
                 if m.kind == k and selectable in (None, m.selectable) and swept in (None, m.swept))


def schedule_methods() -> tuple[Method, ...]:
    """What `run_heuristics` runs, in tie-break order: the original order, then every heuristic."""
    return tuple(m for m in REGISTRY if m.kind in (Kind.ORIGINAL, Kind.HEURISTIC))


def help_text() -> str:
    """One line per selectable method, for the CLI."""
    return "; ".join(f"{name}: {BY_NAME[name].description}"
                     for name in names(Kind.SOLVER, Kind.BEST, Kind.HEURISTIC, Kind.ORIGINAL, selectable=True))
