"""Greedy list scheduling by upward rank with earliest-finish stream choice (HEFT family).

The ready task (all predecessors issued; with ``preserve_collective_order``
also the previous collective) with the highest upward rank is issued next
(ties: lower task id); it goes to the allowed stream on which it would finish
first (ties: the stream left idle for the shortest gap before it, then the
default stream, then the lower stream id), with the simulator's rules for
readiness across streams, the launch rule of asynchronous collectives and the
occupancy rule (`solvercast.ir.engine.Timeline`), so the times it predicts are the times
`simulate` reports. Views take no stream.

Memory: with a budget, a ready task whose allocation would push resident
memory (program order, as `memory_profile` counts it) over the budget is
passed over while another ready task fits; when none fits, the one that frees
the most bytes is issued and the pass is marked as having failed the budget.
"""

from __future__ import annotations

import bisect

from collections.abc import Sequence

from solvercast.ir.problem import Problem, Role
from solvercast.ir.schedule import Schedule
from solvercast.ir.simulate import simulate

from solvercast.ir.engine import Timeline, TimeMemory

from ._common import (ReadySet, best_by_peak, budget_bytes, comm_chain, held_budget, mark_over_budget, peak_of,
                      renamed)
from .work import affords, charge, note_cut


def upward_ranks(problem: Problem) -> list[int]:
    """rank(t) = duration(t) + max over successors s of (rank(s) + sync), where
    the sync is counted only on edges whose two ends may run on different
    streams and that do not end in a view (views pass the sync on to their
    consumers). Successors include the next collective when the collective
    order is preserved."""
    n = problem.num_tasks
    sync = problem.machine.sync_overhead
    tasks = problem.tasks
    allowed = problem.stream_choices
    chain = comm_chain(problem)
    rank = [0] * n
    for t in range(n - 1, -1, -1):
        best = 0
        succ = problem.succs[t]
        if t in chain:
            succ = succ + (chain[t],)
        for s in succ:
            r = rank[s]
            if sync and tasks[s].role != Role.FREE and not (len(allowed[t]) == 1 and allowed[t] == allowed[s]):
                r += sync
            if r > best:
                best = r
        rank[t] = tasks[t].duration + best
    return rank


def _list_pass(problem: Problem, priority, budget: int | None, method: str) -> tuple[Schedule, bool]:
    """One greedy pass with a fixed priority; returns the schedule and whether
    the greedy had to break the budget."""
    charge(problem, "list_pass")
    ready = ReadySet(problem, priority, budget)
    timeline = Timeline(problem)
    streams: dict[int, int] = {}
    tasks = problem.tasks
    defaults, choices = problem.default_streams, problem.stream_choices
    while ready:
        t = ready.pick()
        ready.issue(t)
        if tasks[t].role == Role.FREE:
            timeline.place(t, defaults[t])
            continue
        default = defaults[t]
        best_s, best_key = default, None
        for s in choices[t]:
            # earliest finish; ties: the stream left idle for the shortest gap (a wait blocks its
            # stream until the collective ends), then the default stream, then the lower id
            start = timeline.start_on(t, s)
            key = (start + tasks[t].duration, start - timeline.stream_free[s], s != default, s)
            if best_key is None or key < best_key:
                best_s, best_key = s, key
        timeline.place(t, best_s)
        streams[t] = best_s
    over = ready.over_budget or (ready.memory is not None and ready.memory.peak > budget)
    return Schedule(order=tuple(ready.order), streams=streams, method=method), over


def list_schedule(problem: Problem, memory_budget: int | float | None = None) -> Schedule:
    """Upward-rank list schedule with a stream per task (every non-view task
    gets an explicit stream in ``Schedule.streams``); ``method`` is "list".

    ``memory_budget``: bytes, a float ratio of the original order's peak, or
    None for the machine's budget (None there too: unconstrained).

    On failure to hold the budget the greedy falls back, in turn, to the same
    pass with original-order priority ("list[original-priority]": the original
    order, streams still chosen by earliest finish) and to the original order
    on default streams ("list[original]"); the first within budget is
    returned, so the budget holds whenever the original order holds it. If
    none does, the lowest-peak one is returned with ``method`` ending in
    ``"!over-budget"`` (see `held_budget`).
    """
    budget = budget_bytes(problem, memory_budget)
    ranks = upward_ranks(problem)
    priority = sorted(range(problem.num_tasks), key=lambda t: (-ranks[t], t))
    schedule, over = _list_pass(problem, priority, budget, "list")
    if budget is None:
        return schedule
    if not over and problem.machine.compute_streams == 1:
        return schedule  # one compute stream: the program-order peak the greedy held is the simulated peak
    tried = []
    peak = peak_of(problem, schedule)
    if peak <= budget:
        return schedule
    tried.append((peak, 0, schedule))
    fallback, _ = _list_pass(problem, range(problem.num_tasks), budget, "list[original-priority]")
    peak = peak_of(problem, fallback)
    if peak <= budget:
        return fallback
    tried.append((peak, 1, fallback))
    original = renamed(Schedule.original(problem), "list[original]")
    peak = peak_of(problem, original)
    if peak <= budget:
        return original
    tried.append((peak, 2, original))
    return best_by_peak(tried)


def _blame_tables(problem: Problem) -> tuple[list[list[int]], list[list[int]]]:
    """(buffers each task produces, buffers each task reads), of the buffers that are allocated and read
    (or outputs): while one is allocated and not yet read, a dead end blames its producer."""
    n = problem.num_tasks
    produced: list[list[int]] = [[] for _ in range(n)]
    reads: list[list[int]] = [[] for _ in range(n)]
    for k, buf in enumerate(problem.buffers):
        if buf.producer is not None and buf.size and (buf.users or buf.is_output):
            produced[buf.producer].append(k)
            for u in buf.users:
                reads[u].append(k)
    return produced, reads


def _nondelay_pass(problem: Problem, ranks: list[int], budget: int | None, soft: int | None,
                   base: Sequence[int] | None = None, window: int | None = None,
                   deferred: frozenset[int] = frozenset(), blame: tuple | None = None
                   ) -> tuple[Schedule | None, bool, set[int]]:
    """One earliest-start pass (see `nondelay_schedule`); returns the schedule, whether it broke the
    budget, and the tasks to defer next time. With several compute streams a pass that runs out of
    memory stops there and returns no schedule; with one it goes on, forcing the task that frees the
    most, so that its later dead ends are blamed too (on FSDP each layer has one).

    Below ``soft`` bytes it goes by start time; above it, by the bytes a task adds (net of what it
    frees), so that memory drains before it runs out. Ties
    go by upward rank, or with a ``base`` order by position in it, and then only tasks at most
    ``window`` positions past the first unissued one are eligible (the base order's memory
    behaviour, with idle time filled).

    A ``deferred`` task is held back while it is more than `NONDELAY_DEFER_WINDOW` positions (in the
    base order, else the original) past the first unissued task, unless nothing else fits. When
    nothing fits, the producers of the buffers allocated but not yet read are the tasks to defer:
    they were issued early to fill idle time, and their memory is what ran out.

    The scan over ready tasks goes in tie order and, while no task can cross the soft limit, stops at
    the first that starts when the earliest stream is free: no later one can beat it. It compares at
    most `NONDELAY_SCAN` tasks (that fit the budget, with one compute stream; with several, whether a
    task fits depends on its stream, so the streams are checked one by one).

    ``blame``: `_blame_tables(problem)`, when the caller runs several passes."""
    charge(problem, "nondelay_pass")
    n = problem.num_tasks
    ready = ReadySet(problem, range(n), budget, picks=False)
    timeline = Timeline(problem)
    tasks = problem.tasks
    wait_of = problem.wait_of
    mem = ready.memory
    allowed = problem.stream_choices
    default = problem.default_streams
    streams: dict[int, int] = {}
    over = False
    # position of every task in the base order (else the original one) and the first unissued position
    pos = list(range(n))
    if base is not None:
        for i, t in enumerate(base):
            pos[t] = i
    done = [False] * n
    frontier = 0
    tie = pos if base is not None else [-r for r in ranks]
    produced, reads = blame if blame is not None else _blame_tables(problem)
    unread: dict[int, int] = {}
    culprits: set[int] = set()
    # Ready tasks: views apart (issued at once), the others in tie order, so that the scan can stop at
    # the first that starts as early as anything can (random DAGs keep thousands of tasks ready).
    views: set[int] = set()
    queue: list[tuple[int, int]] = []
    anywhere = 0  # ready tasks that may start before the default stream is free (another stream)
    single = problem.machine.compute_streams == 1

    # several compute streams: memory is judged over time (simulate's rule), program order only guides
    over_time = TimeMemory(problem, timeline) if mem is not None and not single else None
    queued = [False] * n
    largest = max(mem.alloc, default=0) if mem is not None else 0

    def add(t: int) -> None:
        nonlocal anywhere
        if queued[t]:  # a task can become ready through a successor edge and the collective chain
            return
        queued[t] = True
        if tasks[t].role == Role.FREE:
            views.add(t)
            return
        bisect.insort(queue, (tie[t], t))
        if not (single and (t in wait_of or allowed[t] == (0,))):
            anywhere += 1

    def remove(t: int) -> None:
        nonlocal anywhere
        if t in views:
            views.discard(t)
            return
        del queue[bisect.bisect_left(queue, (tie[t], t))]
        if not (single and (t in wait_of or allowed[t] == (0,))):
            anywhere -= 1

    start_on, launch_time = timeline.start_on, timeline.launch_time
    alloc = mem.alloc if mem is not None else None
    pot_free = mem.pot_free if mem is not None else None

    def scan(hold_back: bool):
        """The best ready task that fits the budget, as (key, task, stream), or None."""
        best = None
        floor = timeline.stream_free[0] if anywhere == 0 else min(timeline.stream_free)
        cur = mem.cur if mem is not None else 0
        # the scan may stop early only while no task can cross the soft limit (all "grows" are 0)
        can_stop = mem is None or (cur if over_time is None else over_time.peak_from(floor)) + largest <= soft
        step_fits = over_time is None and mem is not None  # whether a task fits is known before its streams
        timed = examined = 0
        stop_after = None
        levels: dict[int, int] = {}
        for tie_t, t in queue:
            if stop_after is not None and tie_t > stop_after:
                break  # everything from here on ties worse and can start no sooner
            if window is not None and pos[t] > frontier + window:
                continue
            if hold_back and t in deferred and pos[t] > frontier + NONDELAY_DEFER_WINDOW:
                continue
            if step_fits and cur + alloc[t] > budget:
                continue
            if timed == NONDELAY_SCAN or examined == NONDELAY_EXAMINE:
                break
            examined += 1
            fitted = False
            launched = t in wait_of
            for s in allowed[t]:
                # a collective competes for the default stream with its launch point
                start = launch_time(t) if launched else start_on(t, s)
                grows = 0
                if mem is not None:
                    if over_time is None:
                        resident = cur + alloc[t]
                    else:  # what is resident from when its buffers are born (a collective's: its start)
                        born = start_on(t, s) if launched else start
                        if born not in levels:  # many candidates start when a stream is free
                            levels[born] = over_time.peak_from(born)
                        resident = levels[born] + alloc[t]
                        if resident > budget:
                            continue
                    if resident > soft:
                        grows = 1 + alloc[t] - pot_free[t]  # over the soft limit: drain first
                fitted = True
                key = (grows, start, tie[t], s != default[t], s, t)
                if best is None or key < best[0]:
                    best = (key, t, s)
            timed += fitted
            if can_stop and stop_after is None and best is not None and best[0][1] <= floor:
                stop_after = best[0][2]  # only tasks with the same tie can still win (stream, id)
        return best

    is_ready, succs, chain = ready.is_ready, problem.succs, ready.chain
    for t in range(n):
        if is_ready[t]:
            add(t)
    for _ in range(n):  # one task issued per step
        if views:
            t, s = min(views), None
        else:
            best = scan(True)
            if best is None and deferred:
                best = scan(False)
            if best is None:  # nothing fits: free the most; the caller retries or falls back
                over = True
                culprits.update(unread.values())
                if over_time is not None:
                    # the pass is lost; over time the forced task's buffers stay open to the end, so
                    # every later step would be a dead end too, each slower than the last
                    return None, True, culprits
                t = min((u for _, u in queue), key=lambda u: (mem.alloc[u] - mem.pot_free[u], -ranks[u], u))
                s = default[t]
            else:
                _, t, s = best
        remove(t)
        done[pos[t]] = True
        while frontier < n and done[frontier]:
            frontier += 1
        for k in reads[t]:
            unread.pop(k, None)
        for k in produced[t]:
            unread[k] = t
        ready.issue(t)
        for u in succs[t]:
            if is_ready[u]:
                add(u)
        u = chain.get(t)
        if u is not None and is_ready[u]:
            add(u)
        if s is None:
            timeline.place(t, default[t])
        else:
            timeline.place(t, s)
            streams[t] = s
        if over_time is not None:
            over_time.place(t)
    return Schedule(order=tuple(ready.order), streams=streams, method="nondelay"), over, culprits


#: ready tasks (that fit the budget) whose start times one step of `_nondelay_pass` compares, best tie first:
#: a wide DAG keeps thousands ready (random 10,000-task graphs: minutes per pass without the cap)
NONDELAY_SCAN = 16
#: with several compute streams, whether a task fits is found per stream, after its start times are computed:
#: at most this many ready tasks are examined per step, fitting or not (bounds the cost when few fit)
NONDELAY_EXAMINE = 64
#: a deferred task (one that held memory at a dead end of an earlier pass) waits until it is this close to
#: the first unissued task in the original order
NONDELAY_DEFER_WINDOW = 20
#: passes after the first that defer the tasks a dead end blamed (cumulative), before a soft limit is given up
NONDELAY_RETRIES = 2
#: fractions of the budget below which `nondelay_schedule` orders by start time alone (one pass each)
NONDELAY_SOFT_LIMITS = (1.0, 0.95, 0.9, 0.8, 0.7, 0.6)
#: the pass that keeps close to the original order: ties by original position, this far ahead at most
NONDELAY_ORIGINAL_WINDOW = 20


def nondelay_schedule(problem: Problem, memory_budget: int | float | None = None) -> Schedule:
    """Earliest-start list schedule ("nondelay"): issue next the ready task that can start soonest on
    its best stream, ties by upward rank. Unlike `list_schedule`, whose static rank order makes a
    stream sit idle at a wait while independent work is ready, a wait (or a task behind one) is
    issued only when nothing can start sooner, so ready compute fills the time collectives take;
    collectives are launched as soon as their inputs are ready (their launch point competes for
    the default stream like any task). Views are issued as soon as they are ready.

    Memory: a task whose allocation would exceed the budget is passed over (with several compute
    streams, the budget over time from when its buffers are born, as `simulate` counts memory
    there: `TimeMemory`; a stream on which it would not fit is passed over). Issuing by start time
    alone fills memory with half-finished branches until nothing fits, so above a soft limit the pass
    prefers the tasks that add the fewest bytes net of what they free; one pass per soft limit in
    `NONDELAY_SOFT_LIMITS` (fractions of the budget; with several compute streams the first two),
    plus one that keeps close to the original order (ties by original position, at most
    `NONDELAY_ORIGINAL_WINDOW` tasks ahead: the original order's memory behaviour with its idle time
    filled), and the fastest one within the budget wins. A pass that runs out of memory is retried
    (up to `NONDELAY_RETRIES` times) with the tasks its dead ends blame held back to near their
    original place: those that filled idle time with buffers nothing had read yet (on FSDP,
    parameter casts for all-gathers the collective order keeps back). If no pass holds the budget,
    `list_schedule` (whose fallbacks hold it whenever the original order does) is returned as
    "nondelay[list]". ``method`` is "nondelay".
    """
    budget = budget_bytes(problem, memory_budget)
    ranks = upward_ranks(problem)
    if budget is None:
        return _nondelay_pass(problem, ranks, None, None)[0]
    best = None
    # with several compute streams a pass costs several times more (occupancy fitting, memory over
    # time), and soft limits below 0.95 gained at most 0.6% where measured (random and zoo graphs, 2 streams)
    limits = NONDELAY_SOFT_LIMITS if problem.machine.compute_streams == 1 else NONDELAY_SOFT_LIMITS[:2]
    passes = [(fraction, None, None) for fraction in limits]
    passes.append((1.0, range(problem.num_tasks), NONDELAY_ORIGINAL_WINDOW))
    blame = _blame_tables(problem)
    ran, stopped = 0, False
    for fraction, base, window in passes:
        deferred: frozenset[int] = frozenset()
        over = True
        for _ in range(1 + NONDELAY_RETRIES):
            # a work budget (`heuristics.work`) may stop the passes early; the first one always runs
            if ran and not affords(problem, "nondelay_pass", simulate=1):  # the pass and its simulation
                stopped = True
                break
            ran += 1
            schedule, over, culprits = _nondelay_pass(problem, ranks, budget, int(budget * fraction), base, window,
                                                      deferred, blame)
            if not over or culprits <= deferred:
                break
            deferred |= culprits
        if stopped:
            break
        if over:
            continue
        charge(problem, "simulate")
        sim = simulate(problem, schedule)
        if sim.peak_memory <= budget and (best is None or sim.makespan < best[0]):
            best = (sim.makespan, schedule)
    if stopped:
        note_cut(f"nondelay: the work budget stopped it after {ran} passes")
    if best is not None:
        return best[1]
    fallback = list_schedule(problem, budget)
    out = renamed(fallback, "nondelay[list]")
    return out if held_budget(fallback) else mark_over_budget(out)
