"""The sequence-parallel rewrite: which all_reduces it takes, which nodes it computes on blocks of rows (and
where it stops), the values every rank computes (`run_ranks`: the collectives' true results across ranks),
and the optimizer taking it with decomposition where that shortens the step.

Small graphs (make_fx on fake tensors, a fake group of 4)::

    a @ w -> all_reduce -> + x -> layer_norm -> @ w2          (the region: the add and the norm)
    a @ w -> all_reduce -> sum over the rows                    (the region stops at the wait)
"""

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from solvercast import optimize
from solvercast.graph.local_run import random_inputs, run_local, run_ranks
from solvercast.models import build, fake_group
from solvercast.rewrites.decompose import DecomposeOptions, DecomposePlan, apply_decomposition, matmul_sites
from solvercast.rewrites.sequence_parallel import apply_sequence_parallel, row_region, sp_sites

C10D = torch.ops._c10d_functional


def _block(ranks: int = 4, rows: int = 32, op: str = "sum", column_sum: bool = False):
    group = fake_group(ranks, tag=f"sp{ranks}")

    def step(a, w, x, ln_w, ln_b, w2):
        h = x + C10D.wait_tensor(C10D.all_reduce(a @ w, op, group))
        if column_sum:
            return h.sum(0)
        return torch.nn.functional.layer_norm(h, (16,), ln_w, ln_b) @ w2

    args = [torch.empty(rows, 8), torch.empty(8, 16), torch.empty(rows, 16), torch.empty(16), torch.empty(16),
            torch.empty(16, 8)]
    return make_fx(step, tracing_mode="fake")(*args)


def _rank_inputs(gm, ranks: int, sharded=lambda name: False):
    """Each rank's inputs: the same for every placeholder but those ``sharded(name)`` names (different per rank:
    a tensor-parallel weight's shards)."""
    names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    common = random_inputs(gm, seed=0)
    return [[own if sharded(name) else same for name, own, same in zip(names, random_inputs(gm, seed=r + 1), common)]
            for r in range(ranks)]


def _close_on_every_rank(gm, out, rank_args):
    for expected, got in zip(run_ranks(gm, rank_args), run_ranks(out, rank_args)):
        assert len(expected) == len(got)
        for a, b in zip(expected, got):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_the_region_runs_from_the_wait_through_the_residual_and_the_norm():
    gm = _block()
    (site,) = sp_sites(gm)
    region = row_region(gm, [site])
    names = [n.name for n in region.nodes]
    assert names[0] == site.wait and any("layer_norm" in n for n in names)
    assert [n.name for n in region.folds] == ["add"]  # the residual x folded into the reduction
    assert not any(n.target is torch.ops.aten.mm.default for n in region.nodes)  # the next matmul reads full rows


def test_a_reduction_over_the_rows_ends_the_region():
    gm = _block(column_sum=True)
    (site,) = sp_sites(gm)
    region = row_region(gm, [site])
    assert not any(n.target is torch.ops.aten.sum.dim_IntList for n in region.nodes)
    _close_on_every_rank(gm, apply_sequence_parallel(gm, [site]), _rank_inputs(gm, 4, lambda n: n in ("a", "w")))


@pytest.mark.parametrize("case", ["three_ranks", "rows_not_divisible", "avg"])
def test_all_reduces_it_cannot_prove_are_refused(case):
    gm = {"three_ranks": lambda: _block(ranks=3, rows=33), "rows_not_divisible": lambda: _block(rows=30),
          "avg": lambda: _block(op="avg")}[case]()
    assert sp_sites(gm) == []


def test_values_on_every_rank_small_block():
    gm = _block()
    out = apply_sequence_parallel(gm, sp_sites(gm))
    kinds = [str(n.target) for n in out.graph.nodes if "_c10d_functional" in str(n.target)]
    assert not any("all_reduce" in k for k in kinds) and any("reduce_scatter" in k for k in kinds)
    _close_on_every_rank(gm, out, _rank_inputs(gm, 4, lambda n: n in ("a", "w", "w2")))


def test_tp_block_written_sequence_parallel_then_split_keeps_every_rank_s_values():
    """tp_block (two layers, fp32): every all_reduce becomes a reduce_scatter, the residual stream and the
    norms run on blocks of rows, the gathered inputs of the next matmuls and the products before the
    reduce_scatters are then split in chunks: each rank's output is the original's. The weights differ per
    rank (shards), the input and the norms' parameters are the same on every rank."""
    gm = build("tp_block", layers=2, dtype="float32")
    rank_args = _rank_inputs(gm, 4, lambda name: name.endswith(("wqkv", "wo", "w1", "w2")))
    sp = apply_sequence_parallel(gm, sp_sites(gm))
    _close_on_every_rank(gm, sp, rank_args)
    sites = matmul_sites(sp)
    assert {s.kind for s in sites} == {"all_gather_matmul", "matmul_reduce_scatter"}
    _close_on_every_rank(gm, apply_decomposition(sp, DecomposePlan.of({s.collective: 2 for s in sites})), rank_args)


def test_run_ranks_agrees_with_decomposition_on_llama_tp():
    """run_ranks's cross-rank collectives on a DTensor graph, each rank with its own inputs: the split graph
    computes what the original does on every rank."""
    gm = build("llama_tp", layers=1, world_size=4, backward=0)
    rank_args = [random_inputs(gm, seed=r) for r in range(4)]
    out = apply_decomposition(gm, DecomposePlan.of({s.collective: 2 for s in matmul_sites(gm)}))
    for expected, got in zip(run_ranks(gm, rank_args), run_ranks(out, rank_args)):
        for a, b in zip(expected, got):
            assert (a is None and b is None) or torch.equal(a, b)


def test_run_ranks_with_the_same_inputs_on_two_ranks_is_run_local():
    """run_local's all_reduce stand-in doubles its input: what two ranks with the same inputs sum to."""
    gm = build("tp_block", layers=1, world_size=2, dtype="float32")
    args = random_inputs(gm, seed=0)
    local = run_local(gm, args)
    for rank in run_ranks(gm, [args, args]):
        assert all(torch.equal(a, b) for a, b in zip(local, rank))


def test_the_optimizer_writes_plain_tensor_parallelism_sequence_parallel_where_it_pays():
    """tp_block at hidden 8192, sequence 8192 on 8 ranks: the all_reduces outlast their matmuls, splitting them
    alone does not pay (the joining copy), but written sequence-parallel their halves feed and follow matmuls
    that chunking overlaps. At a small size (hidden 128, 256 rows: each collective latency-bound) the 7 plans
    tried all lose and nothing is taken; with sequence_parallel off, no all_reduce is rewritten."""
    big = build("tp_block", layers=2, hidden=8192, heads=32, seq=8192, batch=1, world_size=8)
    res = optimize(big, time_limit=10)
    assert res.decomposition is not None and res.decomposition.sequence_parallel, res.report.decomposition
    assert res.report.optimized_makespan < 0.9 * res.report.baseline_makespan
    assert res.optimized.peak_memory <= res.report.memory_budget
    assert "sequence parallel" in res.report.decomposition
    off = optimize(big, time_limit=10, decomposition=DecomposeOptions(sequence_parallel=False))
    assert off.decomposition is None or not off.decomposition.sequence_parallel
    assert off.report.optimized_makespan > res.report.optimized_makespan
    small = optimize(build("tp_block", layers=2, hidden=128, seq=32, batch=2, heads=4), time_limit=5)
    assert small.decomposition is None, small.report.decomposition
