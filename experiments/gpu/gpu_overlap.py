"""Predicted vs measured step time and peak, with collectives that really run asynchronously.

GPU::

    python -m experiments.gpu.gpu_overlap --device cuda --sizes gpu --time-limit 5 > experiments/results/gpu_overlap_h100.md

CPU stand-in (what can run without a GPU)::

    python -m experiments.gpu.gpu_overlap --device cpu --sizes small --time-limit 5 > experiments/results/gpu_overlap.md

For each model (zoo: fsdp_layers, tp_block, sp_block, moe_block; real machinery: llama_tp,
simple_fsdp, fsdp_tp) and each order:

* ``original``: the graph's own order;
* ``solvercast-1`` / ``solvercast-2``: `optimize` with 1 / 2 compute streams (budget 1.0);
* ``torch_overlap``: PyTorch's overlap scheduler's order (experiments/benchmarks/torch_overlap.py), on our costs;

every order lowered the same way (`solvercast.fx.lower.lower`), then run by `solvercast.runtime.measure.measure`:
each collective on its process group's comm channel for its modelled duration, launched and waited
where the lowered graph puts them (CUDA: side stream + calibrated spin kernel, CUDA-event timing; CPU:
a worker thread per group that sleeps out the duration, ``perf_counter`` timing), median of
``--iters`` steps (>= 20) after 3 warm-up steps, the steps of the orders interleaved
(`solvercast.runtime.measure.measure_side_by_side`: on shared cores the load drifts; each order then sees the
same drift). Predicted: `simulate`'s makespan and peak for the same
problem and schedule. Speedups are against the original order, predicted and measured side by side.

Costs (``--cost``): ``calibrate`` (default) times every compute op on the device at hand with
`solvercast.cost.calibrate` (so the prediction is for this device), and prices the collectives with the
analytic alpha-beta model of ``--link`` (on CUDA: the H100 profile's NVLink numbers; on CPU a stand-in
link, ``--cpu-link-gbps``, slow enough that comm is a sizeable share of the step, since a CPU's
compute is ~1000x slower than an H100's). ``analytic`` uses the H100 roofline for everything (on CPU
the predictions are then for another device: only the speedups are comparable).

On CPU every compute op runs on the one main thread (``torch.set_num_threads(1)``): two compute
streams cannot overlap each other there, so the CPU cost model gives every compute op occupancy 1
(a second stream can then only help by ordering, never by running beside the first).
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import sys
import time

import torch

from experiments.benchmarks.torch_overlap import torch_overlap_schedule, unavailable_reason
from experiments.common import command_line
from solvercast import Schedule, optimize, simulate
from solvercast.cost.device import H100
from solvercast.cost.model import AnalyticCostModel
from solvercast.fx.lower import lower
from solvercast.graph.local_run import random_inputs
from solvercast.models import build
from solvercast.runtime.measure import collective_durations, measure_side_by_side

SIZES = {
    "small": [  # CPU: a step of tens of ms
        ("fsdp_layers", {"layers": 2, "hidden": 256, "seq": 128, "batch": 2, "dtype": "float32"}),
        ("tp_block", {"layers": 2, "hidden": 256, "seq": 128, "batch": 2, "dtype": "float32"}),
        ("sp_block", {"layers": 2, "hidden": 256, "seq": 128, "batch": 2, "dtype": "float32"}),
        ("moe_block", {"layers": 1, "hidden": 256, "seq": 128, "batch": 2, "dtype": "float32"}),
        ("llama_tp", {"layers": 1, "dim": 256, "seq": 64}),
        ("simple_fsdp", {"layers": 1, "dim": 256, "seq": 64}),
        ("fsdp_tp", {"layers": 1, "dim": 256, "seq": 64}),
    ],
    "gpu": [  # H100: a step of ~1-10 ms, bf16 for the zoo
        ("fsdp_layers", {"layers": 4, "hidden": 2048, "seq": 1024, "batch": 4}),
        ("tp_block", {"layers": 2, "hidden": 2048, "seq": 1024, "batch": 4, "heads": 16}),
        ("sp_block", {"layers": 2, "hidden": 2048, "seq": 1024, "batch": 4, "heads": 16}),
        ("moe_block", {"layers": 2, "hidden": 1024, "seq": 1024, "batch": 4, "ffn": 2048}),
        ("llama_tp", {"layers": 2, "dim": 2048, "heads": 16, "seq": 1024, "batch": 2}),
        ("simple_fsdp", {"layers": 2, "dim": 2048, "heads": 16, "seq": 1024, "batch": 2}),
        ("fsdp_tp", {"layers": 2, "dim": 2048, "heads": 16, "seq": 1024, "batch": 2}),
    ],
}


@dataclasses.dataclass(frozen=True)
class OneThread:
    """A cost model for one CPU thread: ``base``'s durations, every compute op occupancy 1."""

    base: object

    def duration(self, node):
        return self.base.duration(node)

    def occupancy(self, node):
        return 1.0

    def collective_time(self, kind, nbytes, group_size):
        return self.base.collective_time(kind, nbytes, group_size)

    def sync_comm_duration(self, node, nbytes, group_size):
        return self.base.sync_comm_duration(node, nbytes, group_size)

    def sync_overhead(self):
        return self.base.sync_overhead()

    def cache_key(self):
        return f"one_thread({self.base.cache_key()})"

    def coverage(self, gm):
        return self.base.coverage(gm) if hasattr(self.base, "coverage") else ""


def cost_model_for(gm, device: str, cost: str, cpu_link_gbps: float):
    link = H100 if device == "cuda" else dataclasses.replace(
        H100, name="cpu-standin-link", link_bandwidth=cpu_link_gbps * 1e9, link_latency=20e-6, sync_overhead=0.0)
    base = AnalyticCostModel(link)
    if cost == "analytic":
        model = AnalyticCostModel(H100)
    else:
        from solvercast.cost.calibrate import calibrate

        model = calibrate(gm, device, base=base)  # wall clock: the measured steps are wall time too
    return OneThread(model) if device == "cpu" else model


def schedules(gm, cost_model, time_limit: float):
    """(label, problem, schedule) for every order, and the optimize reports."""
    out = []
    one = optimize(gm, time_limit=time_limit, compute_streams=1, cost_model=cost_model)
    two = optimize(gm, time_limit=time_limit, compute_streams=2, cost_model=cost_model)
    out.append(("original", one.problem, Schedule.original(one.problem)))
    out.append(("solvercast-1", one.problem, one.schedule))
    out.append(("solvercast-2", two.problem, two.schedule))
    if unavailable_reason() is None:
        out.append(("torch_overlap", one.problem, torch_overlap_schedule(gm, one.problem, budget_ratio=1.0)))
    return out, {"solvercast-1": one, "solvercast-2": two}


def main(argv=None) -> None:
    """Does simulate predict the measured step time and peak when collectives really run asynchronously? Table to stdout
    (experiments/results/gpu_overlap_h100.md on CUDA, gpu_overlap.md for the CPU stand-in)."""
    ap = command_line("experiments.gpu.gpu_overlap", main.__doc__, __doc__)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--sizes", choices=sorted(SIZES), default=None)
    ap.add_argument("--cost", choices=("calibrate", "analytic"), default="calibrate")
    ap.add_argument("--cpu-link-gbps", type=float, default=1.0)
    ap.add_argument("--time-limit", type=float, default=5.0)
    ap.add_argument("--iters", type=int, default=30, help="timed steps per order (interleaved over the orders)")
    ap.add_argument("--models", default=None, help="comma-separated subset")
    args = ap.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda needs CUDA")
    sizes = args.sizes or ("gpu" if args.device == "cuda" else "small")
    cases = [c for c in SIZES[sizes] if args.models is None or c[0] in args.models.split(",")]
    if args.device == "cpu":
        torch.set_num_threads(1)
    where = torch.cuda.get_device_name() if args.device == "cuda" else "CPU stand-in (one thread, worker threads for comm)"
    print(f"# Predicted vs measured: {where}, torch {torch.__version__}\n")
    print("Command: `python -m experiments.gpu.gpu_overlap " + " ".join(sys.argv[1:] if argv is None else argv) + "`\n")
    if args.device == "cpu":
        print(f"1-minute load average at the start: {os.getloadavg()[0]:.1f} (2 cores shared with other jobs)\n")
    print("| model | order | tasks | predicted us | measured us (median, p25-p75) | predicted speedup | "
          "measured speedup | speedup error | measured speedup of minima | predicted peak MiB | measured peak MiB | "
          "anchors |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    mib = 2.0 ** 20
    errors = []
    for name, params in cases:
        gm = build(name, **params)
        cpu_only = sorted({str(n.target) for n in gm.graph.nodes if "_for_cpu" in str(n.target)})
        if args.device == "cuda" and cpu_only:  # the llama graphs are captured for a CPU (`models.llama`)
            print(f"| {name} | not run: captured with CPU-only kernels ({', '.join(cpu_only)}) |", flush=True)
            continue
        inputs = random_inputs(gm, device=args.device)
        cost_model = cost_model_for(gm, args.device, args.cost, args.cpu_link_gbps)
        rows, _ = schedules(gm, cost_model, args.time_limit)
        modules = [lower(gm, problem, schedule) for _, problem, schedule in rows]
        # steps interleaved over the orders: load drifting on shared cores reaches every order alike
        measured = measure_side_by_side(modules, inputs, [collective_durations(m, problem=p)
                                                          for m, (_, p, _) in zip(modules, rows)], iters=args.iters)
        steps = [m.steps_ns for m in measured]
        peaks = [m.peak_bytes for m in measured]
        base_pred = base_meas = base_min = None
        for (label, problem, schedule), module, times, peak in zip(rows, modules, steps, peaks):
            sim = simulate(problem, schedule)
            step_ns = statistics.median(times)
            q1, _, q3 = statistics.quantiles(times, n=4)
            if label == "original":
                base_pred, base_meas, base_min = sim.makespan, step_ns, min(times)
            ps, ms = base_pred / sim.makespan, base_meas / step_ns
            err = ms / ps - 1
            if label != "original":
                errors.append(abs(err))
            anchors = sum(1 for n in module.graph.nodes if "solvercast" in str(n.target))
            print(f"| {name} | {label} | {problem.num_tasks} | {sim.makespan / 1e3:.0f} | {step_ns / 1e3:.0f} "
                  f"({q1 / 1e3:.0f}-{q3 / 1e3:.0f}) | {ps:.3f} | {ms:.3f} | {err:+.1%} | {base_min / min(times):.3f} | "
                  f"{(sim.peak_memory - problem.initial_resident_bytes) / mib:.2f} | {peak / mib:.2f} | "
                  f"{anchors} |", flush=True)
    if errors:
        print(f"\nSpeedup error (measured / predicted - 1) over the non-original rows: median "
              f"{statistics.median(errors):.1%}, max {max(errors):.1%}; within 10%: "
              f"{sum(e <= 0.10 for e in errors)} of {len(errors)}.")


if __name__ == "__main__":
    t0 = time.time()
    main()
    print(f"\n(wall time of the run: {time.time() - t0:.0f} s)")
