"""Multi-stream micro-benchmarks on a GPU, and the occupancy / sync fit of the device model.

Needs CUDA (run it on a device machine; nothing here runs on CPU)::

    python experiments/stream_microbench.py --profile h100 > experiments/results/stream_microbench_h100.md

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
"""

from __future__ import annotations

import argparse
import json

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from solvercast.cost.device import EventRow, StreamPairRow, fit_stream_parameters, get_profile
from solvercast.runtime.measure import cuda_median_ns
from solvercast.cost.roofline import occupancy


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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="h100")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--json", default=None, help="also write the rows here")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("needs CUDA")
    profile = get_profile(args.profile)
    pairs, events = pair_rows(profile, args.iters), event_rows(args.iters)
    fit = fit_stream_parameters(profile, pairs, events)
    print(f"# Multi-stream micro-benchmarks on {torch.cuda.get_device_name()} (torch {torch.__version__})\n")
    print(f"Command: `python experiments/stream_microbench.py --profile {args.profile} --iters {args.iters}`\n")
    print("| pair | occupancies (datasheet) | alone us | together us | datasheet predicts us | fitted predicts us |")
    print("|---|---|---|---:|---:|---:|")
    from solvercast.cost.device import pair_prediction

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


if __name__ == "__main__":
    main()
