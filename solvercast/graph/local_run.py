"""Running an FX graph of one rank on one process: random inputs of its placeholders' shapes, and
deterministic stand-ins for its collectives (`LocalCollectives`), so that a lowered graph's outputs can
be compared with the original's bit for bit, and calibration can time the graph's ops."""

from __future__ import annotations

import torch
import torch.fx as fx
from torch.utils._python_dispatch import TorchDispatchMode


def random_inputs(gm, seed: int = 0, device: str = "cpu") -> list:
    """Random tensors of ``gm``'s placeholders' shapes and dtypes (from ``meta["val"]``), scaled by
    1/sqrt(last dim) so that deep graphs stay finite (complex ones too); integer inputs are 0/1. A placeholder whose
    value is no tensor (the opaque DeviceMesh a DTensor graph passes through) gets None. Each keeps its
    placeholder's strides (a backward's saved activation may be a transposed layout that the graph views)."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        val = node.meta["val"]
        if not isinstance(val, torch.Tensor):
            out.append(None)
        elif val.dtype.is_floating_point or val.dtype.is_complex:
            scale = max(val.shape[-1] if val.dim() else 1, 1) ** -0.5
            dtype = val.dtype if val.dtype.is_complex else torch.float32  # (rotary embeddings' frequencies are complex)
            out.append((torch.randn(tuple(val.shape), generator=gen, dtype=dtype) * scale).to(val.dtype))
        else:
            out.append(torch.randint(0, 2, tuple(val.shape), generator=gen, dtype=val.dtype))
        if out[-1] is not None and not val.is_contiguous():  # the graph may view it as its strides allow
            out[-1] = torch.empty_strided(tuple(val.shape), val.stride(), dtype=val.dtype).copy_(out[-1])
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


def run_ranks(gm, rank_args: list[list]) -> list[list]:
    """Run ``gm`` as every rank of one process group at once, ``rank_args[r]`` rank ``r``'s inputs, with the
    collectives' true results across the ranks (all_reduce "sum" and "avg", reduce_scatter along dim 0,
    all_gather along dim 0; every collective of the graph is taken to span all ``len(rank_args)`` ranks).
    Each rank's outputs as a flat list. Where `run_local`'s stand-ins only keep one rank's shapes, this keeps
    the values a rewrite that moves data between ranks (sequence parallelism) must keep."""
    ranks = len(rank_args)
    envs: list[dict] = [{} for _ in range(ranks)]
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for r in range(ranks):
        for node, value in zip(placeholders, rank_args[r]):
            envs[r][node] = value

    def reduced(values: list, op: str):
        total = values[0].clone()
        for v in values[1:]:
            total += v
        if op == "avg":
            total /= len(values)
        elif op != "sum":
            raise NotImplementedError(f"run_ranks: reduce op {op!r}")
        return total

    out = None
    with torch.no_grad():
        for node in gm.graph.nodes:
            if node.op == "placeholder":
                continue
            if node.op == "output":
                out = [fx.map_arg(node.args[0], lambda n: env[n]) for env in envs]
                break
            if node.op == "get_attr":
                for env in envs:
                    env[node] = getattr(gm, node.target)
                continue
            args = [fx.map_arg(node.args, lambda n: env[n]) for env in envs]
            kwargs = [fx.map_arg(node.kwargs, lambda n: env[n]) for env in envs]
            target = node.target
            if target is _C10D.all_reduce.default:
                total = reduced([a[0] for a in args], args[0][1])
                results = [total.clone() for _ in range(ranks)]
            elif target is _C10D.reduce_scatter_tensor.default:
                if args[0][2] != ranks:
                    raise ValueError(f"run_ranks: {node.name} scatters over {args[0][2]} ranks, not {ranks}")
                total = reduced([a[0] for a in args], args[0][1])
                results = list(total.chunk(ranks))
            elif target is _C10D.all_gather_into_tensor.default:
                if args[0][1] != ranks:
                    raise ValueError(f"run_ranks: {node.name} gathers over {args[0][1]} ranks, not {ranks}")
                gathered = torch.cat([a[0] for a in args])
                results = [gathered.clone() for _ in range(ranks)]
            elif target is _C10D.wait_tensor.default:
                results = [a[0] for a in args]
            elif "_c10d_functional" in str(target):
                raise NotImplementedError(f"run_ranks: no cross-rank semantics for {target}")
            elif node.op == "call_method":
                results = [getattr(a[0], target)(*a[1:], **k) for a, k in zip(args, kwargs)]
            else:
                results = [target(*a, **k) for a, k in zip(args, kwargs)]
            for env, value in zip(envs, results):
                env[node] = value
    return [list(o) if isinstance(o, (tuple, list)) else [o] for o in out]
