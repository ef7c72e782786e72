"""Lowered schedules on a real GPU: same values, measured peak memory and step time vs the model's.

Needs CUDA (run it on a device machine):

    python experiments/gpu_streams.py --time-limit 5 > experiments/results/gpu_streams.md

For each model and number of compute streams it optimizes the graph (`optimize`, budget 1.0), then
runs the original and the lowered module on the GPU and reports:

* ``same values``: the lowered module's outputs equal the original's (bit for bit on one stream; on
  two streams too, since every op computes the same thing whichever stream runs it);
* ``peak``: ``torch.cuda.max_memory_allocated`` during one step minus what was allocated before it
  (the inputs), next to the memory model's predicted peak minus the inputs' bytes;
* ``step``: the median of CUDA-event timings of one step (after warm-up), next to `simulate`'s
  makespan. The model's times are for the H100 profile's roofline, so only the ratios
  (optimized/original) are comparable between the two columns.

Collectives do not run: the graphs are traced for a fake process group of ``world_size`` ranks, and
here each collective node is rewritten to a local stand-in of the right shape (all_reduce -> x*2,
all_gather -> concatenation, ...), launched on the caller's stream. So the measured times say
nothing about comm overlap; they show the anchor ops' overhead and any compute-stream concurrency.
For times with real overlap (each collective on its own stream for its modelled duration) use
experiments/gpu_overlap.py (`solvercast.runtime.measure`); this script stays for the values and peaks.
"""

from __future__ import annotations

import argparse
import copy
import statistics

import torch
import torch.fx as fx

from solvercast import optimize
from solvercast.models import build
from solvercast.graph.local_run import random_inputs

C10D = torch.ops._c10d_functional

CASES = [
    ("tp_mlp", {"layers": 4, "hidden": 2048, "seq": 1024, "batch": 4}),
    ("tp_block", {"layers": 2, "hidden": 2048, "seq": 1024, "batch": 4, "heads": 16}),
    ("sp_block", {"layers": 2, "hidden": 2048, "seq": 1024, "batch": 4, "heads": 16}),
    ("fsdp_layers", {"layers": 4, "hidden": 2048, "seq": 1024, "batch": 4}),
    ("moe_block", {"layers": 2, "hidden": 1024, "seq": 1024, "batch": 4, "ffn": 2048}),
]


def _all_reduce(t, op, group):
    return t * 2


def _all_gather(t, world, group):
    return torch.cat([t * (i + 1) for i in range(world)])


def _reduce_scatter(t, op, world, group):
    return t.reshape(world, t.shape[0] // world, *t.shape[1:]).sum(0)


def _all_to_all(t, outs, ins, group):
    return torch.cat(list(reversed(t.split(list(ins)))))


def _wait(t):
    return t


LOCAL = {
    C10D.all_reduce.default: _all_reduce,
    C10D.all_gather_into_tensor.default: _all_gather,
    C10D.reduce_scatter_tensor.default: _reduce_scatter,
    C10D.all_to_all_single.default: _all_to_all,
    C10D.wait_tensor.default: _wait,
}


def localize(gm: fx.GraphModule) -> fx.GraphModule:
    """A copy of ``gm`` whose collectives are local stand-ins (raises on a collective it does not know)."""
    out = copy.deepcopy(gm)
    for node in out.graph.nodes:
        if node.op != "call_function":
            continue
        if node.target in LOCAL:
            node.target = LOCAL[node.target]
        elif "_c10d_functional" in str(node.target):
            raise NotImplementedError(f"no local stand-in for {node.target}")
    out.recompile()
    return out



def step(gm, args):
    with torch.no_grad():
        out = gm(*[a.clone() for a in args])  # fresh inputs: some graphs update parameters in place
    return list(out) if isinstance(out, (tuple, list)) else [out]


def measure(gm, args, iters: int) -> tuple[list[torch.Tensor], int, float]:
    """(outputs, peak bytes above the inputs' copies, median step ms)."""
    for _ in range(3):
        step(gm, args)
    torch.cuda.synchronize()
    clones = [a.clone() for a in args]
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    with torch.no_grad():
        out = gm(*clones)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    out = list(out) if isinstance(out, (tuple, list)) else [out]
    del clones
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        fresh = [x.clone() for x in args]
        a.record()
        with torch.no_grad():
            gm(*fresh)
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return out, peak, statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--time-limit", type=float, default=5.0)
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("needs CUDA")
    print(f"# Lowered schedules on {torch.cuda.get_device_name()} (torch {torch.__version__})\n")
    print("Command: `python experiments/gpu_streams.py --time-limit "
          f"{args.time_limit:g} --iters {args.iters}`; budget 1.0, collectives replaced by local stand-ins.\n")
    print("| model | streams | tasks | same values | model peak MiB (orig -> opt) | measured peak MiB (orig -> opt) |"
          " model step us (orig -> opt) | measured step ms (orig -> opt) | anchors |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, params in CASES:
        gm = build(name, **params)
        args_cuda = random_inputs(gm, device="cuda")
        orig = localize(gm)
        ref, peak0, ms0 = measure(orig, args_cuda, args.iters)
        for streams in (1, 2):
            res = optimize(gm, time_limit=args.time_limit, compute_streams=streams)
            low = localize(res.gm)
            out, peak1, ms1 = measure(low, args_cuda, args.iters)
            same = all(torch.equal(o, r) for o, r in zip(out, ref)) and len(out) == len(ref)
            inputs_bytes = res.problem.initial_resident_bytes
            anchors = sum(1 for n in res.gm.graph.nodes if "solvercast" in str(n.target))
            mib = 2.0 ** 20
            print(f"| {name} {params} | {streams} | {len(res.problem.tasks)} | {'yes' if same else 'NO'} | "
                  f"{(res.baseline.peak_memory - inputs_bytes) / mib:.1f} -> "
                  f"{(res.optimized.peak_memory - inputs_bytes) / mib:.1f} | "
                  f"{peak0 / mib:.1f} -> {peak1 / mib:.1f} | "
                  f"{res.baseline.makespan / 1e3:.0f} -> {res.optimized.makespan / 1e3:.0f} | "
                  f"{ms0:.3f} -> {ms1:.3f} | {anchors} |", flush=True)


if __name__ == "__main__":
    main()
