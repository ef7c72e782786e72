"""Effect-token ordering (``higher_order.with_effects``) is a fence for communication, and legacy
c10d collectives are sized by the ProcessGroup the graph carries.

with_effects graph (make_fx on fake tensors)::

    mm -> ar1 ; with_effects(token, print) ; mm_1 -> ar2 ; wait(ar1) ; wait(ar2) ; add

Nothing but the fence orders ar2 after the print: ar2's input is mm_1, which needs only x.
"""

import json
import subprocess
import sys

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from solvercast import Role, extract_problem, optimize
from solvercast.models import fake_group
from solvercast.graph.local_run import random_inputs
from tests.support import SCRIPTS

C10D = torch.ops._c10d_functional


def _effect_graph():
    group = fake_group(2)

    def step(token, x, w):
        a = C10D.all_reduce(x @ w, "sum", group)
        token = torch.ops.higher_order.with_effects(token, torch.ops.aten._print.default, "step")[0]
        b = C10D.all_reduce(x @ x, "sum", group)
        return token, C10D.wait_tensor(a) + C10D.wait_tensor(b)

    return make_fx(step, tracing_mode="fake")(torch.empty(0), torch.randn(256, 256), torch.randn(256, 256))


@pytest.mark.parametrize("preserve", [True, False])
def test_no_collective_moves_across_with_effects(preserve):
    gm = _effect_graph()
    p = extract_problem(gm, preserve_collective_order=preserve)
    ids = {t.name: i for i, t in enumerate(p.tasks)}
    assert p.tasks[ids["with_effects"]].role != Role.COMM  # a fence, not communication
    # the chain that keeps both collectives on their side of the fence, in the problem itself
    assert (ids["all_reduce"], ids["with_effects"]) in p.edges
    assert (ids["with_effects"], ids["all_reduce_1"]) in p.edges
    for method in ("list", "comm_priority", "heuristic", "cpsat"):
        res = optimize(gm, time_limit=1, method=method, preserve_collective_order=preserve, memory_budget=float("inf"))
        pos = {res.problem.tasks[t].name: i for i, t in enumerate(res.schedule.order)}
        assert pos["all_reduce"] < pos["with_effects"] < pos["all_reduce_1"], method
        lowered = [n.name for n in res.gm.graph.nodes]
        assert lowered.index("all_reduce") < lowered.index("with_effects") < lowered.index("all_reduce_1")


def test_effect_graph_keeps_its_values():
    gm = _effect_graph()
    res = optimize(gm, time_limit=1, memory_budget=float("inf"))
    args = random_inputs(gm, seed=3)
    # eagerly on the fake group (LocalCollectives, a dispatch mode, cannot run the higher-order op)
    with torch.no_grad():
        for a, b in zip(gm(*args), res.gm(*args)):
            assert torch.equal(a, b)


def test_legacy_collectives_and_fences_get_their_process_group():
    """Default group of 4 fake ranks, a sub-group of 2; extraction's default_group_size (8) is neither.
    Collectives are sized by their group, and collectives and fences (barriers) run on their group's
    comm stream."""
    script = SCRIPTS / "legacy_group_case.py"
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["sizes"] == {"allreduce_": 4, "allreduce__1": 2}
    for name, size_index in (("allreduce_", 0), ("allreduce__1", 1)):
        assert out["durations"][name] == pytest.approx(out["expected"][name][size_index] * 1e9, abs=1)
    assert out["groups"] == {"allreduce_": 0, "allreduce__1": 1} and out["comm_streams"] == 2
    # a fence runs on its own group's communicator: the barrier of the pair on the pair's comm stream
    assert out["fence_groups"] == {"barrier": 0, "barrier_1": 1}


def _two_group_effect_graph():
    dp, tp = fake_group(2, "dp"), fake_group(2, "tp")

    def step(token, x, w):
        a = C10D.all_reduce(x @ w, "sum", dp)
        b = C10D.all_reduce(x @ x, "sum", tp)
        token = torch.ops.higher_order.with_effects(token, torch.ops.aten._print.default, "step")[0]
        c = C10D.all_reduce(w @ w, "sum", dp)
        return token, C10D.wait_tensor(a) + C10D.wait_tensor(b) + C10D.wait_tensor(c)

    return make_fx(step, tracing_mode="fake")(torch.empty(0), torch.randn(256, 256), torch.randn(256, 256))


@pytest.mark.parametrize("order", [True, "group", False])
def test_a_fence_is_ordered_with_every_collective_of_every_group(order):
    """all_reduce (dp) ; all_reduce_1 (tp) ; with_effects ; all_reduce_2 (dp): under a per-group or free order
    nothing but the fence's own edges keeps all_reduce (not next to it) before it; each comm op has an
    edge to the fence after it and from the fence before it."""
    p = extract_problem(_two_group_effect_graph(), preserve_collective_order=order)
    ids = {t.name: i for i, t in enumerate(p.tasks)}
    assert p.tasks[ids["all_reduce"]].group != p.tasks[ids["all_reduce_1"]].group
    fence = ids["with_effects"]
    for name in ("all_reduce", "all_reduce_1"):
        assert (ids[name], fence) in p.edges, name
    assert (fence, ids["all_reduce_2"]) in p.edges
