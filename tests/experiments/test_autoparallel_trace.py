"""autoparallel's execution-trace simulator (vendored in experiments/benchmarks/autoparallel_trace.py) and
solvercast's `simulate` on tiny graphs where both are exact, every node priced by hand: with autoparallel's
launch overhead and solvercast's sync overhead set to 0 they give the same step, the one the durations
imply; with them, each adds its own constant where its rules say.

The graphs (make_fx on fake tensors)::

    chain:    mm1 = x @ w1 -> relu -> mm2 = relu @ w2                   step = mm1 + relu + mm2
    overlap:  mm1 = x @ w -> ar = all_reduce(mm1) (hides behind mm2 = y @ v, or mm2 behind it)
              -> wait(ar) -> add = wait + mm2                           step = mm1 + max(ar, mm2) + add
"""

import dataclasses

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from experiments.benchmarks.autoparallel_trace import LAUNCH_OVERHEAD_US, autoparallel_step_ms, trace_events
from solvercast import Schedule, extract_problem, simulate
from solvercast.cost.device import get_profile
from solvercast.models import fake_group

C10D = torch.ops._c10d_functional
SYNC_US = 2.0  # the sync overhead of solvercast's H100 profile, which these tests price collectives in


def _chain(x, w1, w2):
    return torch.relu(x @ w1) @ w2


def _overlap(group):
    def step(x, w, y, v):
        ar = C10D.all_reduce(x @ w, "sum", group)
        mm2 = y @ v
        return C10D.wait_tensor(ar) + mm2
    return step


def _trace(fn, n_inputs):
    return make_fx(fn, tracing_mode="fake")(*[torch.empty(64, 64) for _ in range(n_inputs)])


def _priced(gm, ms_by_kind: dict[str, float]):
    """``price_ms(node)``: the milliseconds of ``ms_by_kind`` by the node's name (``mm``, ``mm_1``, ``relu``,
    ``all_reduce``, ``add``), 0 for every other node (placeholders, the wait, the output)."""
    names = {n.name for n in gm.graph.nodes}
    assert set(ms_by_kind) <= names, (set(ms_by_kind), names)
    return lambda node: ms_by_kind.get(node.name, 0.0)


def _simulate_ms(gm, price_ms, sync: bool) -> float:
    device = get_profile("h100")
    if not sync:
        device = dataclasses.replace(device, sync_overhead=0.0)
    problem = extract_problem(gm, device=device, cost_fn=lambda n: price_ms(n) / 1e3)
    return simulate(problem, Schedule.original(problem)).makespan / 1e6


def test_compute_chain_is_the_sum_of_its_durations():
    """x, w1, w2 -> mm (0.3 ms) -> relu (0.05 ms) -> mm_1 (0.2 ms) -> output."""
    gm = _trace(_chain, 3)
    ms = {"mm": 0.3, "relu": 0.05, "mm_1": 0.2}
    price = _priced(gm, ms)
    total = sum(ms.values())
    assert autoparallel_step_ms(gm, price, launch_overhead_us=0.0) == pytest.approx(total)
    assert _simulate_ms(gm, price, sync=False) == pytest.approx(total)
    # one stream, no collective: solvercast's sync never applies; autoparallel adds its launch overhead after
    # every node that comes before the last kernel (three placeholders, mm, relu)
    nodes = [n.name for n in gm.graph.nodes]
    assert _simulate_ms(gm, price, sync=True) == pytest.approx(total)
    assert autoparallel_step_ms(gm, price) == pytest.approx(total + nodes.index("mm_1") * LAUNCH_OVERHEAD_US / 1e3)


@pytest.mark.parametrize("ar_ms, mm2_ms", [(0.8, 0.5), (0.5, 0.8)], ids=["all_reduce longer", "matmul longer"])
def test_all_reduce_overlapped_with_an_independent_matmul_costs_the_longer_of_the_two(ar_ms, mm2_ms):
    """x, w, y, v -> mm (0.3 ms) -> all_reduce (on its group's stream) | mm_1 (on the compute stream)
    -> wait_tensor -> add (0.1 ms): the all_reduce and mm_1 both start when mm ends."""
    gm = _trace(_overlap(fake_group(2, tag="ap_trace")), 4)
    ms = {"mm": 0.3, "all_reduce": ar_ms, "mm_1": mm2_ms, "add": 0.1}
    price = _priced(gm, ms)
    expected = ms["mm"] + max(ar_ms, mm2_ms) + ms["add"]
    assert autoparallel_step_ms(gm, price, launch_overhead_us=0.0) == pytest.approx(expected)
    assert _simulate_ms(gm, price, sync=False) == pytest.approx(expected)

    # with their constants, each judge adds its own (in us, then ms):
    # autoparallel: 1 us after each of the 4 placeholders and mm, then the all_reduce launched at that time
    # takes 1 us of the compute stream, and its wait sees it 1 us after it ends (its own overhead);
    # the wait itself adds 1 us before add
    o = LAUNCH_OVERHEAD_US
    mm_end = 4 * o + ms["mm"] * 1e3
    ar_seen = mm_end + o + ar_ms * 1e3 + o
    mm2_end = mm_end + o + o + mm2_ms * 1e3 + o  # mm_1 issued after mm's and the launch's overheads
    add_start = max(mm2_end, ar_seen) + o
    assert autoparallel_step_ms(gm, price) == pytest.approx((add_start + ms["add"] * 1e3) / 1e3)
    # simulate: the all_reduce starts a sync after its launch point and the wait ends a sync after it
    sim = ms["mm"] + max(mm2_ms, ar_ms + 2 * SYNC_US / 1e3) + ms["add"]
    assert _simulate_ms(gm, price, sync=True) == pytest.approx(sim)


def test_trace_events_put_the_collective_on_its_group_stream():
    gm = _trace(_overlap(fake_group(2, tag="ap_trace")), 4)
    price = _priced(gm, {"mm": 0.3, "all_reduce": 0.8, "mm_1": 0.5, "add": 0.1})
    events = {e["args"]["name"]: e for e in trace_events(gm, price, launch_overhead_us=0.0)["traceEvents"]}
    assert set(events) == {"mm", "all_reduce", "mm_1", "add"}  # events of positive duration only
    assert events["all_reduce"]["tid"] != 0 and events["mm_1"]["tid"] == 0
    assert events["all_reduce"]["ts"] == events["mm_1"]["ts"] == pytest.approx(300.0)  # microseconds
