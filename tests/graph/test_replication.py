"""solvercast.graph.replication: which values are proven the same on every rank of a group, on tiny
graphs traced with make_fx on fake tensors; and sequence parallelism folding only what is proven."""

from __future__ import annotations

import pytest
import torch
import torch.fx as fx
from torch.fx.experimental.proxy_tensor import make_fx

from solvercast.graph.replication import Replication
from solvercast.models import fake_group
from solvercast.rewrites.sequence_parallel import row_region, sp_sites

C10D = torch.ops._c10d_functional
TP, DP = fake_group(4, tag="tp"), fake_group(4, tag="dp")


def _trace(f, *args) -> fx.GraphModule:
    return make_fx(f, tracing_mode="fake")(*args)


def _node(gm, name) -> fx.Node:
    return next(n for n in gm.graph.nodes if n.name == name)


def _program(x, w, s):
    reduced = C10D.wait_tensor(C10D.all_reduce(x @ w, "sum", TP))  # alike on TP's ranks
    gathered = C10D.wait_tensor(C10D.all_gather_into_tensor(s, 4, DP))  # alike on DP's ranks only
    scattered = C10D.wait_tensor(C10D.reduce_scatter_tensor(x, "sum", 4, TP))  # each rank its own rows
    mixed = reduced + x  # as alike as x
    noisy = torch.nn.functional.dropout(reduced, 0.5, True)  # each rank its own draw
    return reduced, gathered, scattered, mixed, noisy, torch.relu(reduced) * 2


def test_collectives_replicate_over_their_own_group_and_inputs_as_the_caller_says():
    gm = _trace(_program, torch.randn(8, 8), torch.randn(8, 8), torch.randn(2, 8))
    out = dict(zip(("reduced", "gathered", "scattered", "mixed", "noisy", "relu"),
                   gm.graph.output_node().args[0]))
    every = Replication(gm, "all")
    assert every.proven(out["reduced"], TP) and not every.proven(out["reduced"], DP)
    assert every.proven(out["gathered"], DP) and not every.proven(out["gathered"], TP)
    assert not every.proven(out["scattered"], TP)
    assert every.proven(out["mixed"], TP) and every.proven(out["relu"], TP)
    assert not every.proven(out["noisy"], TP)
    only_w = Replication(gm, ("w_1",))
    assert only_w.proven(out["reduced"], TP) and not only_w.proven(out["mixed"], TP)
    assert not only_w.proven(_node(gm, "x_1"), TP) and only_w.proven(_node(gm, "w_1"), TP)
    with pytest.raises(ValueError, match="not inputs of the graph"):
        Replication(gm, ("x",))
    with pytest.raises(ValueError, match="'all' or a collection"):
        Replication(gm, "x_1")


def test_a_value_written_in_place_is_not_proven():
    def f(x, local):
        r = C10D.wait_tensor(C10D.all_reduce(x, "sum", TP))
        r.add_(local)  # after this, r holds what each rank's local adds
        return (r + 1,)

    gm = _trace(f, torch.randn(8, 8), torch.randn(8, 8))
    rep = Replication(gm, "all")
    assert not rep.proven(gm.graph.output_node().args[0][0], TP)


def _tp_block(x, w, residual, norm_w):
    """A row-parallel matmul's all_reduce, a residual add, an RMS norm: sequence parallelism's region."""
    y = C10D.wait_tensor(C10D.all_reduce(x @ w, "sum", TP)) + residual
    return y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-6) * norm_w


@pytest.mark.parametrize("replicated, folds, weighted", [
    ("all", 1, True),  # the tensor-parallel contract: the residual and the weight alike on every rank
    (("norm_w_1",), 0, False),  # the residual not promised: the add reads the gathered rows
    (("residual_1",), 1, False),  # the norm's weight not promised: its product reads the gathered rows
])
def test_sequence_parallelism_takes_in_only_what_is_proven_alike(replicated, folds, weighted):
    gm = _trace(_tp_block, torch.randn(8, 16), torch.randn(16, 8), torch.randn(8, 8), torch.randn(8))
    region = row_region(gm, sp_sites(gm), replicated)
    assert len(region.folds) == folds
    assert any(n.target is torch.ops.aten.rsqrt.default for n in region.nodes) == (folds == 1)
    assert any(norm_w in n.args for n in region.nodes for norm_w in gm.graph.nodes
               if norm_w.name == "norm_w_1") == weighted


def test_a_residual_gathered_over_another_group_is_not_folded():
    """The fuzz's finding (seeds 96, 1182): an FSDP gather over the data-parallel group added to a
    tensor-parallel all_reduce's result; alike on DP's ranks, not on TP's."""

    def f(x, w, shard):
        gathered = C10D.wait_tensor(C10D.all_gather_into_tensor(shard, 4, DP))
        return C10D.wait_tensor(C10D.all_reduce(x @ w, "sum", TP)) + gathered

    gm = _trace(f, torch.randn(8, 16), torch.randn(16, 8), torch.randn(2, 8))
    assert not row_region(gm, sp_sites(gm), "all").folds
