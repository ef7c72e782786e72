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
    """Whether ``order`` keeps each chain of `Problem.comm_chains` in its original order."""
    pos = {t: i for i, t in enumerate(order)}
    return all(pos[a] < pos[b] for a, b in problem.comm_order_pairs)


def brute_force(problem, budget=None):
    """(best makespan, schedule) over all valid schedules within budget, or (None, None)."""
    from solvercast.ir.problem import Role
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


def reference_times(problem, schedule):
    """(start, end) of every task by DESIGN.md's timing rules, written plainly and independently of
    `solvercast.ir.engine` (no interval pruning, no sorted sweep; quadratic): the engine's check.

    Each stream runs its tasks in program order; an input from another stream is ready
    ``sync_overhead`` after its producer ends; a view passes readiness on; an asynchronous
    collective is a point on the default stream (after its inputs reach that stream) and starts
    ``sync_overhead`` later on its comm stream; with several compute streams a compute task starts at
    the first of (its earliest start, the end of any placed compute task after it) at which the total
    occupancy stays <= 1 over its whole run."""
    from solvercast.ir.problem import Role

    machine = problem.machine
    sync = machine.sync_overhead
    streams = schedule.stream_list(problem)
    start, end = [0] * problem.num_tasks, [0] * problem.num_tasks
    stream_free = [0] * machine.num_streams
    placed = []  # (start, end, occupancy) of every compute task with a duration

    def load(at):
        return sum(o for a, e, o in placed if a <= at < e)

    for t in schedule.order:
        task = problem.tasks[t]
        deps = problem.sync_preds[t]
        if task.role == Role.FREE:
            start[t] = end[t] = max((end[p] for p in deps), default=0)
            continue
        s = streams[t]
        ready = max((end[p] + (sync if streams[p] != s else 0) for p in deps), default=0)
        if t in problem.wait_of:
            launch = max([stream_free[0]] + [end[p] + (sync if streams[p] != 0 else 0) for p in deps])
            stream_free[0] = launch
            ready = launch + sync
        at = max(ready, stream_free[s])
        if machine.compute_streams > 1 and machine.is_compute_stream(s) and task.duration:
            for c in sorted({at} | {e for _, e, _ in placed if e > at}):
                points = [c] + [a for a, _, _ in placed if c < a < c + task.duration]
                if all(load(x) + task.occupancy <= 1 + 1e-9 for x in points):
                    at = c
                    break
            placed.append((at, at + task.duration, task.occupancy))
        start[t], end[t] = at, at + task.duration
        stream_free[s] = end[t]
    return tuple(start), tuple(end)
