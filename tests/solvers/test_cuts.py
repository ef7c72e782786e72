"""Cut bounds (solvers/cuts.py): every cut's relaxation is never above the optimum (brute force, the exact
search), and on real graphs they see the memory-forced idle that `lower_bounds` does not."""

import dataclasses
import time

import pytest

from tests.support import brute_force
from solvercast.ir.bounds import lower_bounds
from solvercast.fx.extract import extract_problem
from solvercast.heuristics import best_heuristic
from solvercast.models import build
from solvercast.ir.problem import Buffer, Machine, Problem, Role, Task
from solvercast.ir.schedule import Schedule
from solvercast.ir.simulate import simulate
from solvercast.solvers.cuts import cut_bound, cut_relaxation, cuttable, not_applicable
from solvercast.solvers.prefixes import search_prefixes
from solvercast.testing import random_problem


def _tiny(seed):
    """Random 6-8 task programs with a kept collective order, syncs, synchronous collectives, two comm streams
    and two process groups; odd seeds have freeable inputs (a relaxation must drop the inputs the cut frees)."""
    p = random_problem(seed, 6 + seed % 3, sync_overhead=(0, 4, 20)[seed % 3], comm_fraction=0.35,
                       sync_comm_fraction=0.3 * (seed % 4 != 0), comm_streams=1 + (seed % 4 == 1))
    if seed % 2:
        p = _freeable_inputs(p)
    if seed % 3 == 2:  # two process groups: each comm stream runs its own
        tasks = tuple(dataclasses.replace(t, group=i % 2) if t.role == Role.COMM else t for i, t in enumerate(p.tasks))
        p = Problem(tasks, p.edges, p.buffers, dataclasses.replace(p.machine, comm_streams=2), True, p.name)
    return p


def _freeable_inputs(p: Problem) -> Problem:
    buffers = tuple(dataclasses.replace(b, freeable=True) if b.producer is None else b for b in p.buffers)
    return Problem(p.tasks, p.edges, buffers, p.machine, p.preserve_collective_order, p.name)


def _budgets(p):
    """No budget, and two between the memory bound and the original order's peak (they bind)."""
    lo = lower_bounds(p).memory
    hi = simulate(p, Schedule.original(p)).peak_memory
    return [None, (lo + hi) // 2, lo + (hi - lo) // 4]


@pytest.mark.parametrize("seed", range(60))
def test_every_cut_stays_at_or_below_the_brute_force_optimum(seed):
    p = _tiny(seed)
    for budget in _budgets(p):
        q = p.with_budget(budget)
        best, _ = brute_force(q)
        if best is None:
            continue
        for c in filter(lambda c: cuttable(q, c), q.async_chain):
            relaxed, launch = cut_relaxation(q, c)
            found = search_prefixes(relaxed, memory_from=launch)
            assert found.complete and found.order is not None
            assert found.makespan <= best, (q.tasks[c].name, found.makespan, best)
        assert cut_bound(q, best + 1, 10**6).bound <= best
        at = cut_bound(q, best, 10**6)  # a proof of the optimum is allowed, nothing above it
        assert at.bound <= best and (not at.proven or at.bound == best)


def _binding_tiny(seeds):
    """(problem, brute-force optimum, an optimal schedule) of the tiny programs with collectives under the two
    binding budgets, where a schedule fits."""
    for seed in seeds:
        p = _tiny(seed)
        for budget in _budgets(p)[1:]:
            q = p.with_budget(budget)
            best, schedule = brute_force(q)
            if best is not None and q.async_chain:
                yield q, best, schedule


def test_cuts_prove_more_than_the_bounds_on_tiny_programs():
    """Not vacuous: on the programs above some cut proves a bound above `lower_bounds`, some the optimum."""
    above = optimal = 0
    for q, best, _ in _binding_tiny(range(60)):
        found = cut_bound(q, best, 10**6)
        above += found.bound > lower_bounds(q).makespan
        optimal += found.proven
    assert above >= 3 and optimal >= 3, (above, optimal)


def _mid(seed):
    return random_problem(seed, 12 + seed % 10, sync_overhead=(0, 3, 20)[seed % 3], comm_fraction=0.3,
                          sync_comm_fraction=0.25 * (seed % 2), comm_streams=1 + (seed % 4 == 1), free_fraction=0.15)


@pytest.mark.parametrize("seed", range(0, 24, 2))
def test_cut_bounds_stay_below_the_exact_optimum_on_mid_size_programs(seed):
    p = _mid(seed)
    if seed % 4 == 2:
        p = _freeable_inputs(p)
    hi = simulate(p, Schedule.original(p)).peak_memory
    q = p.with_budget((lower_bounds(p).memory + hi) // 2)
    optimum = search_prefixes(q)
    assert optimum.complete
    if optimum.order is None:
        return
    found = cut_bound(q, optimum.makespan + 1, 10**6)
    assert found.bound <= optimum.makespan


def test_the_cut_bound_sees_memory_forced_idle_on_simple_fsdp():
    """One layer of FSDP from DTensor parametrizations at its original peak: the waits of the gradient
    reduce-scatters must come early to free memory, and the compute stream idles there. `lower_bounds` is the
    compute work; a cut after the forward sees more, and stays below every schedule found."""
    p = extract_problem(build("simple_fsdp", layers=1))
    p = p.with_budget(max(simulate(p, Schedule.original(p)).peak_memory, lower_bounds(p).memory))
    heuristic = simulate(p, best_heuristic(p, p.machine.memory_budget)).makespan
    found = cut_bound(p, heuristic, 60_000)
    assert found.bound > lower_bounds(p).makespan
    assert found.bound < heuristic and not found.proven
    assert found.cuts_finished >= 2 and found.expansions <= 60_000 + 1


def test_cut_bounds_do_not_apply_without_one_compute_stream_and_a_kept_order():
    assert not_applicable(random_problem(3, 10, compute_streams=2, comm_fraction=0.3))
    free = random_problem(3, 10, comm_fraction=0.3, preserve_collective_order=False)
    assert not_applicable(free) and cut_bound(free, 10**9, 1000).bound == 0
    some = random_problem(3, 10)
    compute_only = Problem((Task("a", Role.COMPUTE, duration=5),), (), (), some.machine, True, "compute only")
    assert not_applicable(compute_only) and cut_bound(compute_only, 10, 1000).bound == 0


def test_an_input_the_cut_frees_is_not_resident_after_it():
    """A freeable input X (100 B) read only by a, which feeds collective c; after c's wait, b allocates 100 B
    under a budget of 150: X must be gone by then, as it is in the problem (freed after a). A relaxation that
    kept X (no holder left after the cut: never freed) would find no schedule and 'prove' any bound."""
    tasks = (Task("a", Role.COMPUTE, 10), Task("c", Role.COMM, 20), Task("w", Role.WAIT, waits_for=1),
             Task("b", Role.COMPUTE, 10))
    buffers = (Buffer("X", 100, None, (0,), freeable=True), Buffer("a_out", 10, 0, (1,)),
               Buffer("c_out", 10, 1, (2, 3)), Buffer("b_out", 100, 3, (), is_output=True))
    p = Problem(tasks, ((0, 1), (1, 2), (2, 3)), buffers, Machine(memory_budget=150))
    best, _ = brute_force(p)
    assert best is not None
    relaxed, launch = cut_relaxation(p, 1)
    assert "X" not in {b.name for b in relaxed.buffers}
    found = cut_bound(p, best + 1, 10_000)
    assert found.cuts_finished == 1 and found.bound <= best


def _fsdp_tp_one_layer():
    p = extract_problem(build("fsdp_tp", layers=1))
    return p.with_budget(max(simulate(p, Schedule.original(p)).peak_memory, lower_bounds(p).memory))


def _bound_by_cuts(p, schedule, seconds=60.0):
    from solvercast.pipeline.portfolio import _bound_by_cuts
    from solvercast.solvers.result import SolveResult, SolveStatus

    found = SolveResult(schedule, SolveStatus.FEASIBLE, simulate(p, schedule), None, None, 0.0)
    return _bound_by_cuts(p, found, time.perf_counter() + seconds, None, time.perf_counter())


def test_the_last_step_of_solve_cpsat_proves_brute_force_optima():
    """`_bound_by_cuts` (what `solve_cpsat` does last) on brute-force optima: OPTIMAL exactly when a cut
    proves it, the schedule kept, never a bound above the optimum; some are proven."""
    from solvercast.solvers.result import SolveStatus

    proven = 0
    for q, best, schedule in _binding_tiny(range(40)):
        got = _bound_by_cuts(q, schedule)
        assert got.schedule is schedule and (got.bound or 0) <= best
        assert (got.status == SolveStatus.OPTIMAL) == cut_bound(q, best, 10**6).proven
        proven += got.status == SolveStatus.OPTIMAL
    assert proven >= 3


def test_the_cut_bound_sees_the_backward_idle_of_fsdp_tp():
    """fsdp_tp with one layer: exact windows from the heuristic, then the cuts: a bound above `lower_bounds`
    (the compute work) and at most the schedule's makespan, the schedule kept."""
    from solvercast.solvers.prefixes import improve_by_windows

    p = _fsdp_tp_one_layer()
    schedule, _ = improve_by_windows(p, best_heuristic(p, p.machine.memory_budget), 100_000)
    got = _bound_by_cuts(p, schedule, seconds=3.0)  # the cuts after the forward take about 0.5 s
    assert got.schedule is schedule
    assert lower_bounds(p).makespan < got.bound <= simulate(p, schedule).makespan


@pytest.mark.heavy
def test_the_cut_proof_agrees_with_the_exact_search_on_fsdp_tp_one_layer():
    """The whole prefix search (about 20 s) finds the same optimum the cut proves."""
    p = _fsdp_tp_one_layer()
    optimum = search_prefixes(p)
    assert optimum.complete
    assert cut_bound(p, optimum.makespan, 200_000).proven
    assert cut_bound(p, optimum.makespan + 1, 200_000).bound == optimum.makespan


def test_no_cut_before_a_synchronous_collective_of_another_comm_stream():
    """A synchronous collective s of another process group (its own comm stream) starts when
    its input x (5 ns, issued before c in the optimum, not in every order) is ready; the relaxation runs x after
    the prefix (a0, 100 ns), so cut at c it ended at 305 against the optimum's 205 and 'proved' 206. Such cuts
    are not made; on c's own stream, or with s on the compute stream only, they are."""
    tasks = (Task("x", Role.COMPUTE, 5), Task("a0", Role.COMPUTE, 100), Task("c", Role.COMM, 10),
             Task("w", Role.WAIT, waits_for=2), Task("s", Role.COMM, 200, group=1))
    buffers = (Buffer("in", 10, None, (0, 1)), Buffer("xo", 10, 0, (4,)), Buffer("a", 10, 1, (2,)),
               Buffer("co", 10, 2, (3,), is_output=True), Buffer("so", 10, 4, (), is_output=True))
    p = Problem(tasks, ((0, 4), (1, 2), (2, 3)), buffers, Machine(comm_streams=2))
    best, _ = brute_force(p)
    assert best == 205
    assert not cuttable(p, 2)
    with pytest.raises(ValueError, match="another comm stream"):
        cut_relaxation(p, 2)
    found = cut_bound(p, best + 1, 10**6)
    assert found.bound <= best and found.cuts_tried == 0
    same_group = Problem(tasks[:4] + (dataclasses.replace(tasks[4], group=0),), p.edges, buffers, p.machine)
    assert cuttable(same_group, 2) and cut_bound(same_group, 10**6, 10**6).bound <= brute_force(same_group)[0]


def test_an_input_that_is_an_output_stays():
    """A freeable input that is also an output is never freed: the relaxation keeps it, an output, even when
    every reader is before the cut."""
    tasks = (Task("a", Role.COMPUTE, 10), Task("c", Role.COMM, 20), Task("w", Role.WAIT, waits_for=1),
             Task("b", Role.COMPUTE, 10))
    buffers = (Buffer("X", 100, None, (0,), is_output=True, freeable=True), Buffer("a_out", 10, 0, (1,)),
               Buffer("c_out", 10, 1, (2, 3)), Buffer("b_out", 100, 3, (), is_output=True))
    p = Problem(tasks, ((0, 1), (1, 2), (2, 3)), buffers, Machine(memory_budget=250))
    relaxed, _ = cut_relaxation(p, 1)
    kept = {b.name: b for b in relaxed.buffers}
    assert kept["X"].is_output and relaxed.is_freed(list(kept).index("X")) is False


@pytest.fixture(autouse=True)
def _walk_beside_allowed(monkeypatch):
    """The walk beside is under test here, whatever the environment says."""
    monkeypatch.delenv("SOLVERCAST_CUT_WALK_BESIDE", raising=False)


def _beside(q, upper, seconds=30.0):
    from solvercast.solvers import cuts

    if cuts._cores() < 2:
        pytest.skip("one usable core: no walk beside the search (it runs in the caller's time)")
    walk = cuts.BackgroundCutBound.start(q, upper, time.perf_counter() + seconds)
    assert walk is not None, "a second core and fork are at hand"
    return walk


def test_the_walk_beside_the_search_proves_what_the_walk_here_does():
    """`BackgroundCutBound` (a forked process) against `cut_bound` in this process on the brute-force optima,
    walked below one more than the optimum and read at the optimum: the same bound, proven exactly when the
    walk here proves the optimum; the child ended."""
    compared = proven = 0
    for q, best, _ in _binding_tiny(range(0, 40, 3)):
        walk = _beside(q, best + 1)
        got = walk.result(best)
        here = cut_bound(q, best + 1, 10**6)
        assert walk.error is None and not walk._process.is_alive()
        assert got.bound == here.bound <= best + 1 and got.proven == (here.bound >= best)
        compared += 1
        proven += got.proven
    assert compared >= 8 and proven >= 1


def test_the_walk_beside_the_search_ends_at_its_deadline():
    """A walk that cannot prove (read at a makespan far above the optimum, which no cut reaches) is read
    until its deadline, not long past it, and ends unproven."""
    p = _fsdp_tp_one_layer()
    started = time.perf_counter()
    got = _beside(p, 10**9, seconds=1.0).result(10**9)
    assert time.perf_counter() - started < 3.0
    assert not got.proven


def test_a_failing_walk_beside_the_search_says_why(monkeypatch):
    """The child's exception reaches the parent as text; the bound is none."""
    from solvercast.solvers import cuts

    def broken(*args, **kwargs):
        raise RuntimeError("broken walk")

    monkeypatch.setattr(cuts, "cut_bound", broken)  # the forked child inherits it
    q, best, _ = next(_binding_tiny(range(40)))
    walk = _beside(q, best + 1)
    got = walk.result(best)
    assert "RuntimeError: broken walk" in walk.error and got.bound == 0 and not got.proven


def test_solve_cpsat_walks_beside_its_search_and_here_without_a_second_core(monkeypatch):
    """fsdp_tp with one layer (the schedule reaches its optimum, 142.54 us, which the cut after the forward
    proves: results/cut_bounds.md): proven optimal by the cut walk beside the search; with one core the same
    schedule, the walk run at the end. The search's work is counted in deterministic time; the 30 s wall
    clock only keeps a loaded 2-core machine from cutting it short (a proof ends the call sooner)."""
    from solvercast.pipeline import portfolio as cpsat
    from solvercast.solvers import cuts
    from solvercast.solvers.result import SolveStatus

    p = _fsdp_tp_one_layer()
    hint = best_heuristic(p, p.machine.memory_budget)
    beside = cpsat.solve_cpsat(p, time_limit=30, hint=hint)
    monkeypatch.setattr(cuts, "_cores", lambda: 1)
    here = cpsat.solve_cpsat(p, time_limit=30, hint=hint)
    assert beside.stats["cut_bound"]["beside"] and not here.stats["cut_bound"]["beside"]
    assert cut_bound(p, beside.makespan, 200_000).proven
    assert beside.status == SolveStatus.OPTIMAL and beside.bound == beside.makespan
    assert here.schedule.order == beside.schedule.order


def test_a_caller_late_to_read_still_gets_the_proof():
    """The walk proves in milliseconds, the caller reads after the deadline (its windows
    ran into the wall cap): what the child sent is read, not dropped."""
    proven = 0
    for q, best, _ in _binding_tiny(range(0, 40, 3)):
        expected = cut_bound(q, best + 1, 10**6)
        walk = _beside(q, best + 1, seconds=0.3)
        time.sleep(0.5)
        got = walk.result(best)
        assert got.bound == expected.bound and got.proven == (expected.bound >= best)
        proven += got.proven
    assert proven >= 1


def test_no_walk_beside_where_fork_fails_or_the_environment_says_so(monkeypatch):
    """A fork that fails (ENOMEM, EAGAIN: it once escaped solve_cpsat): no walk beside, then
    or later in the process (a failed fork leaves multiprocessing's four pipe ends open: no more leak after
    the first); SOLVERCAST_CUT_WALK_BESIDE=0: none either. The caller walks itself."""
    import errno
    import os

    from solvercast.solvers import cuts

    q, best, _ = next(_binding_tiny(range(40)))
    deadline = time.perf_counter() + 5
    walk = cuts.BackgroundCutBound.start(q, best + 1, deadline)
    assert walk is not None and walk.result(best).bound == cut_bound(q, best + 1, 10**6).bound
    assert walk.error is None

    def no_memory():
        raise OSError(errno.ENOMEM, "Cannot allocate memory")

    with monkeypatch.context() as m:
        m.setattr(cuts, "_FORK_FAILED", False)
        m.setattr(os, "fork", no_memory)
        assert cuts.BackgroundCutBound.start(q, best + 1, deadline) is None
        fds = len(os.listdir("/proc/self/fd"))
        assert cuts.BackgroundCutBound.start(q, best + 1, deadline) is None
        assert len(os.listdir("/proc/self/fd")) == fds
    assert not cuts._FORK_FAILED  # restored: the other tests fork
    monkeypatch.setenv("SOLVERCAST_CUT_WALK_BESIDE", "0")
    assert cuts.BackgroundCutBound.start(q, best + 1, deadline) is None


def test_a_full_pipe_never_stops_the_walk(monkeypatch):
    """The parent reads only when its search is done, so a walk with more better bounds
    than the pipe holds (about 300) blocked in its send. Run in a thread here, never read until it ends: it
    ends, and its last word is there."""
    import multiprocessing
    import threading

    from solvercast.solvers import cuts

    def chatty(problem, upper, expansions, *, deadline=None, better=None, progress=None):
        for bound in range(1, 5_001):
            better(cuts.CutBound(bound, "c", False, bound, bound, bound, 0.0))
        return cuts.CutBound(5_000, "c", False, 5_000, 5_000, 5_000, 0.0)

    monkeypatch.setattr(cuts, "cut_bound", chatty)
    receive, send = multiprocessing.get_context("fork").Pipe(duplex=False)
    child = threading.Thread(target=cuts._walk_and_report, args=(None, 10, 10, None, send), daemon=True)
    child.start()
    child.join(timeout=20)
    assert not child.is_alive(), "the walk blocked on a full pipe"
    messages = []
    try:
        while receive.poll(0):
            messages.append(receive.recv())
    except EOFError:  # all read: the child's end is closed
        pass
    assert messages[-1][0] == "done" and messages[-1][1].bound == 5_000 and len(messages) < 5_001


def test_the_walk_beside_works_past_descriptor_1024_and_without_descriptors(monkeypatch):
    """`select` refuses descriptors past 1024 (a training job with many files open), so the
    child's first report raised and the walk was lost; and a process out of descriptors raised out of
    `start`. Past 1024 the walk beside gives the bound the walk here does; with none left, no walk beside."""
    import errno
    import os

    from solvercast.solvers import cuts

    q, best, _ = next((q, b, s) for q, b, s in _binding_tiny(range(40)) if cut_bound(q, b, 10**6).bound)
    expected = cut_bound(q, best + 1, 10**6)
    spare = []
    try:
        while len(spare) < 1100:
            spare.append(os.open("/dev/null", os.O_RDONLY))
        got = _beside(q, best + 1)
        assert got._connection.fileno() > 1024
        assert got.result(best).bound == expected.bound and got.error is None
    finally:
        for fd in spare:
            os.close(fd)

    def no_descriptors(self, *args, **kwargs):
        raise OSError(errno.EMFILE, "Too many open files")

    import multiprocessing

    monkeypatch.setattr(cuts, "_FORK_FAILED", False)
    monkeypatch.setattr(type(multiprocessing.get_context("fork")), "Pipe", no_descriptors)
    assert cuts.BackgroundCutBound.start(q, best + 1, time.perf_counter() + 5) is None


def test_a_failed_walk_beside_is_walked_here(monkeypatch):
    """The walk beside failed (its error text set): `_bound_by_cuts` walks here in the time left, and the
    error stays in the stats."""
    from solvercast.pipeline import portfolio as cpsat
    from solvercast.solvers import cuts
    from solvercast.solvers.result import SolveResult, SolveStatus

    def broken(*args, **kwargs):
        raise RuntimeError("broken walk")

    q, best, schedule = next((q, b, s) for q, b, s in _binding_tiny(range(40)) if cut_bound(q, b, 10**6).bound)
    expected = cut_bound(q, best, 10**6)
    real = cuts.cut_bound
    monkeypatch.setattr(cuts, "cut_bound", broken)  # the forked child inherits it
    walk = _beside(q, best + 1)
    monkeypatch.setattr(cuts, "cut_bound", real)
    found = SolveResult(schedule, SolveStatus.FEASIBLE, simulate(q, schedule), None, None, 0.0)
    got = cpsat._bound_by_cuts(q, found, time.perf_counter() + 5, None, time.perf_counter(), walk)
    assert "broken walk" in got.stats["cut_bound"]["error"]
    if expected.proven:
        assert got.status == SolveStatus.OPTIMAL and got.bound == best
    else:
        assert got.status == SolveStatus.FEASIBLE and got.bound == expected.bound



def test_the_walk_starts_above_the_optimum_when_the_original_order_breaks_the_budget():
    """`cpsat._walk_upper`: the original order's makespan when it holds the budget (and a hint's), else the
    serial horizon. The case: an original order over the budget that is faster than the optimum
    (a walk below it would stop at its first cut, proving nothing). Every walk upper is at or above the
    brute-force optimum, and on those cases the walk beside from it proves what the walk here proves."""
    from solvercast.pipeline import portfolio as cpsat

    over_and_faster = 0
    for q, best, schedule in _binding_tiny(range(80)):
        original = simulate(q, Schedule.original(q))
        upper = cpsat._walk_upper(q, None)
        assert upper >= best
        assert cpsat._walk_upper(q, schedule) == best  # an optimal hint within the budget
        if original.peak_memory > q.machine.memory_budget and original.makespan < best:
            over_and_faster += 1
            assert upper > original.makespan
    assert over_and_faster >= 1
