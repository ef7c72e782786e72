"""Exact search over program prefixes: the optimum with one compute stream, by dynamic programming.

With one compute stream a schedule is a program order (and a stream for each synchronous collective that
may take its comm stream), and the engine (`engine.replay`, `engine.StepMemory`) places the tasks in that
order. What the rest of an order can still do depends on its prefix only through

* the set of tasks issued (a down-set of the dependency graph): it fixes the bytes resident (memory is
  counted over program steps) and, with the collective order kept, which collective comes next;
* when each stream is free, and when the issued tasks end whose results a later task may get after its
  stream is free: a collective's end (its wait reads it), a task on a comm stream. A stream-0 task whose
  every later reader runs on stream 0 (or launches from it) never decides a start again: its end is at
  most stream 0's free time.

The placement is monotone (an input ready earlier never starts a task later), so of two prefixes with
the same set, one whose times are all no later *dominates*: every completion of the other is at least as
good after it. A breadth-first search by prefix length that keeps, per set, only undominated times, and
drops a prefix whose makespan bound reaches ``upper`` (the best schedule known), therefore ends with an
optimal order, or proves that none beats ``upper``. Views are issued as soon as they are ready: they take
no time and no stream and allocate nothing, so an earlier issue only frees memory sooner.

Most orders differ only in which of two stream-0 tasks goes first while both have their inputs; when no
later task needs either's end and memory allows both orders, the two reach the same prefix. Sleep sets
(Godefroid's partial-order reduction) expand one of the two orders only: fsdp_tp with 1 layer needs
1.09 million expansions instead of 1.38 million. A task asleep in a prefix is one whose other order an
earlier sibling path explored; a prefix another one dominates is covered by that one's continuations, so
the dominator wakes what the dominated one had awake.

The number of sets grows with the graph's width: one FSDP layer (80-95 tasks that take time) is searched
in 20-25 s, two layers (160, 10 independent parameter chains) are not in minutes. The search stops at
``max_expansions`` (counted, so every run gives the same answer) and then proves nothing."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from solvercast.errors import InfeasibleBudgetError, UnsupportedProblemError
from solvercast.ir.problem import Problem, Role
from solvercast.ir.schedule import Schedule
from solvercast.ir.simulate import SimResult, validate
from solvercast.solvers.result import Outcome, SolveResult

_RUNS, _VIEW, _LAUNCHED = 0, 1, 2


@dataclass(frozen=True)
class PrefixTuning:
    """How the prefix search counts its time and when it gives up; vary with `dataclasses.replace`."""

    #: expansions (a prefix extended by one task) per second on the 2-core machines: the conversion of seconds
    #: to the counted limit (`experiments/tuning/exact.py prefixes`, results/prefix_search.md)
    expansions_per_second: int = 30_000
    #: a progress line this often at most
    progress_seconds: float = 1.0
    #: a search that has spent more than 1/this of its expansions on the first tenth of its prefix lengths stops
    #: there: whole searches spent 28-64 x what their first tenth took (results/tuning_notes.md#prefix-growth)
    growth_after_a_tenth: int = 20


#: the shipped values
PREFIX_TUNING = PrefixTuning()


def not_applicable(problem: Problem) -> str | None:
    """Why the search does not apply to ``problem`` (None: it does)."""
    if problem.machine.compute_streams != 1:
        return "several compute streams (the GPU is shared over time, not by program order)"
    return None


@dataclass
class PrefixSearch:
    """What `search_prefixes` found. ``complete``: every prefix was searched, so ``order`` is optimal, or,
    when it is None, no schedule within the budget ends before ``upper``."""

    order: tuple[int, ...] | None
    streams: dict[int, int]
    makespan: int | None
    complete: bool
    expansions: int
    most_prefixes: int  # the most prefixes (sets x undominated times) kept at one length
    seconds: float
    stats: dict = field(default_factory=dict)


class _Tables:
    """What the search reads per task, built once per call."""

    def __init__(self, problem: Problem):
        n = problem.num_tasks
        tasks = problem.tasks
        self.n = n
        self.sync = problem.machine.sync_overhead
        self.num_streams = problem.machine.num_streams
        self.duration = [task.duration for task in tasks]
        self.kind = [_VIEW if task.role == Role.FREE else _LAUNCHED if problem.is_async_comm(t) else _RUNS
                     for t, task in enumerate(tasks)]
        self.streams = problem.stream_choices
        self.preds_mask = [sum(1 << q for q in problem.preds[t]) for t in range(n)]
        self.succs = problem.succs
        self.sync_preds = problem.sync_preds
        readers: list[list[int]] = [[] for _ in range(n)]
        for t in range(n):
            for q in self.sync_preds[t]:
                readers[q].append(t)
        # the task's readers never need its end beyond stream 0's free time (when it ran on stream 0)
        self.stream0_reader = [all(self.kind[u] == _LAUNCHED or self.streams[u] == (0,) for u in readers[t])
                               for t in range(n)]
        self.readers_mask = [sum(1 << u for u in readers[t]) for t in range(n)]
        # tasks that run on stream 0 only and whose end no later task needs: issued one after the other
        # with their inputs ready, two of them end with the same times in either order
        self.quiet_mask = sum(1 << t for t in range(n) if self.kind[t] == _RUNS and self.streams[t] == (0,)
                              and self.stream0_reader[t])
        # comm task -> the one before it in its chain of `comm_chains` (issued first); a chain's first: -1
        self.order_pred = {b: a for chain in problem.comm_chains for a, b in zip((-1,) + chain, chain)}
        self.alloc = problem.allocated_bytes
        self.touches = problem.release_counts[0]
        self.release_size = [size for size, _ in problem.releasable]
        self.release_mask = [sum(1 << h for h in holders) for _, holders in problem.releasable]
        # work each stream must still run: tasks that can run on one stream only
        self.work_stream = [s[0] if len(s) == 1 and self.kind[t] != _VIEW else -1
                            for t, s in enumerate(self.streams)]


def search_prefixes(problem: Problem, upper: int | None = None, *, max_expansions: int | None = None,
                    deadline: float | None = None, progress: Callable[[str], None] | None = None,
                    window: tuple[tuple[int, ...], int, int] | None = None,
                    memory_from: int | None = None, tuning: PrefixTuning = PREFIX_TUNING) -> PrefixSearch:
    """The exact search (module docstring) for a problem with one compute stream, within
    ``problem.machine.memory_budget`` (from task ``memory_from``'s step on, when given: the relaxations of
    solvers/cuts.py), for a makespan below ``upper``. Stops without a proof after
    ``max_expansions`` expansions (or at a tenth of its lengths, when the expansions so far predict more:
    `PrefixTuning.growth_after_a_tenth`), or when the wall clock passes ``deadline`` (a `time.perf_counter` reading;
    ``stats["stopped_by_wall_clock"]``)."""
    why = not_applicable(problem)
    if why:
        raise UnsupportedProblemError(f"the prefix search does not apply: {why}; use cpsat")
    started = time.perf_counter()
    tb = _Tables(problem)
    budget = problem.machine.memory_budget
    upper = float("inf") if upper is None else upper
    full = (1 << tb.n) - 1
    remaining = _work_left(tb)
    start_ideal, level = _first_level(tb, problem.initial_resident_bytes, remaining)
    expansions = most = 0
    said = started
    finished = []
    stopped = None
    # the engine's peak counts the inputs resident before any step, whatever the first views free
    over_budget = memory_from is None and budget is not None and problem.initial_resident_bytes > budget
    if over_budget or max(remaining) >= upper:
        level = {}
    elif start_ideal == full:  # views only: the first views are the whole order
        finished, level = level[start_ideal][4], {}
    depth = 0  # prefix length in tasks that take time: the search ends at the number of such tasks
    allowed = None if window is None else _window_masks(tb, *window)
    checkpoint = max(1, sum(1 for k in tb.kind if k != _VIEW) // 10)
    while level and stopped is None:
        grown: dict[int, tuple] = {}
        allowed_now = None if allowed is None else allowed[depth]
        for ideal, entry in level.items():
            expansions += _expand_set(tb, ideal, entry, grown, allowed_now, budget, memory_from, upper)
            if max_expansions is not None and expansions > max_expansions:
                stopped = "limit"
                break
            if deadline is not None and time.perf_counter() > deadline:
                stopped = "wall clock"
                break
        if stopped is not None:
            break
        level, count = _next_level(grown, full, finished)
        most = max(most, count)
        depth += 1
        if (window is None and max_expansions is not None and depth == checkpoint
                and expansions * tuning.growth_after_a_tenth > max_expansions):
            stopped = "predicted"  # the rest would not fit: the time goes back to the caller
        if progress is not None and count and time.perf_counter() >= said + tuning.progress_seconds:
            said = time.perf_counter()
            progress(f"prefix search: {len(level)} sets, {count} prefixes, {expansions} expansions")
    seconds = time.perf_counter() - started
    stats = {"stopped_by_wall_clock": stopped == "wall clock", "predicted_too_long": stopped == "predicted"}
    if stopped is not None or not finished:
        return PrefixSearch(None, {}, None, stopped is None, expansions, most, seconds, stats)
    best = min(finished, key=lambda p: max(p[0]))
    order, streams = _read_order(best[3])
    return PrefixSearch(tuple(order), streams, max(best[0]), True, expansions, most, seconds, stats)


def _issue(tb: _Tables, ideal: int, cur: int, ready: int, t: int) -> tuple[int, int, int, list[int]]:
    """Issue t, then every view it makes ready: (set, bytes resident after, the tasks ready then
    (views aside), the views)."""
    ideal |= 1 << t
    ready &= ~(1 << t)
    views, stack = [], [t]
    while stack:
        x = stack.pop()
        for u in tb.succs[x]:
            if not ideal >> u & 1 and not tb.preds_mask[u] & ~ideal:
                if tb.kind[u] == _VIEW:
                    ideal |= 1 << u
                    views.append(u)
                    stack.append(u)
                else:
                    ready |= 1 << u
    # freed: the buffers these tasks hold whose holders are all issued now (once each: a view and its
    # producer may both hold one)
    freed = {k for x in [t] + views for k in tb.touches[x] if not tb.release_mask[k] & ~ideal}
    return ideal, cur - sum(tb.release_size[k] for k in freed), ready, views


def _work_left(tb: _Tables) -> list[int]:
    """Per stream, the durations of the tasks that can run on that stream only."""
    remaining = [0] * tb.num_streams
    for t in range(tb.n):
        if tb.work_stream[t] >= 0:
            remaining[tb.work_stream[t]] += tb.duration[t]
    return remaining


def _first_level(tb: _Tables, resident: int, remaining: list[int]) -> tuple[int, dict[int, tuple]]:
    """The set of the views ready before any task, and the search's first level: that set with its one
    prefix.

    A level maps a set to (bytes resident, comm tasks issued, work left per stream, tasks ready, prefixes); a
    prefix is (times, keys, ends, node, asleep) with times the streams' free times, keys the (task, stream) of
    the kept ends, node (parent node, issued tasks, stream choices) to read the order back, asleep the mask of
    its sleep set."""
    n, kind = tb.n, tb.kind
    start_ideal, start_cur = 0, resident
    start_ready = sum(1 << t for t in range(n) if not tb.preds_mask[t] and kind[t] != _VIEW)
    first_views: list[int] = []
    for t in range(n):
        if kind[t] == _VIEW and not start_ideal >> t & 1 and not tb.preds_mask[t]:
            start_ideal, start_cur, start_ready, views = _issue(tb, start_ideal, start_cur, start_ready, t)
            first_views += [t] + views
    return start_ideal, {start_ideal: (start_cur, 0, tuple(remaining), start_ready,
                                       [((0,) * tb.num_streams, (), (), (None, tuple(first_views), ()), 0)])}


def _allowed_steps(tb: _Tables, ideal: int, cur: int, candidates: int, budget: int | None,
                   memory_from: int | None, checked: bool) -> list[tuple[int, int | None]]:
    """(task, its chain predecessor or None) of each issue among ``candidates`` that the collective order and
    the memory allow."""
    steps = []
    while candidates:
        low = candidates & -candidates
        candidates ^= low
        t = low.bit_length() - 1
        pos = tb.order_pred.get(t)
        if pos is not None and pos >= 0 and not ideal >> pos & 1:
            continue
        if budget is not None and (checked or t == memory_from) and cur + tb.alloc[t] > budget:
            continue
        steps.append((t, pos))
    return steps


def _calm_tasks(tb: _Tables, quiet_tasks: int, end_of: dict[int, tuple[int, int]], stream0_free: int) -> int:
    """The quiet tasks whose inputs are ready by the time stream 0 is free: any two of them, if memory
    allows both orders, commute (the same times and set after both)."""
    calm = quiet_tasks
    if end_of:
        m = quiet_tasks
        while m:
            low = m & -m
            m ^= low
            c = low.bit_length() - 1
            for q in tb.sync_preds[c]:
                if q in end_of and end_of[q][0] + (tb.sync if end_of[q][1] else 0) > stream0_free:
                    calm &= ~low
                    break
    return calm


def _child_sleep_set(tb: _Tables, t: int, asleep: int, feasible: int, calm: int, new_cur: int,
                     budget: int | None, checked: bool, issue_now: Callable[[int], tuple]) -> int:
    """The sleep set after issuing the calm task t: the calm tasks asleep already or tried before t at this
    prefix, whose order with t memory allows both ways."""
    child_asleep = 0
    maybe = (asleep | (feasible & ((1 << t) - 1) & ~asleep)) & calm
    while maybe:
        low = maybe & -maybe
        maybe ^= low
        c = low.bit_length() - 1
        if budget is None or not checked or (new_cur + tb.alloc[c] <= budget
                                             and issue_now(c)[1] + tb.alloc[t] <= budget):
            child_asleep |= low
    return child_asleep


def _place(tb: _Tables, times: tuple[int, ...], inputs: list[tuple[int, int]], t: int,
           s: int) -> tuple[list[int], int]:
    """The streams' free times after t is placed on stream s, and t's end."""
    sync = tb.sync
    free = list(times)
    if tb.kind[t] == _LAUNCHED:  # a zero-time point on stream 0 that waits for the inputs
        ready = free[0]
        for e, qs in inputs:
            r = e + (sync if qs != 0 else 0)
            if r > ready:
                ready = r
        free[0] = ready
        ready += sync
    else:
        ready = 0
        for e, qs in inputs:
            r = e + (sync if qs != s else 0)
            if r > ready:
                ready = r
    end = (ready if ready > free[s] else free[s]) + tb.duration[t]
    free[s] = end
    return free, end


def _expand_set(tb: _Tables, ideal: int, entry: tuple, grown: dict[int, tuple], allowed_now: int | None,
                budget: int | None, memory_from: int | None, upper: float) -> int:
    """Extend every prefix of set ``ideal`` (its level ``entry``) by each task it may issue next, adding
    the children whose makespan bound stays below ``upper`` to ``grown`` (the next level, unpruned).
    Returns the number of expansions."""
    cur, issued_comms, rem, ready_tasks, prefixes = entry
    checked = memory_from is None or ideal >> memory_from & 1  # the budget holds at these steps
    candidates = ready_tasks if allowed_now is None else ready_tasks & allowed_now
    steps = _allowed_steps(tb, ideal, cur, candidates, budget, memory_from, checked)
    issued: dict[int, tuple] = {}  # task -> (set, bytes after, ready, views, work left), when asked

    def issue_now(t: int) -> tuple:
        got = issued.get(t)
        if got is None:
            new_ideal, new_cur, new_ready, views = _issue(tb, ideal, cur + tb.alloc[t], ready_tasks, t)
            new_rem = rem
            if tb.work_stream[t] >= 0:
                new_rem = list(rem)
                new_rem[tb.work_stream[t]] -= tb.duration[t]
                new_rem = tuple(new_rem)
            got = issued[t] = (new_ideal, new_cur, new_ready, views, new_rem)
        return got

    expansions = 0
    feasible = sum(1 << step[0] for step in steps)
    quiet_tasks = feasible & tb.quiet_mask
    for times, keys, ends, node, asleep in prefixes:
        end_of = {q: (e, qs) for (q, qs), e in zip(keys, ends)}
        calm = _calm_tasks(tb, quiet_tasks, end_of, times[0])
        for t, pos in steps:
            if asleep >> t & 1:
                continue  # the other order of a commuting pair reaches the same prefix
            expansions += 1
            new_ideal, new_cur, new_ready, views, new_rem = issue_now(t)
            child_asleep = 0
            if calm >> t & 1:
                child_asleep = _child_sleep_set(tb, t, asleep, feasible, calm, new_cur, budget, checked, issue_now)
            child = grown.get(new_ideal)
            if child is None:
                child = grown[new_ideal] = (new_cur, issued_comms + (pos is not None), new_rem, new_ready, [])
            out = child[4]
            inputs = [end_of[q] for q in tb.sync_preds[t] if q in end_of]
            for s in tb.streams[t]:
                free, end = _place(tb, times, inputs, t, s)
                # the streams t changed: the others' free time plus their work passed at the parent
                if free[s] + new_rem[s] >= upper or free[0] + new_rem[0] >= upper:
                    continue
                kept = {(q, qs): e for q, (e, qs) in end_of.items() if tb.readers_mask[q] & ~new_ideal}
                if tb.readers_mask[t] & ~new_ideal and not (s == 0 and tb.stream0_reader[t]):
                    kept[t, s] = end
                new_keys = tuple(sorted(kept))
                out.append((tuple(free), new_keys, tuple(kept[k] for k in new_keys),
                            (node, (t,) + tuple(views), ((t, s),) if len(tb.streams[t]) > 1 else ()),
                            child_asleep))
    return expansions


def _next_level(grown: dict[int, tuple], full: int, finished: list) -> tuple[dict[int, tuple], int]:
    """The next level from ``grown``: each set's undominated prefixes; those of the full set go to
    ``finished``. Returns the level and the number of prefixes it keeps."""
    level = {}
    count = 0
    for ideal, (cur, issued_comms, rem, ready_tasks, prefixes) in grown.items():
        kept = _undominated(prefixes)
        if ideal == full:
            finished += kept
        elif kept:
            level[ideal] = (cur, issued_comms, rem, ready_tasks, kept)
            count += len(kept)
    return level, count


def _read_order(node: tuple | None) -> tuple[list[int], dict[int, int]]:
    """The program order and the stream choices a prefix's node chain records, first task first."""
    order, streams = [], {}
    while node is not None:
        parent, tasks, choices = node
        order[:0] = tasks
        streams.update(choices)
        node = parent
    return order, streams


def _window_masks(tb: _Tables, order: tuple[int, ...], lo: int, hi: int) -> list[int]:
    """Per prefix length, the tasks the search may issue next when only positions [lo, hi) of ``order`` are
    free: before them the order's own task, inside any task of the window, after them the order's again."""
    timed = [t for t in order if tb.kind[t] != _VIEW]
    first = sum(1 for t in order[:lo] if tb.kind[t] != _VIEW)
    inside = sum(1 << t for t in order[lo:hi] if tb.kind[t] != _VIEW)
    size = bin(inside).count("1")
    return [1 << t if not first <= d < first + size else inside for d, t in enumerate(timed)]


def _undominated(prefixes: list) -> list:
    """The prefixes no other one of the same set dominates (same kept ends, every time no later); the
    first of equal ones is kept, so the search is deterministic. A dominated prefix's continuations are
    covered only by its dominator's, so the dominator keeps asleep only what both had asleep (with the
    dominator's own sleep set alone, a 12-task program lost its optimum)."""
    if len(prefixes) == 1:
        return prefixes
    prefixes = sorted(prefixes, key=lambda p: (p[1], sum(p[0]) + sum(p[2]), p[0], p[2]))
    kept: list = []
    for p in prefixes:
        times, keys, ends = p[0], p[1], p[2]
        for i, o in enumerate(kept):
            if o[1] == keys and all(a <= b for a, b in zip(o[0], times)) and all(a <= b for a, b in zip(o[2], ends)):
                kept[i] = o[:4] + (o[4] & p[4],)
                break
        else:
            kept.append(p)
    return kept


def improve_by_windows(problem: Problem, schedule: Schedule, max_expansions: int, *, size: int = 40,
                       per_window: int = 50_000, deadline: float | None = None,
                       progress: Callable[[str], None] | None = None,
                       starts: Callable[[Schedule, SimResult], Sequence[int]] | None = None,
                       tuning: PrefixTuning = PREFIX_TUNING) -> tuple[Schedule, dict]:
    """Exact windows: the prefix search over positions [lo, lo + ``size``) of the schedule's order, the rest kept
    (`search_prefixes`' ``window``), below its makespan, windows half overlapping from the start (or where
    ``starts`` of the pass's schedule and its simulation says, in its order), passes repeated while one gains;
    each window stops after ``per_window`` expansions, all after ``max_expansions`` (counted: the same answer
    on every run). Returns the best schedule (valid, by `validate`) and stats."""
    budget = problem.machine.memory_budget
    best, best_sim = schedule, validate(problem, schedule, memory_budget=budget)
    n = len(schedule.order)
    spent = tried = improved = 0
    stopped_by_wall = False
    gained = True
    while gained and spent < max_expansions and not stopped_by_wall:
        gained = False
        slide = range(0, max(1, n - size + 1), max(1, size // 2))
        for lo in (slide if starts is None else starts(best, best_sim)):
            if spent >= max_expansions:
                break
            if deadline is not None and time.perf_counter() > deadline:
                stopped_by_wall = True
                break
            found = search_prefixes(problem, best_sim.makespan, window=(best.order, lo, min(n, lo + size)),
                                    max_expansions=min(per_window, max_expansions - spent), deadline=deadline,
                                    tuning=tuning)
            spent += found.expansions
            tried += 1
            stopped_by_wall |= found.stats["stopped_by_wall_clock"]
            if found.order is None:
                continue
            candidate = Schedule(order=found.order, streams=found.streams, method="prefix-windows")
            best, best_sim = candidate, validate(problem, candidate, memory_budget=budget)
            improved += 1
            gained = True
            if progress is not None:
                progress(f"  exact window at {lo}: makespan {best_sim.makespan / 1e3:.1f} us")
    return best, {"windows_tried": tried, "windows_improved": improved, "expansions": spent,
                  "stopped_by_wall_clock": stopped_by_wall}


def solve_prefixes(problem: Problem, time_limit: float = 10.0, memory_budget: int | None = None,
                   hint: Schedule | None = None, *, deterministic: bool = True, deadline: float | None = None,
                   progress: Callable[[str], None] | None = None, tuning: PrefixTuning = PREFIX_TUNING) -> SolveResult:
    """`search_prefixes` as a solver: below ``hint``'s makespan, within ``time_limit`` (counted as
    `PrefixTuning.expansions_per_second` expansions a second with ``deterministic``, so every run gives the same answer;
    wall-clock seconds otherwise). OPTIMAL when the search ends: its order, or the hint when nothing beats
    it; INFEASIBLE (raised) when no order holds the budget; HINT_KEPT / NO_SOLUTION when it is stopped."""
    started = time.perf_counter()
    why = not_applicable(problem)
    if why:
        raise UnsupportedProblemError(f"the prefix search does not apply: {why}; use cpsat")
    budget = problem.machine.memory_budget if memory_budget is None else memory_budget
    problem = problem.with_budget(budget)
    hint_sim = validate(problem, hint, memory_budget=budget) if hint is not None else None
    limit = int(time_limit * tuning.expansions_per_second) if deterministic else None
    ends = started + time_limit if deadline is None else deadline  # the wall clock caps a counted search too
    found = search_prefixes(problem, hint_sim.makespan if hint_sim is not None else None, max_expansions=limit,
                            deadline=ends, progress=progress, tuning=tuning)
    wall = time.perf_counter() - started
    stats = dict(found.stats, expansions=found.expansions, most_prefixes=found.most_prefixes)
    status = "complete" if found.complete else "stopped"
    outcome = Outcome(hint, hint_sim, wall, f"prefix search: {status}", stats)
    if not found.complete:
        return outcome.no_solution(f"the prefix search ended after {found.expansions} expansions without a schedule",
                                   f"the prefix search ended after {found.expansions} expansions; kept the warm start")
    if found.order is None:
        if hint_sim is None:
            raise InfeasibleBudgetError(f"the prefix search proved that no schedule keeps peak memory within {budget} B")
        return outcome.better_of(problem, hint, hint_sim, proven=True, hint_proven=True, objective=hint_sim.makespan,
                                 bound=hint_sim.makespan, proved_hint="the prefix search proved the warm start optimal",
                                 kept_hint="")
    schedule = Schedule(order=found.order, streams=found.streams, method="prefixes")
    sim = validate(problem, schedule, memory_budget=budget)
    if sim.makespan != found.makespan:
        raise AssertionError(f"the prefix search's order simulates to {sim.makespan} ns, not {found.makespan}")
    return outcome.better_of(problem, schedule, sim, proven=True, hint_proven=False, objective=found.makespan,
                             bound=found.makespan, proved_hint="", kept_hint="")
