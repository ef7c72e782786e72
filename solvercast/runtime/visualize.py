"""Pictures of schedules: Chrome traces (Perfetto) and Gantt + memory PNGs."""

from __future__ import annotations

import json
from pathlib import Path

from solvercast.graph.collectives import REGISTRY as COLLECTIVE_KINDS
from solvercast.ir.budget import budget_label
from solvercast.ir.problem import Problem, Role
from solvercast.ir.engine import memory_over_time
from solvercast.ir.simulate import SimResult


def _stream_name(problem: Problem, s: int) -> str:
    m = problem.machine
    return f"compute {s}" if m.is_compute_stream(s) else f"comm {s - m.compute_streams}"


def memory_curve(problem: Problem, sim: SimResult) -> tuple[list[int], list[int]]:
    """(times, bytes) of the memory the report's peak is taken from.

    Program steps: bytes during each step, placed at the step's issue time on the device (a
    collective at its launch point, others at their start; a running maximum keeps the curve in
    program order). With several compute streams the peak is the larger of that and the resident
    bytes over time (`engine.several_streams_peak`), so the curve is the larger of the two at each
    time."""
    times, latest = [], 0
    for t in sim.order:
        latest = max(latest, sim.launch.get(t, sim.start[t]))
        times.append(latest)
    steps = list(sim.memory.during_step)
    if problem.machine.compute_streams == 1:
        return times, steps
    curve = memory_over_time(problem, sim.start, sim.end)
    merged_times = sorted(set(times) | {t for t, _ in curve})
    out, i, j, step_now, time_now = [], 0, 0, 0, curve[0][1]
    for at in merged_times:
        while i < len(times) and times[i] <= at:
            step_now = max(step_now, steps[i]) if i and times[i] == times[i - 1] else steps[i]
            i += 1
        while j < len(curve) and curve[j][0] <= at:
            time_now = curve[j][1]
            j += 1
        out.append(max(step_now, time_now))
    return merged_times, out


def _per_run(problem: Problem, runs: dict) -> dict[str, tuple[Problem, SimResult]]:
    """Each run with its problem: a run is a `SimResult` of ``problem``, or a ``(Problem, SimResult)`` pair
    when it schedules another graph (the original graph beside its bucketed rewrite)."""
    return {label: run if isinstance(run, tuple) else (problem, run) for label, run in runs.items()}


def write_chrome_trace(path: str | Path, problem: Problem, runs: dict[str, SimResult],
                       memory_budget: int | None = None, members: dict[str, tuple[str, ...]] | None = None) -> None:
    """One process per run (e.g. baseline, optimized), one thread per stream,
    memory as a counter track. Times in microseconds as the format wants. A run is a `SimResult` of
    ``problem`` or a ``(Problem, SimResult)`` pair; ``members``: a bucket's task name -> the collectives it
    launches, shown in its event's args."""
    events = []
    members = members or {}
    for pid, (label, (run_problem, sim)) in enumerate(_per_run(problem, runs).items()):
        events.append({"ph": "M", "pid": pid, "name": "process_name", "args": {"name": label}})
        for s in range(run_problem.machine.num_streams):
            events.append({"ph": "M", "pid": pid, "tid": s, "name": "thread_name",
                           "args": {"name": _stream_name(run_problem, s)}})
        for t, task in enumerate(run_problem.tasks):
            if task.role == Role.FREE:
                continue
            events.append({
                "ph": "X", "pid": pid, "tid": sim.streams[t], "name": task.name, "cat": task.role.value,
                "ts": sim.start[t] / 1e3, "dur": (sim.end[t] - sim.start[t]) / 1e3,
                "args": {"op": task.op, "occupancy": task.occupancy}
                | ({"members": list(members[task.name])} if task.name in members else {}),
            })
        for ts, resident in zip(*memory_curve(run_problem, sim)):
            args = {"resident MiB": resident / 2**20}
            if memory_budget is not None:
                args["budget MiB"] = memory_budget / 2**20
            events.append({"ph": "C", "pid": pid, "name": "memory", "ts": ts / 1e3, "args": args})
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ns"}))


_COLORS = {Role.COMPUTE: "#4c72b0", Role.COMM: "#dd8452", Role.WAIT: "#c44e52"}
_LABEL_CHARS_WIDTH = 0.0075  # share of the time axis one label character takes at the figure's width


#: every op name of every collective kind (functional, coalesced, legacy c10d) -> its kind's short label
_SHORT_COLLECTIVES = {op: kind.label or kind.name for kind in COLLECTIVE_KINDS
                      for op in kind.ops + tuple(legacy[0] for legacy in kind.legacy)}


def _short_op(op: str) -> str:
    """A bar's label: ``aten.mm.default`` -> ``mm``; collectives abbreviated (``AG``, ``RS``, ``AR``)."""
    parts = [p for p in op.split(".") if p not in ("default", "Tensor", "Scalar", "int")]
    name = parts[-1] if parts else op
    return _SHORT_COLLECTIVES.get(name, name)


def plot_schedules(path: str | Path, problem: Problem, runs: dict[str, SimResult],
                   memory_budget: int | None = None, frontier=None,
                   members: dict[str, tuple[str, ...]] | None = None) -> None:
    """Gantt chart per stream for each run (stacked), the memory curves against the budget, and with a
    ``frontier`` (`solvercast.pipeline.pareto.Frontier`) makespan against peak memory, one point per budget.
    A run is a `SimResult` of ``problem`` or a ``(Problem, SimResult)`` pair; ``members``: a bucket's task
    name -> the collectives it launches (its bar reads ``AGx4``)."""
    members = members or {}
    runs = _per_run(problem, runs)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    streams = problem.machine.num_streams
    extra = [max(2, streams)] if frontier is not None else []
    fig, axes = plt.subplots(len(runs) + 1 + len(extra), 1,
                             figsize=(12, 2.2 + 1.2 * streams * len(runs) + 2.5 + 2.5 * len(extra)),
                             gridspec_kw={"height_ratios": [streams] * len(runs) + [max(2, streams)] + extra})
    if frontier is not None:
        _plot_frontier(axes[-1], frontier)
        axes = axes[:-1]
    horizon = max(sim.makespan for _, sim in runs.values()) / 1e3
    for ax, (label, (run_problem, sim)) in zip(axes, runs.items()):
        for t, task in enumerate(run_problem.tasks):
            if task.role == Role.FREE:
                continue
            width = (sim.end[t] - sim.start[t]) / 1e3
            row = streams - 1 - sim.streams[t]
            if width == 0:  # waits: a thin marker where they block their stream
                ax.plot([sim.start[t] / 1e3] * 2, [row - 0.4, row + 0.4], color=_COLORS[Role.WAIT], lw=1)
                continue
            ax.barh(row, width, left=sim.start[t] / 1e3, height=0.8, color=_COLORS[task.role],
                    edgecolor="white", linewidth=0.3, hatch="///" if task.name in members else None)
            name = _short_op(task.op) + (f"x{len(members[task.name])}" if task.name in members else "")
            if width >= horizon * _LABEL_CHARS_WIDTH * len(name):  # label the bars the name fits in
                ax.text(sim.start[t] / 1e3 + width / 2, row, name, ha="center", va="center", fontsize=6,
                        color="white", clip_on=True)
        ax.set_yticks(range(streams), [_stream_name(run_problem, s) for s in reversed(range(streams))])
        ax.set_xlim(0, horizon * 1.02)
        ax.set_title(f"{label}: makespan {sim.makespan / 1e3:,.1f} us, exposed comm {sim.exposed_comm / 1e3:,.1f} us")
    handles = [Patch(color=c, label=r.value) for r, c in _COLORS.items()]
    if members:
        handles.append(Patch(facecolor=_COLORS[Role.COMM], hatch="///", edgecolor="white", label="bucket"))
    axes[0].legend(handles=handles, loc="upper right", fontsize=8)
    mem_ax = axes[-1]
    for label, (run_problem, sim) in runs.items():
        times, resident = memory_curve(run_problem, sim)
        mem_ax.step([x / 1e3 for x in times], [r / 2**20 for r in resident], where="post", label=label)
    if memory_budget is not None:
        mem_ax.axhline(memory_budget / 2**20, color="black", ls="--", lw=1, label="budget")
    mem_ax.set_xlim(0, horizon * 1.02)
    mem_ax.set_xlabel("time (us)")
    mem_ax.set_ylabel("resident (MiB)")
    mem_ax.legend(fontsize=8)
    fig.suptitle(problem.name or "schedule", fontsize=10)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_frontier(ax, frontier) -> None:
    """Makespan against peak memory, one point per budget; the undominated points joined as a staircase."""
    labels: dict[tuple[int, int], list[str]] = {}  # budgets that reached the same point share its label
    for p in frontier.points:
        ax.plot(p.peak_memory / 2**20, p.makespan / 1e3, "o", color="grey" if p.dominated else "tab:blue")
        labels.setdefault((p.peak_memory, p.makespan), []).append(budget_label(p.budget, p.ratio))
    for (peak, makespan), names in labels.items():
        ax.annotate(", ".join(names), (peak / 2**20, makespan / 1e3), fontsize=7, xytext=(4, 4),
                    textcoords="offset points")
    best = frontier.optimal()
    ax.step([p.peak_memory / 2**20 for p in best], [p.makespan / 1e3 for p in best], where="post",
            color="tab:blue", lw=1)
    ax.plot(frontier.baseline_peak / 2**20, frontier.baseline_makespan / 1e3, "x", color="black", label="baseline")
    ax.set_xlabel("peak memory (MiB)")
    ax.set_ylabel("makespan (us)")
    ax.set_title("memory/time trade-off")
    ax.legend(fontsize=8)
