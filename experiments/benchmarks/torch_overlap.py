"""PyTorch's own FX overlap scheduler as a peer method (`torch_overlap`), judged by `simulate`.

Entry point: ``torch._inductor.fx_passes.overlap_scheduling.schedule_overlap_bucketing(gm, ...)``
(what Inductor runs for ``aten_distributed_optimizations``). It is a greedy list scheduler: compute
nodes keep their original relative order (they are ranked by the compute index they dominate), and
collective starts are hoisted / waits sunk so that in-flight collectives overlap the next compute
nodes, under torch's own memory limit (``max_memory_increase_*`` over its baseline peak) and an
in-flight-bytes cap.

What the adapter does so that the comparison is like for like:

* **Same graph**: it runs on a ``copy.deepcopy`` of the GraphModule the sweep built (the caller's
  graph is untouched), on CPU, with the fake tensors in ``meta["val"]``.
* **Our runtimes**: ``custom_runtime_estimation(node, override_size)`` returns our
  ``problem.tasks[i].duration`` (integer ns) in **milliseconds** (torch's unit), looked up by FX node
  name (``problem.tasks[i].name``). Nodes we do not model (placeholders, output) get ``None``.
* **Roofline replaced**: with ``compute_estimator="analytical"`` torch re-estimates every compute
  node (mm, bmm, ...) with ``estimate_roofline_runtime_ms`` *ignoring* the custom estimator (in
  ``_align_compute_nodes_runtime_estimations_across_all_distributed_ranks``), and that roofline
  needs a GPU's peak FLOPs. We monkeypatch the module's ``estimate_roofline_runtime_ms`` to our
  table for the duration of the call. (``compute_estimator="benchmark"`` would run the ops on real
  tensors and all-gather the timings over the default process group; we avoid it.)
* **No process group**: the scheduler calls ``torch.distributed.get_world_size()`` even when both
  estimators are analytical (nothing is gathered then). The graphs use stand-alone fake groups, so
  no default group exists; we patch ``get_world_size`` to return the graph's world size.
* **Diagnostics off**: its logging functions (``_log_collective_benchmarks``,
  ``_log_compute_estimations`` in ``node_runtime_estimation``) re-estimate collectives with torch's
  NCCL model, which needs a registered process group; they are patched to no-ops (they only log).
* **Bucketing disabled**: ``collective_bucketing=False`` (no merged collectives),
  ``pre_bucketing_fsdp_collectives=False`` (else FSDP all-gathers are pre-merged into new nodes),
  ``max_off_bucket_gb=None`` (no batching of off-path collectives for later bucketing),
  ``insert_overlap_deps=False`` (no control-dependency wrapper nodes). With these settings the
  output graph has exactly the input's nodes; the adapter checks that every task's node is present
  once and raises otherwise (it never guesses a mapping).
* **Memory**: torch's limit is relative to its own baseline (`MemoryTracker`, which differs from
  ours, see README "Memory model vs PyTorch's estimator"). A budget ratio ``r >= 1`` is passed as
  ``max_memory_increase_ratio = r - 1`` (absolute cap off); ``r < 1`` as ratio 0 (torch never
  tries to *reduce* memory); no budget as a 1e6 GB absolute cap (passing None for both limits
  crashes torch 2.13: its memory tracker is then None but still called). Whether the result fits our budget is decided
  by `simulate` afterwards, like for every method.

The output node order is read back as a `Schedule` (program order of our task ids, default streams:
torch's scheduler knows one compute stream). The result is returned as-is, even when it is slower
than the original order (`optimize` would keep the original in that case; here we report the peer's
own answer).
"""

from __future__ import annotations

import contextlib
import copy
from unittest import mock

import torch
import torch.fx as fx

from solvercast.ir.problem import Problem
from solvercast.ir.schedule import Schedule

NS_PER_MS = 1e6


def _world_size(gm: fx.GraphModule) -> int:
    meta = gm.meta.get("solvercast") or {}
    return int(meta.get("world_size") or 1)


def unavailable_reason() -> str | None:
    """Why this torch cannot run the adapter (None when it can): it patches torch 2.13's module layout."""
    try:
        from torch._inductor.fx_passes import node_runtime_estimation as nre
        from torch._inductor.fx_passes import overlap_scheduling as ovs
    except ImportError as e:
        return f"torch {torch.__version__} has no overlap scheduler ({e})"
    missing = [f"overlap_scheduling.{a}" for a in ("schedule_overlap_bucketing", "estimate_roofline_runtime_ms")
               if not hasattr(ovs, a)]
    missing += [f"node_runtime_estimation.{a}" for a in ("_log_collective_benchmarks", "_log_compute_estimations")
                if not hasattr(nre, a)]
    if missing:
        return (f"the adapter is written for torch 2.13's overlap scheduler; torch {torch.__version__} "
                f"lacks {', '.join(missing)}")
    return None


def torch_overlap_order(gm: fx.GraphModule, problem: Problem, budget_ratio: float | None = None,
                        **overrides) -> list[str]:
    """Run ``schedule_overlap_bucketing`` on a deep copy of ``gm`` with our durations and return the
    names of its call_function nodes in the output order. Raises ``RuntimeError`` on a torch whose
    overlap scheduler the adapter does not know (`unavailable_reason`)."""
    reason = unavailable_reason()
    if reason:
        raise RuntimeError(reason)
    from torch._inductor.fx_passes import node_runtime_estimation as nre
    from torch._inductor.fx_passes import overlap_scheduling as ovs

    durations_ms = {t.name: t.duration / NS_PER_MS for t in problem.tasks}

    def custom_runtime_estimation(node: fx.Node, override_size: int | None) -> float | None:
        return durations_ms.get(node.name)

    def roofline(node: fx.Node) -> float:
        return durations_ms.get(node.name, 0.0)

    if budget_ratio is None:
        # both None would switch torch's memory tracking off, which crashes in torch 2.13
        # (`self.memory_tracker` is None but still used); a huge absolute cap is the same as no limit
        mem_kwargs = {"max_memory_increase_gb": 1e6, "max_memory_increase_ratio": None}
    else:
        mem_kwargs = {"max_memory_increase_gb": None, "max_memory_increase_ratio": max(0.0, budget_ratio - 1.0)}
    kwargs = dict(
        collective_bucketing=False, insert_overlap_deps=False, pre_bucketing_fsdp_collectives=False,
        max_off_bucket_gb=None, custom_runtime_estimation=custom_runtime_estimation,
        collective_estimator="analytical", compute_estimator="analytical", enable_fusion_regions=False,
        **mem_kwargs)
    kwargs.update(overrides)

    work = copy.deepcopy(gm)
    ws = _world_size(gm)
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(ovs, "estimate_roofline_runtime_ms", roofline))
        stack.enter_context(mock.patch.object(torch.distributed, "get_world_size", lambda *a, **k: ws))
        # diagnostics only: they re-run torch's NCCL model, which needs a real process group
        for fn in ("_log_collective_benchmarks", "_log_compute_estimations"):
            stack.enter_context(mock.patch.object(nre, fn, lambda *a, **k: None))
        out = ovs.schedule_overlap_bucketing(work, **kwargs)
    return [n.name for n in out.graph.nodes if n.op == "call_function"]


def torch_overlap_bucketed(gm: fx.GraphModule, price_ms, budget_ratio: float | None = 1.0) -> fx.GraphModule:
    """``schedule_overlap_bucketing`` as autoparallel's run.py calls it (bucketing on: FSDP pre-bucketing
    and overlap-preserving bucketing, its default caps), on a deep copy of ``gm``, every node priced by
    ``price_ms(node, override_bytes)`` (milliseconds; ``override_bytes``: the input plus output bytes of a
    collective the bucketer sizes, else None). Returns its output module: new nodes (buckets), so it is
    judged by extracting it, not as an order of ``gm``'s tasks."""
    reason = unavailable_reason()
    if reason:
        raise RuntimeError(reason)
    from torch._inductor.fx_passes import node_runtime_estimation as nre
    from torch._inductor.fx_passes import overlap_scheduling as ovs

    mem_kwargs = {"max_memory_increase_gb": 1e6, "max_memory_increase_ratio": None} if budget_ratio is None else \
        {"max_memory_increase_gb": None, "max_memory_increase_ratio": max(0.0, budget_ratio - 1.0)}
    work = copy.deepcopy(gm)
    ws = _world_size(gm)
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(ovs, "estimate_roofline_runtime_ms", lambda n: price_ms(n, None)))
        stack.enter_context(mock.patch.object(torch.distributed, "get_world_size", lambda *a, **k: ws))
        # its all_gather buckets ask this rank's index of a group a fake group cannot answer: rank 0's graph
        stack.enter_context(mock.patch.object(torch.distributed, "get_rank", lambda *a, **k: 0))
        for fn in ("_log_collective_benchmarks", "_log_compute_estimations"):
            stack.enter_context(mock.patch.object(nre, fn, lambda *a, **k: None))
        return ovs.schedule_overlap_bucketing(
            work, collective_bucketing=True, insert_overlap_deps=False, custom_runtime_estimation=price_ms,
            collective_estimator="analytical", compute_estimator="analytical", enable_fusion_regions=False,
            **mem_kwargs)


def torch_overlap_schedule(gm: fx.GraphModule, problem: Problem, budget_ratio: float | None = None,
                           **overrides) -> Schedule:
    """torch's overlap scheduler's order of ``gm`` as a `Schedule` of ``problem`` (default streams).

    Raises ``RuntimeError`` when the output graph's nodes do not map one to one onto the tasks
    (e.g. if bucketing was re-enabled through ``overrides``)."""
    names = torch_overlap_order(gm, problem, budget_ratio, **overrides)
    ids = {t.name: i for i, t in enumerate(problem.tasks)}
    order = [ids[n] for n in names if n in ids]
    extra = [n for n in names if n not in ids]
    if len(order) != len(ids) or len(set(order)) != len(ids):
        missing = sorted(set(ids) - set(names))
        raise RuntimeError(f"torch's overlap scheduler changed the node set: added {extra[:5]}, "
                           f"removed {missing[:5]} (bucketing on?); cannot map its order onto the tasks")
    if extra:  # call_function nodes we do not schedule (none in the zoo): ignored, but say so
        raise RuntimeError(f"torch's output has call_function nodes that are not tasks: {extra[:5]}")
    return Schedule(order=tuple(order), method="torch_overlap")
