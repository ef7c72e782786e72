"""CP-SAT model: program order, streams and launch/wait placement under a memory budget.

The model reads top to bottom: scale, variables, constraints, objective,
hint, solve, extract. Its semantics are `simulate`'s (DESIGN.md):

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
  simulator's rule exactly. With several compute streams memory is taken over
  time: a buffer lives from its producer's start to its last user's end.
* Collectives keep their original order (SPMD safety) unless told otherwise.

The program order of a solution is the tasks sorted by program time; the
schedule is then re-simulated, and never returned if worse than the hint.
Any feasible model solution re-simulates to a makespan no larger than the
model's (serial schedule generation on start-sorted lists never starts a task
later), so the model's optimum is the simulator's optimum for one compute
stream; with several, re-simulation may move buffer lifetimes, and the result
is checked.
"""

from __future__ import annotations

import math
from functools import cached_property
import time
from collections.abc import Callable

from ortools.sat.python import cp_model

from solvercast.bounds import earliest_starts, latest_starts, lower_bounds
from solvercast.errors import InfeasibleBudgetError, InvalidScheduleError
from solvercast.problem import Problem, Role
from solvercast.schedule import Schedule
from solvercast.simulate import SimResult, simulate, validate
from solvercast.solvers.common import scale_problem, topological_by_key
from solvercast.solvers.result import SolveResult, SolveStatus

def model_horizon_cap(num_tasks: int) -> int:
    """Time units the model may span; longer horizons are scaled down (durations rounded up).

    Small domains make CP-SAT much faster on large models (synthetic 1,000 tasks
    with memory, 30 s: nothing better than the warm start at 2e6 units, -0.5 %
    at 1e5), while tiny graphs keep nanosecond precision, so the cap shrinks with
    the graph: 1e8 / tasks, within [5e4, 2e6]."""
    return int(min(2_000_000, max(50_000, 100_000_000 // max(1, num_tasks))))
OCCUPANCY_SCALE = 1000
# CP-SAT deterministic time per wall-clock second on these models, 2 cores, 2 workers: measured 0.05-0.12
# with the other core busy (synthetic 300 tasks, fsdp_layers 4 layers) and 0.19-0.27 on an idle machine.
# 0.1 lets an idle machine use a third to a half of its limit deterministically (measured: 3.4 s of 10 s on
# fsdp_layers 4 layers); on a busy one the wall clock may end
# the search first, and the result says so (stats["stopped_by_wall_clock"], and optimize's report).
DETERMINISTIC_UNITS_PER_SECOND = 0.1


class _Model:
    """One CP-SAT model of a (scaled) problem with a horizon."""

    def __init__(self, problem: Problem, horizon: int, budget: int | None):
        self.p = problem
        self.horizon = horizon
        self.budget = budget
        self.m = cp_model.CpModel()
        n = problem.num_tasks
        self.n = n
        self.single_stream = problem.machine.compute_streams == 1
        self.K = 2 * (n + 1)  # program-time ticks per time unit (one compute stream only)
        self.half = n + 1
        self.timed = [t for t in range(n) if problem.tasks[t].role != Role.FREE]
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
        # windowed search (`scope`): tasks before the window are constants, tasks after it are left out
        self.past: list[int] = []
        self.future: list[int] = []
        self.gone: set[int] = set()  # the future, as a set
        self.frontier: dict[int, int] = {}  # stream -> when the past leaves it free
        self._past_ptime = -1  # the past's last program time

    def scope(self, schedule: Schedule, sim: SimResult, lo: int, hi: int) -> None:
        """Model only the tasks at positions ``lo:hi`` of ``schedule`` (call before `add_variables`).

        Tasks before the window keep the incumbent's times, streams and program times as constants
        (`simulate` times a task from what comes before it in program order, so no reorder of the
        window moves them), and the window's tasks start after the past is done with each stream.
        Tasks after the window are left out: buffers they hold live past the window, and the
        objective only sees the window (`solve_cpsat` judges the whole schedule with `simulate`).
        A model of a few hundred tasks, whatever the graph's size."""
        p = self.p
        order = list(schedule.order)
        self.past, window, self.future = order[:lo], order[lo:hi], order[hi:]
        self.gone = set(self.future)
        self._scope_streams = sim.streams
        self._scope_end = sim.end
        ptime = self._program_time_hint(schedule, sim, sim.launch) if self.single_stream else {}
        self._past_ptime = max((ptime[t] for t in self.past if t in ptime), default=-1)
        for t in self.past:
            if t not in self._contracted:
                self.ptime[t] = ptime.get(t, 0)
            if p.tasks[t].role == Role.FREE:
                continue
            self.start[t] = sim.start[t]
            self.on[t] = {sim.streams[t]: 1}
            self.frontier[sim.streams[t]] = max(self.frontier.get(sim.streams[t], 0), sim.end[t])
            if t in p.wait_of:
                self.launch[t] = sim.launch[t]
                self.frontier[0] = max(self.frontier.get(0, 0), sim.launch[t])
        self.timed = [t for t in window if p.tasks[t].role != Role.FREE]

    @property
    def launch_vars(self) -> dict[int, cp_model.IntVar]:
        """Launch points that are variables (not constants of the past)."""
        return {c: v for c, v in self.launch.items() if not isinstance(v, int)}

    # ---- variables --------------------------------------------------------------------------
    def add_variables(self) -> None:
        p, m = self.p, self.m
        est = earliest_starts(p)
        lst = latest_starts(p, self.horizon)
        for t in self.timed:
            task = p.tasks[t]
            lo, hi = est[t], max(est[t], lst[t])
            if self.frontier:  # windowed: on whichever stream, not before the past is done with all
                lo = max(lo, min(self.frontier.get(k, 0) for k in p.allowed_streams(t)))
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
                if self.frontier.get(k, 0) > lo:
                    m.Add(s >= self.frontier[k]).OnlyEnforceIf(lit)
        for c in p.wait_of:
            if c in self.gone or c in self.launch:  # left out, or a constant of the past
                continue
            self.launch[c] = m.NewIntVar(self.frontier.get(0, 0),
                                         max(self.frontier.get(0, 0), est[c], lst[c] - p.machine.sync_overhead),
                                         f"launch_{p.tasks[c].name}")
            self.intervals[0].append((c, m.NewFixedSizeIntervalVar(self.launch[c], 0, f"launch_iv_{p.tasks[c].name}")))
        self.makespan = m.NewIntVar(max(est[t] + p.tasks[t].duration for t in self.timed) if self.timed else 0,
                                    self.horizon, "makespan")

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
    def add_constraints(self) -> None:
        self._no_overlap_per_stream()
        self._precedences()
        self._launches()
        self._collective_order()
        self._occupancy()
        if self.single_stream:
            self._program_times()
        if self.budget is not None:
            self._memory()
        for t in self.timed:
            self.m.Add(self.makespan >= self.start[t] + self.p.tasks[t].duration)

    def _no_overlap_per_stream(self) -> None:
        for ivs in self.intervals.values():
            if len(ivs) > 1:
                self.m.AddNoOverlap([iv for _, iv in ivs])

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
        comms = [c for c in p.comm_tasks if c not in self.gone]
        past = set(self.past)
        if len(comms) < 2:
            return
        if p.preserve_collective_order:
            for a, b in zip(comms, comms[1:]):
                if b not in past:
                    self._comm_precede(a, b)
            # non-consecutive pairs on a shared comm stream follow from the chain on one comm stream;
            # with several, order each pair that may share one
            if p.machine.comm_streams > 1 or any(not p.is_async_comm(c) for c in comms):
                for i, a in enumerate(comms):
                    for b in comms[i + 1:]:
                        if b not in past:
                            self._same_stream_order(a, b)
            return
        for i, a in enumerate(comms):
            for b in comms[i + 1:]:
                if a in past and b in past:
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
            la, lb = self._program_key(a), self._program_key(b)
            # ties at one instant are broken by task id
            m.Add(lb >= la + (0 if a < b else 1)).OnlyEnforceIf(cond)
        self._same_stream_order(a, b, cond)

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
            self.m.AddCumulative(ivs, demands, OCCUPANCY_SCALE)

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

    def _program_times(self) -> None:
        """One compute stream: program time P per task (see module docstring)."""
        p, m, K, half = self.p, self.m, self.K, self.half
        top = K * (self.horizon + 1)
        past = set(self.past)
        first = self._past_ptime + 1  # the window's program comes after the past's
        for t in range(self.n):
            if t not in self._contracted and t not in past and t not in self.gone:
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
        for u, v in p.edges:
            if v in self._contracted or v in past or v in self.gone:
                continue
            for a in (self._anchors(u) if u in self._contracted else (u,)):
                m.Add(self.ptime[v] >= self.ptime[a] + 1)
        for a, b, enforce in self._pending_program_order:
            cond = [] if enforce is None else [enforce]
            m.Add(self.ptime[b] >= self.ptime[a] + 1).OnlyEnforceIf(cond)

    def _memory(self) -> None:
        p, m = self.p, self.m
        capacity = self.budget - p.resident_bytes
        if capacity < 0:
            m.AddBoolOr([])  # resident inputs alone exceed the budget
            return
        if self.single_stream:
            top = self.K * (self.horizon + 1) + 1
            point = lambda t: self.ptime[t]  # noqa: E731
            after = lambda t: self.ptime[t] + 1  # noqa: E731
        else:
            top = self.horizon + 1
            point = lambda t: self.start[t]  # noqa: E731
            after = lambda t: self.start[t] + p.tasks[t].duration  # noqa: E731
        ivs, demands = [], []
        past = set(self.past)
        for b in p.lifetime_buffers:
            buf, holders = p.buffers[b], p.buffer_holders[b]
            if self.past and holders <= past:
                continue  # windowed: freed before the window
            if buf.producer in self.gone:
                continue  # windowed: born after the window
            born = 0 if buf.is_input else point(buf.producer)
            if buf.is_output or (holders & self.gone and self.single_stream):
                end = top  # (windowed) held past the window: every later step comes after the window's
            else:
                end = m.NewIntVar(0, top, f"dies_{buf.name}")
                self.lifetime_end[b] = end
                if holders & self.gone:  # windowed, several streams: held until the incumbent frees it
                    m.Add(end >= max(self._scope_end[u] for u in holders & self.gone))
                for u in holders - self.gone:
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
            size = m.NewIntVar(0, top, f"life_{buf.name}")
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
        # makespan first, then every start (launch points included) as early as possible: a window that
        # fills an idle gap but does not move the makespan yet is still progress for the next window
        starts = [self.start[t] for t in self.timed] + list(self.launch_vars.values())
        # weighted so that one unit of makespan outweighs any change in the starts (each within the horizon)
        self.m.Minimize(len(starts) * (self.horizon + 1) * self.makespan + sum(starts))

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
        if self.single_stream:
            ptime = self._program_time_hint(schedule, sim, launch)
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
        p = self.p
        value = lambda x: x if isinstance(x, int) else solver.Value(x)  # noqa: E731 (constants of the past)
        streams = {t: self._scope_streams[t] for t in self.past + self.future if p.tasks[t].role != Role.FREE}
        for t in self.timed:
            for k, lit in self.on[t].items():
                if isinstance(lit, int) or solver.Value(lit):
                    streams[t] = k
                    break
        if self.single_stream:
            key = {t: (value(self.ptime[t]), t) for t in self.ptime}
            past = set(self.past)
            floor = self._past_ptime + 1 if self.past else -1  # the window's views stay in the window
            for t in range(self.n):  # contracted views: right after their inputs
                if t in self._contracted and t not in self.gone:
                    key[t] = (max([key[a][0] for a in self._anchors(t)] + [-1 if t in past else floor]), t)
        else:
            key = {t: (i - len(self.past), 0, t) for i, t in enumerate(self.past)}
            for t in self.timed:
                if t in self.launch:
                    key[t] = (solver.Value(self.launch[t]), 0, t)
                else:
                    key[t] = (solver.Value(self.start[t]), int(p.tasks[t].duration > 0), t)
            for t in range(self.n):  # views: when their inputs are ready, in topological (id) order
                if p.tasks[t].role == Role.FREE and t not in key and t not in self.gone:
                    ready = max((solver.Value(self.start[q]) + p.tasks[q].duration for q in p.sync_preds[t]),
                                default=0)
                    key[t] = (ready, 0, t)
        after = 1 << 62  # windowed: the tasks left out follow in the incumbent's order
        for i, t in enumerate(self.future):
            key[t] = (after + i, t) if self.single_stream else (after + i, 0, t)
        order = topological_by_key(p, key)
        return Schedule(order=order, streams=streams, method="cpsat")


def _check_hint(model: _Model) -> None:
    """Fail loudly if the hint is not a feasible point of the model: solve with
    every hinted variable fixed. (CP-SAT's own debug_crash_on_bad_hint aborts
    the process, and in 9.15 also on hints that this check and a presolve-free
    solve both accept.)"""
    proto = model.m.Proto()
    hinted = set(proto.solution_hint.vars)
    missing = [v.name for i, v in enumerate(proto.variables) if i not in hinted]
    if missing:
        raise AssertionError(f"hint is incomplete: no value for {missing[:5]}")
    checker = cp_model.CpSolver()
    checker.parameters.fix_variables_to_their_hinted_value = True
    checker.parameters.num_workers = 1
    checker.parameters.max_time_in_seconds = 30
    status = checker.Solve(model.m)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise AssertionError(f"hint is not a feasible point of the CP-SAT model ({checker.StatusName(status)})")


#: with several streams, how many of the newest solutions CP-SAT reported are simulated to pick the best
KEPT_SOLUTIONS_JUDGED = 32


class _Solutions(cp_model.CpSolverSolutionCallback):
    """Reports each improving solution, and with several compute streams keeps
    their schedules for `_best_valid`: re-simulation may push the last one over
    the budget (memory is judged over time there), or time an earlier one faster."""

    def __init__(self, model: _Model, say: Callable[[str], None] | None, factor: int, keep: bool):
        super().__init__()
        self.model, self.say, self.factor, self.keep = model, say, factor, keep
        self.schedules: list[Schedule] = []

    def on_solution_callback(self) -> None:
        if self.say:
            self.say(f"  CP-SAT: makespan {self.Value(self.model.makespan) * self.factor / 1e3:.1f} us "
                     f"(model bound {self.BestObjectiveBound() * self.factor / 1e3:.1f}) at {self.WallTime():.1f} s")
        if self.keep:
            self.schedules.append(self.model.extract(self))


def _potential(sim: SimResult, left_shift: bool) -> tuple[int, ...]:
    """What a solution must lower to replace the hint: the makespan, then (left_shift) the sum of starts."""
    return (sim.makespan, sum(sim.start)) if left_shift else (sim.makespan,)


def _best_valid(problem: Problem, candidates: list[Schedule], budget: int | None, left_shift: bool,
                ) -> tuple[Schedule | None, SimResult | None, dict[int, InvalidScheduleError]]:
    """The candidate that `validate` accepts with the lowest `_potential` (first wins ties), its
    simulation, and the errors of the rejected ones by index. With several streams the model's times
    and memory are not the simulator's: the final solution may break the budget, and an earlier one
    may simulate faster."""
    best, best_sim, errors = None, None, {}
    for i, candidate in enumerate(candidates):
        try:
            sim = validate(problem, candidate, memory_budget=budget)
        except InvalidScheduleError as e:  # the model and the simulator disagree on this one
            errors[i] = e
            continue
        if best_sim is None or _potential(sim, left_shift) < _potential(best_sim, left_shift):
            best, best_sim = candidate, sim
    return best, best_sim, errors


def solve_cpsat(
    problem: Problem,
    time_limit: float = 10.0,
    memory_budget: int | None = None,
    hint: Schedule | None = None,
    *,
    deterministic: bool = True,
    workers: int = 2,
    seed: int = 0,
    log_progress: bool | Callable[[str], None] = False,
    debug_hint: bool = False,  # first check that the hint is a feasible point of the model (raises if not)
    progress: Callable[[str], None] | None = None,
    fixed_order: set[int] | None = None,
    window: tuple[int, int] | None = None,
    left_shift: bool = False,
    repair_hint: bool = False,
) -> SolveResult:
    """Solve ``problem`` with CP-SAT, warm-started from ``hint``.

    ``memory_budget`` defaults to the problem's machine budget. With
    ``deterministic`` the time limit is CP-SAT's deterministic time (same
    answer on every run and rank) instead of wall-clock seconds, converted at
    DETERMINISTIC_UNITS_PER_SECOND; the wall clock still caps the call at
    ``time_limit``, and ``stats["stopped_by_wall_clock"]`` says when that cap,
    which is not deterministic, ended the search. ``progress`` receives a line
    per improved solution. ``fixed_order``: tasks kept in the hint's relative
    order and on its streams (a reduced model; see solvers/large.py).
    ``window``: (lo, hi) positions of the hint's order; only those tasks are
    modelled (see `_Model.scope`).
    ``left_shift``: keep the hint's makespan as a cap and minimize it, then
    the sum of start times; a schedule with the same makespan and earlier
    starts then counts as an improvement.

    Returns the better of the solver's schedule and the hint, judged by
    `simulate`; the status says which. Raises `InfeasibleBudgetError` when the
    solver proves no schedule fits the budget.
    """
    t0 = time.perf_counter()
    budget = problem.machine.memory_budget if memory_budget is None else memory_budget
    build_started = t0
    hint_sim = validate(problem, hint, memory_budget=budget) if hint is not None else None

    serial = sum(t.duration for t in problem.tasks) + 2 * problem.machine.sync_overhead * problem.num_tasks
    horizon = hint_sim.makespan if hint_sim is not None else serial
    modelled = problem.num_tasks if window is None else window[1] - window[0]
    factor = max(1, math.ceil(horizon / model_horizon_cap(modelled)))
    scaled = scale_problem(problem, factor)
    scaled_hint_sim = simulate(scaled, hint) if hint is not None else None
    model_horizon = scaled_hint_sim.makespan if scaled_hint_sim is not None else -(-serial // factor)

    model = _Model(scaled, model_horizon, budget)
    if window is not None:
        if hint is None:
            raise ValueError("window models part of the hint: give a hint")
        model.scope(hint, scaled_hint_sim, *window)
    model.add_variables()
    model.add_constraints()
    model.add_objective(left_shift)
    if left_shift:
        if hint is None:
            raise ValueError("left_shift improves on the hint: give a hint")
        model.m.Add(model.makespan <= model_horizon)
    # our bounds hold for the scaled problem too (its durations are rounded up), and CP-SAT's own bound
    # with memory is weak: telling it lets it prove optimality sooner
    if window is None:
        model.m.Add(model.makespan >= lower_bounds(problem).makespan // factor)
    if fixed_order:
        if hint is None:
            raise ValueError("fixed_order keeps the hint's order: give a hint")
        model.fix_order(hint, scaled_hint_sim, fixed_order)
    if hint is not None:
        model.add_hint(hint, scaled_hint_sim)

    solver = cp_model.CpSolver()
    params = solver.parameters
    params.num_workers = workers
    params.random_seed = seed
    if deterministic:
        params.max_deterministic_time = time_limit * DETERMINISTIC_UNITS_PER_SECOND
        params.interleave_search = False
    # Deterministic time advances slower than the wall clock on this problem (measured on 2 cores:
    # DETERMINISTIC_UNITS_PER_SECOND); the budget is converted so that the deterministic limit, which
    # gives the same answer on every rank, normally ends the search, and the wall clock caps the call.
    wall_cap = time_limit
    params.max_time_in_seconds = wall_cap
    # repair_hint helped at ~1k tasks in the prototype, but OR-Tools 9.15 sometimes aborts the whole
    # process with it ("Check failed: heuristics.fixed_search != nullptr", seen with and without
    # fixed_order when the time limit falls early): off unless asked for.
    params.repair_hint = bool(repair_hint and hint is not None)
    if debug_hint and hint is not None:
        _check_hint(model)
    if log_progress:
        params.log_search_progress = True
        if callable(log_progress):
            solver.log_callback = log_progress
    build_time = time.perf_counter() - build_started
    callback = _Solutions(model, progress, factor, keep=not model.single_stream and budget is not None)
    status = solver.Solve(model.m, callback)
    wall = time.perf_counter() - t0
    name = solver.StatusName(status)
    # a bound on the scaled model (durations rounded up) can exceed the real optimum: reported unscaled only
    # CP-SAT's optimum and bound are the problem's only for the whole, unscaled model with the makespan
    # objective (a scaled model's durations are rounded up; reduced models solve part of it), and, with
    # several compute streams, only without synchronous comm ops (their program order is approximated
    # by start times, which excludes some valid schedules)
    sync_comm = any(not problem.is_async_comm(c) for c in problem.comm_tasks)
    exact = (factor == 1 and not fixed_order and window is None and not left_shift
             and not (sync_comm and problem.machine.compute_streams > 1))
    bound = int(solver.BestObjectiveBound()) if status in (cp_model.OPTIMAL, cp_model.FEASIBLE) and exact else None
    stopped_by_wall = deterministic and solver.WallTime() >= wall_cap * 0.98
    stats = {"scale": factor, "stopped_by_wall_clock": stopped_by_wall, "build_time": build_time,
             "deterministic_time": solver.deterministic_time, "solver_wall_time": solver.WallTime(), "variables": len(model.m.Proto().variables),
             "constraints": len(model.m.Proto().constraints), "branches": solver.NumBranches()}

    if status == cp_model.INFEASIBLE:
        raise InfeasibleBudgetError(
            f"CP-SAT proved that no schedule keeps peak memory within {budget} B"
            + (f" (smallest peak a heuristic found: {hint_sim.peak_memory} B)" if hint_sim else ""),
            best_peak=hint_sim.peak_memory if hint_sim else None)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        if hint is None:
            return SolveResult(None, SolveStatus.NO_SOLUTION, None, None, None, wall, name,
                               f"CP-SAT found no schedule in {time_limit:g} s ({name})", stats)
        return SolveResult(hint, SolveStatus.HINT_KEPT, hint_sim, None, None, wall, name,
                           f"CP-SAT found no solution in {time_limit:g} s ({name}); kept the warm start", stats)

    final = model.extract(solver)
    objective = int(solver.Value(model.makespan)) * factor
    # the newest kept solutions, the final one's repeat left out: each costs a simulation
    earlier = [c for c in callback.schedules[::-1][:KEPT_SOLUTIONS_JUDGED] if c != final]
    schedule, sim, errors = _best_valid(problem, [final] + earlier, budget, left_shift)
    if schedule is None:
        if hint is None:
            raise errors[0]
        return SolveResult(hint, SolveStatus.HINT_KEPT, hint_sim, objective, bound, wall, name,
                           f"CP-SAT's schedule failed validation ({errors[0]}); kept the warm start", stats)
    if schedule is not final:
        status = cp_model.FEASIBLE  # an earlier solution: no longer the proven optimum
        stats["earlier_solution"] = f"the final one: {errors[0]}" if 0 in errors else "the final one simulated slower"
    if hint_sim is not None and _potential(sim, left_shift) >= _potential(hint_sim, left_shift):
        msg = "CP-SAT proved the warm start optimal" if status == cp_model.OPTIMAL and exact else \
            "CP-SAT found nothing better than the warm start"
        solved = SolveStatus.OPTIMAL if status == cp_model.OPTIMAL and exact else SolveStatus.HINT_KEPT
        return SolveResult(hint, solved, hint_sim, objective, bound, wall, name, msg, stats)
    solved = SolveStatus.OPTIMAL if status == cp_model.OPTIMAL and exact else SolveStatus.FEASIBLE
    return SolveResult(schedule, solved, sim, objective, bound, wall, name, "", stats)
