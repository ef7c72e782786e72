"""The zoo's FSDP models with bucketing on for both: PyTorch's `schedule_overlap_bucketing` against
solvercast choosing its own buckets with the schedule. A markdown table to stdout.

    python -m experiments.benchmarks.zoo_buckets --time-limit 10 > experiments/results/zoo_buckets.md
    python -m experiments.benchmarks.zoo_buckets --models fsdp_layers --time-limit 5     # one, quick

Models: fsdp_layers (its defaults, and 8 small layers over 16 ranks, where each collective's latency
weighs), simple_fsdp and fsdp_tp (2 layers). Costs: solvercast's H100 analytic model for every node, given
to PyTorch through ``custom_runtime_estimation`` (bucket sizes included) as in
`experiments.benchmarks.public_graphs`. PyTorch runs as autoparallel's run.py calls it (FSDP pre-bucketing
and overlap-preserving bucketing), its memory limit 1.0 x its own estimator's baseline; solvercast runs
`optimize` with its defaults (buckets and the collective order "auto"), budget 1.0 x the original peak.
Each output graph is extracted and its order simulated by `simulate` (the same judge for both); where
PyTorch's graph holds more than the original peak, solvercast runs again with that peak as its budget.
"""

from __future__ import annotations

import os
import platform
import time

import torch
import torch.fx as fx

from experiments.benchmarks.public_graphs import collective_counts
from experiments.common import below_commands, chosen, command_line, invocation

CASES = {
    "fsdp_layers": dict(),
    "fsdp_layers_small": dict(layers=8, hidden=64, seq=32, world_size=16),
    "simple_fsdp": dict(layers=2),
    "fsdp_tp": dict(layers=2),
}


def run_case(name: str, params: dict, time_limit: float) -> dict:
    from experiments.benchmarks.torch_overlap import torch_overlap_bucketed, unavailable_reason
    from solvercast import extract_problem, optimize, simulate
    from solvercast.cost.device import get_profile
    from solvercast.cost.model import AnalyticCostModel
    from solvercast.ir.schedule import Schedule
    from solvercast.models import build

    model = AnalyticCostModel(get_profile("h100"))

    def judged(gm):
        p = extract_problem(gm)
        return simulate(p, Schedule.original(p))

    def price_ms(node: fx.Node, override_bytes: int | None = None) -> float:
        try:
            return model.duration(node) / 1e6
        except Exception:  # noqa: BLE001 - PyTorch asks of every node, priceable or not
            return 0.0

    gm = build(name.removesuffix("_small"), **params)
    row = dict(model=name, params=params, colls=collective_counts(gm), original=judged(gm))
    start = time.perf_counter()
    res = optimize(gm, time_limit=time_limit)
    row.update(solvercast=judged(res.gm), solvercast_s=time.perf_counter() - start, report=res.report,
               solvercast_colls=collective_counts(res.gm))
    reason = unavailable_reason()
    if reason:
        row["torch_error"] = reason
        return row
    try:
        torch_gm = torch_overlap_bucketed(gm, price_ms, budget_ratio=1.0)
        row.update(torch=judged(torch_gm), torch_colls=collective_counts(torch_gm))
    except Exception as e:  # noqa: BLE001 - the peer failed here: say so, never a number
        row["torch_error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        return row
    if row["torch"].peak_memory > row["original"].peak_memory:
        again = optimize(gm, time_limit=time_limit, memory_budget=int(row["torch"].peak_memory))
        row["solvercast_at_torch_peak"] = judged(again.gm)
    return row


COLUMNS = ["model", "AG/RS/AR", "original us", "solvercast us", "PyTorch us", "solvercast / PyTorch",
           "solvercast us at PyTorch's peak", "solvercast AG/RS/AR", "PyTorch AG/RS/AR", "original peak MiB",
           "solvercast peak MiB", "PyTorch peak MiB", "solvercast s"]


def _us(ns: int) -> str:
    return f"{ns / 1e3:,.1f}"


def _mib(b: int) -> str:
    return f"{b / 2**20:.2f}"


def line(r: dict) -> str:
    sc, th = r["solvercast"], r.get("torch")
    label = r["model"] + "".join(f" {k}={v}" for k, v in r["params"].items())
    cells = [label, r["colls"], _us(r["original"].makespan), _us(sc.makespan),
             _us(th.makespan) if th else f"none: {r['torch_error']}", f"{sc.makespan / th.makespan:.3f}" if th else "-",
             _us(r["solvercast_at_torch_peak"].makespan) if "solvercast_at_torch_peak" in r else "-",
             r["solvercast_colls"], r.get("torch_colls", "-"), _mib(r["original"].peak_memory), _mib(sc.peak_memory),
             _mib(th.peak_memory) if th else "-", f"{r['solvercast_s']:.1f}"]
    return "| " + " | ".join(cells) + " |"


def main(argv=None) -> int:
    """How do solvercast's buckets, chosen with the schedule, compare with PyTorch's bucketing on the zoo's FSDP
    models, on the same costs and judged by the same simulator? (result: experiments/results/zoo_buckets.md)"""
    ap = command_line("experiments.benchmarks.zoo_buckets", main.__doc__, below_commands(__doc__))
    ap.add_argument("--models", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    ap.add_argument("--time-limit", type=float, default=10.0, help="solvercast's time limit per model, seconds")
    args = ap.parse_args(argv)
    names = chosen(ap, args.models, CASES, "models")
    command = invocation("experiments.benchmarks.zoo_buckets")
    print("# The zoo's FSDP models with bucketing on: solvercast's buckets against PyTorch's\n")
    print(f"Command: `{command}`; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; machine "
          f"{platform.machine()}, nproc {os.cpu_count()}; torch {torch.__version__}.\n")
    print("| " + " | ".join(COLUMNS) + " |")
    print("|---" * len(COLUMNS) + "|")
    notes = []
    for name in names:
        r = run_case(name, CASES[name], args.time_limit)
        print(line(r), flush=True)
        rep = r["report"]
        notes.append(f"- {name}: solvercast {rep.method}, gap {rep.gap:.1%}, collective order {rep.collective_order}; "
                     f"buckets: {rep.buckets}")
    print("\n" + "\n".join(notes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
