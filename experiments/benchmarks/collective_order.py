"""What does each collective order (`optimize(preserve_collective_order=)`: "global", "group", "free") give
on graphs with collectives of two process groups? A markdown table to stdout.

    python -m experiments.benchmarks.collective_order --time-limit 10 > experiments/results/collective_order.md

Graphs: the zoo's fsdp_tp (FSDP and TP groups) at 1, 2 and 4 layers, H100 analytic costs; autoparallel's
Llama-3 8B backward on a 2-D mesh (``bw_64_2d``, vendored; costs as `experiments.benchmarks.public_graphs`
reads them). Each solve: ``optimize`` with method auto, budget 1.0 x the original peak, the deterministic
time limit; the makespan is `simulate`'s on the problem of that mode (the same tasks and costs in every mode).
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
import time

MODES = ("global", "group", "free")
ZOO = (("fsdp_tp", 1), ("fsdp_tp", 2), ("fsdp_tp", 4))


def _solve(gm, mode: str, time_limit: float, cost_fn=None) -> dict:
    from solvercast import optimize

    start = time.perf_counter()
    res = optimize(gm, time_limit=time_limit, memory_budget=1.0, preserve_collective_order=mode, cost_fn=cost_fn,
                   bucketing=False)  # the order alone
    r = res.report
    return dict(mode=mode, original=r.baseline_makespan, optimized=r.optimized_makespan, bound=r.best_bound,
                method=r.method, seconds=time.perf_counter() - start,
                groups=len({res.problem.tasks[c].group for c in res.problem.comm_tasks}),
                collectives=len(res.problem.comm_tasks))


def rows(time_limit: float, graphs: list[str]) -> list[dict]:
    from solvercast.models import build

    out = []
    for name, layers in ZOO:
        label = f"{name} {layers} layers"
        if graphs and label.split()[0] not in graphs and f"{name}:{layers}" not in graphs:
            continue
        for mode in MODES:
            out.append(dict(graph=label, **_solve(build(name, layers=layers), mode, time_limit)))
            print(f"{label} {mode}: {out[-1]['optimized']}", file=sys.stderr, flush=True)
    if not graphs or "bw_64_2d" in graphs:
        from experiments.benchmarks.public_graphs import loaded_graph

        for mode in MODES:
            with loaded_graph("bw_64_2d") as (gm, table, _info):
                out.append(dict(graph="bw_64_2d", **_solve(gm, mode, time_limit, cost_fn=table.seconds)))
            print(f"bw_64_2d {mode}: {out[-1]['optimized']}", file=sys.stderr, flush=True)
    return out


def table(found: list[dict]) -> str:
    lines = ["| graph | groups / collectives | order | original us | optimized us | vs global | lower bound us "
             "| gap to bound | method | s |", "|---|---|---|---|---|---|---|---|---|---|"]
    glob = {r["graph"]: r["optimized"] for r in found if r["mode"] == "global"}
    for r in found:
        vs = f"{(r['optimized'] / glob[r['graph']] - 1) * 100:+.2f}%" if r["graph"] in glob else "-"
        gap = f"{(r['optimized'] / r['bound'] - 1) * 100:.1f}%" if r["bound"] else "-"
        lines.append(f"| {r['graph']} | {r['groups']} / {r['collectives']} | {r['mode']} | {r['original'] / 1e3:.3f} "
                     f"| {r['optimized'] / 1e3:.3f} | {vs} | {r['bound'] / 1e3:.3f} | {gap} | {r['method']} "
                     f"| {r['seconds']:.1f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.benchmarks.collective_order",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=10.0, help="optimize's time limit per solve, seconds")
    ap.add_argument("--graphs", default="", help="comma-separated: fsdp_tp, fsdp_tp:2 (one size), bw_64_2d; "
                                                 "default all")
    args = ap.parse_args(argv)
    from experiments.common import commit_label

    graphs = [g for g in args.graphs.split(",") if g]
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    found = rows(args.time_limit, graphs)
    print(f"Run at commit {commit_label()}, {started}; machine {platform.machine()}, Python {platform.python_version()}.\n")
    print(table(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
