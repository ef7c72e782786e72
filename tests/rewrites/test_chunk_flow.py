"""Chunks carried through pointwise work (`solvercast.rewrites.chunk_flow`): each op between a join and the
cuts that follow it is written once per chunk, nothing is computed twice, values are bitwise the same; and
on a tensor-parallel Llama forward at batch 2, each decomposed all_gather chunk depends on one
reduce_scatter chunk only, which is what lets the next layer's gather start before the last scatter."""

import pytest
import torch
import torch.fx as fx
from torch.fx.experimental.proxy_tensor import make_fx

from solvercast.graph.local_run import random_inputs, run_ranks
from solvercast.models import build
from solvercast.rewrites.chunk_flow import carry_chunks
from solvercast.rewrites.decompose import DecomposePlan, apply_decomposition, matmul_sites

ATEN = torch.ops.aten
C10D = torch.ops._c10d_functional


def _joined_norm_cut(chunks: int, whole_reader: bool):
    """Pieces joined along dim 1, a residual add and RMSNorm, the result cut into ``chunks`` along dim 1
    again; with ``whole_reader``, the residual sum is also returned whole."""

    def step(a, b, residual, weight):
        joined = torch.cat([a, b], 1)
        h = joined + residual
        x = h.float()
        normed = (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * weight).to(torch.bfloat16)
        width = normed.shape[1] // chunks
        cuts = tuple(normed[:, j * width:(j + 1) * width] for j in range(chunks))
        return cuts + ((h,) if whole_reader else ())

    args = [torch.empty(2, 4, 16, dtype=torch.bfloat16), torch.empty(2, 4, 16, dtype=torch.bfloat16),
            torch.empty(2, 8, 16, dtype=torch.bfloat16), torch.empty(16)]
    return make_fx(step, tracing_mode="fake")(*args)


def _ops(gm, *targets):
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target in targets]


@pytest.mark.parametrize("whole_reader", [False, True])
def test_the_pointwise_work_between_a_join_and_its_cuts_is_written_per_chunk(whole_reader):
    gm = _joined_norm_cut(chunks=2, whole_reader=whole_reader)
    args = random_inputs(gm, seed=3)
    expected = gm(*args)
    pointwise = len(_ops(gm, ATEN.add.Tensor, ATEN.mul.Tensor, ATEN.rsqrt.default, ATEN.pow.Tensor_Scalar))
    written = carry_chunks(gm.graph)
    gm.graph.lint()
    gm.recompile()
    got = gm(*args)
    assert all(torch.equal(x, y) for x, y in zip(expected, got))
    assert written >= pointwise
    # each chunk is computed from its own piece: the join of the inputs is gone, no op runs twice
    assert not any(n.args[0] and all(p.op == "placeholder" for p in n.args[0]) for n in _ops(gm, ATEN.cat.default))
    assert len(_ops(gm, ATEN.rsqrt.default)) == 2 and len(_ops(gm, ATEN.slice.Tensor)) == 2  # the residual cut
    assert len(_ops(gm, ATEN.cat.default)) == (1 if whole_reader else 0)  # the sum read whole: joined once


def test_cuts_that_do_not_split_a_value_into_equal_chunks_are_left_alone():
    def step(x):
        y = x * 2
        return y[:, :3], y[:, 3:]

    gm = make_fx(step, tracing_mode="fake")(torch.empty(2, 8))
    before = [n.format_node() for n in gm.graph.nodes]
    assert carry_chunks(gm.graph) == 0
    assert [n.format_node() for n in gm.graph.nodes] == before


def _collective_ancestors(node: fx.Node, target) -> set[str]:
    seen, stack, found = set(), [node], set()
    while stack:
        n = stack.pop()
        for a in n.all_input_nodes:
            if a not in seen:
                seen.add(a)
                stack.append(a)
                if a.target is target:
                    found.add(a.name)
    return found


@pytest.mark.parametrize("degree", [2, 4])
def test_a_llama_forward_at_batch_two_gathers_each_chunk_after_its_own_scatter_chunk(degree):
    """DTensor's sequence-parallel Llama forward at batch 2: the attention's and the MLP's reduce_scatters and
    all_gathers split by batch entries (2) or positions (4). Chunk j of the MLP's gather needs chunk j of the
    attention's scatter and no other (carried through the residual add and RMSNorm); every rank's values are
    the original's."""
    gm = build("llama_tp", layers=2, world_size=4, backward=0, batch=2)
    sites = matmul_sites(gm)
    assert {(s.kind, s.layout) for s in sites} == {("all_gather_matmul", "batch_major"),
                                                   ("matmul_reduce_scatter", "batch_major")}
    out = apply_decomposition(gm, DecomposePlan.of({s.collective: degree for s in sites}))
    scatters = [n for n in out.graph.nodes if n.target is C10D.reduce_scatter_tensor.default]
    gathers = [n for n in out.graph.nodes if n.target is C10D.all_gather_into_tensor.default]
    first_scatter = [n.name for n in scatters[:degree]]  # layer 0's attention
    mlp_gathers = gathers[degree:2 * degree]  # layer 0: the attention's gather, then the MLP's
    for j, gather in enumerate(mlp_gathers):
        assert _collective_ancestors(gather, C10D.reduce_scatter_tensor.default) == {first_scatter[j]}
    rank_args = [random_inputs(gm, seed=r) for r in range(4)]
    for a, b in zip(run_ranks(gm, rank_args), run_ranks(out, rank_args)):
        for x, y in zip(a, b):
            torch.testing.assert_close(x, y)


def test_a_value_two_partitions_reach_is_rebuilt_from_one_of_them():
    """A residual sum read by two cut sets of different widths (a layer's gathers split at two degrees) and
    also returned whole: each partition gets its own chunks, the whole value is joined from one of them."""

    def step(a, b, r):
        h = torch.cat([a, b], 1) + r
        x, y = h * 2, h * 3
        return (*(x[:, j * 2:(j + 1) * 2] for j in range(4)), *(y[:, j * 4:(j + 1) * 4] for j in range(2)), h)

    gm = make_fx(step, tracing_mode="fake")(torch.empty(2, 4, 3), torch.empty(2, 4, 3), torch.empty(2, 8, 3))
    args = random_inputs(gm, seed=5)
    expected = gm(*args)
    carry_chunks(gm.graph)
    gm.graph.lint()
    gm.recompile()
    assert all(torch.equal(x, y) for x, y in zip(expected, gm(*args)))
    assert len(_ops(gm, ATEN.add.Tensor)) == 6  # the sum per chunk of each partition, never whole
