"""Workload graphs for solvercast: distributed training/inference steps traced to FX.

>>> from solvercast.models import build, list_models, describe
>>> gm = build("tp_block", layers=2, world_size=4)

Every graph is traced with ``make_fx(tracing_mode="fake")`` (or built node by
node on fake tensors for ``synthetic``; ``llama_tp``, ``simple_fsdp`` and
``fsdp_tp`` are what torch.compile's post-grad hook sees of PyTorch's own
DTensor parallelism, `models/_capture.py`), so every node carries
``meta["val"]`` and no real memory is used. Collectives are
``torch.ops._c10d_functional`` ops, each followed by a separate
``wait_tensor`` placed right before the result is first used. Group names
come from stand-alone fake process groups, one per world size
(``solvercast_fake_w{W}``, see ``models/_tracing.py``).
``gm.meta["solvercast"]`` records the model name, its resolved parameters,
the world size and the group name.

Builds are deterministic: the same parameters give the same graph and node
names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch.fx as fx

from ._tracing import fake_group, group_is_registered, parse_dtype, register_fake_group
from .fsdp import FSDP_DEFAULTS, fsdp_layers
from .llama import FSDP_TP_DEFAULTS, LLAMA_TP_DEFAULTS, SIMPLE_FSDP_DEFAULTS, fsdp_tp, llama_tp, simple_fsdp
from .moe import MOE_DEFAULTS, moe_block
from .synthetic import SYNTHETIC_DEFAULTS, synthetic
from .transformer import SP_BLOCK_DEFAULTS, TP_BLOCK_DEFAULTS, TP_MLP_DEFAULTS, sp_block, tp_block, tp_mlp

__all__ = ["MODELS", "ModelInfo", "build", "describe", "fake_group", "group_is_registered", "list_models",
           "register_fake_group"]


@dataclass(frozen=True)
class ModelInfo:
    name: str
    description: str
    defaults: dict[str, Any]
    fn: Callable[[dict[str, Any]], fx.GraphModule]


# parameters that may be 0 (all other integers must be >= 1)
_ZERO_OK = {"seed", "shared_ffn", "backward"}
# integer parameters whose default None means "derived" (documented per model)
_OPTIONAL_INT = {"ffn", "shared_ffn", "kv_heads"}
_FLOAT = {"comm_fraction"}

MODELS: dict[str, ModelInfo] = {
    m.name: m
    for m in (
        ModelInfo("tp_mlp", "Megatron tensor-parallel MLP: mm -> gelu -> mm -> all_reduce -> wait -> residual, "
                  "per layer (ffn defaults to 4*hidden; microbatches > 1 interleaves independent chunks)",
                  TP_MLP_DEFAULTS, tp_mlp),
        ModelInfo("tp_block", "Tensor-parallel transformer blocks: LN -> qkv (sharded heads) -> bmm/softmax "
                  "attention -> out proj -> all_reduce; LN -> MLP -> all_reduce", TP_BLOCK_DEFAULTS, tp_block),
        ModelInfo("sp_block", "Sequence-parallel (Megatron-SP) blocks: LN on the sequence shard, all_gather "
                  "before column-parallel mm, reduce_scatter after row-parallel mm", SP_BLOCK_DEFAULTS, sp_block),
        ModelInfo("fsdp_layers", "FSDP forward + backward + SGD step of residual LN-MLP layers: per-layer "
                  "all_gather (forward and backward), reduce_scatter of gradients", FSDP_DEFAULTS, fsdp_layers),
        ModelInfo("moe_block", "Expert-parallel MoE: router softmax/topk, all_to_all dispatch, batched expert "
                  "MLP, all_to_all combine, weighted sum, plus a shared dense MLP (shared_ffn=0 disables)",
                  MOE_DEFAULTS, moe_block),
        ModelInfo("llama_tp", "Llama blocks (RMSNorm, SDPA attention, SwiGLU) made tensor + sequence parallel by "
                  "parallelize_module; the post-grad graph torch.compile gives (backward=1: the backward graph, "
                  "0: the forward)", LLAMA_TP_DEFAULTS, llama_tp),
        ModelInfo("simple_fsdp", "Llama blocks under FSDP from DTensor parametrizations (torchtitan's SimpleFSDP): "
                  "all_gather in the forward graph, reduce_scatter of gradients in the backward graph",
                  SIMPLE_FSDP_DEFAULTS, simple_fsdp),
        ModelInfo("fsdp_tp", "Llama blocks with SimpleFSDP over dp and tensor + sequence parallel over tp on a 2-D "
                  "mesh (dp = world_size / tp): two process groups", FSDP_TP_DEFAULTS, fsdp_tp),
        ModelInfo("synthetic", "Seeded random DAG of mm/add/mul/relu and collectives with randomly placed "
                  "waits; tasks = number of call_function nodes", SYNTHETIC_DEFAULTS, synthetic),
    )
}


def list_models() -> list[str]:
    """Names accepted by :func:`build`."""
    return list(MODELS)


def _info(name: str) -> ModelInfo:
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; valid models: {', '.join(MODELS)}")
    return MODELS[name]


def describe(name: str | None = None) -> dict[str, Any]:
    """``{"name", "description", "defaults"}`` for one model, or ``{name: that}`` for all."""
    if name is None:
        return {n: describe(n) for n in MODELS}
    info = _info(name)
    return {"name": info.name, "description": info.description, "defaults": dict(info.defaults)}


def _check_param(model: str, key: str, value: Any, default: Any) -> Any:
    def bad(what: str) -> ValueError:
        return ValueError(f"{model}: parameter {key}={value!r} {what}")

    if key == "dtype":
        try:
            return parse_dtype(value)
        except ValueError as e:
            raise ValueError(f"{model}: {e}") from None
    if key in _FLOAT:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad("must be a number")
        return float(value)
    if value is None and key in _OPTIONAL_INT:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        # accept integral floats / numeric strings from CLIs
        try:
            as_int = int(str(value))
        except (TypeError, ValueError):
            raise bad("must be an integer") from None
        value = as_int
    lo = 0 if key in _ZERO_OK else 1
    if value < lo:
        raise bad(f"must be >= {lo}")
    return value


def build(name: str, **params: Any) -> fx.GraphModule:
    """Trace model ``name`` with ``params`` overriding its defaults (see :func:`describe`).

    Raises ``ValueError`` for an unknown model, an unknown parameter or an
    invalid value (wrong type, not divisible by ``world_size``, ...).
    """
    info = _info(name)
    unknown = sorted(set(params) - set(info.defaults))
    if unknown:
        raise ValueError(
            f"unknown parameter(s) {', '.join(unknown)} for model {name!r}; "
            f"valid parameters: {', '.join(f'{k}={v!r}' for k, v in info.defaults.items())}")
    merged = {**info.defaults, **params}
    checked = {k: _check_param(name, k, v, info.defaults[k]) for k, v in merged.items()}
    return info.fn(checked)
