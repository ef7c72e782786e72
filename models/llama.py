"""Llama-style blocks parallelised by PyTorch's own machinery, captured from torch.compile.

Each block: RMSNorm -> attention (q/k/v projections, grouped-query heads, causal SDPA, output
projection) -> residual; RMSNorm -> SwiGLU MLP (``w2(silu(w1 x) * w3 x)``) -> residual. No rotary
embedding, no vocabulary: the graphs are the blocks, which is where the collectives are.

* ``llama_tp``: tensor + sequence parallel with
  ``torch.distributed.tensor.parallel.parallelize_module`` and torchtitan's plan (norms sequence
  parallel, q/k/v/w1/w3 column-wise, wo/w2 row-wise to ``Shard(1)``): all_gather before the
  column-wise projections, reduce_scatter after the row-wise ones, in forward and backward.
* ``simple_fsdp``: FSDP built from DTensor parametrizations as torchtitan's SimpleFSDP does
  (``torchtitan/experiments/graph_trainer/simple_fsdp.py``): every parameter is a DTensor
  ``Shard(0)`` on the data-parallel mesh; reading it redistributes it to ``Replicate()``
  (all_gather in forward) and its gradient leaves as ``Partial`` (reduce_scatter in backward).
* ``fsdp_tp``: both on a 2-D mesh ``(dp, tp)``: the TP-local shard of each parameter is
  FSDP-sharded over ``dp``, as SimpleFSDP's ``replicate_compute`` does for DP + TP. Two process
  groups, two communicators.

Parameters and inputs are fake tensors (any size builds; nothing runs). A training step compiles to
two graphs: ``backward=1`` (default) returns the backward graph (inputs: saved activations and the
output's gradient; outputs: the gradients), ``backward=0`` the forward graph (outputs: the blocks'
output and the activations saved for backward). ``batch`` is the global batch (split over dp),
``seq`` the full sequence (split over tp by sequence parallelism). Group names are solvercast's fake groups
(``solvercast_fake_{dp,tp}_w{N}``; `models._capture`).
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.fx as fx
import torch.nn as nn
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

from ._capture import capture_post_grad, fake_mesh, mesh_group_names, rename_groups
from ._tracing import divisible, dtype_name, fake_group, require

LLAMA_COMMON = {"layers": 1, "dim": 256, "heads": 4, "kv_heads": None, "ffn": None, "seq": 64, "batch": 1,
                "dtype": "float32", "backward": 1}
LLAMA_TP_DEFAULTS = {**LLAMA_COMMON, "world_size": 2}
SIMPLE_FSDP_DEFAULTS = {**LLAMA_COMMON, "batch": 2, "world_size": 2}
FSDP_TP_DEFAULTS = {**LLAMA_COMMON, "batch": 2, "world_size": 4, "tp": 2}  # dp = world_size / tp

_EPS = 1e-5


def llama_ffn(dim: int, ffn: int | None) -> int:
    """Llama's hidden size: 2/3 of 4*dim, rounded up to a multiple of 256 (dim=4096 -> 11008; pass
    ffn=14336 for Llama-3-8B)."""
    return int(ffn) if ffn else 256 * -(-(8 * dim // 3) // 256)


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int):
        super().__init__()
        self.head_dim = dim // heads
        self.wq = nn.Linear(dim, heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(heads * self.head_dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        # -1 heads: under tensor parallelism each rank holds heads / tp of them
        q = self.wq(x).view(b, s, -1, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, s, -1, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, s, -1, self.head_dim).transpose(1, 2)
        groups = q.shape[1] // k.shape[1]
        if groups > 1:  # grouped-query attention: each kv head serves `groups` query heads
            k = k.repeat_interleave(groups, dim=1)
            v = v.repeat_interleave(groups, dim=1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(o.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int, hidden: int):
        super().__init__()
        self.attention_norm = nn.RMSNorm(dim, eps=_EPS)
        self.attention = Attention(dim, heads, kv_heads)
        self.ffn_norm = nn.RMSNorm(dim, eps=_EPS)
        self.feed_forward = FeedForward(dim, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x))
        return x + self.feed_forward(self.ffn_norm(x))


class Blocks(nn.Module):
    def __init__(self, layers: int, dim: int, heads: int, kv_heads: int, hidden: int):
        super().__init__()
        self.layers = nn.ModuleList(Block(dim, heads, kv_heads, hidden) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def tensor_parallel(model: Blocks, tp_mesh: Any) -> None:
    """torchtitan's Llama plan: sequence-parallel norms, column-wise q/k/v/w1/w3, row-wise wo/w2 back
    to the sequence shard (``Shard(1)``); the residual stream stays sequence-sharded."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)

    gather = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
    plan = {
        "attention_norm": SequenceParallel(), "attention": gather,
        "attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(), "attention.wv": ColwiseParallel(),
        "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
        "ffn_norm": SequenceParallel(), "feed_forward": gather,
        "feed_forward.w1": ColwiseParallel(), "feed_forward.w3": ColwiseParallel(),
        "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
    }
    for block in model.layers:
        parallelize_module(block, tp_mesh, plan)


class _ReplicateCompute:
    """SimpleFSDP's parametrization: the stored parameter is ``Shard(0)`` on the dp mesh; reading it
    all-gathers it (``Replicate()``) and marks its gradient ``Partial`` (reduce_scatter in
    backward). Under TP the gathered tensor is the TP-local shard, wrapped back as a TP DTensor."""

    def __init__(self, dp_mesh: Any, tp_mesh: Any = None, tp_placements: tuple = ()):
        self.dp_mesh, self.tp_mesh, self.tp_placements = dp_mesh, tp_mesh, tp_placements

    def __call__(self, param: Any) -> torch.Tensor:
        from torch.distributed.tensor import DTensor, Partial, Replicate

        full = param.redistribute(placements=[Replicate()]).to_local(grad_placements=[Partial()])
        if self.tp_mesh is None:
            return full
        return DTensor.from_local(full, self.tp_mesh, self.tp_placements, run_check=False)


_SWAPPED: dict[tuple[type, frozenset[str]], type] = {}


def data_parallel(model: nn.Module, dp_mesh: Any) -> None:
    """Shard every parameter on dim 0 over ``dp_mesh`` and read it through `_ReplicateCompute`, by
    swapping each module's class for a subclass with a property per parameter (SimpleFSDP's
    ``_register_parametrization``, which Dynamo traces through)."""
    from torch.distributed.tensor import DTensor, Shard, distribute_tensor

    for module in list(model.modules()):
        own = dict(module.named_parameters(recurse=False))
        if not own:
            continue
        compute = {}
        for name, p in own.items():
            if isinstance(p, DTensor):  # a TP parameter: FSDP-shard its local shard
                compute[name] = _ReplicateCompute(dp_mesh, p.device_mesh, tuple(p.placements))
                local = p.to_local().detach()
            else:
                compute[name] = _ReplicateCompute(dp_mesh)
                local = p.data
            module.register_parameter(name, nn.Parameter(distribute_tensor(local, dp_mesh, [Shard(0)])))
        key = (type(module), frozenset(own))
        cls = _SWAPPED.get(key)
        if cls is None:
            props = {n: property(lambda self, n=n: self._fsdp_compute[n](self._parameters[n])) for n in own}
            cls = _SWAPPED[key] = type(f"SimpleFSDP{type(module).__name__}", (type(module),), props)
        module._fsdp_compute = compute
        module.__class__ = cls


def _check(p: dict[str, Any], tp: int, dp: int) -> tuple[int, int, int]:
    dim, heads = p["dim"], p["heads"]
    kv = p["kv_heads"] or heads
    hidden = llama_ffn(dim, p["ffn"])
    divisible(dim, heads, "dim across heads")
    divisible(heads, kv, "heads across kv_heads")
    divisible(kv, tp, "kv_heads across the tensor-parallel size")
    divisible(hidden, tp, "ffn across the tensor-parallel size")
    divisible(p["seq"], tp, "seq across the tensor-parallel size (sequence parallel)")
    divisible(dim, dp * tp, "dim across the sharded ranks (dim-0 sharding)")
    divisible(hidden, dp * tp, "ffn across the sharded ranks (dim-0 sharding)")
    divisible(kv * (dim // heads), dp * tp, "kv projection rows across the sharded ranks")
    require(p["backward"] in (0, 1), f"backward must be 0 (forward graph) or 1 (backward graph), got {p['backward']}")
    return kv, hidden, dim // heads


_BUILT: dict[tuple, list[fx.GraphModule]] = {}


def _build(name: str, p: dict[str, Any], dp: int, tp: int) -> fx.GraphModule:
    """A copy of the captured forward or backward graph. One compile gives both, and takes seconds:
    each step is captured once per process."""
    _check(p, tp, dp)
    key = (name, tuple(sorted((k, v) for k, v in p.items() if k != "backward")))
    if key not in _BUILT:
        _BUILT[key] = _capture(name, p, dp, tp)
    gm = copy.deepcopy(_BUILT[key][p["backward"]])
    gm.meta["solvercast"]["params"]["backward"] = p["backward"]
    return gm


def mesh_dims(name: str, p: dict[str, Any]) -> list[tuple[str, int]]:
    """The model's mesh: ``[(dimension name, size)]``."""
    sizes = {"llama_tp": {"tp": p.get("world_size")}, "simple_fsdp": {"dp": p.get("world_size")},
             "fsdp_tp": {"dp": p.get("world_size", 0) // p.get("tp", 1), "tp": p.get("tp")}}[name]
    return [(n, int(s)) for n, s in sizes.items()]


def make_step(name: str, p: dict[str, Any], mesh: Any) -> tuple[nn.Module, torch.Tensor]:
    """The parallelised blocks of model ``name`` on ``mesh`` and their per-rank input (requires grad),
    made in the current tensor mode (fake tensors under a ``FakeTensorMode``)."""
    dims = dict(mesh_dims(name, p))
    dp, tp = dims.get("dp", 1), dims.get("tp", 1)
    kv, hidden, _ = _check(p, tp, dp)
    divisible(p["batch"], dp, f"{name}: batch across dp")
    dt = p["dtype"]
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dt)  # parameters made in dt (``.to`` cannot swap fake parameters)
    try:
        model = Blocks(p["layers"], p["dim"], p["heads"], kv, hidden)
    finally:
        torch.set_default_dtype(previous)
    if "tp" in dims:
        tensor_parallel(model, mesh["tp"])
    if "dp" in dims:
        data_parallel(model, mesh["dp"])
    x = torch.randn(p["batch"] // dp, p["seq"] // tp, p["dim"], dtype=dt, requires_grad=True)
    return model, x


def _capture(name: str, p: dict[str, Any], dp: int, tp: int) -> list[fx.GraphModule]:
    dims = mesh_dims(name, p)
    with fake_mesh([s for _, s in dims], [n for n, _ in dims]) as mesh:
        renames = mesh_group_names(mesh)
        with FakeTensorMode():
            model, x = make_step(name, p, mesh)
        graphs = capture_post_grad(model, [x], backward=True)
    groups = {n: fake_group(s, tag=n) for n, s in dims}  # destroying the default group unregistered ours too
    params = {k: (dtype_name(v) if isinstance(v, torch.dtype) else v) for k, v in p.items()}
    for gm in graphs:
        rename_groups(gm, renames)
        gm.meta["solvercast"] = {"model": name, "params": dict(params), "world_size": dp * tp,
                                 "group_name": groups[dims[-1][0]], "groups": groups}
    return graphs



def llama_tp(p: dict[str, Any]) -> fx.GraphModule:
    return _build("llama_tp", p, dp=1, tp=p["world_size"])


def simple_fsdp(p: dict[str, Any]) -> fx.GraphModule:
    return _build("simple_fsdp", p, dp=p["world_size"], tp=1)


def fsdp_tp(p: dict[str, Any]) -> fx.GraphModule:
    divisible(p["world_size"], p["tp"], "fsdp_tp: world_size across tp (dp = world_size / tp)")
    return _build("fsdp_tp", p, dp=p["world_size"] // p["tp"], tp=p["tp"])
