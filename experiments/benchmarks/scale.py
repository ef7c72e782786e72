"""How `optimize` scales: quality and phase times on 1k-40k-task graphs, whether its time limit holds, the
real-machinery models at Llama-3-8B size, and the fixed costs of a call. Markdown tables to stdout.

    python -m experiments.benchmarks.scale scale --time-limit 60 --wall-clock > experiments/results/scale.md
    python -m experiments.benchmarks.scale time-limit > experiments/results/time_limit.md
    python -m experiments.benchmarks.scale time-limit --sizes 300,10000 --limits 1,2 --streams 1   # a subset
    python -m experiments.benchmarks.scale real-size > experiments/results/real_size.md
    python -m experiments.benchmarks.scale real-size --models llama_tp --layers 4                 # quick
    python -m experiments.benchmarks.scale fixed-costs --sizes 10000,40000

``scale``: solver quality and phase times on 1k-10k-task graphs, through `optimize` as a user calls it.

``time-limit``: is `optimize`'s time_limit a promise? For each size of synthetic graph (seed 1), time limit, compute-stream count and budget (1.0 x the
original peak, or none), one `optimize` call (method auto, deterministic) is timed from the built module
to the returned one; the model's build is not counted. The table gives wall / T, the phases, what the
heuristics' work budget cut, and the quality against the full heuristic portfolio (`best_heuristic`
with no work budget; up to --quality-max tasks, since it is slow beyond).

``real-size``: Each model (`llama_tp`, `simple_fsdp`, `fsdp_tp`) is built once per size (one torch.compile capture on
fake tensors gives the forward and the backward graph; minutes at 32 layers), then `optimize` runs on
each graph with the default limit (10 s) and budget (1.0 x the original peak). The table gives the wall
time of the `optimize` call alone (the build is not counted), its phases, the method that produced the
result (a heuristic's name: the heuristics carried it), the gap to the best bound, and whether the
budget held.

``fixed-costs``: the fixed costs of an `optimize` call, phase by phase, on synthetic graphs: extraction, the
baseline's simulation, the structural and the quick bounds, and lowering of nondelay's schedule on one and
two compute streams, each with the garbage collector paused as `optimize` runs them. Wall seconds, and per
task: the figures the time plan's constants (solvercast/pipeline/time_plan.py) come from.
"""

from __future__ import annotations

import os
import platform
import time

import ortools
import torch

from experiments.common import below_commands, command_line, invocation
import solvercast.cost.roofline as roofline
from solvercast import optimize, simulate
from solvercast.errors import InfeasibleBudgetError
from solvercast.fx.extract import extract_problem
from solvercast.fx.lower import lower
from solvercast.gc_paused import gc_paused
from solvercast.heuristics import best_heuristic
from solvercast.heuristics.list_scheduling import nondelay_schedule
from solvercast.ir.bounds import lower_bounds
from solvercast.ir.schedule import Schedule
from solvercast.models import build

CASES = [
    ("synthetic", {"tasks": 1000, "seed": 1}),
    ("synthetic", {"tasks": 3000, "seed": 1}),
    ("synthetic", {"tasks": 10000, "seed": 1}),
    ("fsdp_layers", {"layers": 76}),
]
LLAMA3_8B = dict(dim=4096, heads=32, kv_heads=8, ffn=14336, seq=8192, dtype="bfloat16")
WORLD = {"llama_tp": dict(world_size=8), "simple_fsdp": dict(world_size=8, batch=8),
         "fsdp_tp": dict(world_size=16, tp=8, batch=2)}


def _command() -> str:
    return invocation("experiments.benchmarks.scale")


# ---------------------------------------------------------------- scale


def cmd_scale(args) -> None:
    print(f"# Scale: time limit {args.time_limit:g} s, budget {args.budget:g} x original peak, method {args.method}, "
          f"{'wall-clock' if args.wall_clock else 'deterministic'} time limit\n")
    print(f"Machine: {platform.machine()}, 2 cores; python {platform.python_version()}, torch {torch.__version__}, "
          f"ortools {ortools.__version__}.\n")
    print("| graph | tasks | original us | best heuristic us | solver us | best bound us | gap heuristic | gap solver |"
          " method (auto's choice) | status | build s | extract s | heuristics s | solve s | lower s | total s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, params in CASES:
        t0 = time.perf_counter()
        gm = build(name, **params)
        built = time.perf_counter() - t0
        res = optimize(gm, time_limit=args.time_limit, memory_budget=args.budget, method=args.method,
                       deterministic=not args.wall_clock)
        r = res.report
        heuristic = simulate(res.problem, best_heuristic(res.problem)).makespan
        ph = r.phases
        print(f"| {name} {params} | {r.tasks} | {r.baseline_makespan / 1e3:.1f} | {heuristic / 1e3:.1f} | "
              f"{r.optimized_makespan / 1e3:.1f} | {r.best_bound / 1e3:.1f} | "
              f"{(heuristic - r.best_bound) / r.best_bound:.2%} | {r.gap:.2%} | {r.method} ({r.solver}) | "
              f"{r.solver_status} | {built:.1f} | {ph.get('extract', 0):.1f} | {ph.get('heuristics', 0):.1f} | "
              f"{ph.get('solve', 0):.1f} | {ph.get('lower', 0):.1f} | {ph.get('total', 0):.1f} |", flush=True)



# ---------------------------------------------------------------- time-limit


def cmd_time_limit(args) -> None:
    print("# time_limit: wall time of whole `optimize` calls\n")
    print(f"Command: `{_command()}`\n")
    print(f"Machine: {platform.machine()}, nproc {os.cpu_count()}, Python {platform.python_version()}; "
          f"load average at start {os.getloadavg()[0]:.1f}.\n")
    print("| tasks | streams | budget | T (s) | wall (s) | wall / T | extract | heuristics | solve | lower | "
          "method | cut by the work budget | makespan / full portfolio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for size in [int(x) for x in args.sizes.split(",")]:
        gm = build("synthetic", tasks=size, seed=1)
        for streams in [int(x) for x in args.streams.split(",")]:
            for budget_arg in args.budgets.split(","):
                budget = None if budget_arg == "none" else float(budget_arg)
                budget = float("inf") if budget is None else budget
                full = None
                for limit in [float(x) for x in args.limits.split(",")]:
                    start = time.perf_counter()
                    res = optimize(gm, time_limit=limit, compute_streams=streams, memory_budget=budget)
                    wall = time.perf_counter() - start
                    r = res.report
                    if full is None and size <= args.quality_max and r.analysed:
                        try:
                            full = simulate(res.problem, best_heuristic(res.problem)).makespan
                        except InfeasibleBudgetError:
                            full = float("nan")
                    quality = f"{r.optimized_makespan / full:.4f}" if full and r.analysed else "-"
                    ph = r.phases
                    cut = ", ".join(r.heuristics_cut) or "-" if r.analysed else "**not analysed**: returned untouched"
                    print(f"| {size} | {streams} | {budget_arg} | {limit:g} | {wall:.2f} | {wall / limit:.2f} | "
                          f"{ph.get('extract', 0):.2f} | {ph.get('heuristics', 0):.2f} | {ph.get('solve', 0):.2f} | "
                          f"{ph.get('lower', 0):.2f} | {r.method} | {cut} | {quality} |",
                          flush=True)



# ---------------------------------------------------------------- real-size


def cmd_real_size(args) -> None:
    print("# Real-machinery models at Llama-3-8B dimensions through `optimize`\n")
    print(f"Command: `{_command()}`\n")
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



# ---------------------------------------------------------------- fixed-costs


def cmd_fixed_costs(args) -> None:
    print("| tasks | extract | simulate | bounds | bounds (quick) | lower, 1 stream | lower, 2 streams | load |")
    print("|---|---|---|---|---|---|---|---|")
    for n in [int(x) for x in args.sizes.split(",")]:
        gm = build("synthetic", tasks=n, seed=1)
        roofline._PRICES.clear()  # a first call: no prices remembered from another
        seconds: dict[str, float] = {}

        def timed(name, fn):
            with gc_paused():
                start = time.perf_counter()
                out = fn()
                seconds[name] = time.perf_counter() - start
            return out

        p = timed("extract", lambda: extract_problem(gm))
        baseline = timed("simulate", lambda: simulate(p, Schedule.original(p)))
        p = p.with_budget(baseline.peak_memory)
        timed("bounds", lambda: lower_bounds(p))
        timed("quick", lambda: lower_bounds(p, structural=False))
        one = nondelay_schedule(p)
        timed("lower1", lambda: lower(gm, p, one, check=False))
        p2 = extract_problem(gm, compute_streams=2).with_budget(baseline.peak_memory)
        two = nondelay_schedule(p2)
        timed("lower2", lambda: lower(gm, p2, two, check=False))
        cells = " | ".join(f"{seconds[k]:.2f} s ({seconds[k] / n:.1e}/task)"
                           for k in ("extract", "simulate", "bounds", "quick", "lower1", "lower2"))
        print(f"| {n} | {cells} | {os.getloadavg()[0]:.1f} |", flush=True)


def main(argv=None) -> int:
    """How does optimize scale with the graph's size, and does its time limit hold? Tables to stdout (results:
    experiments/results/scale.md, time_limit.md, real_size.md)."""
    ap = command_line("experiments.benchmarks.scale", main.__doc__, below_commands(__doc__))
    sub = ap.add_subparsers(dest="cmd", required=True)
    sc = sub.add_parser("scale", help="quality and phase times on 1k-10k-task graphs")
    sc.add_argument("--time-limit", type=float, default=60.0)
    sc.add_argument("--budget", type=float, default=1.0, help="ratio of the original order's peak")
    sc.add_argument("--method", default="auto")
    sc.add_argument("--wall-clock", action="store_true", help="wall-clock time limit (optimize's deterministic=False)")
    tl = sub.add_parser("time-limit", help="wall time of whole optimize calls against their limit")
    tl.add_argument("--sizes", default="10,300,1000,3000,10000,40000")
    tl.add_argument("--limits", default="1,2,10")
    tl.add_argument("--streams", default="1,2")
    tl.add_argument("--budgets", default="1.0,none")
    tl.add_argument("--quality-max", type=int, default=3000, help="compare with the full portfolio up to this size")
    rs = sub.add_parser("real-size", help="llama_tp, simple_fsdp, fsdp_tp at Llama-3-8B dimensions")
    rs.add_argument("--models", default="llama_tp,simple_fsdp,fsdp_tp")
    rs.add_argument("--layers", type=int, default=32)
    rs.add_argument("--time-limit", type=float, default=10.0)
    fc = sub.add_parser("fixed-costs", help="extraction, simulation, bounds and lowering, per task")
    fc.add_argument("--sizes", default="10000,40000")
    args = ap.parse_args(argv)
    {"scale": cmd_scale, "time-limit": cmd_time_limit, "real-size": cmd_real_size,
     "fixed-costs": cmd_fixed_costs}[args.cmd](args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
