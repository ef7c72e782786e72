"""Several CUDA streams on a GPU: what two kernels on two streams cost, and lowered schedules run for real.

Needs CUDA (nothing here runs on CPU)::

    python -m experiments.gpu.streams microbench --profile h100 --json experiments/results/stream_rows_h100.json \
        > experiments/results/stream_microbench_h100.md
    python -m experiments.gpu.streams lowered --time-limit 5 > experiments/results/gpu_streams.md

``microbench``: multi-stream micro-benchmarks, and the occupancy / sync fit of the device model.

Rows (CUDA events, median of ``--iters`` after warm-up; every kernel traced once with make_fx so that
its modelled occupancy is `solvercast.cost.roofline.occupancy` of the same op and shapes):

* **two matmuls on two streams**: square bf16 matmuls of n = 256 ... 8192, each alone and both
  launched together on two streams (time from the first launch to the last end);
* **a matmul beside elementwise work**: an n x n matmul on one stream and ``x * 2 + 1`` over m
  elements on the other, for a grid of (n, m);
* **event record + wait**: K small kernels ping-ponged between two streams (each waits for the
  other's event) against the same K kernels on one stream: the extra time per kernel is one
  record + wait.

Then `solvercast.cost.device.fit_stream_parameters` fits the profile's ``num_sms`` (which scales every
occupancy) and ``sync_overhead`` to the rows, and the script prints, per row, the datasheet's and the
fitted model's prediction (side by side or one after the other) next to the measurement. A two-stream
schedule is chosen by the solver only where the fitted occupancies let kernels overlap.

``lowered``: lowered schedules on a real GPU: same values, measured peak memory and step time vs the model's.

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
experiments/gpu/gpu_overlap.py (`solvercast.runtime.measure`); this script stays for the values and peaks.
"""

from __future__ import annotations

import copy
import json
import statistics

import torch
import torch.fx as fx
from torch.fx.experimental.proxy_tensor import make_fx

from experiments.common import command_line
from solvercast import optimize
from solvercast.cost.device import EventRow, StreamPairRow, fit_stream_parameters, get_profile, pair_prediction
from solvercast.cost.roofline import occupancy
from solvercast.graph.local_run import random_inputs
from solvercast.models import build
from solvercast.runtime.measure import cuda_median_ns


# ---------------------------------------------------------------- microbench


def _occupancy(fn, args, profile) -> float:
    gm = make_fx(fn, tracing_mode="fake")(*args)
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    return max(occupancy(n, profile) for n in nodes)


def _together(f, g, s1, s2):
    def run():
        main = torch.cuda.current_stream()
        s1.wait_stream(main)
        s2.wait_stream(main)
        with torch.cuda.stream(s1):
            f()
        with torch.cuda.stream(s2):
            g()
        main.wait_stream(s1)
        main.wait_stream(s2)
    return run


def pair_rows(profile, iters: int) -> list[StreamPairRow]:
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    rows = []
    mm = lambda x, w: x @ w  # noqa: E731
    ew = lambda x: x * 2 + 1  # noqa: E731
    for n in (256, 512, 1024, 2048, 4096, 8192):
        x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        occ = _occupancy(mm, (x, w), profile)
        f = lambda: mm(x, w)  # noqa: E731
        alone = cuda_median_ns(f, iters)
        rows.append(StreamPairRow(occ, occ, alone, alone, cuda_median_ns(_together(f, f, s1, s2), iters), f"mm {n} | mm {n}"))
    for n in (1024, 4096):
        x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        occ_mm = _occupancy(mm, (x, w), profile)
        f = lambda: mm(x, w)  # noqa: E731
        t_mm = cuda_median_ns(f, iters)
        for m in (2 ** 16, 2 ** 20, 2 ** 24):
            y = torch.randn(m, device="cuda", dtype=torch.bfloat16)
            occ_ew = _occupancy(ew, (y,), profile)
            g = lambda: ew(y)  # noqa: E731
            rows.append(StreamPairRow(occ_mm, occ_ew, t_mm, cuda_median_ns(g, iters), cuda_median_ns(_together(f, g, s1, s2), iters),
                                      f"mm {n} | ew {m}"))
    return rows


def event_rows(iters: int, kernels: int = 200) -> list[EventRow]:
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    rows = []
    for m in (2 ** 10, 2 ** 16):
        y = torch.randn(m, device="cuda")

        def one_stream():
            for _ in range(kernels):
                y.mul_(1.0)

        def ping_pong():
            main = torch.cuda.current_stream()
            s1.wait_stream(main)
            streams = (s1, s2)
            for k in range(kernels):
                s, other = streams[k % 2], streams[1 - k % 2]
                with torch.cuda.stream(s):
                    y.mul_(1.0)
                    e = torch.cuda.Event()
                    e.record(s)
                other.wait_event(e)
            main.wait_stream(s1)
            main.wait_stream(s2)

        extra = (cuda_median_ns(ping_pong, iters) - cuda_median_ns(one_stream, iters)) / kernels
        rows.append(EventRow(max(0.0, extra), f"ping-pong of {kernels} kernels on {m} elements"))
    return rows


def microbench(args) -> None:
    profile = get_profile(args.profile)
    pairs, events = pair_rows(profile, args.iters), event_rows(args.iters)
    fit = fit_stream_parameters(profile, pairs, events)
    print(f"# Multi-stream micro-benchmarks on {torch.cuda.get_device_name()} (torch {torch.__version__})\n")
    print(f"Command: `python -m experiments.gpu.streams microbench --profile {args.profile} --iters {args.iters}`\n")
    print("| pair | occupancies (datasheet) | alone us | together us | datasheet predicts us | fitted predicts us |")
    print("|---|---|---|---:|---:|---:|")
    for r in pairs:
        print(f"| {r.label} | {r.first_occupancy:.2f} + {r.second_occupancy:.2f} | {r.first_ns / 1e3:.1f}, "
              f"{r.second_ns / 1e3:.1f} | {r.together_ns / 1e3:.1f} | {pair_prediction(r) / 1e3:.1f} | "
              f"{pair_prediction(r, fit.scale) / 1e3:.1f} |")
    print("\n| event row | record + wait us |\n|---|---:|")
    for e in events:
        print(f"| {e.label} | {e.ns / 1e3:.2f} |")
    print(f"\nFit: num_sms {profile.num_sms} -> {fit.profile.num_sms} (occupancy x{fit.scale:.2f}), sync_overhead "
          f"{profile.sync_overhead * 1e6:.2f} -> {fit.profile.sync_overhead * 1e6:.2f} us; pair error "
          f"{fit.error_before:.1%} -> {fit.error_after:.1%}; overlap agrees on {fit.agree} of {fit.pairs} pairs.")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"pairs": [r.__dict__ for r in pairs], "events": [e.__dict__ for e in events]}, f, indent=1)



# ---------------------------------------------------------------- lowered

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


def lowered(args) -> None:
    print(f"# Lowered schedules on {torch.cuda.get_device_name()} (torch {torch.__version__})\n")
    print("Command: `python -m experiments.gpu.streams lowered --time-limit "
          f"{args.time_limit:g} --iters {args.iters}`; budget 1.0, collectives replaced by local stand-ins.\n")
    print("| model | streams | tasks | same values | model peak MiB (orig -> opt) | measured peak MiB (orig -> opt) |"
          " model step us (orig -> opt) | measured step ms (orig -> opt) | anchors |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, params in CASES:
        if args.models and name not in args.models.split(","):
            continue
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


def main(argv=None) -> int:
    """Do several CUDA streams behave as the device model says? `microbench`: two kernels on two streams and event
    costs, and the fit of num_sms / sync_overhead (experiments/results/stream_microbench_h100.md); `lowered`: optimized
    schedules run on the GPU, values, peak and step time (experiments/results/gpu_streams.md). Tables go to stdout.
    Needs CUDA."""
    ap = command_line("experiments.gpu.streams", main.__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("microbench", help="stream pairs, event costs, and the device model's fit")
    m.add_argument("--profile", default="h100")
    m.add_argument("--iters", type=int, default=20)
    m.add_argument("--json", default=None, help="also write the rows here")
    low = sub.add_parser("lowered", help="optimized schedules run on the GPU: values, peak, step time")
    low.add_argument("--time-limit", type=float, default=5.0)
    low.add_argument("--iters", type=int, default=20)
    low.add_argument("--models", default=None, help="comma-separated subset of " + ",".join(n for n, _ in CASES))
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("needs CUDA")
    microbench(args) if args.cmd == "microbench" else lowered(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
