"""Brute force: every topological order and stream assignment of a tiny problem, judged by simulate."""

import itertools

from solvercast import Schedule, simulate


def topological_orders(problem):
    n = problem.num_tasks
    indeg = [len(p) for p in problem.preds]
    order = []

    def rec():
        if len(order) == n:
            yield tuple(order)
            return
        for t in range(n):
            if indeg[t] == 0 and t not in placed:
                placed.add(t)
                order.append(t)
                for s in problem.succs[t]:
                    indeg[s] -= 1
                yield from rec()
                for s in problem.succs[t]:
                    indeg[s] += 1
                order.pop()
                placed.discard(t)

    placed = set()
    yield from rec()


def collective_order_ok(problem, order):
    if not problem.preserve_collective_order:
        return True
    comms = [t for t in order if t in set(problem.comm_tasks)]
    return comms == list(problem.comm_tasks)


def brute_force(problem, budget=None):
    """(best makespan, schedule) over all valid schedules within budget, or (None, None)."""
    from solvercast.problem import Role
    budget = problem.machine.memory_budget if budget is None else budget
    choosers = [t for t in range(problem.num_tasks)
                if problem.tasks[t].role != Role.FREE and len(problem.allowed_streams(t)) > 1]
    best = (None, None)
    for order in topological_orders(problem):
        if not collective_order_ok(problem, order):
            continue
        for combo in itertools.product(*(problem.allowed_streams(t) for t in choosers)):
            sched = Schedule(order=order, streams=dict(zip(choosers, combo)))
            r = simulate(problem, sched)
            if budget is not None and r.peak_memory > budget:
                continue
            if best[0] is None or r.makespan < best[0]:
                best = (r.makespan, sched)
    return best
