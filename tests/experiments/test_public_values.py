"""The pieces of the public-graph values check (`experiments.benchmarks.public_values`): a slice computes what
the same nodes compute in the whole graph, and a kernel the CPU build lacks is stood in for deterministically
with the shapes its meta kernel gives."""

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from experiments.benchmarks.public_values import CpuStandIns, compared, graph_slice
from solvercast.graph.local_run import random_inputs, run_local
from solvercast.models import fake_group

C10D = torch.ops._c10d_functional


def _two_layers():
    group = fake_group(4, tag="pv4")

    def step(x, w1, w2, unused):
        g = C10D.wait_tensor(C10D.all_gather_into_tensor(w1, 4, group))
        h = torch.relu(x @ g)
        g2 = C10D.wait_tensor(C10D.all_gather_into_tensor(w2, 4, group))
        return (h @ g2).sum(0)

    return make_fx(step, tracing_mode="fake")(torch.empty(8, 16), torch.empty(4, 16), torch.empty(4, 16),
                                              torch.empty(3))


def test_a_slice_returns_what_its_nodes_compute_in_the_whole_graph():
    gm = _two_layers()
    nodes = list(gm.graph.nodes)
    relu = next(i for i, n in enumerate(nodes) if "relu" in str(n.target))
    piece = graph_slice(gm, relu + 1)
    placeholders = [n.name for n in piece.graph.nodes if n.op == "placeholder"]
    assert placeholders == ["x_1", "w1_1"]  # only the inputs it reads
    (out,) = run_local(piece, [a for a, n in zip(random_inputs(gm, seed=3), nodes) if n.name in placeholders])
    # the relu's value, computed by hand from the same inputs and the stand-in gather (block r: input x (r + 1))
    x, w1 = [a for a, n in zip(random_inputs(gm, seed=3), nodes) if n.name in placeholders]
    gathered = torch.cat([w1 * (r + 1) for r in range(4)])
    torch.testing.assert_close(out, torch.relu(x @ gathered), rtol=0, atol=0)


def test_a_slice_past_a_launch_keeps_its_wait():
    gm = _two_layers()
    nodes = list(gm.graph.nodes)
    launch = next(i for i, n in enumerate(nodes) if "all_gather" in str(n.target))
    piece = graph_slice(gm, launch + 1)
    assert [str(n.target).split(".")[-2] for n in piece.graph.nodes if n.op == "call_function"] == \
        ["all_gather_into_tensor", "wait_tensor"]


def test_a_kernel_the_cpu_lacks_is_stood_in_for_deterministically():
    q = torch.randn(1, 2, 8, 16)
    call = torch.ops.aten._scaled_dot_product_cudnn_attention.default
    stand_ins = CpuStandIns()
    with stand_ins:
        first = call(q, q, q, None, True, 0.0, True)
        second = call(q, q, q, None, True, 0.0, True)
        other = call(q * 2, q, q, None, True, 0.0, True)
    assert stand_ins.stood_in == {"aten._scaled_dot_product_cudnn_attention.default"}
    assert first[0].shape == (1, 2, 8, 16) and first[0].device.type == "cpu"
    assert torch.equal(first[0], second[0]) and not torch.equal(first[0], other[0])


def test_outputs_are_compared_bitwise_then_by_relative_difference():
    a = [torch.tensor([1.0, -4.0])]
    assert compared(a, [torch.tensor([1.0, -4.0])]) == (True, 0.0)
    assert compared(a, [torch.tensor([1.0, -3.0])]) == (False, 0.25)


def test_the_vendored_forward_graph_s_slice_keeps_its_values_bucketed_and_lowered():
    """autoparallel's fw_64_1d (vendored): its first four FSDP all_gathers in one bucket, ordered and lowered,
    and `optimize`'s own output, compute the slice's values bit for bit (all_gather buckets are bitwise)."""
    from experiments.benchmarks.public_values import check_graph

    row = check_graph("fw_64_1d", None, sites=4, time_limit=2.0)
    assert row["forced"].startswith("all_gather: 4 collectives in 1 launch")
    assert row["forced_same"] == (True, 0.0) and row["optimize_same"] == (True, 0.0)
