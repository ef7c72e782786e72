"""MILP model (PuLP: HiGHS or CBC) of the scheduling problem, for small graphs.

Used to cross-check CP-SAT optima on problems of up to ~15 tasks. The
semantics are `simulate`'s (DESIGN.md, "Execution semantics").

Formulation: position-based (assignment). Why positions and not, like CP-SAT,
times from which the order is read off: memory is judged in *host program
order* (`memory_profile`), and the launch point of an asynchronous collective
is its place in that order. An assignment x[t,k] = "task t is the k-th task
issued" encodes the program order directly, so

* precedence is a prefix-sum inequality:  X(v,k) <= X(u,k-1), where
  X(t,k) = sum_{k'<=k} x[t,k'] = [pos(t) <= k];
* resident bytes at step k are linear in prefix sums: a buffer is alive at k
  iff its producer is at or before k and some user (or the producer) is at or
  after k, so alive(b,k) >= X(prod,k) - X(u,k-1) for every user u (alive is a
  continuous variable only pushed down by the budget: exact at the optimum);
* "a before b" binaries o[a,b] are tied to the positions exactly by
  o >= X(a,k) - X(b,k) and 1 - o >= X(b,k) - X(a,k) for all k, and drive the
  big-M disjunctions of timing:
  - tasks sharing a stream run in program order: before(a,b) and same stream
    => start_b >= end_a (waits are zero-length tasks, so they block);
  - an asynchronous collective c has a launch point L_c, a zero-time point on
    the default stream 0: L_c >= end of every stream-0 task at an earlier
    position, every stream-0 task at a later position starts >= L_c, launches
    keep program order, L_c >= end_p + sync*[p not on 0] for each input p, and
    c starts >= L_c + sync;
  - a dependency p -> t across streams costs sync (a "streams differ"
    variable, forced to 1 when they differ);
* stream choice: binaries y[t,s] where a task has several allowed streams.

Objective: makespan. `simulate` runs each task as early as its order and
streams allow; the MILP also allows delays. With one compute stream every
`simulate` constraint is a lower bound the MILP also imposes, so re-simulating
the MILP's order and streams never ends later than the MILP's makespan, and the
simulation of any valid schedule is a feasible MILP point: the optima agree,
and memory (position-based) is exact.

Supported:

* one compute stream, with or without a memory budget;
* two compute streams WITHOUT a memory budget: the occupancy rule (tasks on
  different compute streams never exceed total occupancy 1) is, with two
  streams, pairwise: two tasks whose occupancies sum to more than 1 never
  overlap. The schedule is read both from the positions and from the MILP's
  times (sorted, as CP-SAT does; serial generation on a start-sorted list
  never starts a task later), and the better simulation is returned.
* More than two compute streams, or several compute streams with a memory
  budget (memory is then judged over time, not program order), raise
  `UnsupportedProblemError`: use CP-SAT.

Results are always re-simulated and validated; the returned schedule is never
worse than the warm start.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time
import warnings

from solvercast.ir.bounds import earliest_starts, latest_starts, lower_bounds
from solvercast.errors import InfeasibleBudgetError, UnsupportedProblemError
from solvercast.ir.problem import Problem, Role
from solvercast.ir.schedule import Schedule
from solvercast.ir.simulate import SimResult, simulate, validate
from solvercast.solvers.common import (scale_problem, serial_horizon, serial_syncs, start_time_keys,
                                       topological_by_key)
from solvercast.solvers.result import Outcome, SolveResult, SolveStatus, best_valid


def _import_pulp():
    """Import PuLP without loading highspy into this process.

    PuLP loads highspy's C extension with RTLD_GLOBAL on import, and highspy
    and OR-Tools (which bundles its own HiGHS) cannot share a process: whichever
    comes second fails to import (undefined HiGHS symbols). CP-SAT lives in the
    same process as this module, so HiGHS runs in a subprocess instead (see
    `_solve_highs`); CBC is a subprocess anyway.
    """
    if "pulp" in sys.modules:
        return sys.modules["pulp"]
    blocked = "highspy" not in sys.modules
    if blocked:
        sys.modules["highspy"] = None  # makes `import highspy` fail quietly inside PuLP
    try:
        import pulp
    finally:
        if blocked and sys.modules.get("highspy", 0) is None:
            del sys.modules["highspy"]
    return pulp


pulp = _import_pulp()

MAX_MODEL_HORIZON = 1_000_000  # time units in the model; larger horizons are scaled down (big-M numerics)
_OCC_SLACK = 1e-9


_HIGHS_SCRIPT = r"""
import json, sys
import highspy
args = json.load(open(sys.argv[1]))
h = highspy.Highs()
h.setOptionValue("output_flag", bool(args["msg"]))
h.setOptionValue("time_limit", float(args["time_limit"]))
h.readModel(args["mps"])
names = list(h.getLp().col_names_)
if args["start"] is not None:
    sol = highspy.HighsSolution()
    sol.col_value = [float(args["start"].get(n, 0.0)) for n in names]
    sol.value_valid = True
    h.setSolution(sol)
h.run()
info = h.getInfo()
values = list(h.getSolution().col_value)
json.dump({"status": h.modelStatusToString(h.getModelStatus()),
           "has_solution": int(info.primal_solution_status) == 2,
           "bound": info.mip_dual_bound,
           "values": dict(zip(names, values))}, open(args["out"], "w"))
"""


def highs_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("highspy") is not None


def _solve_highs(lp, time_limit: float, msg: bool, warm: bool) -> tuple[str, str, float | None]:
    """Solve ``lp`` with highspy in a subprocess (see `_import_pulp`); load the
    values into the PuLP variables. Returns (kind, HiGHS status, dual bound),
    kind in optimal / feasible / infeasible / none."""
    with tempfile.TemporaryDirectory(prefix="solvercast_milp_") as tmp:
        mps, out, args_path = (os.path.join(tmp, f) for f in ("model.mps", "out.json", "args.json"))
        lp.writeMPS(mps)
        start = None
        if warm and all(v.varValue is not None for v in lp.variables()):
            start = {v.name: float(v.varValue) for v in lp.variables()}
        with open(args_path, "w") as f:
            json.dump({"mps": mps, "out": out, "msg": msg, "time_limit": time_limit, "start": start}, f)
        proc = subprocess.run([sys.executable, "-c", _HIGHS_SCRIPT, args_path],
                              capture_output=not msg, text=True, timeout=time_limit + 120)
        if proc.returncode != 0 or not os.path.exists(out):
            raise RuntimeError(f"HiGHS subprocess failed (rc {proc.returncode}): {(proc.stderr or '')[-2000:]}")
        with open(out) as f:
            res = json.load(f)
    status = res["status"]
    if status == "Infeasible":
        return "infeasible", status, None
    if not res["has_solution"]:
        return "none", status, None
    for v in lp.variables():
        v.varValue = res["values"].get(v.name, 0.0)
    kind = "optimal" if status == "Optimal" else "feasible"
    bound = res["bound"] if math.isfinite(res["bound"]) else None
    return kind, status, bound


def _solve_cbc(lp, time_limit: float, msg: bool, warm: bool) -> tuple[str, str, float | None]:
    note = ""
    try:
        lp.solve(pulp.PULP_CBC_CMD(msg=msg, timeLimit=time_limit, warmStart=warm))
    except pulp.PulpSolverError as e:
        # the bundled CBC can crash (SIGSEGV) when its time limit strikes while it
        # processes a MIP start: retry once without it, then report no solution
        if not warm:
            return "none", f"CBC failed: {e}", None
        note = " (CBC crashed with the warm start; solved without it)"
        try:
            lp.solve(pulp.PULP_CBC_CMD(msg=msg, timeLimit=time_limit, warmStart=False))
        except pulp.PulpSolverError as e2:
            return "none", f"CBC failed: {e2}", None
    status, sol_status = lp.status, lp.sol_status
    name = f"{pulp.LpStatus.get(status, status)} / {pulp.LpSolution.get(sol_status, sol_status)}{note}"
    if status == pulp.LpStatusInfeasible or sol_status == pulp.LpSolutionInfeasible:
        return "infeasible", name, None
    if sol_status == pulp.LpSolutionOptimal:
        return "optimal", name, None
    if sol_status == pulp.LpSolutionIntegerFeasible:
        return "feasible", name, None
    return "none", name, None


class _Model:
    def __init__(self, p: Problem, horizon: int, budget: int | None):
        self.p = p
        self.n = n = p.num_tasks
        self.H = horizon
        self.budget = budget
        m = p.machine
        self.sync = m.sync_overhead
        self.M = horizon + 2 * self.sync + max((t.duration for t in p.tasks), default=0) + 1
        self.lp = pulp.LpProblem("solvercast_milp", pulp.LpMinimize)
        self.timed = [t for t in range(n) if p.tasks[t].role != Role.FREE]
        self.asyncs = list(p.async_chain)
        self.vars: list[tuple[pulp.LpVariable, str, tuple]] = []  # (var, kind, key) for the warm start

        # program-order relation that every schedule obeys: edges, plus the collective order kept (`comm_chains`)
        direct = set(p.edges)
        direct |= set(p.comm_order_pairs)
        self.direct = sorted(direct)
        succ = [set() for _ in range(n)]
        for u, v in self.direct:
            succ[u].add(v)
        desc = [set() for _ in range(n)]
        for t in range(n - 1, -1, -1):
            for v in succ[t]:
                desc[t] |= {v} | desc[v]
        self.desc = desc
        anc_count = [0] * n
        for t in range(n):
            for v in desc[t]:
                anc_count[v] += 1
        self.window = [(anc_count[t], n - 1 - len(desc[t])) for t in range(n)]

    def _var(self, name, kind, key, low=None, up=None, cat=pulp.LpContinuous):
        if hasattr(self.lp, "add_variable"):  # PuLP >= 3.3 (LpVariable(...) is deprecated there)
            v = self.lp.add_variable(name, low, up, cat=cat)
        else:  # pragma: no cover - older PuLP
            v = pulp.LpVariable(name, lowBound=low, upBound=up, cat=cat)
        self.vars.append((v, kind, key))
        return v

    # ---- positions ------------------------------------------------------------------------
    def X(self, t: int, k: int):
        """[pos(t) <= k] as a linear expression (or a constant)."""
        lo, hi = self.window[t]
        if k < lo:
            return 0
        if k >= hi:
            return 1
        return pulp.lpSum(self.x[t][j] for j in range(lo, k + 1))

    def before(self, a: int, b: int):
        """[pos(a) < pos(b)]."""
        if b in self.desc[a]:
            return 1
        if a in self.desc[b]:
            return 0
        return self.o[(a, b)] if a < b else 1 - self.o[(b, a)]

    def build(self) -> None:
        n, lp = self.n, self.lp
        self.x = []
        for t in range(n):
            lo, hi = self.window[t]
            self.x.append({k: self._var(f"x_{t}_{k}", "x", (t, k), cat=pulp.LpBinary) for k in range(lo, hi + 1)})
            lp += pulp.lpSum(self.x[t].values()) == 1
        for k in range(n):
            lp += pulp.lpSum(self.x[t][k] for t in range(n) if k in self.x[t]) == 1
        for u, v in self.direct:
            for k in range(n):
                xv, xu = self.X(v, k), self.X(u, k - 1)
                if not (isinstance(xv, int) and isinstance(xu, int)):
                    lp += xv <= xu
        self.o = {}
        for a in range(n):
            for b in range(a + 1, n):
                if b in self.desc[a] or a in self.desc[b]:
                    continue
                o = self._var(f"o_{a}_{b}", "o", (a, b), cat=pulp.LpBinary)
                self.o[(a, b)] = o
                for k in range(n):
                    d = self.X(a, k) - self.X(b, k)
                    lp += o >= d
                    lp += 1 - o >= -d
        self._streams()
        self._timing()
        if self.budget is not None:
            self._memory()

    def _streams(self) -> None:
        p = self.p
        self.y: dict[int, dict[int, object]] = {}
        for t in self.timed:
            allowed = list(p.allowed_streams(t))
            if len(allowed) == 1:
                self.y[t] = {allowed[0]: 1}
                continue
            self.y[t] = {s: self._var(f"y_{t}_{s}", "y", (t, s), cat=pulp.LpBinary) for s in allowed}
            self.lp += pulp.lpSum(self.y[t].values()) == 1
        self._diff: dict[tuple[int, int], object] = {}
        self._same: dict[tuple[int, int], object] = {}

    def on(self, t: int, s: int):
        return self.y[t].get(s, 0)

    def diff(self, a: int, b: int):
        """[a and b run on different streams] (forced to 1 when they do)."""
        ya, yb = self.y[a], self.y[b]
        if not set(ya) & set(yb):
            return 1
        if len(ya) == 1 and len(yb) == 1:
            return 0
        key = (min(a, b), max(a, b))
        if key not in self._diff:
            d = self._var(f"diff_{key[0]}_{key[1]}", "diff", key, 0, 1)
            for s in set(ya) | set(yb):
                self.lp += d >= self.on(a, s) - self.on(b, s)
                self.lp += d >= self.on(b, s) - self.on(a, s)
            self._diff[key] = d
        return self._diff[key]

    def same(self, a: int, b: int):
        """[a and b share a stream] (forced to 1 when they do); None if they never can."""
        ya, yb = self.y[a], self.y[b]
        common = set(ya) & set(yb)
        if not common:
            return None
        if len(ya) == 1 and len(yb) == 1:
            return 1
        key = (min(a, b), max(a, b))
        if key not in self._same:
            q = self._var(f"same_{key[0]}_{key[1]}", "same", key, 0, 1)
            for s in common:
                self.lp += q >= self.on(a, s) + self.on(b, s) - 1
            self._same[key] = q
        return self._same[key]

    def _timing(self) -> None:
        p, lp, M, sync = self.p, self.lp, self.M, self.sync
        est = earliest_starts(p)
        lst = latest_starts(p, self.H)
        d = [task.duration for task in p.tasks]
        self.S = {t: self._var(f"S_{t}", "S", t, est[t], max(est[t], lst[t])) for t in self.timed}
        self.L = {c: self._var(f"L_{c}", "L", c, 0, max(0, max(est[c], lst[c]) - sync)) for c in self.asyncs}
        S, L = self.S, self.L
        self.cmax = self._var("makespan", "cmax", None, lower_bounds(p).makespan, self.H)
        lp += self.cmax
        for t in self.timed:
            lp += self.cmax >= S[t] + d[t]
        # dependencies
        for t in self.timed:
            if t in L:
                for q in p.sync_preds[t]:
                    lp += L[t] >= S[q] + d[q] + sync * (1 - self.on(q, 0))
                lp += S[t] >= L[t] + sync
                continue
            for q in p.sync_preds[t]:
                lp += S[t] >= S[q] + d[q] + sync * self.diff(q, t)
        # tasks sharing a stream run in program order
        for i, a in enumerate(self.timed):
            for b in self.timed[i + 1:]:
                q = self.same(a, b)
                if q is None:
                    continue
                ab = self.before(a, b)
                if not isinstance(ab, int) or ab == 1:
                    lp += S[b] >= S[a] + d[a] - M * (1 - ab) - M * (1 - q)
                if not isinstance(ab, int) or ab == 0:
                    lp += S[a] >= S[b] + d[b] - M * ab - M * (1 - q)
        # launch points: zero-time points on the default stream, in program order
        for c in self.asyncs:
            for a in self.timed:
                if a == c or a in L or 0 not in self.y[a]:
                    continue
                ac = self.before(a, c)
                off = M * (1 - self.on(a, 0))
                if not isinstance(ac, int) or ac == 1:
                    lp += L[c] >= S[a] + d[a] - M * (1 - ac) - off
                if not isinstance(ac, int) or ac == 0:
                    lp += S[a] >= L[c] - M * ac - off
            for c2 in self.asyncs:
                if c2 > c:
                    cc = self.before(c, c2)
                    if not isinstance(cc, int) or cc == 1:
                        lp += L[c2] >= L[c] - M * (1 - cc)
                    if not isinstance(cc, int) or cc == 0:
                        lp += L[c] >= L[c2] - M * cc
        # several compute streams: with two, "total occupancy <= 1" is pairwise
        self.z = {}
        if p.machine.compute_streams > 1:
            comp = set(p.machine.compute_stream_ids)
            cand = [t for t in self.timed if d[t] > 0 and set(self.y[t]) & comp]
            for i, a in enumerate(cand):
                for b in cand[i + 1:]:
                    if p.tasks[a].occupancy + p.tasks[b].occupancy <= 1.0 + _OCC_SLACK:
                        continue
                    off = M * pulp.lpSum(self.on(a, s) for s in self.y[a] if s not in comp) + \
                        M * pulp.lpSum(self.on(b, s) for s in self.y[b] if s not in comp)
                    z = self._var(f"z_{a}_{b}", "z", (a, b), cat=pulp.LpBinary)  # 1: a ends before b starts
                    self.z[(a, b)] = z
                    lp += S[b] >= S[a] + d[a] - M * (1 - z) - off
                    lp += S[a] >= S[b] + d[b] - M * z - off

    def _memory(self) -> None:
        p, lp, n = self.p, self.lp, self.n
        capacity = self.budget - p.resident_bytes
        terms: list[list] = [[] for _ in range(n)]
        self.alive = {}
        for b in p.lifetime_buffers:
            buf, users = p.buffers[b], p.buffer_users[b]
            for k in range(n):
                if buf.is_input:
                    lows = [1 - self.X(u, k - 1) for u in users]
                elif buf.is_output:
                    terms[k].append(buf.size * self.X(buf.producer, k))
                    continue
                else:
                    born = self.X(buf.producer, k)
                    if isinstance(born, int) and born == 0:
                        continue
                    lows = [born - self.X(u, k - 1) for u in set(users) | {buf.producer}]
                consts = [v for v in lows if isinstance(v, (int, float))]
                if any(v >= 1 for v in consts):
                    terms[k].append(buf.size)
                    continue
                lows = [v for v in lows if not isinstance(v, (int, float))]
                if not lows:
                    continue
                a = self._var(f"alive_{b}_{k}", "alive", (b, k), 0, 1)
                self.alive[(b, k)] = a
                for v in lows:
                    lp += a >= v
                terms[k].append(buf.size * a)
        for k in range(n):
            if terms[k]:
                lp += pulp.lpSum(terms[k]) <= capacity

    # ---- warm start ----------------------------------------------------------------------
    def set_hint(self, schedule: Schedule, sim: SimResult) -> None:
        pos = schedule.positions()
        streams = sim.streams
        launch = sim.launch
        mem = None
        for v, kind, key in self.vars:
            if kind == "x":
                t, k = key
                val = int(pos[t] == k)
            elif kind == "o":
                val = int(pos[key[0]] < pos[key[1]])
            elif kind == "y":
                val = int(streams[key[0]] == key[1])
            elif kind == "diff":
                val = int(streams[key[0]] != streams[key[1]])
            elif kind == "same":
                val = int(streams[key[0]] == streams[key[1]])
            elif kind == "S":
                val = sim.start[key]
            elif kind == "L":
                val = launch[key]
            elif kind == "cmax":
                val = sim.makespan
            elif kind == "z":
                a, b = key
                val = int(sim.end[a] <= sim.start[b])
            elif kind == "alive":
                if mem is None:
                    mem = self._alive_values(pos)
                val = mem[key]
            else:  # pragma: no cover
                raise AssertionError(kind)
            v.setInitialValue(val)

    def _alive_values(self, pos: dict[int, int]) -> dict[tuple[int, int], int]:
        p = self.p
        out = {}
        for (b, k) in self.alive:
            buf = p.buffers[b]
            ends = p.buffer_holders[b]
            born = 0 if buf.is_input else pos[buf.producer]
            out[(b, k)] = int(born <= k <= max(pos[u] for u in ends))
        return out

    # ---- extraction ----------------------------------------------------------------------
    def extract(self) -> list[Schedule]:
        p = self.p
        streams = {}
        for t in self.timed:
            ys = self.y[t]
            streams[t] = max(ys, key=lambda s: ys[s] if isinstance(ys[s], int) else (ys[s].value() or 0.0))
        pos_of = {t: max(self.x[t], key=lambda k: self.x[t][k].value() or 0.0) for t in range(self.n)}
        key = {t: (pos_of[t], t) for t in range(self.n)}
        out = [Schedule(order=topological_by_key(p, key), streams=streams, method="milp")]
        if p.machine.compute_streams > 1:  # also read off the times, as CP-SAT does
            val = {t: self.S[t].value() or 0.0 for t in self.S}
            launch = {c: self.L[c].value() or 0.0 for c in self.L}
            tkey = start_time_keys(p, self.timed, val, launch, rounding=lambda x: round(x, 6))
            out.append(Schedule(order=topological_by_key(p, tkey), streams=streams, method="milp"))
        return out


def solve_milp(
    problem: Problem,
    time_limit: float = 10.0,
    memory_budget: int | None = None,
    hint: Schedule | None = None,
    *,
    solver: str | None = "highs",
    msg: bool = False,
    max_tasks: int = 20,
) -> SolveResult:
    """Solve ``problem`` exactly as a MILP (see the module docstring), warm-started from ``hint``.

    ``solver``: "highs" (PuLP's highspy interface), "cbc" (PuLP's bundled
    CBC), or None (HiGHS if available, else CBC). ``memory_budget`` defaults
    to the machine's budget. Supports one compute stream (with or without a
    budget) and two compute streams without a budget; otherwise, and above
    ``max_tasks`` tasks, raises `UnsupportedProblemError` (use CP-SAT), and `InfeasibleBudgetError` when the solver proves no schedule
    fits the budget. The result is re-simulated and never worse than the hint.
    """
    t0 = time.perf_counter()
    n = problem.num_tasks
    if n > max_tasks:
        raise UnsupportedProblemError(
            f"the MILP is for small graphs: {n} tasks > max_tasks={max_tasks}; use method='cpsat' (or 'auto'), "
            "which models the same problem at any size (solvercast.pipeline.portfolio.solve_cpsat)")
    budget = problem.machine.memory_budget if memory_budget is None else memory_budget
    C = problem.machine.compute_streams
    if C > 2:
        raise UnsupportedProblemError(f"the MILP models at most 2 compute streams (got {C}): the occupancy rule "
                                      "is only pairwise there; use method='cpsat'")
    if C > 1 and budget is not None:
        raise UnsupportedProblemError(
            "the MILP takes a memory budget only with one compute stream (with several, memory is judged over "
            "time): use method='cpsat', or compute_streams=1, or no budget (optimize: memory_budget=math.inf; "
            "its default None means 1.0 x the original peak)")
    if solver is None:
        solver = "highs" if highs_available() else "cbc"
    if solver not in ("highs", "cbc"):
        raise ValueError(f"unknown MILP solver {solver!r}: use 'highs', 'cbc' or None")
    if solver == "highs" and not highs_available():
        raise RuntimeError("HiGHS (the highspy package) is not installed; use solver='cbc'")
    hint_sim = validate(problem, hint, memory_budget=budget) if hint is not None else None
    if budget is not None and problem.resident_bytes > budget:
        raise InfeasibleBudgetError(
            f"resident graph inputs alone ({problem.resident_bytes} B) exceed the memory budget {budget} B",
            best_peak=problem.resident_bytes)
    if n == 0:
        sched = Schedule(order=(), method="milp")
        return SolveResult(sched, SolveStatus.OPTIMAL, simulate(problem, sched), 0, 0,
                           time.perf_counter() - t0, "trivial")

    # horizon: the hint's makespan, else a bound every valid schedule meets
    serial = serial_horizon(problem, big_m_margin=True)
    horizon = min(serial, hint_sim.makespan) if hint_sim is not None else serial
    factor = max(1, math.ceil(horizon / MAX_MODEL_HORIZON))
    scaled = scale_problem(problem, factor)
    if hint is not None:
        scaled_hint_sim = simulate(scaled, hint)
        model_horizon = scaled_hint_sim.makespan
    else:
        scaled_hint_sim = None
        model_horizon = -(-serial // factor) + serial_syncs(scaled, big_m_margin=True)  # and the rounding up

    model = _Model(scaled, model_horizon, budget)
    model.build()
    if hint is not None:
        model.set_hint(hint, scaled_hint_sim)
    run = _solve_highs if solver == "highs" else _solve_cbc
    with warnings.catch_warnings():  # PuLP 4.0 deprecations inside PuLP itself (PULP_CBC_CMD, mappings)
        warnings.simplefilter("ignore", DeprecationWarning)
        kind, backend_status, dual_bound = run(model.lp, time_limit, msg, hint is not None)
    wall = time.perf_counter() - t0
    name = f"{solver}: {backend_status}"
    # HiGHS and CBC have wall-clock limits only: an unproven answer depends on the machine's speed
    stats = {"scale": factor, "variables": len(model.lp.variables()), "constraints": model.lp.numConstraints(),
             "solver": solver, "stopped_by_wall_clock": kind != "optimal"}
    outcome = Outcome(hint, hint_sim, wall, name, stats)

    if kind == "infeasible" and hint is not None:
        # the warm start is a feasible point of the model by construction, so this is a
        # backend glitch (CBC can report "Integer infeasible" after a MIP start): keep the hint
        return SolveResult(hint, SolveStatus.HINT_KEPT, hint_sim, None, None, wall, name,
                           f"the MILP ({solver}) reported infeasible although the warm start is feasible; "
                           "kept the warm start", stats)
    if kind == "infeasible":
        raise InfeasibleBudgetError(
            f"the MILP ({solver}) proved that no schedule keeps peak memory within {budget} B",
            best_peak=hint_sim.peak_memory if hint_sim else None)
    if kind == "none":
        return outcome.no_solution(f"the MILP ({solver}) found no schedule in {time_limit:g} s",
                                   f"the MILP ({solver}) found no solution in {time_limit:g} s; kept the warm start")

    proven = kind == "optimal" and factor == 1
    objective = int(round(model.cmax.value())) * factor
    bound = objective if proven else (
        int(math.ceil(dual_bound - 1e-6)) * factor if dual_bound is not None else None)
    best, best_sim, errors = best_valid(problem, model.extract(), budget)
    if best is None:
        error = next(iter(errors.values()))
        if hint is None:
            raise AssertionError(f"MILP schedule failed validation: {error}")
        return outcome.invalid("the MILP's", error, objective, bound)
    # OPTIMAL only if the solver proved it and the simulator agrees with the model
    proven = proven and best_sim.makespan <= objective
    message = "" if proven or kind != "optimal" else \
        "the solver's optimum re-simulated later than its objective (model scaled or approximate)"
    return outcome.better_of(problem, best, best_sim, proven=proven, hint_proven=proven and hint_sim is not None
                             and hint_sim.makespan <= objective, objective=objective, bound=bound,
                             proved_hint="the MILP proved the warm start optimal",
                             kept_hint="the MILP found nothing better than the warm start; kept it", message=message)
