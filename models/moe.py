"""Mixture-of-experts layer with expert parallelism.

Per layer, on this rank's ``tokens = batch * seq`` tokens:

router:    LayerNorm -> logits = mm(h, w_router) -> softmax -> topk
dispatch:  sort the ``tokens * topk`` assignments by expert, gather the token
           rows (index_select), all_to_all_single -> wait
experts:   ``experts / world_size`` local experts as one batched matmul
           (bmm -> gelu -> bmm)
combine:   all_to_all_single back -> wait -> un-sort -> weight by the router
           probabilities and sum over topk
shared:    a dense "shared expert" MLP on the same tokens (independent of the
           all_to_alls, so it can overlap them) added to the output.

Shapes must be static, so routing is assumed balanced: every expert receives
``capacity = tokens * topk / experts`` rows from every rank and the
all_to_all split sizes are equal (as with a capacity-based dispatch).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx
import torch.nn.functional as F

from ._tracing import Comm, divisible, layer_norm, model_meta, require, trace
from .transformer import COMMON_DEFAULTS

MOE_DEFAULTS = {**COMMON_DEFAULTS, "layers": 1, "ffn": 512, "experts": 8, "topk": 2, "shared_ffn": None}


def moe_block(p: dict[str, Any]) -> fx.GraphModule:
    L, H, S, B, W = (p[k] for k in ("layers", "hidden", "seq", "batch", "world_size"))
    E, K, Fh = p["experts"], p["topk"], p["ffn"]
    Fs = Fh if p.get("shared_ffn") is None else p["shared_ffn"]
    dt = p["dtype"]
    require(K <= E, f"topk ({K}) must be <= experts ({E})")
    divisible(E, W, "experts across world_size (expert parallel)")
    T = B * S
    divisible(T * K, E, "batch*seq*topk across experts (balanced capacity)")
    El = E // W
    C = T * K // E            # rows per (expert, source rank)
    comm = Comm(W)

    inputs = [("x", (B, S, H), dt)]
    for i in range(L):
        inputs += [
            (f"l{i}_ln_w", (H,), dt), (f"l{i}_ln_b", (H,), dt),
            (f"l{i}_router", (H, E), dt),
            (f"l{i}_expert_w1", (El, H, Fh), dt), (f"l{i}_expert_w2", (El, Fh, H), dt),
        ]
        if Fs:
            inputs += [(f"l{i}_shared_w1", (H, Fs), dt), (f"l{i}_shared_w2", (Fs, H), dt)]

    def body(a: dict[str, torch.Tensor]) -> Any:
        x = a["x"].reshape(T, H)
        for i in range(L):
            h = layer_norm(x, a[f"l{i}_ln_w"], a[f"l{i}_ln_b"])
            probs = torch.softmax(torch.mm(h, a[f"l{i}_router"]), dim=-1)      # [T, E]
            top_p, top_e = torch.topk(probs, K, dim=-1)                       # [T, K]
            order = torch.argsort(top_e.reshape(-1), stable=True)            # assignments by expert
            routed = torch.index_select(h, 0, torch.div(order, K, rounding_mode="floor"))  # [T*K, H]

            recv = comm.all_to_all(routed)                                   # launch dispatch
            recv = comm.wait(recv)                                           # [W*El*C, H]
            xe = recv.view(W, El, C, H).transpose(0, 1).reshape(El, W * C, H)
            ye = torch.bmm(F.gelu(torch.bmm(xe, a[f"l{i}_expert_w1"])), a[f"l{i}_expert_w2"])
            send = ye.view(El, W, C, H).transpose(0, 1).reshape(T * K, H)

            back = comm.all_to_all(send)                                     # launch combine
            back = comm.wait(back)                                           # [T*K, H], sorted order
            unsorted = torch.index_select(back, 0, torch.argsort(order))
            moe_out = (unsorted.view(T, K, H) * top_p.unsqueeze(-1)).sum(dim=1)

            out = x + moe_out
            if Fs:
                shared = torch.mm(F.gelu(torch.mm(h, a[f"l{i}_shared_w1"])), a[f"l{i}_shared_w2"])
                out = out + shared
            x = out
        return x.view(B, S, H)

    return trace(body, inputs, model_meta("moe_block", p, comm, shared_ffn=Fs, capacity=C))
