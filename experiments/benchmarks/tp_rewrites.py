"""Tensor-parallel graphs with and without collective-matmul decomposition: the predicted step when
`optimize` may split all_gather -> matmul and matmul -> reduce_scatter pairs (`solvercast.pipeline.decompose`)
against the same call with the rewrite off, which sites it took, and where it declined. A markdown table to
stdout.

    python -m experiments.benchmarks.tp_rewrites > experiments/results/tp_rewrites.md
    python -m experiments.benchmarks.tp_rewrites --cases llama_8b_fw_32 --time-limit 30     # one case

Each case is one graph priced by the H100 analytic model, optimized twice (``decomposition=False``, then the
default) with the same time limit and memory budget (1.0 x the original peak, the default); the step is the
optimized schedule's simulated makespan. Bucketing stays on in both (its default). Cases: ``llama_tp`` at
Llama-3-8B layer sizes (dim 4096, 32 heads, 8 KV heads, FFN 14336, bf16, batch 1) on 8 ranks, forward and
backward, 2 or 32 layers, sequence 128 to 8192; on 2 ranks; at the model's small defaults; ``fsdp_tp``,
``tp_mlp`` and ``tp_block`` at their defaults; ``tp_block`` (plain tensor parallelism: all_reduces) at
hidden 8192 on 4 ranks and hidden 4096 on 8 ranks, sequence 4096.
"""

from __future__ import annotations

import platform
import sys
import time

import torch

from experiments.common import below_commands, chosen, command_line, commit_label, invocation

LLAMA_8B = dict(dim=4096, heads=32, kv_heads=8, ffn=14336, batch=1, dtype="bfloat16")
CASES = {
    "llama_8b_fw_seq128": ("llama_tp", dict(LLAMA_8B, layers=2, seq=128, world_size=8, backward=0)),
    "llama_8b_fw_seq1024": ("llama_tp", dict(LLAMA_8B, layers=2, seq=1024, world_size=8, backward=0)),
    "llama_8b_fw_seq8192": ("llama_tp", dict(LLAMA_8B, layers=2, seq=8192, world_size=8, backward=0)),
    "llama_8b_bw_seq8192": ("llama_tp", dict(LLAMA_8B, layers=2, seq=8192, world_size=8, backward=1)),
    "llama_8b_fw_seq8192_tp2": ("llama_tp", dict(LLAMA_8B, layers=2, seq=8192, world_size=2, backward=0)),
    "llama_8b_fw_32": ("llama_tp", dict(LLAMA_8B, layers=32, seq=8192, world_size=8, backward=0)),
    "llama_small_fw": ("llama_tp", dict(layers=2, backward=0)),
    "fsdp_tp_fw": ("fsdp_tp", dict(layers=2, backward=0)),
    "fsdp_tp_bw": ("fsdp_tp", dict(layers=2, backward=1)),
    "tp_mlp": ("tp_mlp", dict()),
    "tp_block": ("tp_block", dict()),
    "tp_block_h8192_tp4": ("tp_block", dict(layers=2, hidden=8192, heads=32, seq=4096, batch=1, world_size=4)),
    "tp_block_h4096_tp8": ("tp_block", dict(layers=2, hidden=4096, heads=32, seq=4096, batch=1, world_size=8)),
}


def run_case(model: str, params: dict, time_limit: float) -> dict:
    from solvercast import optimize
    from solvercast.models import build
    from solvercast.rewrites.decompose import matmul_sites

    gm = build(model, **params)
    sites = matmul_sites(gm)
    rows = {}
    for label, on in (("off", False), ("on", True)):
        started = time.perf_counter()
        res = optimize(gm, time_limit=time_limit, decomposition=on)
        rows[label] = dict(step=res.report.optimized_makespan, baseline=res.report.baseline_makespan,
                           peak=res.optimized.peak_memory, budget=res.report.memory_budget, tasks=res.problem.num_tasks,
                           note=res.report.decomposition, seconds=time.perf_counter() - started)
    return dict(sites=len(sites), **rows)


def main(argv=None) -> int:
    """Does splitting collective-matmul pairs shorten tensor-parallel steps, and is it declined where it does
    not? Per case, the optimized step with the rewrite off and on, the sites taken, the peaks against the
    budget (result: experiments/results/tp_rewrites.md)."""
    ap = command_line("experiments.benchmarks.tp_rewrites", main.__doc__, below_commands(__doc__))
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)} (default: all)")
    ap.add_argument("--time-limit", type=float, default=30.0, help="seconds per optimize call (default %(default)g)")
    args = ap.parse_args(argv)
    cases = chosen(ap, args.cases, CASES, "cases")
    command = invocation("experiments.benchmarks.tp_rewrites")
    print("# Collective-matmul decomposition on tensor-parallel graphs\n")
    print(f"Command: `{command}`; commit {commit_label()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"torch {torch.__version__}, {platform.machine()} CPU, H100 analytic costs, budget 1.0 x the original "
          "peak, bucketing on in both runs.\n")
    print("| case | model params | tasks (off / on) | sites | original us | step off us | step on us | on / off | "
          "peak on / budget MiB | decomposition | s (off / on) |")
    print("|---|---|---|---:|---:|---:|---:|---:|---|---|---|")
    mib = 2 ** 20
    for case in cases:
        model, params = CASES[case]
        r = run_case(model, params, args.time_limit)
        off, on = r["off"], r["on"]
        shown = ", ".join(f"{k}={v}" for k, v in params.items())
        print(f"| {case} | {model} {shown} | {off['tasks']} / {on['tasks']} | {r['sites']} | {off['baseline'] / 1e3:,.1f} | "
              f"{off['step'] / 1e3:,.1f} | {on['step'] / 1e3:,.1f} | {on['step'] / off['step']:.3f} | "
              f"{on['peak'] / mib:,.1f} / {on['budget'] / mib:,.1f} | {on['note']} | "
              f"{off['seconds']:.0f} / {on['seconds']:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
