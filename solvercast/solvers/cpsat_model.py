"""The CP-SAT model: program order, streams and launch/wait placement under a memory budget.

`CpsatModel` reads top to bottom: variables, constraints (one named group
each), objective, hint, extract; `solve_model` (solvers/cpsat.py) scales the
problem, drives the solve and chooses among solutions. What the model decides
(the whole problem, or a window of an incumbent) is its `Scope`
(solvers/scope.py). Its semantics are `simulate`'s (DESIGN.md):

* Every task with a stream (all but FREE views) gets a start; tasks with a
  choice of stream get one optional interval per stream, exactly one present.
  A NoOverlap per stream. Zero-length intervals (waits) still cannot sit
  strictly inside another task on their stream, so a wait blocks its stream.
* An asynchronous collective c also gets a *launch point* l_c: a zero-length
  interval on the default stream 0, after c's inputs are ready there; c starts
  no earlier than l_c + sync. This is exactly `simulate`'s launch rule.
* A dependency between real tasks on different streams costs the sync
  overhead (reified on "same stream" when streams are free).
* With several compute streams, one cumulative over occupancy keeps the GPU
  at most full.
* Memory: one AddCumulative over buffer lifetimes (never a reservoir: far
  slower here, see shared/notes/cpsat-scaling.md). With one compute stream the
  peak is taken in host program order: every task gets a *program time*
  P = K * (its instant) + a tie-breaking offset, where K > 2n, and zero-length
  points (waits, launches, views) sit in the lower half of an instant, tasks
  that take time in the upper half. Sorting by P gives the program order, and
  a buffer lives from P(producer) to P(last user) inclusive, which is the
  simulator's rule exactly. With one compute stream and a budget (the whole
  problem or a window, up to MAX_POSITION_PAIRS pairs) program times give way to
  program *positions* 0..N-1 (`_program_positions`; a window's tasks take 0..,
  the past's constants the negative ones below): one literal per pair of
  default-stream items that dependencies leave unordered orders both their
  positions and their times, and the memory cumulative runs over positions,
  whose small domains propagate (program times spanned hundreds of millions).
  With several compute streams memory is taken over time: a buffer lives from
  its producer's start to its last user's end.
* Collectives keep their original order (SPMD safety) unless told otherwise.

The program order of a solution is the tasks sorted by program time (several
compute streams: by start time, `common.start_time_keys`); the schedule is
then re-simulated, and never returned if worse than the hint.
Any feasible model solution re-simulates to a makespan no larger than the
model's (serial schedule generation on start-sorted lists never starts a task
later), so the model's optimum is the simulator's optimum for one compute
stream; with several, re-simulation may move buffer lifetimes, and the result
is checked.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import cached_property

from ortools.sat.python import cp_model

from solvercast.ir.bounds import earliest_starts, latest_starts
from solvercast.ir.problem import Problem, Role
from solvercast.ir.schedule import Schedule
from solvercast.ir.simulate import SimResult
from solvercast.solvers.common import shifted_tasks, start_time_keys, topological_by_key
from solvercast.solvers.scope import Scope

OCCUPANCY_SCALE = 1000
#: the position model orders every pair of default-stream items that dependencies leave unordered with one
#: literal; past this many pairs it falls back to program times: building the pairs in Python then costs more than it
#: saves (fsdp_layers 4 layers: ~2,000 pairs; synthetic 300 tasks: ~20,000 pairs, 80,000 constraints, seconds to build).
#: 8,000 takes in simple_fsdp 2 layers (5,877 pairs: 25,000 constraints, built in 0.4 s; 284.3 -> 282.3 us in 10 s
#: where program times kept the warm start) and fsdp_layers 8 layers (6,066)
MAX_POSITION_PAIRS = 8_000


def model_horizon_cap(num_tasks: int) -> int:
    """Time units the model may span; longer horizons are scaled down (durations rounded up).

    Small domains make CP-SAT much faster on large models (synthetic 1,000 tasks
    with memory, 30 s: nothing better than the warm start at 2e6 units, -0.5 %
    at 1e5), while tiny graphs keep nanosecond precision, so the cap shrinks with
    the graph: 1e8 / tasks, within [5e4, 2e6]."""
    return int(min(2_000_000, max(50_000, 100_000_000 // max(1, num_tasks))))


class CpsatModel:
    """One CP-SAT model of a (scaled) problem with a horizon, over what ``scope`` decides."""

    def __init__(self, problem: Problem, horizon: int, budget: int | None, scope: Scope | None = None,
                 positions: bool = True, issue_order: Sequence[int] | None = None):
        self.p = problem
        self.horizon = horizon
        self.budget = budget
        self.m = cp_model.CpModel()
        n = problem.num_tasks
        self.n = n
        self.single_stream = problem.machine.compute_streams == 1
        self.K = 2 * (n + 1)  # program-time ticks per time unit (one compute stream only)
        self.half = n + 1
        self.scope = scope = scope or Scope.whole()
        # several streams: what comes first among tasks issued at one instant (`extract` sorts by it too):
        # the warm start's order (a window's incumbent, or ``issue_order``), else the ids. The ids alone made
        # a warm start that issued two collectives at one instant, the higher id first, an infeasible hint
        order = scope.incumbent.order if scope.incumbent is not None else issue_order
        self.rank = list(range(n))
        for i, t in enumerate(order or ()):
            self.rank[t] = i
        self.timed = [t for t in scope.decided(problem) if problem.tasks[t].role != Role.FREE]
        self.start: dict[int, cp_model.IntVar] = {}
        self.on: dict[int, dict[int, cp_model.IntVar | int]] = {}  # task -> stream -> literal (or 1)
        self.intervals: dict[int, list] = {s: [] for s in range(problem.machine.num_streams)}
        self.launch: dict[int, cp_model.IntVar] = {}
        self.ptime: dict[int, cp_model.IntVar] = {}
        self.same: dict[tuple[int, int], cp_model.IntVar] = {}
        self.lifetime_end: dict[int, cp_model.IntVar] = {}
        self.comm_before: dict[tuple[int, int], cp_model.IntVar] = {}
        self.lifetimes: list = []  # (born, size, end, buffer) of each memory interval
        self._pending_program_order: list = []  # (a, b, condition): a before b in program time
        self._anchor_memo: dict[int, frozenset[int]] = {}
        self._past_ptime = -1  # the past's last program time (windowed)
        self.before: dict[tuple[int, int], cp_model.IntVar] = {}  # position model: a before b on the default stream
        # memory over program positions (see `_program_positions`): one compute stream, a budget, and few
        # enough pairs to order (the whole problem, a fixed order, or a window: its tasks take positions
        # 0.., the past's constants below them)
        self.positions = (positions and self.single_stream and budget is not None
                          and len(self._unordered_pairs) <= MAX_POSITION_PAIRS)
        if scope.past:
            self._fix_past()

    def _fix_past(self) -> None:
        """The past's times, streams, launch points and program times: constants of the incumbent."""
        p, scope, sim = self.p, self.scope, self.scope.sim
        if self.positions:  # the past in its order below the window's positions, which start at 0
            ranked = [t for t in scope.past if t not in self._contracted]
            ptime = {t: i - len(ranked) for i, t in enumerate(ranked)}
        else:
            ptime = self._program_time_hint(scope.incumbent, sim, sim.launch) if self.single_stream else {}
        self._past_ptime = max((ptime[t] for t in scope.past if t in ptime), default=-1)
        for t in scope.past:
            if t not in self._contracted:
                self.ptime[t] = ptime.get(t, 0)
            if p.tasks[t].role == Role.FREE:
                continue
            self.start[t] = sim.start[t]
            self.on[t] = {sim.streams[t]: 1}
            if t in p.wait_of:
                self.launch[t] = sim.launch[t]

    @property
    def launch_vars(self) -> dict[int, cp_model.IntVar]:
        """Launch points that are variables (not constants of the past)."""
        return {c: v for c, v in self.launch.items() if not isinstance(v, int)}

    # ---- variables --------------------------------------------------------------------------
    def add_variables(self) -> None:
        p, m, frontier = self.p, self.m, self.scope.frontier
        est = earliest_starts(p)
        lst = latest_starts(p, self.horizon)
        for t in self.timed:
            task = p.tasks[t]
            lo, hi = est[t], max(est[t], lst[t])
            if frontier:  # windowed: on whichever stream, not before the past is done with all
                lo = max(lo, self.scope.earliest_on(p.allowed_streams(t)))
                hi = max(lo, hi)
            s = m.NewIntVar(lo, hi, f"start_{task.name}")
            self.start[t] = s
            streams = list(p.allowed_streams(t))
            if len(streams) == 1:
                self.on[t] = {streams[0]: 1}
                self.intervals[streams[0]].append((t, m.NewFixedSizeIntervalVar(s, task.duration, f"iv_{task.name}")))
                continue
            self.on[t] = {}
            for k in streams:
                lit = m.NewBoolVar(f"on_{task.name}_s{k}")
                self.on[t][k] = lit
                self.intervals[k].append(
                    (t, m.NewOptionalFixedSizeIntervalVar(s, task.duration, lit, f"iv_{task.name}_s{k}")))
            m.AddExactlyOne(self.on[t].values())
            for k, lit in self.on[t].items():  # windowed: after the past on the stream it takes
                if frontier.get(k, 0) > lo:
                    m.Add(s >= frontier[k]).OnlyEnforceIf(lit)
        for c in p.wait_of:
            if not self.scope.decides(c):  # a constant of the past, or left out
                continue
            self.launch[c] = m.NewIntVar(frontier.get(0, 0),
                                         max(frontier.get(0, 0), est[c], lst[c] - p.machine.sync_overhead),
                                         f"launch_{p.tasks[c].name}")
            self.intervals[0].append((c, m.NewFixedSizeIntervalVar(self.launch[c], 0, f"launch_iv_{p.tasks[c].name}")))
        self.makespan = m.NewIntVar(max(est[t] + p.tasks[t].duration for t in self.timed) if self.timed else 0,
                                    self.horizon, "makespan")
        # [makespan, horizon + 1): every stream is idle after the makespan. Added to each NoOverlap and to the
        # occupancy cumulative, it is the "makespan interval" CP-SAT looks for when it builds their linear
        # relaxation (energy <= makespan - start); without one, CP-SAT 9.15 derives the makespan from a full
        # transitive closure of the precedences (DetectMakespanFromPrecedences), which neither counts as
        # deterministic time nor checks the clock: 22 s of a 7 s limit at 1,000 tasks with 2 compute streams
        self.after_makespan = m.NewIntervalVar(self.makespan, self.horizon + 1 - self.makespan, self.horizon + 1,
                                               "after_makespan")

    def _sync_cost(self, a: int, b: int):
        """sync * [a and b run on different streams], as a linear expression."""
        sync = self.p.machine.sync_overhead
        if sync == 0:
            return 0
        sa, sb = self.on[a], self.on[b]
        common = set(sa) & set(sb)
        if not common:
            return sync
        if len(sa) == 1 and len(sb) == 1:
            return 0  # both pinned to the same stream
        key = (a, b)
        if key not in self.same:
            same = self.m.NewBoolVar(f"same_{self.p.tasks[a].name}_{self.p.tasks[b].name}")
            for k in set(sa) | set(sb):
                la, lb = sa.get(k, 0), sb.get(k, 0)
                # same => (a on k <=> b on k)
                if isinstance(la, int) and isinstance(lb, int):
                    if la != lb:
                        self.m.Add(same == 0)
                    continue
                self.m.Add(la == lb).OnlyEnforceIf(same)
            # "not same" is left free: the sync is then paid, which only a worse solution would choose
            self.same[key] = same
        return sync - sync * self.same[key]

    def _on_stream0(self, t: int):
        """sync cost for a value of t to reach the default stream."""
        sync = self.p.machine.sync_overhead
        lit = self.on[t].get(0)
        if lit is None:
            return sync
        if sync == 0 or isinstance(lit, int):
            return 0
        return sync - sync * lit

    # ---- constraints ------------------------------------------------------------------------
    def constraint_groups(self) -> list[tuple[str, Callable[[], None]]]:
        """The constraint groups this model needs, by name, in the order they are added."""
        groups = [("no_overlap_per_stream", self._no_overlap_per_stream),
                  ("precedences", self._precedences),
                  ("launches", self._launches),
                  ("collective_order", self._collective_order),
                  ("occupancy", self._occupancy)]
        if self.single_stream:
            groups.append(("program_times", self._program_times))
        if self.budget is not None:
            groups.append(("memory", self._memory))
        groups.append(("makespan", self._makespan))
        return groups

    def add_constraints(self) -> None:
        for _, add in self.constraint_groups():
            add()

    def _makespan(self) -> None:
        for t in self.timed:
            self.m.Add(self.makespan >= self.start[t] + self.p.tasks[t].duration)

    def _no_overlap_per_stream(self) -> None:
        for ivs in self.intervals.values():
            if len(ivs) > 1:
                self.m.AddNoOverlap([iv for _, iv in ivs] + [self.after_makespan])

    def _precedences(self) -> None:
        p = self.p
        for t in self.timed:
            if t in self.launch:
                continue  # an async collective waits for its inputs through its launch point
            for q in p.sync_preds[t]:
                self.m.Add(self.start[t] >= self.start[q] + p.tasks[q].duration + self._sync_cost(q, t))

    def _launches(self) -> None:
        p = self.p
        sync = p.machine.sync_overhead
        for c, l in self.launch_vars.items():
            for q in p.sync_preds[c]:
                self.m.Add(l >= self.start[q] + p.tasks[q].duration + self._on_stream0(q))
            self.m.Add(self.start[c] >= l + sync)

    def _collective_order(self) -> None:
        """Comm streams run collectives in launch (program) order."""
        p, m = self.p, self.m
        scope = self.scope
        comms = [c for c in p.comm_tasks if not scope.left_out(c)]
        if len(comms) < 2:
            return
        chain_of: dict[int, int] = {}  # comm task -> its chain of `comm_chains` (the order kept)
        for k, whole in enumerate(p.comm_chains):
            chain = [c for c in whole if not scope.left_out(c)]
            chain_of.update((c, k) for c in chain)
            for a, b in zip(chain, chain[1:]):
                if not scope.is_past(b):
                    self._comm_precede(a, b)
            # non-consecutive pairs on a shared comm stream follow from the chain on one comm stream;
            # with several, order each pair that may share one
            if p.machine.comm_streams > 1 or any(not p.is_async_comm(c) for c in chain):
                for i, a in enumerate(chain):
                    for b in chain[i + 1:]:
                        if not scope.is_past(b):
                            self._same_stream_order(a, b)
        for i, a in enumerate(comms):  # pairs whose order is free: one literal each
            for b in comms[i + 1:]:
                if (scope.is_past(a) and scope.is_past(b)) or chain_of.get(a, -1) == chain_of.get(b, -2):
                    continue
                before = m.NewBoolVar(f"before_{p.tasks[a].name}_{p.tasks[b].name}")
                self.comm_before[(a, b)] = before
                self._comm_precede(a, b, before)
                self._comm_precede(b, a, before.Not())

    def _program_key(self, c: int):
        return self.ptime[c] if self.single_stream else self.launch.get(c, self.start[c])

    def _comm_precede(self, a: int, b: int, enforce=None) -> None:
        """a before b in program order, and on their comm stream if they share one."""
        m = self.m
        cond = [] if enforce is None else [enforce]
        if self.single_stream:
            self._pending_program_order.append((a, b, enforce))
        else:
            # at one instant, `extract`'s sort decides: a launch (a point) before an op that takes time, then
            # `rank`; a before b at one instant only if that sort puts it first
            tie = 0 if self._issue_sort(a) < self._issue_sort(b) else 1
            m.Add(self._program_key(b) >= self._program_key(a) + tie).OnlyEnforceIf(cond)
        self._same_stream_order(a, b, cond)

    def _issue_sort(self, t: int) -> tuple[int, int]:
        """How `start_time_keys` orders ``t`` among what is issued at its program key's instant."""
        return (0 if t in self.launch else int(self.p.tasks[t].duration > 0), self.rank[t])

    def _same_stream_order(self, a: int, b: int, cond=()) -> None:
        p, m = self.p, self.m
        shared = set(self.on[a]) & set(self.on[b]) & set(p.machine.comm_stream_ids)
        for k in shared:
            lits = [x for x in (self.on[a][k], self.on[b][k]) if not isinstance(x, int)]
            m.Add(self.start[b] >= self.start[a] + p.tasks[a].duration).OnlyEnforceIf(list(cond) + lits)

    def _occupancy(self) -> None:
        p = self.p
        if self.single_stream:
            return
        ivs, demands = [], []
        for k in p.machine.compute_stream_ids:
            for t, iv in self.intervals[k]:
                task = p.tasks[t]
                if t in self.launch or task.duration == 0:  # launch points and waits take no GPU
                    continue
                ivs.append(iv)
                demands.append(math.ceil(task.occupancy * OCCUPANCY_SCALE - 1e-9))
        if ivs:
            self.m.AddCumulative(ivs + [self.after_makespan], demands + [OCCUPANCY_SCALE], OCCUPANCY_SCALE)

    @cached_property
    def _contracted(self) -> frozenset[int]:
        """Views with consumers get no program time of their own (a reduction
        that loses nothing: a view allocates nothing and runs nowhere, and the
        program order places it right after its inputs, where it frees what it
        was the last to hold)."""
        return frozenset(t for t, task in enumerate(self.p.tasks) if task.role == Role.FREE and self.p.succs[t])

    def _anchors(self, t: int) -> frozenset[int]:
        """Nearest predecessors of t that have a program time, looking through contracted views."""
        if t not in self._anchor_memo:
            out: set[int] = set()
            for q in self.p.preds[t]:
                out |= self._anchors(q) if q in self._contracted else {q}
            self._anchor_memo[t] = frozenset(out)
        return self._anchor_memo[t]

    def _program_points(self, t: int) -> frozenset[int]:
        """Tasks whose program time bounds a lifetime that ``t`` holds: a contracted view is issued right
        after its inputs (see `extract`), so what it holds lives until just after them."""
        return self._anchors(t) if t in self._contracted else frozenset((t,))

    @cached_property
    def _order_closure(self) -> tuple[list[int], list[int]]:
        """(ancestors, descendants) of every task as bitmasks, over the orders every program keeps: the
        dependencies, and the launch orders of asynchronous collectives the collective order keeps (`async_chains`).
        Each link also orders the two ends in time on the default stream (a dependency through its
        constraints, the launch chain through `_program_positions`), so a pair they order needs no literal."""
        p, n = self.p, self.n
        chain_pred = {b: a for chain in p.async_chains for a, b in zip(chain, chain[1:])}
        up = [0] * n
        for t in range(n):  # ids are topological, and the chain follows ids
            mask = 0
            for q in p.preds[t] + ((chain_pred[t],) if t in chain_pred else ()):
                mask |= up[q] | (1 << q)
            up[t] = mask
        down = [0] * n
        chain_succ = {a: b for b, a in chain_pred.items()}
        for t in range(n - 1, -1, -1):
            mask = 0
            for q in p.succs[t] + ((chain_succ[t],) if t in chain_succ else ()):
                mask |= down[q] | (1 << q)
            down[t] = mask
        return up, down

    @cached_property
    def _unordered_pairs(self) -> list[tuple[int, int]]:
        """Pairs (a, b), a < b, of tasks that may both be sequenced by the default stream (every task but
        views: an asynchronous collective through its launch point) and that `_order_closure` leaves
        unordered. Counted first, from popcounts: only a model that will use them lists them."""
        p = self.p
        if not (self.single_stream and self.budget is not None):
            return []
        items = [t for t in range(self.n) if p.tasks[t].role != Role.FREE and self.scope.decides(t)]
        mask = sum(1 << t for t in items)
        up = self._order_closure[0]
        ordered = sum((up[t] & mask).bit_count() for t in items)
        if len(items) * (len(items) - 1) // 2 - ordered > MAX_POSITION_PAIRS:
            return [(0, 0)] * (MAX_POSITION_PAIRS + 1)  # too many: only the count is read
        return [(a, b) for i, b in enumerate(items) for a in items[:i] if not up[b] >> a & 1]

    def _sequenced(self, t: int):
        """(when t takes the default stream, for how long, the literal "t is on it" or 1, or None when t
        never is): an asynchronous collective by its launch point."""
        if t in self.launch:
            return self.launch[t], 0, 1
        on_default = self.on[t].get(0)
        return None if on_default is None else (self.start[t], self.p.tasks[t].duration, on_default)

    def _program_positions(self) -> None:
        """One compute stream with a budget: each task's *position* in the program, 0..N-1 (views that
        feed others take their inputs' place, `_contracted`), instead of program times in the horizon
        times 2n. Dependencies and the collective order bound positions; each pair of default-stream
        items left unordered gets one literal that orders both their positions and their times (the
        earlier ends before the later starts: the default stream runs in program order). Memory is then
        a cumulative over positions with small domains (`_memory`), as in Moccasin (Bartan et al. 2023),
        which propagates where program times in the hundreds of millions did not."""
        p, m = self.p, self.m
        up, down = self._order_closure
        positioned = [t for t in range(self.n) if t not in self._contracted and self.scope.decides(t)]
        mask = sum(1 << t for t in positioned)
        last = len(positioned) - 1
        for t in positioned:
            self.ptime[t] = m.NewIntVar((up[t] & mask).bit_count(), last - (down[t] & mask).bit_count(),
                                        f"pos_{p.tasks[t].name}")
        self._program_order_links()
        for whole in p.async_chains:  # the launch orders `_order_closure` relies on
            chain = [c for c in whole if c in self.launch]  # windowed: the past's and the window's
            for a, b in zip(chain, chain[1:]):
                if not isinstance(self.launch[b], int):
                    m.Add(self.launch[b] >= self.launch[a])
        for a, b in self._unordered_pairs:
            first, second = self._sequenced(a), self._sequenced(b)
            if first is None or second is None:
                continue
            cond = [lit for lit in (first[2], second[2]) if not isinstance(lit, int)]
            before = m.NewBoolVar(f"before_{p.tasks[a].name}_{p.tasks[b].name}")
            self.before[(a, b)] = before
            m.Add(self.ptime[b] >= self.ptime[a] + 1).OnlyEnforceIf([before] + cond)
            m.Add(second[0] >= first[0] + first[1]).OnlyEnforceIf([before] + cond)
            m.Add(self.ptime[a] >= self.ptime[b] + 1).OnlyEnforceIf([before.Not()] + cond)
            m.Add(first[0] >= second[0] + second[1]).OnlyEnforceIf([before.Not()] + cond)

    def _program_order_links(self) -> None:
        """Program times (or positions) follow the dependencies, through contracted views, and the
        collective order."""
        p, m = self.p, self.m
        for u, v in p.edges:
            if v in self._contracted or not self.scope.decides(v):
                continue
            for a in (self._anchors(u) if u in self._contracted else (u,)):
                m.Add(self.ptime[v] >= self.ptime[a] + 1)
        for a, b, enforce in self._pending_program_order:
            cond = [] if enforce is None else [enforce]
            m.Add(self.ptime[b] >= self.ptime[a] + 1).OnlyEnforceIf(cond)

    def _program_times(self) -> None:
        """One compute stream: program time P per task (see module docstring)."""
        if self.positions:
            self._program_positions()
            return
        p, m, K, half = self.p, self.m, self.K, self.half
        top = K * (self.horizon + 1)
        first = self._past_ptime + 1  # the window's program comes after the past's
        for t in range(self.n):
            if t not in self._contracted and self.scope.decides(t):
                self.ptime[t] = m.NewIntVar(first, top, f"ptime_{p.tasks[t].name}")
        for t in self.timed:
            if t in self.launch:
                anchor, upper = self.launch[t], False
            else:
                anchor, upper = self.start[t], p.tasks[t].duration > 0
            lo = half if upper else 0
            on_default = 1 if t in self.launch else self.on[t].get(0)
            if on_default is None:
                continue  # runs on a comm stream: its program time is free but for precedence and order
            cond = [] if isinstance(on_default, int) else [on_default]
            m.Add(self.ptime[t] >= K * anchor + lo).OnlyEnforceIf(cond)
            m.Add(self.ptime[t] <= K * anchor + lo + half - 1).OnlyEnforceIf(cond)
        self._program_order_links()

    def _memory(self) -> None:
        p, m = self.p, self.m
        capacity = self.budget - p.resident_bytes
        if capacity < 0:
            m.AddBoolOr([])  # resident inputs alone exceed the budget
            return
        if self.single_stream:
            top = len(self.ptime) if self.positions else self.K * (self.horizon + 1) + 1
            point = lambda t: self.ptime[t]  # noqa: E731
            after = lambda t: self.ptime[t] + 1  # noqa: E731
        else:
            top = self.horizon + 1
            point = lambda t: self.start[t]  # noqa: E731
            after = lambda t: self.start[t] + p.tasks[t].duration  # noqa: E731
        ivs, demands = [], []
        scope = self.scope
        for b in p.lifetime_buffers:
            buf, holders = p.buffers[b], p.buffer_holders[b]
            if scope.freed_before(p, b):
                continue  # windowed: freed before the window
            if scope.left_out(buf.producer):
                continue  # windowed: born after the window
            born = 0 if buf.is_input else point(buf.producer)
            held_after = scope.held_after(holders)
            if not p.is_freed(b) or (held_after and self.single_stream):
                end = top  # (windowed) held past the window: every later step comes after the window's
            else:
                end = m.NewIntVar(0, top, f"dies_{buf.name}")
                self.lifetime_end[b] = end
                if held_after:  # windowed, several streams: held until the incumbent frees it
                    m.Add(end >= scope.incumbent_end(held_after))
                for u in holders - held_after:
                    if self.single_stream:
                        for a in self._program_points(u):
                            m.Add(end >= after(a))
                    elif p.tasks[u].role != Role.FREE:
                        m.Add(end >= after(u))
                    else:  # a view ends when the values it passes on are ready
                        for q in p.sync_preds[u]:
                            m.Add(end >= after(q))
                if buf.producer is not None:
                    m.Add(end >= born + 1)
            # (windowed positions: the past's are negative, so a lifetime from there may span more than top)
            size = m.NewIntVar(0, top - min(0, born) if isinstance(born, int) else top, f"life_{buf.name}")
            self.lifetimes.append((born, size, end, b))
            ivs.append(m.NewIntervalVar(born, size, end, f"buf_{buf.name}"))
            demands.append(buf.size)
        if ivs:
            m.AddCumulative(ivs, demands, capacity)

    def fix_order(self, schedule: Schedule, sim: SimResult, fixed: set[int]) -> None:
        """Keep the tasks in ``fixed`` in the incumbent's relative order and on its streams; the others
        stay free. Used by the placement model and by windowed search (solvers/large.py)."""
        p, m = self.p, self.m
        last_on: dict[int, tuple] = {}  # stream -> (end expression) of the previous fixed item
        previous_ptime = None
        for t in schedule.order:
            if t not in fixed or t in self._contracted:
                continue
            if self.single_stream and previous_ptime is not None:
                m.Add(self.ptime[t] >= previous_ptime + 1)
            if self.single_stream:
                previous_ptime = self.ptime[t]
            if p.tasks[t].role == Role.FREE:
                continue
            stream = sim.streams[t]
            lit = self.on[t][stream]
            if not isinstance(lit, int):
                m.Add(lit == 1)
            items = [(stream, self.start[t], self.start[t] + p.tasks[t].duration)]
            if t in self.launch:
                items.append((0, self.launch[t], self.launch[t]))
            for k, begin, end in items:
                if k in last_on:
                    m.Add(begin >= last_on[k])
                last_on[k] = end

    # ---- objective and hint --------------------------------------------------------------------
    def add_objective(self, left_shift: bool = False) -> None:
        if not left_shift:
            self.m.Minimize(self.makespan)
            return
        # makespan first, then the shifted tasks' starts and the launch points as early as possible
        # (`shifted_tasks`: with one compute stream the collectives): a window that launches a collective
        # sooner but does not move the makespan yet is still progress for the next window
        shifted = set(shifted_tasks(self.p))
        starts = [self.start[t] for t in self.timed if t in shifted] + list(self.launch_vars.values())
        # weighted so that one unit of makespan outweighs any change in the starts (each within the horizon)
        self.m.Minimize(max(1, len(starts)) * (self.horizon + 1) * self.makespan + sum(starts))

    def add_hint(self, schedule: Schedule, sim: SimResult) -> None:
        """A complete hint: every variable gets the value the schedule implies."""
        p, m = self.p, self.m
        for t in self.timed:
            m.AddHint(self.start[t], sim.start[t])
            for k, lit in self.on[t].items():
                if not isinstance(lit, int):
                    m.AddHint(lit, int(sim.streams[t] == k))
        launch = sim.launch
        for c, l in self.launch_vars.items():
            m.AddHint(l, launch[c])
        for (a, b), same in self.same.items():
            m.AddHint(same, int(sim.streams[a] == sim.streams[b]))
        pos = schedule.positions()
        for (a, b), lit in self.comm_before.items():
            m.AddHint(lit, int(pos[a] < pos[b]))
        m.AddHint(self.makespan, sim.makespan)
        if self.positions:
            ptime = self._position_hint(schedule)
            for (a, b), before in self.before.items():
                m.AddHint(before, int(ptime[a] < ptime[b]))
        elif self.single_stream:
            ptime = self._program_time_hint(schedule, sim, launch)
        if self.single_stream:
            for t, var in self.ptime.items():
                if not isinstance(var, int):
                    m.AddHint(var, ptime[t])
        else:
            ptime = None
        if self.budget is not None:
            for b, end in self.lifetime_end.items():
                buf = p.buffers[b]
                ends = p.buffer_holders[b]
                if self.single_stream:
                    value = max(ptime[a] + 1 for u in ends for a in self._program_points(u))
                else:
                    value = max(sim.end[u] for u in ends)
                    if buf.producer is not None:
                        value = max(value, sim.start[buf.producer] + 1)
                m.AddHint(end, value)
            for born, size, end, b in self.lifetimes:
                born_value = born if isinstance(born, int) else (
                    ptime[p.buffers[b].producer] if self.single_stream else sim.start[p.buffers[b].producer])
                end_value = end if isinstance(end, int) else None
                if end_value is None:
                    buf = p.buffers[b]
                    ends = p.buffer_holders[b]
                    end_value = max(ptime[a] + 1 for u in ends for a in self._program_points(u)) \
                        if self.single_stream else max(
                        [sim.end[u] for u in ends] + ([born_value + 1] if buf.producer is not None else []))
                m.AddHint(size, end_value - born_value)

    def _position_hint(self, schedule: Schedule) -> dict[int, int]:
        """Positions that sort exactly into the schedule's order (windowed: the past's constants, and the
        window's tasks from 0)."""
        ranked = [t for t in schedule.order if t in self.ptime and self.scope.decides(t)]
        hint = {t: v for t, v in self.ptime.items() if isinstance(v, int)}
        hint.update({t: i for i, t in enumerate(ranked)})
        return hint

    def _program_time_hint(self, schedule: Schedule, sim: SimResult, launch: dict[int, int]) -> dict[int, int]:
        """Program times that sort exactly into the schedule's order."""
        p, K, half = self.p, self.K, self.half
        ptime = {}
        clock, upper = 0, False  # instants on the default stream only grow along the order
        for rank, t in enumerate(schedule.order):
            task = p.tasks[t]
            if t in launch:
                instant, takes_time = launch[t], False
            elif task.role != Role.FREE and sim.streams[t] == 0:
                instant, takes_time = sim.start[t], task.duration > 0
            else:  # views and comm-stream ops take the current program time
                instant, takes_time = clock, False
            if instant > clock:
                clock, upper = instant, False
            upper = upper or takes_time
            ptime[t] = K * clock + (half if upper else 0) + rank
        return ptime

    # ---- extraction ---------------------------------------------------------------------------
    def extract(self, solver: cp_model.CpSolver) -> Schedule:
        """The solution's schedule: program order from program times (one compute stream) or from
        start times (several), with the past first and the left-out future last, in the incumbent's order."""
        p, scope = self.p, self.scope
        value = lambda x: x if isinstance(x, int) else solver.Value(x)  # noqa: E731 (constants of the past)
        streams = {t: scope.sim.streams[t] for t in scope.past + scope.future if p.tasks[t].role != Role.FREE}
        for t in self.timed:
            for k, lit in self.on[t].items():
                if isinstance(lit, int) or solver.Value(lit):
                    streams[t] = k
                    break
        if self.single_stream:
            key = {t: (value(self.ptime[t]), 1, t) for t in self.ptime}
            # a view with no input to follow: the first of the past (windowed positions: the past's are
            # negative), or the first of the window
            bottom = min((k[0] for k in key.values()), default=0) - 1
            floor = self._past_ptime + 1 if scope.past else bottom  # the window's views stay in the window
            for t in range(self.n):  # contracted views: right after their inputs, before what shares their
                if t in self._contracted and not scope.left_out(t):  # program time (the window's first task)
                    first = bottom if scope.is_past(t) else floor
                    key[t] = (max([key[a][0] for a in self._anchors(t)] + [first]), 0, t)
        else:
            key = {t: (i - len(scope.past), 0, t) for i, t in enumerate(scope.past)}
            starts = {t: value(v) for t, v in self.start.items()}
            launches = {c: value(v) for c, v in self.launch.items()}
            key.update(start_time_keys(p, self.timed, starts, launches, skip=scope.past_set | scope.future_set,
                                       rank=self.rank))
        after = 1 << 62  # windowed: the tasks left out follow in the incumbent's order
        for i, t in enumerate(scope.future):
            key[t] = (after + i, 0, t)
        order = topological_by_key(p, key)
        return Schedule(order=order, streams=streams, method="cpsat")

    def check_hint(self) -> None:
        """Fail loudly if the hint is not a feasible point of the model: solve with
        every hinted variable fixed. (CP-SAT's own debug_crash_on_bad_hint aborts
        the process, and in 9.15 also on hints that this check and a presolve-free
        solve both accept.)"""
        proto = self.m.Proto()
        hinted = set(proto.solution_hint.vars)
        missing = [v.name for i, v in enumerate(proto.variables) if i not in hinted]
        if missing:
            raise AssertionError(f"hint is incomplete: no value for {missing[:5]}")
        checker = cp_model.CpSolver()
        checker.parameters.fix_variables_to_their_hinted_value = True
        checker.parameters.num_workers = 1
        checker.parameters.max_time_in_seconds = 30
        status = checker.Solve(self.m)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            raise AssertionError(f"hint is not a feasible point of the CP-SAT model ({checker.StatusName(status)})")
