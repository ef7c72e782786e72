# The functions between "vendored from autoparallel" and "end of vendored code" below are copied from
# meta-pytorch/autoparallel, autoparallel/graph_passes/debug_helpers.py, at commit
# a54c2529b1cb10b6b27a585b4a6fc2f84bc1d232 (https://github.com/meta-pytorch/autoparallel). Their license:
#
# Copyright (c) Meta Platforms, Inc. and affiliates.
#
# Redistribution and use in source and binary forms, with or without modification,
# are permitted provided that the following conditions are met:
#
#  * Redistributions of source code must retain the above copyright notice, this
#    list of conditions and the following disclaimer.
#
#  * Redistributions in binary form must reproduce the above copyright notice,
#    this list of conditions and the following disclaimer in the documentation
#    and/or other materials provided with the distribution.
#
#  * Neither the name Meta nor the names of its contributors may be used to
#    endorse or promote products derived from this software without specific
#    prior written permission.
#
# THIS SOFTWARE IS PROVIDED BY THE COPYRIGHT HOLDERS AND CONTRIBUTORS "AS IS" AND
# ANY EXPRESS OR IMPLIED WARRANTIES, INCLUDING, BUT NOT LIMITED TO, THE IMPLIED
# WARRANTIES OF MERCHANTABILITY AND FITNESS FOR A PARTICULAR PURPOSE ARE
# DISCLAIMED. IN NO EVENT SHALL THE COPYRIGHT HOLDER OR CONTRIBUTORS BE LIABLE FOR
# ANY DIRECT, INDIRECT, INCIDENTAL, SPECIAL, EXEMPLARY, OR CONSEQUENTIAL DAMAGES
# (INCLUDING, BUT NOT LIMITED TO, PROCUREMENT OF SUBSTITUTE GOODS OR SERVICES;
# LOSS OF USE, DATA, OR PROFITS; OR BUSINESS INTERRUPTION) HOWEVER CAUSED AND ON
# ANY THEORY OF LIABILITY, WHETHER IN CONTRACT, STRICT LIABILITY, OR TORT
# (INCLUDING NEGLIGENCE OR OTHERWISE) ARISING IN ANY WAY OUT OF THE USE OF THIS
# SOFTWARE, EVEN IF ADVISED OF THE POSSIBILITY OF SUCH DAMAGE.
#
# The rest of this file is solvercast's.
"""autoparallel's execution-trace simulator as a second judge: each order of autoparallel's Llama-3 8B graphs
stepped by autoparallel's ``create_execution_trace`` and by solvercast's `simulate`, on the same per-node costs.

    python -m experiments.benchmarks.autoparallel_trace > experiments/results/autoparallel_trace.md
    python -m experiments.benchmarks.autoparallel_trace --graphs fw_64_1d --time-limit 5     # one, quick
    python -m experiments.benchmarks.autoparallel_trace --dir ~/autoparallel/autoparallel/tools/overlap_simulator \\
        --graphs fw_256_2d

Vendored from autoparallel: what ``create_execution_trace`` calls (``_is_communication_node``,
``_is_sync_collective``, ``_is_wait_tensor``, ``_resolve_comm_node``, ``_get_tid``, ``_get_category``,
``_get_collective_type``, ``get_repr``) and the function itself, their logic unchanged. One change:
``create_execution_trace`` takes its launch overhead (1 us in autoparallel, a local constant there) as a
keyword argument ``launch_overhead`` with that default, so that the table can show what the overhead alone
accounts for. Left out, as ``create_execution_trace`` does not use them: ``parse_tensor_annotation``,
``build_arguments``, ``make_custom_runtime_estimation`` (autoparallel's own cost model, which needs its
``cost_models`` package), ``get_graph_module`` and ``apply_schedule_overlap_bucket`` (and with them the imports
of ``aot_export_joint_with_descriptors``, ``schedule_overlap_bucketing``, ``get_group_name``). No torch
feature was missing in torch 2.13 (CPU): nothing else was adapted.

The step time is read from the trace as autoparallel's ``tools/overlap_simulator/run.py`` reads it
(``calculate_stats``): the latest ``ts + dur`` of the trace's events (events of nonzero duration only).

Graphs and costs are `experiments.benchmarks.public_graphs`': each repro traced on fake ``meta`` tensors
(``loaded_graph(graph, directory, device="meta")``); every node priced by ``table_prices(table)`` for
autoparallel (milliseconds, given as microseconds) and by ``cost_fn=table.seconds`` for `simulate` (the same
prices: ``table_prices`` is those overrides on the H100 analytic model). Two orders per graph: the original,
and the graph that ``optimize(gm, time_limit=..., cost_fn=table.seconds)`` returns (its ``res.gm``, with
its buckets merged), each judged in its own node order by both. Both are judged again without the one constant
each simulator adds that the other has not: autoparallel's launch overhead of 1 us on every node (``launch
0``), and solvercast's ``sync_overhead`` of 2 us at every collective launch and every wait (``sync 0``,
H100's profile with ``sync_overhead=0``); the table shows what each constant adds and how far apart the two
steps are without them.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any, Callable

import torch
import torch.fx as fx
from torch.utils._dtype_abbrs import dtype_abbrs

from experiments.benchmarks.public_graphs import (add_graph_arguments, chosen_graphs, collective_counts, loaded_graph,
                                                  run_line, table_prices)
from experiments.common import below_commands, command_line, invocation, print_table_head

# ---- vendored from autoparallel (autoparallel/graph_passes/debug_helpers.py) ----------------------------------

# _dtensor ops that are collective communications (not routed through
# _c10d_functional but still run on the NCCL stream).
_DTENSOR_COLLECTIVE_OPS = frozenset({"shard_dim_alltoall"})


def _is_communication_node(node):
    if not node.op == "call_function":
        return False
    if not isinstance(node.target, torch._ops.OpOverload):
        return False

    ns = node.target.namespace
    if ns in ("_c10d_functional", "c10d_functional"):
        return True
    if ns == "_dtensor" and node.target._opname in _DTENSOR_COLLECTIVE_OPS:
        return True
    return False


def _is_sync_collective(node):
    """Return True for collectives that block (no wait_tensor follows)."""
    if not _is_communication_node(node):
        return False
    return node.target.namespace == "_dtensor"


def _is_wait_tensor(node):
    return _is_communication_node(node) and node.target._opname == "wait_tensor"


def _resolve_comm_node(node, global_time):
    """Resolve the actual collective node from a wait_tensor's argument.

    With insert_overlap_deps=True or chained waits, the wait_tensor's arg may
    be a control_deps wrapper or another wait_tensor rather than the collective
    itself. Walk through these to find the node tracked in global_time.
    """
    arg = node.args[0]
    # Walk through chained waits
    while isinstance(arg, torch.fx.Node) and _is_wait_tensor(arg):
        arg = arg.args[0]
    # Walk through wrappers like control_deps
    while (
        isinstance(arg, torch.fx.Node)
        and arg not in global_time
        and arg.op == "call_function"
        and not _is_communication_node(arg)
    ):
        # control_deps args can be tuples; search all Node args
        found = False
        for a in arg.args:
            if isinstance(a, torch.fx.Node) and a in global_time:
                arg = a
                found = True
                break
        if not found:
            for a in arg.args:
                if isinstance(a, torch.fx.Node):
                    arg = a
                    break
            else:
                break
    return arg


def _get_tid(node):
    if _is_communication_node(node):
        if _is_wait_tensor(node):
            return 0
        return f"group-{node.args[-1]}"
    return 0


def _get_category(node):
    """Get trace category for node."""
    if _is_communication_node(node):
        return "nccl"
    if node.op == "call_function":
        target_str = str(node.target)
        if any(x in target_str.lower() for x in ["mm", "bmm", "matmul", "addmm"]):
            return "gemm"
        if any(x in target_str.lower() for x in ["flash", "attention", "sdpa"]):
            return "attention"
    return "kernel"


def _get_collective_type(node):
    """Get the type of collective operation."""
    if not _is_communication_node(node):
        return None
    target_str = str(node.target)
    if "all_gather" in target_str:
        return "AllGather"
    elif "reduce_scatter" in target_str:
        return "ReduceScatter"
    elif "all_reduce" in target_str:
        return "AllReduce"
    elif "alltoall" in target_str:
        return "AllToAll"
    elif "wait_tensor" in target_str:
        return "Wait"
    return "Unknown"


def get_repr(arg, mode="full"):
    def get_dtype_repr(dtype):
        return dtype_abbrs[dtype]

    if isinstance(arg, torch.Tensor):
        out = {}
        out["shape"] = tuple(arg.shape)
        out["dtype"] = get_dtype_repr(arg.dtype)
        return out

    if isinstance(arg, (int, float, str)):
        return arg

    if isinstance(arg, torch.dtype):
        return get_dtype_repr(arg)

    if isinstance(arg, torch.fx.Node):
        if mode == "name_only" or "val" not in arg.meta:
            return f"fx node {arg.name}"
        elif mode == "full":
            return {"name": arg.name, "data": get_repr(arg.meta["val"])}
        elif mode == "content_only":
            return get_repr(arg.meta["val"])
        else:
            raise ValueError(f"Unknown mode {mode}")

    if isinstance(arg, (list, tuple)):
        return [get_repr(x, mode="name_only") for x in arg]

    if isinstance(arg, dict):
        return {k: get_repr(v, mode="name_only") for k, v in arg.items()}

    return f"arg {type(arg)}"


def create_execution_trace(
    gm: torch.fx.GraphModule,
    runtime_estimator: Callable[[torch.fx.Node], float],
    name: str = "fake_trace",
    file_path: str | None = None,
    launch_overhead: float = 1,  # solvercast: a keyword (autoparallel: the local `launch_overhead = 1  # 1us`)
) -> dict[str, Any]:
    """
    Create a perfetto trace from a GraphModule representing its execution
    trace. This is useful for inspecting communication-computation overlapping
    for different reordering strategies.
    """
    trace_events = []
    curr_time: dict[int | str, float] = {0: 0}
    global_time: dict[torch.fx.Node, float] = {}

    for node_idx, node in enumerate(gm.graph.nodes):
        dur = runtime_estimator(node)  # in us
        tid = _get_tid(node)
        if tid not in curr_time:
            curr_time[tid] = curr_time[0]

        cat = _get_category(node)
        coll_type = _get_collective_type(node)
        if coll_type:
            event_name = f"nccl:{coll_type}"
        elif node.op == "call_function":
            event_name = str(node.target)
        else:
            event_name = node.op

        event = {"ph": "X", "cat": cat, "name": event_name, "pid": 0, "tid": tid}

        if _is_communication_node(node):
            if tid == 0 and _is_wait_tensor(node) and node.args[0].op != "placeholder":
                comm_node = _resolve_comm_node(node, global_time)
                if comm_node in global_time:
                    comm_end_time = global_time[comm_node]
                    curr_time[tid] = max(curr_time[tid], comm_end_time)

            else:
                curr_time[tid] = max(curr_time[0], curr_time[tid])

        event["ts"] = curr_time[tid]
        event["dur"] = dur
        curr_time[tid] += dur + launch_overhead
        if tid != 0:
            curr_time[0] += launch_overhead
            # keep track of when a given collective will finish
            global_time[node] = curr_time[tid]
            if _is_sync_collective(node):
                # Synchronous collective: compute stream must wait for it
                curr_time[0] = max(curr_time[0], curr_time[tid])

        event["args"] = {
            "name": node.name,
            "order": node_idx,
            "output": get_repr(node, mode="content_only"),
            "inputs": [get_repr(arg) for arg in node.args],
        }

        if dur > 0.0:
            trace_events.append(event)

    trace = {
        "traceEvents": trace_events,
        "traceName": f"{name}_trace.json",
        "displayTimeUnit": "us",
    }

    if file_path is not None:
        with open(file_path, "w") as fp:
            json.dump(trace, fp, indent=2)

    return trace

# ---- end of vendored code -------------------------------------------------------------------------------------

LAUNCH_OVERHEAD_US = 1.0  # autoparallel's constant: added after every node, and to the compute stream per collective


def trace_events(gm: fx.GraphModule, price_ms: Callable[[fx.Node], float], name: str = "fake_trace",
                 file_path: str | None = None, launch_overhead_us: float = LAUNCH_OVERHEAD_US) -> dict[str, Any]:
    """autoparallel's Chrome trace of ``gm`` in its node order (``create_execution_trace``), every node taking
    ``price_ms(node)`` milliseconds; times in the trace are microseconds. ``file_path``: also written there as
    JSON. Raises whatever ``price_ms`` raises."""
    return create_execution_trace(gm, lambda n: price_ms(n) * 1e3, name=name, file_path=file_path,
                                  launch_overhead=launch_overhead_us)


def autoparallel_step_ms(gm: fx.GraphModule, price_ms: Callable[[fx.Node], float],
                         launch_overhead_us: float = LAUNCH_OVERHEAD_US) -> float:
    """The step time, in milliseconds, that autoparallel's ``create_execution_trace`` gives ``gm`` in its node
    order, every node taking ``price_ms(node)`` milliseconds: the latest end of a trace event, as autoparallel's
    overlap simulator (run.py's ``calculate_stats``) reads it. 0.0 for a graph with no node of positive price;
raises whatever ``price_ms`` raises."""
    trace = trace_events(gm, price_ms, launch_overhead_us=launch_overhead_us)
    return max((e["ts"] + e["dur"] for e in trace["traceEvents"]), default=0.0) / 1e3


# ---- the comparison ---------------------------------------------------------------------------------------------


def _simulate_ms(gm: fx.GraphModule, table, sync: bool = True) -> float:
    """`simulate`'s step for ``gm`` in its node order, in the benchmark's costs (``sync=False``: H100's profile
    with no sync overhead)."""
    from solvercast import Schedule, extract_problem, simulate
    from solvercast.cost.device import get_profile

    device = get_profile("h100")
    if not sync:
        device = dataclasses.replace(device, sync_overhead=0.0)
    problem = extract_problem(gm, device=device, cost_fn=table.seconds)
    return simulate(problem, Schedule.original(problem)).makespan / 1e6


def judge(gm: fx.GraphModule, table) -> dict[str, float]:
    """Both judges' steps (ms) for ``gm`` in its node order, each as it is and without its own constant. Raises
    `ExtractionError` where solvercast cannot extract ``gm``."""
    price_ms = table_prices(table)
    return dict(autoparallel=autoparallel_step_ms(gm, price_ms),
                autoparallel_launch0=autoparallel_step_ms(gm, price_ms, launch_overhead_us=0.0),
                simulate=_simulate_ms(gm, table), simulate_sync0=_simulate_ms(gm, table, sync=False))


def run_graph(graph: str, directory: Path | None, time_limit: float) -> list[dict]:
    """One row per order of ``graph`` (original, solvercast's), both judges' steps in each."""
    from solvercast import optimize

    rows = []
    with loaded_graph(graph, directory, device="meta") as (gm, table, info):
        rows.append(dict(graph=graph, order="original", nodes=info["nodes"], colls=collective_counts(gm),
                         **judge(gm, table)))
        start = time.perf_counter()
        res = optimize(gm, time_limit=time_limit, cost_fn=table.seconds)
        seconds = time.perf_counter() - start
        if not res.report.analysed:
            rows.append(dict(graph=graph, order=f"solvercast: not analysed ({res.report.fallback})"))
            return rows
        rows.append(dict(graph=graph, order=f"solvercast ({res.report.method}, {seconds:.0f} s)",
                         nodes=len(res.gm.graph.nodes), colls=collective_counts(res.gm), **judge(res.gm, table)))
    return rows


COLUMNS = ["graph", "order", "nodes", "AG/RS/AR", "autoparallel ms", "simulate ms", "autoparallel / simulate - 1",
           "autoparallel's launch overheads ms", "simulate's syncs ms", "launch 0 - sync 0 ns"]


def row_line(r: dict) -> str:
    """A table row: both steps, their relative difference, what each one's constant adds to its step (the step
    less the step without it), and the difference of the two steps without them."""
    if "autoparallel" not in r:
        return "| " + " | ".join([r["graph"], r["order"]] + ["-"] * (len(COLUMNS) - 2)) + " |"
    ap, sim = r["autoparallel"], r["simulate"]
    cells = [r["graph"], r["order"], str(r["nodes"]), r["colls"], f"{ap:.3f}", f"{sim:.3f}", f"{ap / sim - 1:+.3%}",
             f"{ap - r['autoparallel_launch0']:.3f}", f"{sim - r['simulate_sync0']:.3f}",
             f"{(r['autoparallel_launch0'] - r['simulate_sync0']) * 1e6:.0f}"]
    return "| " + " | ".join(cells) + " |"


def main(argv=None) -> int:
    """Does autoparallel's execution-trace simulator (``create_execution_trace``, vendored) agree with solvercast's
    `simulate` on autoparallel's Llama-3 8B graphs, in their original order and in solvercast's, on the same
    per-node costs? A markdown table to stdout (result: experiments/results/autoparallel_trace.md)."""
    ap = command_line("experiments.benchmarks.autoparallel_trace", main.__doc__, below_commands(__doc__))
    add_graph_arguments(ap, 10.0)
    args = ap.parse_args(argv)
    graphs = chosen_graphs(ap, args)

    command = invocation("experiments.benchmarks.autoparallel_trace")
    print("# autoparallel's execution-trace simulator and solvercast's `simulate`, side by side\n")
    print(f"Command: `{command}` (solvercast's time limit {args.time_limit:g} s).\n")
    print(run_line())
    print("Each order judged in its own node order, on the same per-node prices, by autoparallel's "
          "`create_execution_trace` (vendored from meta-pytorch/autoparallel a54c2529; step = latest event end, as "
          "its run.py reads it) and by solvercast's `simulate` (the graph extracted with `cost_fn=table.seconds`). "
          "`autoparallel's launch overheads`: its step less its step with `launch_overhead=0` (1 us after every "
          "node, and 1 us of the compute stream per collective launch); `simulate's syncs`: its step less its step "
          "with `sync_overhead=0` (2 us before every collective starts and after it ends, at its wait); "
          "`launch 0 - sync 0`: the two steps without those constants, their difference in ns.\n")
    print_table_head("## Step times", COLUMNS)
    for g in graphs:
        for r in run_graph(g, args.dir, args.time_limit):
            print(row_line(r), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
