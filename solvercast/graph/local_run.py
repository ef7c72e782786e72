"""Running an FX graph of one rank on one process: random inputs of its placeholders' shapes, and
deterministic stand-ins for its collectives (`LocalCollectives`), so that a lowered graph's outputs can
be compared with the original's bit for bit, and calibration can time the graph's ops."""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode


def random_inputs(gm, seed: int = 0, device: str = "cpu") -> list:
    """Random tensors of ``gm``'s placeholders' shapes and dtypes (from ``meta["val"]``), scaled by
    1/sqrt(last dim) so that deep graphs stay finite; integer inputs are 0/1. A placeholder whose
    value is no tensor (the opaque DeviceMesh a DTensor graph passes through) gets None."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        val = node.meta["val"]
        if not isinstance(val, torch.Tensor):
            out.append(None)
        elif val.dtype.is_floating_point:
            scale = max(val.shape[-1] if val.dim() else 1, 1) ** -0.5
            out.append((torch.randn(tuple(val.shape), generator=gen) * scale).to(val.dtype))
        else:
            out.append(torch.randint(0, 2, tuple(val.shape), generator=gen, dtype=val.dtype))
    return [t if t is None else t.to(device) for t in out]


_C10D = torch.ops._c10d_functional


class LocalCollectives(TorchDispatchMode):
    """Deterministic stand-ins for the functional collectives (right shapes, no process group), so
    that outputs can be compared bit for bit; every other op runs as is. The in-place all-reduce
    writes its input, as the real one does."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is _C10D.all_reduce.default:
            return args[0] * 2
        if func is _C10D.all_reduce_.default:
            return args[0].mul_(2)
        if func is _C10D.all_reduce_coalesced.default:
            return [t * 2 for t in args[0]]
        if func is _C10D.all_gather_into_tensor.default:
            t, w = args[0], args[1]
            return torch.cat([t * (i + 1) for i in range(w)])
        if func is _C10D.reduce_scatter_tensor.default:
            t, w = args[0], args[2]
            return t.reshape(w, t.shape[0] // w, *t.shape[1:]).sum(0)
        if func is _C10D.all_to_all_single.default:
            t, ins = args[0], list(args[2])
            return torch.cat(list(reversed(t.split(ins))))
        if func is _C10D.wait_tensor.default:
            return args[0]
        return func(*args, **kwargs)


def run_local(gm, args: list[torch.Tensor]) -> list[torch.Tensor]:
    """``gm(*args)`` with `LocalCollectives`, outputs as a flat list."""
    with torch.no_grad(), LocalCollectives():
        out = gm(*args)
    return list(out) if isinstance(out, (tuple, list)) else [out]
