"""Correct on every graph: each failure class a fuzzer found, as a test, plus a small
standing fuzz profile (`solvercast.testing.fuzz`; the large one is experiments/benchmarks/fuzz.py)."""

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st
from torch.fx.experimental.proxy_tensor import make_fx

from solvercast import SolvercastError, extract_problem, optimize
from solvercast.models import fake_group
from solvercast.graph.local_run import run_local

C = torch.ops._c10d_functional
G = fake_group(2)

METHODS = ("list", "nondelay", "comm_priority", "heuristic", "cpsat")


def _same_values(gm, low, args) -> bool:
    """Outputs and (mutated) inputs bit for bit, collectives replaced by local stand-ins."""
    a1, a2 = [a.clone() for a in args], [a.clone() for a in args]
    ref, got = run_local(gm, a1) + a1, run_local(low, a2) + a2
    return len(ref) == len(got) and all(torch.equal(x, y) for x, y in zip(ref, got))


def _wrong_runs(gm, args) -> list[str]:
    wrong = []
    for method in METHODS:
        for streams in (1, 2):
            for budget in (1.0, math.inf):
                res = optimize(gm, time_limit=1, method=method, compute_streams=streams, memory_budget=budget)
                if not _same_values(gm, res.gm, args):
                    wrong.append(f"{method} streams={streams} budget={budget}")
    return wrong


def _reads_after_in_place_all_reduce(p1, x):
    """all_reduce_(x) -> wait -> sigmoid(x): sigmoid reads x, written by the collective until its wait."""
    c = C.all_reduce_(x, "sum", G)
    C.wait_tensor(c)
    y = torch.sigmoid(x)
    return (y[:, 10:11],)


def _matmul_after_in_place_all_reduce(x, d):
    c = C.all_reduce_(x, "sum", G)
    w = C.wait_tensor(c)
    return (torch.matmul(x, d) + w.sum(),)


@pytest.mark.parametrize("fn", [_reads_after_in_place_all_reduce, _matmul_after_in_place_all_reduce])
@pytest.mark.parametrize("mode", ["fake", "real"])
def test_readers_of_an_in_place_collective_stay_after_its_wait(fn, mode):
    args = [torch.randn(64, 64), torch.randn(64, 64)]
    gm = make_fx(fn, tracing_mode=mode)(*[a.clone() for a in args])
    p = extract_problem(gm)
    names = [t.name for t in p.tasks]
    wait = names.index("wait_tensor")
    reader = next(i for i, t in enumerate(p.tasks) if t.op.startswith(("aten.sigmoid", "aten.mm")))
    assert (wait, reader) in p.edges
    assert _wrong_runs(gm, args) == []


def _write_through_a_view_after_a_read(a, b):
    """mm -> softmax reads y; y.t().sigmoid_() writes y through a view: softmax must come first."""
    y = torch.mm(a, b)
    s = torch.softmax(y, -1)
    y.t().sigmoid_()
    return (s, y)


def test_real_traced_graphs_keep_aliasing_by_schema():
    args = [torch.randn(32, 32), torch.randn(32, 32)]
    gm = make_fx(_write_through_a_view_after_a_read)(*[a.clone() for a in args])  # real tensors
    p = extract_problem(gm)
    idx = {t.name: i for i, t in enumerate(p.tasks)}
    assert (idx["_softmax"], idx["sigmoid_"]) in p.edges
    # the view and the written result are the mm's buffer, not buffers of their own
    assert len([b for b in p.buffers if b.producer is not None]) == 2  # mm and softmax
    assert _wrong_runs(gm, args) == []


def _constants_read_through_a_view_then_written(view_captured: bool):
    """A program over tensors it captures (not inputs), which make_fx turns into graph constants::

        x (get_attr) -> t(x) ----> mm(p, t, out=y)      reads x through a view
        x (get_attr, again) -----> sub(a, b, out=x)     writes x: must stay after the mm

    ``view_captured``: the view is made outside (``xt = x.t()``, a constant of its own that shares x's
    storage) instead of inside the traced code. Each get_attr node gets a value of its own, storage
    included, so only the module's attributes say that they are one tensor."""
    x, y = torch.randn(4, 4), torch.zeros(4, 4)
    xt = x.t()

    def f(a, b, p):
        torch.mm(p, xt if view_captured else x.t(), out=y)
        torch.sub(a, b, out=x)
        return y + 0, x + 0

    return f


@pytest.mark.parametrize("view_captured", [False, True])
@pytest.mark.parametrize("mode", ["real", "fake"])
def test_a_write_to_a_constant_stays_after_reads_of_its_views(mode, view_captured):
    """Every order `lower` accepts (random topological orders of the problem) computes the original's
    values: the sub that writes x never runs before the mm that read x through its view."""
    import copy
    import random

    from solvercast import Schedule, lower
    from solvercast.testing import random_topological_order

    args = [torch.randn(4, 4) for _ in range(3)]
    f = _constants_read_through_a_view_then_written(view_captured)
    if mode == "real":
        gm = make_fx(f)(*[a.clone() for a in args])
    else:
        gm = make_fx(f, tracing_mode="fake", _allow_non_fake_inputs=True)(*[a.clone() for a in args])
    p = extract_problem(gm)
    idx = {t.name: i for i, t in enumerate(p.tasks)}
    assert (idx["mm"], idx["sub"]) in p.edges
    ref = run_local(copy.deepcopy(gm), [a.clone() for a in args])  # a copy each: a run writes the constants
    for seed in range(20):
        low = lower(copy.deepcopy(gm), p, Schedule(order=random_topological_order(p, random.Random(seed))))
        got = run_local(low, [a.clone() for a in args])
        assert all(torch.equal(r, g) for r, g in zip(ref, got)), f"order {seed}: {[n.name for n in low.graph.nodes]}"


def test_repeated_solves_give_the_same_schedule_and_say_no_wall_clock():
    """Fuzz program 189 (2 streams, budget 1.1, auto): 6 calls with CP-SAT's 2 parallel workers gave 2
    different lowered programs (74/75-style "optimal" vs "feasible"); deterministic mode now gives one,
    ended by a proof or the deterministic limit, never by the wall clock."""
    from solvercast.testing.fuzz import Case, random_program, trace_program

    case = Case.draw(189)
    gm = trace_program(random_program(189), case.trace)
    # 3 s: the search ends after well under 1 s on an idle machine, so the wall clock, which caps the
    # call at 3 s, does not end it even on a loaded one
    runs = [optimize(gm, time_limit=3.0, memory_budget=case.budget, compute_streams=case.compute_streams,
                     method=case.method) for _ in range(6)]
    assert len({r.gm.code for r in runs}) == 1
    assert len({(r.schedule.order, tuple(sorted(r.schedule.streams.items()))) for r in runs}) == 1
    assert not any("wall clock" in (r.report.solver_message or "") for r in runs)


def test_milp_out_of_its_range_is_refused_with_what_works():
    """method='milp' with more than 20 tasks, or 2 streams with a budget (the default included): a
    SolvercastError naming what works, not a NotImplementedError / bare ValueError."""
    from solvercast.errors import UnsupportedProblemError
    from solvercast.models import build

    with pytest.raises(UnsupportedProblemError, match="cpsat"):
        optimize(build("tp_block", layers=2), time_limit=2, method="milp")
    args = [torch.randn(64, 64), torch.randn(64, 64)]
    small = make_fx(_write_through_a_view_after_a_read, tracing_mode="fake")(*args)
    with pytest.raises(UnsupportedProblemError, match="compute_streams=1"):
        optimize(small, time_limit=2, method="milp", compute_streams=2)
    assert optimize(small, time_limit=2, method="milp", compute_streams=2, memory_budget=math.inf).schedule


def test_a_budget_no_schedule_meets_is_an_infeasible_budget_error_with_best_peak():
    """Fuzz program 0, 2 streams, budget 0.9, cpsat: no heuristic meets it and every CP-SAT solution
    re-simulates over it; it was an InvalidScheduleError escaping solve_cpsat."""
    from solvercast.errors import InfeasibleBudgetError
    from solvercast.testing.fuzz import random_program, trace_program

    gm = trace_program(random_program(0), "fake")
    with pytest.raises(InfeasibleBudgetError) as e:
        optimize(gm, time_limit=1, method="cpsat", compute_streams=2, memory_budget=0.9,
                 preserve_collective_order="global", bucketing=False)  # the case as it was found
    assert e.value.best_peak is not None and e.value.best_peak > 0


def test_solvercast_pass_checks_its_options_and_keys_cost_fn_by_code():
    from solvercast import SolvercastPass

    with pytest.raises(TypeError, match="bogus_option"):
        SolvercastPass(bogus_option=3)
    with pytest.raises(ValueError, match="method"):
        SolvercastPass(method="fastest")

    def make_cost_fn():
        return lambda node: None  # a new function object each call, same code

    a, b = make_cost_fn(), make_cost_fn()
    assert a is not b
    assert SolvercastPass(cost_fn=a).uuid() == SolvercastPass(cost_fn=b).uuid()
    assert SolvercastPass(cost_fn=a).uuid() != SolvercastPass().uuid()


# derandomize: the same 40 programs on every run, so CI judges the code, not the draw (the large
# profile, experiments/benchmarks/fuzz.py, covers 2,000 more)
@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6))
def test_standing_fuzz_profile(seed):
    """Random FX programs (solvercast.testing.fuzz): a result or a SolvercastError, the same values on real
    inputs, within the report's budget and the lowered module (anchors included) within it, the same
    lowered program on a repeat call. The large profile: experiments/benchmarks/fuzz.py."""
    from solvercast.testing.fuzz import Case, check_optimize

    outcome, why = check_optimize(Case.draw(seed))
    assert outcome != "failed", why


@pytest.mark.parametrize("seed", [12, 214, 245, 339])
def test_the_lowered_module_holds_no_more_than_the_report_says(seed):
    """Fuzz programs where, with 2 compute streams, the lowered module (run in its program order,
    anchors included) held more than the budget the report promised: a record token was a view of its
    tensor, holding it until a later wait_and_bind, and the peak with several streams counted only
    memory over time. Tokens now hold nothing, and that peak counts the program order too."""
    from solvercast.testing.fuzz import Case, check_optimize

    case = Case.draw(seed)
    assert case.compute_streams == 2
    outcome, why = check_optimize(case)
    assert outcome == "ok", why


@pytest.mark.parametrize("seed", [9, 152])
def test_real_traced_programs_lower_without_a_bare_key_error(seed):
    """Fuzz programs traced with real tensors, 2 compute streams: lowering raised a bare KeyError
    (lower.py, a producer missing from the stream clocks) while views and getitems of real-traced
    values did not alias their inputs' storages; aliasing now comes from the schemas."""
    from solvercast.testing.fuzz import Case, check_optimize

    case = Case.draw(seed)
    assert case.trace == "real" and case.compute_streams == 2
    outcome, why = check_optimize(case)
    assert outcome == "ok", why


def test_legacy_c10d_collectives_are_comm_ops_and_p2p_are_fences():
    """make_fx of torch.distributed calls records legacy in-place c10d ops: allreduce_ was a FREE task
    (0 ns), send/recv/barrier compute kernels, and nothing ordered recv_'s write before its reader.
    Now the collective is a synchronous comm op of its kind, send/recv/barrier are fences that no
    collective crosses (also with preserve_collective_order=False), and recv_ writes its buffer."""
    import json
    import subprocess
    import sys

    from tests.support import SCRIPTS

    script = SCRIPTS / "legacy_c10d_case.py"
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["roles"] == {"allreduce_": "comm", "barrier": "comm", "send": "comm", "recv_": "comm"}
    assert out["recv_before_add"]
    for key in ("comm_orders_preserve_True", "comm_orders_preserve_False"):
        assert all(order == ["allreduce_", "barrier", "send", "recv_"] for order in out[key]), out[key]
    assert out["values_equal"]
