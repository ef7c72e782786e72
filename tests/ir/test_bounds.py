"""Lower bounds: derived by hand on a small graph, and never above the brute-force optimum."""

import pytest

from solvercast import Machine, Problem, Role, Task, lower_bounds
from solvercast.ir.bounds import _preemptive_sequence
from solvercast.testing import random_problem

from tests.support import brute_force

C, M, W = Role.COMPUTE, Role.COMM, Role.WAIT


def two_gathers(preserve=True):
    """x(10) -> ag1(50) -> w1 -> y1(10) and x -> ag2(50) -> w2 -> y2(10)."""
    tasks = (Task("x", C, 10), Task("ag1", M, 50), Task("ag2", M, 50), Task("w1", W, waits_for=1),
             Task("w2", W, waits_for=2), Task("y1", C, 10), Task("y2", C, 10))
    edges = ((0, 1), (0, 2), (1, 3), (2, 4), (3, 5), (4, 6))
    return Problem(tasks, edges, machine=Machine(), preserve_collective_order=preserve)


def test_sequencing_bound_by_hand():
    # ag2 runs after ag1 on the one comm stream (order kept): x 0-10, ag1 10-60, ag2 60-110, y2 110-120.
    # The other bounds miss it: critical path 10+50+10 = 70, compute 30, comm 100.
    b = lower_bounds(two_gathers())
    assert (b.critical_path, b.compute, b.comm, b.sequencing, b.makespan) == (70, 30, 100, 120, 120)
    assert brute_force(two_gathers())[0] == 120
    # free collective order: no chain, but sequencing the comm stream gives the same: both collectives
    # start after x (head 10), take 100 together, and the last one still has y (10) to feed
    free = two_gathers(preserve=False)
    assert lower_bounds(free).sequencing == 120 == brute_force(free)[0]


def test_a_collective_waits_for_all_its_ancestors_work():
    # a(10), b(10) -> ar(50) -> w -> u(10): the one compute stream runs a and b before the launch, so ar
    # starts at 20 at the earliest, u at 70: 80. Critical path 10 + 50 + 10 = 70, compute 30.
    tasks = (Task("a", C, 10), Task("b", C, 10), Task("ar", M, 50), Task("w", W, waits_for=2), Task("u", C, 10))
    p = Problem(tasks, ((0, 2), (1, 2), (2, 3), (3, 4)))
    b = lower_bounds(p)
    assert (b.critical_path, b.compute, b.sequencing) == (70, 30, 80)
    assert brute_force(p)[0] == 80


def test_preemptive_sequence_by_hand():
    # (head, work, tail): a(0, 10, 0), b(2, 3, 20): b preempts a at 2, ends 5 (+20 = 25); a ends 13
    assert _preemptive_sequence([(0, 10, 0), (2, 3, 20)]) == 25
    assert _preemptive_sequence([(5, 1, 0)]) == 6
    assert _preemptive_sequence([]) == 0


@pytest.mark.parametrize("streams", [1, 2])
@pytest.mark.parametrize("seed", range(25))
def test_bounds_never_exceed_the_optimum(seed, streams):
    p = random_problem(seed, 7, compute_streams=streams, sync_overhead=3 * (seed % 2), comm_fraction=0.3,
                       sync_comm_fraction=0.1)
    best, _ = brute_force(p)
    b = lower_bounds(p)
    assert b.makespan <= best


def two_chains(groups=(0, 0), **machine):
    """a1(10) -> agA(5) -> wA -> a2(10) and b1(40) -> agB(30) -> wB -> b2(10), agA before agB; ``groups``:
    their process groups (one comm stream each when there are enough)."""
    tasks = (Task("a1", C, 10), Task("b1", C, 40), Task("agA", M, 5, group=groups[0]),
             Task("agB", M, 30, group=groups[1]), Task("wA", W, waits_for=2), Task("wB", W, waits_for=3),
             Task("a2", C, 10), Task("b2", C, 10))
    edges = ((0, 2), (1, 3), (2, 4), (3, 5), (4, 6), (5, 7))
    return Problem(tasks, edges, machine=Machine(**machine))


def test_window_bound_by_hand():
    # The GPU must finish a1 and b1 before agB can start (agA comes first on the one comm stream, and agB
    # waits for b1): agB 50-80, b2 80-90, whatever the order; a2 fills the window.
    p = two_chains()
    b = lower_bounds(p)
    assert (b.critical_path, b.compute, b.windows, b.makespan) == (80, 70, 90, 90)
    assert brute_force(p)[0] == 90
    # the launch pays the sync, and so does the wait: agB runs 53-83, its wait at 86, b2 86-96
    assert lower_bounds(two_chains(sync_overhead=3)).windows == 96 == brute_force(two_chains(sync_overhead=3))[0]


@pytest.mark.parametrize("name, params", [("fsdp_layers", {"layers": 2}), ("sp_block", {"layers": 2})])
def test_window_bound_holds_on_zoo_graphs(zoo_graph, name, params):
    """Where the window bound is above every other bound (FSDP: the GPU idles while each layer's
    all-gather waits behind the previous collectives), no valid schedule beats it: random programs that
    keep the collective order, and the heuristics' schedules."""
    import random

    from solvercast import Schedule, extract_problem, simulate
    from solvercast.heuristics import run_heuristics
    from solvercast.testing import random_topological_order

    p = extract_problem(zoo_graph(name, **params))
    b = lower_bounds(p)
    bound = b.windows
    # the window bound is the one that counts here: above every other bound (a broken one returning 0
    # would pass the check below)
    assert bound > max(b.critical_path, b.compute, b.comm, b.sequencing)
    rng = random.Random(0)
    orders = [Schedule(order=random_topological_order(p, rng, keep_comm_order=True)) for _ in range(100)]
    makespans = [simulate(p, s).makespan for s in orders] + [sim.makespan for _, sim in run_heuristics(p).values()]
    assert bound <= min(makespans)


def test_window_bound_per_comm_stream():
    """One chain per comm stream (a collective runs on its group's stream), the compute stream shared."""
    # one group on two comm streams: agA and agB still share one, as with one comm stream
    assert lower_bounds(two_chains(comm_streams=2)).windows == 90 == brute_force(two_chains(comm_streams=2))[0]
    # two groups on two streams: each chain alone. agB's: b1 0-40 on the GPU, agB 40-70, b2 70-80 (a1, a2
    # fill the GPU meanwhile); the optimum is 90 (agA's launch, after a1, comes before agB's: a bound
    # per chain leaves that out)
    two = two_chains(groups=(0, 1), comm_streams=2)
    assert lower_bounds(two).windows == 80 and brute_force(two)[0] == 90
    # with the order free, agB may go first: no bound
    free = Problem(two_chains().tasks, two_chains().edges, preserve_collective_order=False)
    assert lower_bounds(free).windows == 0


@pytest.mark.parametrize("seed", range(20))
def test_bounds_hold_with_several_comm_streams(seed):
    """Random programs whose collectives alternate between two process groups on two comm streams: each
    stream's chain bounds (windows, sequencing, comm work) stay under the optimum."""
    import dataclasses

    p = random_problem(seed, 7, compute_streams=1 + seed % 2, sync_overhead=5 * (seed % 3), comm_fraction=0.5)
    groups = {c: k % 2 for k, c in enumerate(p.comm_tasks)}
    tasks = tuple(dataclasses.replace(t, group=groups.get(i, 0)) for i, t in enumerate(p.tasks))
    p = dataclasses.replace(p, tasks=tasks, machine=dataclasses.replace(p.machine, comm_streams=2))
    b = lower_bounds(p)
    assert max(b.windows, b.sequencing, b.comm) <= brute_force(p)[0]


@pytest.mark.parametrize("seed", range(20))
def test_window_bound_holds_with_sync_and_several_compute_streams(seed):
    p = random_problem(seed, 7, compute_streams=1 + seed % 2, sync_overhead=5 * (seed % 3), comm_fraction=0.4)
    assert lower_bounds(p).windows <= brute_force(p)[0]


def gather_beside_a_big_buffer(budget=None, sync=0):
    """a(10) -> ar(30) -> w -> b(10), and beside it u(40) -> v(5) through U (50 B); ar holds A (10 B, a's
    output) and R (10 B, its own) until its wait."""
    from solvercast import Buffer

    tasks = (Task("a", C, 10), Task("ar", M, 30), Task("w", W, waits_for=1), Task("b", C, 10),
             Task("u", C, 40), Task("v", C, 5))
    buffers = (Buffer("A", 10, 0, (1,)), Buffer("R", 10, 1, (2, 3)), Buffer("U", 50, 4, (5,)))
    return Problem(tasks, ((0, 1), (1, 2), (2, 3), (4, 5)), buffers=buffers,
                   machine=Machine(sync_overhead=sync, memory_budget=budget))


def test_exposure_bound_by_hand():
    # No budget: u and v run while ar is in flight (a 0-10, ar 10-40, u 10-50, v 50-55, b 55-65): the
    # compute work, 65, and the exposure bound says no more.
    free = gather_beside_a_big_buffer()
    assert lower_bounds(free).exposure == 65 == brute_force(free)[0]
    # Budget 60 B: with ar in flight A + R (20 B) are resident, so neither u's step nor v's (U, 50 B) fits:
    # ar's 30 ns are exposed, 65 + 30 = 95 (a, ar, w, b, then u, v; or u, v first). Every other bound
    # misses it: the critical path is 50, the compute work 65.
    tight = gather_beside_a_big_buffer(budget=60)
    b = lower_bounds(tight)
    assert b.exposure == 95 == b.makespan == brute_force(tight)[0]
    assert max(b.critical_path, b.compute, b.comm, b.sequencing, b.windows) == 65
    # the launch and the wait each pay the sync: 65 + 3 + 30 + 3
    assert lower_bounds(gather_beside_a_big_buffer(budget=60, sync=3)).exposure == 101
    assert brute_force(gather_beside_a_big_buffer(budget=60, sync=3))[0] == 101


def test_exposure_bound_under_a_budget_with_no_buffer_to_place():
    """A budget but no buffer whose lifetime an order decides (fuzz programs 1162, 1326 crashed here):
    memory forces nothing, so a(10), ar(30), b(10) and the independent u(40): the compute work."""
    tasks = (Task("a", C, 10), Task("ar", M, 30), Task("w", W, waits_for=1), Task("b", C, 10), Task("u", C, 40))
    p = Problem(tasks, ((0, 1), (1, 2), (2, 3)), machine=Machine(memory_budget=100))
    assert not p.lifetime_buffers
    assert lower_bounds(p).exposure == 60 == brute_force(p)[0]


def test_exposure_bound_where_it_is_not_computed():
    """Several compute streams (memory is judged over time, windows overlap on the GPU) and a free
    collective order (the launch order that keeps windows apart is not fixed): 0."""
    import dataclasses

    tight = gather_beside_a_big_buffer(budget=60)
    two = dataclasses.replace(tight, machine=dataclasses.replace(tight.machine, compute_streams=2))
    assert lower_bounds(two).exposure == 0
    assert lower_bounds(dataclasses.replace(tight, preserve_collective_order=False)).exposure == 0


@pytest.mark.parametrize("comm_streams", [1, 2])
def test_exposure_bound_never_exceeds_the_optimum_with_binding_budgets(comm_streams):
    """Brute force over tiny random programs, each without a budget, with one halfway between the
    original peak and the memory bound, and with the memory bound itself; with two comm streams the
    collectives alternate between two process groups. The bound must also be the best one somewhere
    (a bound that returned 0 would pass the first check)."""
    import dataclasses

    from solvercast import Schedule, simulate

    above_the_others = 0
    for seed in range(30):
        p = random_problem(seed, 7, sync_overhead=5 * (seed % 2), comm_fraction=0.4,
                           sync_comm_fraction=0.1 * (seed % 3 == 2))
        if comm_streams == 2:
            groups = {c: k % 2 for k, c in enumerate(p.comm_tasks)}
            tasks = tuple(dataclasses.replace(t, group=groups.get(i, 0)) for i, t in enumerate(p.tasks))
            p = dataclasses.replace(p, tasks=tasks, machine=dataclasses.replace(p.machine, comm_streams=2))
        peak, floor = simulate(p, Schedule.original(p)).peak_memory, lower_bounds(p).memory
        for budget in (None, (peak + floor) // 2, floor):
            q = p.with_budget(budget)
            best, _ = brute_force(q)
            if best is None:  # nothing fits
                continue
            b = lower_bounds(q)
            assert b.exposure <= best, (seed, budget)
            above_the_others += b.exposure > max(b.critical_path, b.compute, b.comm, b.sequencing, b.windows)
    assert above_the_others >= 5
