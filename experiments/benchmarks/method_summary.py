"""Per-method summary of a sweep CSV: makespan against the best heuristic and against PyTorch's overlap
scheduler, gap to the best bound, and time, as one markdown table and one plot (used by `sweep.summarize`).

A *group* is one (graph, compute streams, budget); a method is compared with a reference (``heuristic``,
``torch_overlap``) only in the groups where both rows are ``ok``. Ratios are makespan / reference makespan
(< 1: the method is faster), all judged by `simulate`; their geometric mean is over those groups.
"""

from __future__ import annotations

import math
import statistics

REFERENCES = ("heuristic", "torch_overlap")


def _group(r: dict) -> tuple:
    return (r["model"], r["params"], r["seed"], r["compute_streams"], r["budget"])


def method_column(r: dict) -> str:
    """``cpsat@10s`` for a solver row, the method's name otherwise."""
    return r["method"] + (f"@{r['time_limit']}s" if r["time_limit"] else "")


def _geomean(v: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in v) / len(v))


def ratios(rows: list[dict], reference: str) -> dict[str, list[float]]:
    """Method column -> its makespan / the reference's, one value per group where both are ok."""
    ref = {_group(r): float(r["optimized_makespan"]) for r in rows if r["method"] == reference and r["status"] == "ok"}
    out: dict[str, list[float]] = {}
    for r in rows:
        g = _group(r)
        if r["status"] == "ok" and g in ref and ref[g] > 0:
            out.setdefault(method_column(r), []).append(float(r["optimized_makespan"]) / ref[g])
    return out


def table(rows: list[dict], order: list[str]) -> list[str]:
    """Markdown lines: one row per method column, in ``order``."""
    vs = {ref: ratios(rows, ref) for ref in REFERENCES}
    lines = ["| method | ok runs | vs best heuristic: geomean (groups, better/worse) | "
             "vs torch_overlap: geomean (groups, better/worse) | gap to bound: median / max | over budget | "
             "time s: median / max |",
             "|---|---:|---|---|---|---:|---|"]

    def cell(v: list[float]) -> str:
        if not v:
            return "-"
        return f"{_geomean(v):.3f} ({len(v)}, {sum(x < 0.999 for x in v)}/{sum(x > 1.001 for x in v)})"

    for col in order:
        ok = [r for r in rows if r["status"] == "ok" and method_column(r) == col]
        if not ok:
            continue
        gaps = [float(r["gap"]) for r in ok]
        times = [float(r["phase_total"]) for r in ok if r["phase_total"]]
        lines.append(f"| {col} | {len(ok)} | {cell(vs['heuristic'].get(col, []))} | "
                     f"{cell(vs['torch_overlap'].get(col, []))} | {statistics.median(gaps):.2%} / {max(gaps):.2%} | "
                     f"{sum(r['over_budget'] == 'True' for r in ok)} | "
                     + (f"{statistics.median(times):.2f} / {max(times):.1f} |" if times else "- |"))
    return lines


def plot(rows: list[dict], order: list[str], path) -> None:
    """Three box plots per method column: makespan / best heuristic, makespan / torch_overlap, gap (%)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    vs = {ref: ratios(rows, ref) for ref in REFERENCES}
    gaps = {col: [100 * float(r["gap"]) for r in rows if r["status"] == "ok" and method_column(r) == col]
            for col in order}
    panels = [("makespan / best heuristic", vs["heuristic"]), ("makespan / torch_overlap", vs["torch_overlap"]),
              ("gap to best bound (%)", gaps)]
    fig, axes = plt.subplots(1, 3, figsize=(15, 5))
    for ax, (label, data) in zip(axes, panels):
        cols = [c for c in order if data.get(c)]
        if not cols:
            ax.set_axis_off()
            continue
        ax.boxplot([data[c] for c in cols])  # labels set below: boxplot's keyword changed name in matplotlib 3.9
        ax.set_xticks(range(1, len(cols) + 1))
        ax.set_xticklabels(cols, rotation=60, ha="right", fontsize=7)
        if "/" in label:
            ax.axhline(1.0, color="k", lw=0.8)
        ax.set_ylabel(label)
    fig.suptitle("Per method, over the sweep's (graph, streams, budget) groups (lower is better)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
