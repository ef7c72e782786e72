"""How the rewrite searches (`solvercast.pipeline.buckets`, `solvercast.pipeline.decompose`) score a plan: the
plan's graph, extracted, is scheduled by the heuristics (the solver's warm starts) under the caller's budget,
and its step is the simulated makespan of that schedule. Every plan gets the same share of heuristic work, so
plans are compared by equal searches, and the work (plus each extraction, priced per task) is counted so that
a search stops at the same plan on every rank."""

from __future__ import annotations

from solvercast.errors import InfeasibleBudgetError
from solvercast.heuristics import best_heuristic
from solvercast.heuristics.work import WorkBudget, work_budget
from solvercast.ir.problem import Problem
from solvercast.pipeline.extracted import Extracted
from solvercast.ir.schedule import Schedule
from solvercast.ir.simulate import SimResult, simulate

#: a search's work is shared among about this many plans (each plan's heuristics get this share)
PLANS_PER_SHARE = 12


class PlanJudge:
    """Scores extracted plans under ``budget`` bytes (None: no budget). ``plan_work``: the heuristic work
    (`heuristics.work`, reference microseconds) each plan gets; without it, `PLANS_PER_SHARE`'th of
    ``work_limit``, the work all plans together may spend (both None: no limit). ``extract_work_per_task``:
    the work one task's extraction counts for; ``build_work_per_task``: what building one plan's problem
    counts for per task where a search builds it without writing the graph (`solvercast.rewrites.bucket_problem`;
    None: plans are written and extracted). ``spent``: the work counted so far (the searches stop on it)."""

    def __init__(self, budget: int | None, work_limit: float | None, extract_work_per_task: float,
                 plan_work: float | None = None, build_work_per_task: float | None = None):
        self.budget, self.extract_work_per_task = budget, extract_work_per_task
        self.builds = build_work_per_task is not None  # plans built, not written
        self.build_work_per_task = build_work_per_task if self.builds else extract_work_per_task
        self.plan_work = plan_work if plan_work is not None or work_limit is None else work_limit / PLANS_PER_SHARE
        self.spent = 0.0
        self.largest = 0  # the most tasks of a plan judged so far

    def share(self, limit: float | None, parts: float) -> float | None:
        """The work total at which the next of ``parts`` equal parts of what is left below ``limit`` ends (None:
        no limit): what an earlier part leaves over goes to the later ones. (A part of weight w among parts
        of total weight W left: ``parts`` = W / w.)"""
        return None if limit is None else self.spent + (limit - self.spent) / parts

    def plan_cost(self, num_tasks: int) -> float:
        """The work one plan of about ``num_tasks`` tasks counts for: building its problem and its heuristics'
        share."""
        return self.build_work_per_task * num_tasks + (self.plan_work or 0.0)

    def affords(self, limit: float | None, num_tasks: int, plans: int = 1) -> bool:
        """Whether ``plans`` more plans of about ``num_tasks`` tasks fit in ``limit`` (None: no limit): a search
        that started a plan it cannot pay for would overrun its limit by that plan, which on a large graph
        under a short limit is the whole limit again. A plan is taken to be as large as the largest judged so
        far, if that is larger."""
        return limit is None or self.spent + plans * self.plan_cost(max(num_tasks, self.largest)) <= limit

    def unaffordable(self, limit: float, num_tasks: int, work_per_second: float) -> str:
        """The report's line for a search the limit pays for no plan of."""
        return (f"not searched: the time limit's share ({limit / work_per_second:.2f} s) pays for no plan "
                f"(each costs about {self.plan_cost(num_tasks) / work_per_second:.2f} s to "
                f"{'build' if self.builds else 'write, extract'} and judge)")

    def step(self, extracted: Extracted, built: bool = False) -> int | None:
        """The heuristics' step on ``extracted`` (`Extracted`; ``built`` as `judge` takes it), or None when no
        schedule fits the budget."""
        judged = self.judge(extracted, built)
        return None if judged is None else judged[2].makespan

    def judge(self, extracted: Extracted, built: bool = False) -> tuple[Problem, Schedule, SimResult] | None:
        """The heuristics' schedule of ``extracted`` under the budget and its simulation (None when no
        schedule fits): the step, and where the step waits. ``built``: its problem was built without writing
        the graph (counted at ``build_work_per_task``, else at ``extract_work_per_task``)."""
        problem = extracted.problem.with_budget(self.budget)
        work = WorkBudget(limit=self.plan_work)
        with work_budget(work):
            try:
                schedule = best_heuristic(problem, memory_budget=self.budget,
                                          original_simulation=extracted.baseline)
            except InfeasibleBudgetError:
                schedule = None
        self.spent += work.spent + (self.build_work_per_task if built else self.extract_work_per_task) * problem.num_tasks
        self.largest = max(self.largest, problem.num_tasks)
        return None if schedule is None else (problem, schedule, simulate(problem, schedule))
