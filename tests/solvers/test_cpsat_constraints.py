"""One small feasible and one small infeasible case per CP-SAT constraint group.

Each case builds a tiny `Problem` by hand, builds the model with some of its constraint groups
(`CpsatModel.constraint_groups`), fixes a few variables and asks CP-SAT whether a solution is left.
An infeasible case is also solved without the group under test, where it must be feasible: a failure
names the group that broke. Every answer is a proof (OPTIMAL / FEASIBLE or INFEASIBLE) under a small
deterministic limit, never a wall-clock one.
"""

import pytest
from ortools.sat.python import cp_model

from solvercast import Buffer, Machine, Problem, Role, Task
from solvercast.solvers.cpsat_model import CpsatModel

C, M, W = Role.COMPUTE, Role.COMM, Role.WAIT
HORIZON = 1000
ALL = None


def has_solution(problem, fix, groups=ALL, without=(), budget=None) -> bool:
    """Whether the model of ``problem`` with the named constraint groups (all by default, less
    ``without``) still has a solution once ``fix(model)`` has fixed some of its variables."""
    model = CpsatModel(problem, HORIZON, budget)
    model.add_variables()
    names = [name for name, _ in model.constraint_groups()]
    for name in (groups or ()) + tuple(without):
        assert name in names, f"no constraint group {name!r} in {names}"
    for name, add in model.constraint_groups():
        if (groups is ALL or name in groups) and name not in without:
            add()
    fix(model)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.max_deterministic_time = 5.0
    status = solver.Solve(model.m)
    assert status in (cp_model.OPTIMAL, cp_model.FEASIBLE, cp_model.INFEASIBLE), solver.StatusName(status)
    return status != cp_model.INFEASIBLE


def fixes(**values):
    """fix(model) setting ``start_<task id>`` (and ``on_<task>_<stream>``, ``launch_<task>``) values."""
    def fix(model):
        for name, value in values.items():
            kind, *ids = name.split("_")
            ids = [int(i) for i in ids]
            var = {"start": lambda: model.start[ids[0]], "on": lambda: model.on[ids[0]][ids[1]],
                   "launch": lambda: model.launch[ids[0]]}[kind]()
            model.m.Add(var == value)
    return fix


def broken_by(group, problem, fix, budget=None) -> bool:
    """Infeasible with every group, feasible without ``group``: ``group`` is what the fix breaks."""
    return not has_solution(problem, fix, budget=budget) and has_solution(problem, fix, without=(group,),
                                                                          budget=budget)


def two_independent(occupancy=1.0, streams=1, sync=0):
    """a(10), b(10), no edge."""
    return Problem((Task("a", C, 10, occupancy), Task("b", C, 10, occupancy)), (),
                   machine=Machine(compute_streams=streams, sync_overhead=sync))


# ---- no overlap per stream ---------------------------------------------------------------------------
def test_no_overlap_per_stream():
    """a(10), b(10) on the one compute stream: b at 10 fits after a, b at 5 runs inside a."""
    p = two_independent()
    assert has_solution(p, fixes(start_0=0, start_1=10))
    assert broken_by("no_overlap_per_stream", p, fixes(start_0=0, start_1=5))


# ---- precedences (with the sync of a cross-stream edge) ---------------------------------------------
def test_precedences_pay_the_sync_across_streams():
    """a(10) -> b(10), sync 5, two compute streams: b on another stream than a starts at 15, not 10."""
    p = Problem((Task("a", C, 10), Task("b", C, 10)), ((0, 1),), machine=Machine(compute_streams=2, sync_overhead=5))
    assert has_solution(p, fixes(on_0_0=1, on_1_1=1, start_0=0, start_1=15))
    assert has_solution(p, fixes(on_0_0=1, on_1_0=1, start_0=0, start_1=10))  # same stream: no sync
    assert broken_by("precedences", p, fixes(on_0_0=1, on_1_1=1, start_0=0, start_1=10))


# ---- launches ----------------------------------------------------------------------------------------
def test_launches():
    """x(50) -> c(comm 20) -> w -> y(10), sync 5: c is launched on the default stream once x is done,
    and starts a sync after its launch."""
    tasks = (Task("x", C, 50), Task("c", M, 20), Task("w", W, waits_for=1), Task("y", C, 10))
    p = Problem(tasks, ((0, 1), (1, 2), (2, 3)), machine=Machine(sync_overhead=5))
    assert has_solution(p, fixes(start_0=0, launch_1=50, start_1=55))
    assert broken_by("launches", p, fixes(start_0=0, launch_1=60, start_1=60))  # starts with its launch


# ---- collective order --------------------------------------------------------------------------------
def two_collectives():
    """c1(comm 20) -> w1 -> u1(10), c2(comm 20) -> w2 -> u2(10), independent: c1 runs before c2."""
    tasks = (Task("c1", M, 20), Task("w1", W, waits_for=0), Task("u1", C, 10),
             Task("c2", M, 20), Task("w2", W, waits_for=3), Task("u2", C, 10))
    return Problem(tasks, ((0, 1), (1, 2), (3, 4), (4, 5)), machine=Machine())


def test_collective_order():
    p = two_collectives()
    assert has_solution(p, fixes(start_0=0, start_3=30))
    assert broken_by("collective_order", p, fixes(start_3=0, start_0=30))  # c2 first: out of order


# ---- occupancy ---------------------------------------------------------------------------------------
def test_occupancy():
    """a, b on two compute streams at the same time: fine at half the GPU each, not at all of it."""
    both_at_zero = fixes(on_0_0=1, on_1_1=1, start_0=0, start_1=0)
    assert has_solution(two_independent(0.5, streams=2), both_at_zero)
    assert broken_by("occupancy", two_independent(1.0, streams=2), both_at_zero)


# ---- program times -----------------------------------------------------------------------------------
def test_program_times_follow_the_instants():
    """One compute stream: a at 0, b at 10, so a comes first in program order (P(a) < P(b))."""
    p = two_independent()

    def order(first, second):
        def fix(model):
            fixes(start_0=0, start_1=10)(model)
            model.m.Add(model.ptime[second] < model.ptime[first])
        return fix

    assert has_solution(p, order(1, 0))  # P(b) > P(a): agrees with the starts
    assert not has_solution(p, order(0, 1))  # (P exists only with this group: no case without it)


# ---- memory (cumulative over buffer lifetimes) -------------------------------------------------------
def two_buffers(streams=1):
    """a(10) makes A (100 B) for c(10); b(10) makes B (100 B) for d(10); budget 150: A and B never live
    at once, so c must be issued before b (or d before a). Half-GPU kernels: occupancy never binds."""
    tasks = tuple(Task(name, C, 10, 0.5) for name in "abcd")
    buffers = (Buffer("A", 100, 0, users=(2,)), Buffer("B", 100, 1, users=(3,)))
    return Problem(tasks, ((0, 2), (1, 3)), buffers, machine=Machine(compute_streams=streams))


def test_memory():
    p = two_buffers()
    assert has_solution(p, fixes(start_0=0, start_2=10, start_1=20, start_3=30), budget=150)
    assert broken_by("memory", p, fixes(start_0=0, start_1=10, start_2=20, start_3=30), budget=150)
    assert has_solution(p, fixes(start_0=0, start_1=10, start_2=20, start_3=30), budget=200)


def test_memory_over_time_with_several_streams():
    """Two compute streams: memory is taken over time; A and B both alive at 5 breaks a 150 B budget."""
    p = two_buffers(streams=2)
    ok = fixes(on_0_0=1, on_2_0=1, on_1_0=1, on_3_0=1, start_0=0, start_2=10, start_1=20, start_3=30)
    bad = fixes(on_0_0=1, on_1_1=1, start_0=0, start_1=0)
    assert has_solution(p, ok, budget=150)
    assert broken_by("memory", p, bad, budget=150)


@pytest.mark.parametrize("streams", [1, 2])
def test_every_group_is_named_in_order(streams):
    p = two_buffers(streams)
    model = CpsatModel(p, HORIZON, 150)
    model.add_variables()
    names = [name for name, _ in model.constraint_groups()]
    assert names == ["no_overlap_per_stream", "precedences", "launches", "collective_order", "occupancy"] + \
        (["program_times"] if streams == 1 else []) + ["memory", "makespan"]


# ---- after the makespan ------------------------------------------------------------------------------
def test_every_stream_is_idle_after_the_makespan():
    """a(10), b(10), two compute streams: every NoOverlap and the occupancy cumulative hold the interval
    [makespan, horizon + 1), in the shape CP-SAT 9.15's linear relaxation takes for a makespan (end fixed
    at the largest end, size at least 1, demand equal to the capacity); without it CP-SAT computes a full
    transitive closure of the precedences that ignores every time limit."""
    model = CpsatModel(two_independent(streams=2), HORIZON, None)
    model.add_variables()
    model.add_constraints()
    proto = model.m.Proto()
    tail = model.after_makespan.Index()
    end = proto.constraints[tail].interval.end
    assert not end.vars and end.offset == HORIZON + 1
    no_overlaps = [c.no_overlap for c in proto.constraints if c.has_no_overlap()]
    cumulatives = [c.cumulative for c in proto.constraints if c.has_cumulative()]
    assert len(no_overlaps) == 2 and len(cumulatives) == 1  # one per compute stream (the comm stream is empty)
    assert all(tail in c.intervals for c in no_overlaps)
    occupancy = cumulatives[0]
    i = list(occupancy.intervals).index(tail)
    assert occupancy.demands[i].offset == occupancy.capacity.offset
    # and it takes the streams only after the makespan: both tasks at 0 on two streams, makespan 10
    assert has_solution(two_independent(streams=2, occupancy=0.5), fixes(on_0_0=1, on_1_1=1, start_0=0, start_1=0))


# ---- several streams: collectives issued at one instant (three reproductions) --------------

def _tied_sync_and_async():
    """A synchronous comm op s (50, the lower id) on the comm stream and an asynchronous collective c launched
    at t=0: s may start at 0 too (then the program must issue it first, yet a launch sorts before an op
    that takes time at one instant; ties by id allowed it)."""
    tasks = (Task("s", M, 50), Task("c", M, 10), Task("wc", W, waits_for=1), Task("op", C, 100))
    buffers = (Buffer("bs", 1, 0, users=(3,)), Buffer("bc", 1, 1, users=(2,)))
    p = Problem(tasks, ((1, 2), (0, 3)), buffers, machine=Machine(compute_streams=2),
                preserve_collective_order=False)
    return p, lambda m: [m.m.Add(m.launch[1] == 0), m.m.Add(m.on[0][2] == 1)]


def _three_at_one_launch():
    """c0 and c2 on one comm stream, c1 on the other, all launched at t=0."""
    tasks = (Task("c0", M, 10, group=0), Task("c1", M, 10, group=1), Task("c2", M, 50, group=0),
             Task("w0", W, waits_for=0), Task("w1", W, waits_for=1), Task("w2", W, waits_for=2), Task("op", C, 100))
    buffers = tuple(Buffer(f"b{c}", 1, c, users=(c + 3,)) for c in range(3))
    p = Problem(tasks, ((0, 3), (1, 4), (2, 5), (5, 6)), buffers,
                machine=Machine(compute_streams=2, comm_streams=2), preserve_collective_order=False)
    return p, lambda m: [m.m.Add(m.launch[c] == 0) for c in range(3)]


def _tied_behind_a_wait():
    """x, y, z launched at t=10; x reads a wait issued at that instant."""
    tasks = (Task("c_pre", M, 10, group=1), Task("pre_y", C, 10), Task("y", M, 10, group=0), Task("z", M, 10, group=1),
             Task("w_pre", W, waits_for=0), Task("x", M, 50, group=0), Task("wy", W, waits_for=2),
             Task("wz", W, waits_for=3), Task("wx", W, waits_for=5), Task("op", C, 100))
    buffers = tuple(Buffer(f"b{c}", 1, c, users=(w,)) for c, w in ((0, 4), (1, 2), (2, 6), (3, 7), (5, 8)))
    p = Problem(tasks, ((0, 4), (4, 5), (1, 2), (2, 6), (3, 7), (5, 8), (8, 9)), buffers,
                machine=Machine(compute_streams=2, comm_streams=2), preserve_collective_order=False)
    return p, lambda m: [m.m.Add(m.launch[c] == 10) for c in (2, 3, 5)]


@pytest.mark.parametrize("case", [_tied_sync_and_async, _three_at_one_launch, _tied_behind_a_wait])
def test_every_order_of_tied_collectives_the_model_allows_is_the_one_extracted(case):
    """Several streams, free collective order, collectives issued at one instant: for every choice of the
    model's order literals, a solution extracts to a program that `simulate` runs no later than the model
    (the program issues tied collectives in the order their comm streams run them). A reassignment of tied
    collectives by counting the order literals let the model choose a cycle, a synchronous op first, or an
    order a wait held up: each simulated 10 ns later than the model."""
    import itertools

    from solvercast import simulate

    problem, tie = case()

    def model_of_ties():
        model = CpsatModel(problem, HORIZON, None)
        model.add_variables()
        model.add_constraints()
        model.add_objective()
        tie(model)
        return model

    pairs = sorted(model_of_ties().comm_before)
    solved = 0
    for values in itertools.product((0, 1), repeat=len(pairs)):
        model = model_of_ties()
        for pair, value in zip(pairs, values):
            model.m.Add(model.comm_before[pair] == value)
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = 1
        solver.parameters.max_deterministic_time = 5.0
        status = solver.Solve(model.m)
        assert status in (cp_model.OPTIMAL, cp_model.INFEASIBLE), solver.StatusName(status)
        if status == cp_model.OPTIMAL:
            solved += 1
            assert simulate(problem, model.extract(solver)).makespan <= solver.Value(model.makespan), values
    assert solved  # some order of the tied collectives is a solution
