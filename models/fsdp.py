"""FSDP (FSDP2-style, fully sharded) forward + backward + optimizer step.

Each layer is a pre-LayerNorm residual MLP ``y = x + W2 gelu(W1 LN(x))``
(``nn.Linear`` layout ``[out, in]``, no biases). Its four parameters are
sharded on dim 0 across ``world_size`` ranks and packed in one fp32 flat
shard per layer (placeholder ``l{i}_shard``), as FSDP2 does:

forward, per layer:  cast to ``dtype`` -> all_gather -> wait -> unpack (view,
    split, reshape per parameter) -> compute
loss:                mean squared error against ``target``
backward, per layer (reverse): re-cast -> re-all_gather -> wait -> unpack ->
    manual backward matmuls (gelu_backward, native_layer_norm_backward) ->
    pack the four weight gradients -> reduce_scatter (not waited yet)
optimizer:           per layer, in reduce_scatter order: wait -> cast to fp32
    -> SGD update of the shard (``aten.add`` with ``alpha=-lr``)

The backward is written out explicitly (no autograd), so the graph holds both
passes with real data dependencies on the saved activations.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx
import torch.nn.functional as F

from ._tracing import Comm, divisible, ffn_width, model_meta, trace
from .transformer import COMMON_DEFAULTS

FSDP_DEFAULTS = {**COMMON_DEFAULTS, "layers": 2, "ffn": None}

_LR = 1e-3
_EPS = 1e-5
_aten = torch.ops.aten


def fsdp_layers(p: dict[str, Any]) -> fx.GraphModule:
    L, H, S, B, W = (p[k] for k in ("layers", "hidden", "seq", "batch", "world_size"))
    dt = p["dtype"]
    Fh = ffn_width(p)
    divisible(H, W, "hidden across world_size (dim-0 sharding)")
    divisible(Fh, W, "ffn across world_size (dim-0 sharding)")
    comm = Comm(W)
    T = B * S
    mixed = dt != torch.float32

    # parameter shapes and their per-rank shard sizes (numel / W)
    shapes = [(H,), (H,), (Fh, H), (H, Fh)]            # ln_w, ln_b, w1, w2
    shard_sizes = [int(torch.Size(s).numel()) // W for s in shapes]
    shard_numel = sum(shard_sizes)

    inputs = [("x", (B, S, H), dt), ("target", (B, S, H), dt)]
    inputs += [(f"l{i}_shard", (shard_numel,), torch.float32) for i in range(L)]

    def gather(shard: torch.Tensor) -> list[torch.Tensor]:
        src = shard.to(dt) if mixed else shard
        full = comm.wait(comm.all_gather(src))                      # [W * shard_numel]
        parts = full.view(W, shard_numel).split(shard_sizes, dim=1)  # each [W, numel/W]
        return [part.reshape(shape) for part, shape in zip(parts, shapes)]

    def pack(grads: list[torch.Tensor]) -> torch.Tensor:
        return torch.cat([g.reshape(W, -1) for g in grads], dim=1).view(-1)

    def body(a: dict[str, torch.Tensor]) -> Any:
        x = a["x"].reshape(T, H)
        saved = []
        for i in range(L):
            ln_w, ln_b, w1, w2 = gather(a[f"l{i}_shard"])
            ln, mean, rstd = _aten.native_layer_norm(x, [H], ln_w, ln_b, _EPS)
            h1 = torch.mm(ln, w1.t())
            a1 = F.gelu(h1)
            y = x + torch.mm(a1, w2.t())
            saved.append((x, ln, mean, rstd, h1, a1))
            x = y

        diff = x - a["target"].reshape(T, H)
        loss = (diff * diff).mean()
        g = diff * (2.0 / diff.numel())                             # d loss / d y

        pending = []
        for i in reversed(range(L)):
            x_in, ln, mean, rstd, h1, a1 = saved[i]
            ln_w, ln_b, w1, w2 = gather(a[f"l{i}_shard"])
            grad_w2 = torch.mm(g.t(), a1)
            grad_a1 = torch.mm(g, w2)
            grad_h1 = _aten.gelu_backward(grad_a1, h1)
            grad_w1 = torch.mm(grad_h1.t(), ln)
            grad_ln = torch.mm(grad_h1, w1)
            need_input_grad = i > 0
            gx, grad_ln_w, grad_ln_b = _aten.native_layer_norm_backward(
                grad_ln, x_in, [H], mean, rstd, ln_w, ln_b, [need_input_grad, True, True])
            pending.append((i, comm.reduce_scatter(pack([grad_ln_w, grad_ln_b, grad_w1, grad_w2]))))
            if need_input_grad:
                g = g + gx

        new_shards = [None] * L
        for i, rs in pending:                                       # optimizer step
            grad = comm.wait(rs)
            if mixed:
                grad = grad.to(torch.float32)
            new_shards[i] = torch.add(a[f"l{i}_shard"], grad, alpha=-_LR)
        return (loss, *new_shards)

    return trace(body, inputs, model_meta("fsdp_layers", p, comm, ffn=Fh))
