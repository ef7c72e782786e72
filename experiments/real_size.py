"""Real-machinery models at Llama-3-8B dimensions through `optimize` at its default time limit (issue 17).

Each model (`llama_tp`, `simple_fsdp`, `fsdp_tp`) is built once per size (one torch.compile capture on
fake tensors gives the forward and the backward graph; minutes at 32 layers), then `optimize` runs on
each graph with the default limit (10 s) and budget (1.0 x the original peak). The table gives the wall
time of the `optimize` call alone (the build is not counted), its phases, the method that produced the
result (a heuristic's name: the heuristics carried it), the gap to the best bound, and whether the
budget held.

    .venv/bin/python experiments/real_size.py > experiments/results/real_size.md
    .venv/bin/python experiments/real_size.py --models llama_tp --layers 4     # quick
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys
import time

from solvercast import optimize
from solvercast.models import build

LLAMA3_8B = dict(dim=4096, heads=32, kv_heads=8, ffn=14336, seq=8192, dtype="bfloat16")
WORLD = {"llama_tp": dict(world_size=8), "simple_fsdp": dict(world_size=8, batch=8),
         "fsdp_tp": dict(world_size=16, tp=8, batch=2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="llama_tp,simple_fsdp,fsdp_tp")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--time-limit", type=float, default=10.0)
    args = ap.parse_args()
    print("# Real-machinery models at Llama-3-8B dimensions through `optimize`\n")
    print(f"Command: `.venv/bin/python {' '.join(shlex.quote(a) for a in sys.argv)}`\n")
    print(f"Machine: {platform.machine()}, nproc {os.cpu_count()}, Python {platform.python_version()}; "
          f"load average at start {os.getloadavg()[0]:.1f}. Dimensions: {LLAMA3_8B}, {args.layers} layers.\n")
    print("| model | graph | tasks | build (s) | wall (s) | wall / T | extract | heuristics | solve | lower | "
          "method | baseline (us) | optimized (us) | change | gap to bound | peak / budget | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        for backward in (0, 1):
            start = time.perf_counter()
            gm = build(name, layers=args.layers, backward=backward, **LLAMA3_8B, **WORLD[name])
            built = time.perf_counter() - start
            start = time.perf_counter()
            res = optimize(gm, time_limit=args.time_limit)
            wall = time.perf_counter() - start
            r, ph = res.report, res.report.phases
            held = r.optimized_peak_memory / r.memory_budget if r.memory_budget else float("nan")
            print(f"| {name} | {'backward' if backward else 'forward'} | {r.tasks} | {built:.0f} | {wall:.2f} | "
                  f"{wall / args.time_limit:.2f} | {ph.get('extract', 0):.2f} | {ph.get('heuristics', 0):.2f} | "
                  f"{ph.get('solve', 0):.2f} | {ph.get('lower', 0):.2f} | {r.method} | "
                  f"{r.baseline_makespan / 1e3:,.1f} | {r.optimized_makespan / 1e3:,.1f} | "
                  f"{(r.optimized_makespan - r.baseline_makespan) / r.baseline_makespan:+.1%} | {r.gap:.2%} | "
                  f"{held:.3f} | {os.getloadavg()[0]:.1f} |", flush=True)
            if r.fallback or r.solver_message:
                print(f"|  |  |  |  |  |  |  |  |  |  | {(r.solver_message or r.fallback)[:120]} |  |  |  |  |  |  |",
                      flush=True)


if __name__ == "__main__":
    main()
