"""Tensor-parallel (Megatron) and sequence-parallel (Megatron-SP) transformer workloads.

Weights are stored ``[in, out]`` so a linear layer is one ``aten.mm`` on the
flattened ``[tokens, features]`` activations. Attention is written with plain
``bmm`` / ``softmax`` (CPU fake SDPA traces to
``_scaled_dot_product_flash_attention_for_cpu``, which cost models rarely
know). Every collective is waited right before its result is used.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.fx as fx
import torch.nn.functional as F

from ._tracing import Comm, divisible, dtype_name, ffn_width, layer_norm, model_meta, require, trace

COMMON_DEFAULTS: dict[str, Any] = {
    "layers": 2,
    "hidden": 256,
    "seq": 128,
    "batch": 2,
    "world_size": 4,
    "dtype": "bfloat16",
}

TP_MLP_DEFAULTS = {**COMMON_DEFAULTS, "layers": 4, "ffn": None, "microbatches": 1}
TP_BLOCK_DEFAULTS = {**COMMON_DEFAULTS, "heads": 8, "ffn": None, "microbatches": 1}
SP_BLOCK_DEFAULTS = {**COMMON_DEFAULTS, "heads": 8, "ffn": None}


def _mlp(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """Column-parallel then row-parallel matmul: the result is a partial sum."""
    return torch.mm(F.gelu(torch.mm(x, w1)), w2)


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """q, k, v: [batch*heads, seq, head_dim]."""
    scores = torch.bmm(q, k.transpose(1, 2)) * scale
    return torch.bmm(torch.softmax(scores, dim=-1), v)


# --------------------------------------------------------------------------
# tp_mlp
# --------------------------------------------------------------------------

def tp_mlp(p: dict[str, Any]) -> fx.GraphModule:
    L, H, S, B, W, M = (p[k] for k in ("layers", "hidden", "seq", "batch", "world_size", "microbatches"))
    dt = p["dtype"]
    Fh = ffn_width(p)
    divisible(Fh, W, "ffn (MLP width) across world_size")
    divisible(B, M, "batch across microbatches")
    Fl = Fh // W
    comm = Comm(W)

    inputs = [("x", (B, S, H), dt)]
    for i in range(L):
        inputs += [(f"l{i}_w1", (H, Fl), dt), (f"l{i}_w2", (Fl, H), dt)]

    def body(a: dict[str, torch.Tensor]) -> Any:
        hs = _microbatches(a["x"], M, H)
        for i in range(L):
            for m in range(M):
                partial = _mlp(hs[m], a[f"l{i}_w1"], a[f"l{i}_w2"])
                red = comm.all_reduce(partial)
                hs[m] = hs[m] + comm.wait(red)
        return _joined(hs, B // M, S, H)

    return trace(body, inputs, model_meta("tp_mlp", p, comm, ffn=Fh))


# --------------------------------------------------------------------------
# tp_block
# --------------------------------------------------------------------------

def _check_heads(p: dict[str, Any]) -> tuple[int, int]:
    H, heads, W = p["hidden"], p["heads"], p["world_size"]
    divisible(H, heads, "hidden across heads")
    divisible(heads, W, "heads across world_size")
    return heads // W, H // heads


def _block_inputs(i: int, H: int, hl: int, d: int, Fl: int, dt: torch.dtype) -> list:
    return [
        (f"l{i}_ln1_w", (H,), dt), (f"l{i}_ln1_b", (H,), dt),
        (f"l{i}_wqkv", (H, 3 * hl * d), dt), (f"l{i}_wo", (hl * d, H), dt),
        (f"l{i}_ln2_w", (H,), dt), (f"l{i}_ln2_b", (H,), dt),
        (f"l{i}_w1", (H, Fl), dt), (f"l{i}_w2", (Fl, H), dt),
    ]


def _microbatches(x: torch.Tensor, M: int, H: int) -> list[torch.Tensor]:
    """``x`` as ``M`` microbatches of tokens (batch-major rows of width ``H``)."""
    chunks = [x] if M == 1 else list(x.chunk(M, dim=0))
    return [c.reshape(-1, H) for c in chunks]


def _joined(hs: list[torch.Tensor], Bm: int, S: int, H: int) -> Any:
    """The microbatches back as [Bm, S, H] outputs: one tensor, or a tuple of several."""
    outs = [h.view(Bm, S, H) for h in hs]
    return outs[0] if len(outs) == 1 else tuple(outs)


def _layers_inputs(L: int, H: int, hl: int, d: int, Fl: int, dt: torch.dtype) -> list:
    return [x for i in range(L) for x in _block_inputs(i, H, hl, d, Fl, dt)]


def _tensor_parallel(p: dict[str, Any]) -> tuple:
    """Heads and head dim per rank, the MLP width in all and per rank, the attention scale and the TP group's
    collectives, of a Megatron block with ``p``'s sizes (its checks raise on sizes that do not divide)."""
    W = p["world_size"]
    hl, d = _check_heads(p)
    Fh = ffn_width(p)
    divisible(Fh, W, "ffn (MLP width) across world_size")
    return hl, d, Fh, Fh // W, 1.0 / math.sqrt(d), Comm(W)


def tp_block(p: dict[str, Any]) -> fx.GraphModule:
    L, H, S, B, W, M = (p[k] for k in ("layers", "hidden", "seq", "batch", "world_size", "microbatches"))
    dt = p["dtype"]
    hl, d, Fh, Fl, scale, comm = _tensor_parallel(p)
    divisible(B, M, "batch across microbatches")
    Bm = B // M

    inputs = [("x", (B, S, H), dt)] + _layers_inputs(L, H, hl, d, Fl, dt)

    def attn_part(h: torch.Tensor, a: dict[str, torch.Tensor], i: int) -> torch.Tensor:
        ln = layer_norm(h, a[f"l{i}_ln1_w"], a[f"l{i}_ln1_b"])
        qkv = torch.mm(ln, a[f"l{i}_wqkv"])                       # [Bm*S, 3*hl*d], batch-major tokens
        qkv = qkv.view(Bm, S, 3, hl, d).permute(2, 0, 3, 1, 4)    # [3, Bm, hl, S, d]
        q, k, v = (t.reshape(Bm * hl, S, d) for t in qkv.unbind(0))
        ctx = _attention(q, k, v, scale)                          # [Bm*hl, S, d]
        ctx = ctx.view(Bm, hl, S, d).permute(0, 2, 1, 3).reshape(Bm * S, hl * d)
        return torch.mm(ctx, a[f"l{i}_wo"])                       # partial sum over ranks

    def body(a: dict[str, torch.Tensor]) -> Any:
        hs = _microbatches(a["x"], M, H)
        for i in range(L):
            for m in range(M):
                red = comm.all_reduce(attn_part(hs[m], a, i))
                hs[m] = hs[m] + comm.wait(red)
            for m in range(M):
                ln = layer_norm(hs[m], a[f"l{i}_ln2_w"], a[f"l{i}_ln2_b"])
                red = comm.all_reduce(_mlp(ln, a[f"l{i}_w1"], a[f"l{i}_w2"]))
                hs[m] = hs[m] + comm.wait(red)
        return _joined(hs, Bm, S, H)

    return trace(body, inputs, model_meta("tp_block", p, comm, ffn=Fh))


# --------------------------------------------------------------------------
# sp_block
# --------------------------------------------------------------------------

def sp_block(p: dict[str, Any]) -> fx.GraphModule:
    L, H, S, B, W = (p[k] for k in ("layers", "hidden", "seq", "batch", "world_size"))
    dt = p["dtype"]
    hl, d, Fh, Fl, scale, comm = _tensor_parallel(p)
    divisible(S, W, "seq across world_size (sequence parallel)")
    Sl = S // W

    # Megatron-SP layout: [seq, batch, hidden], sequence-major tokens, so the
    # all_gather / reduce_scatter over dim 0 shard the sequence.
    inputs = [("x", (Sl, B, H), dt)] + _layers_inputs(L, H, hl, d, Fl, dt)

    def body(a: dict[str, torch.Tensor]) -> Any:
        h = a["x"].reshape(Sl * B, H)                             # local sequence shard
        for i in range(L):
            ln = layer_norm(h, a[f"l{i}_ln1_w"], a[f"l{i}_ln1_b"])   # on the sequence shard
            full = comm.wait(comm.all_gather(ln))                    # [S*B, H]
            qkv = torch.mm(full, a[f"l{i}_wqkv"])
            qkv = qkv.view(S, B, 3, hl, d).permute(2, 1, 3, 0, 4)    # [3, B, hl, S, d]
            q, k, v = (t.reshape(B * hl, S, d) for t in qkv.unbind(0))
            ctx = _attention(q, k, v, scale)
            ctx = ctx.view(B, hl, S, d).permute(2, 0, 1, 3).reshape(S * B, hl * d)
            out = comm.reduce_scatter(torch.mm(ctx, a[f"l{i}_wo"]))  # -> [Sl*B, H]
            h = h + comm.wait(out)

            ln = layer_norm(h, a[f"l{i}_ln2_w"], a[f"l{i}_ln2_b"])
            full = comm.wait(comm.all_gather(ln))
            out = comm.reduce_scatter(_mlp(full, a[f"l{i}_w1"], a[f"l{i}_w2"]))
            h = h + comm.wait(out)
        return h.view(Sl, B, H)

    require(Sl >= 1, "seq must be >= world_size")
    return trace(body, inputs, model_meta("sp_block", p, comm, ffn=Fh))
