"""Calibrated costs against the measured run: does `simulate` predict the module's time on CPU (or CUDA)?

    python -m experiments.gpu.calibration [--trials 3] [--runs 11] [--models tp_mlp,...] [--out FILE]
    python -m experiments.gpu.calibration --device cuda      # experiments/results/calibration_cuda.md

For every zoo model (small float32 shapes, world size 2), on real CPU tensors in one thread
(``torch.set_num_threads(1)``), each trial:

1. `solvercast.cost.calibrate(gm, "cpu", mode=LocalCollectives, clock="thread")` with a fresh cache times
   every distinct op (views, getitems and waits too: on one CPU thread they take time, and the model
   charges them to the kernel that first reads them), in 3 warm-up and ``--runs`` timed rounds;
2. measures, side by side: after each round one run of the module with
   `solvercast.graph.local_run.run_local` (the collectives' local stand-ins); the median of the runs after
   the warm-up rounds;
3. predicts: `simulate(extract_problem(gm, cost_model=...), Schedule.original(...)).makespan`.

Collectives: ``run_local`` runs each collective as its local stand-in (a multiply, a concatenation, a
sum), inline on the one thread; calibration times those stand-ins under the same dispatch mode, and
the problem prices each collective at its stand-in's time on the comm stream with a sync overhead of
0. `simulate` lets a collective overlap the compute issued between its launch and its wait, which the
single CPU thread cannot do, so the prediction may be below the run by up to the stand-ins' total
(the "comm" column); on these graphs it is small.

Clock: the cores are shared with other processes (the results give the load average), so the
check uses each thread's CPU time (``time.thread_time``) for both the op timings and the runs: wall
time measures the waiting for a core. The wall-clock median of the runs is reported beside it.
A trial is one calibration and one measurement side by side; its error is prediction / measurement
- 1. The figures are medians over the trials, the error is the median of the trials' errors, and the
check is |error| <= 15%.

``--device cuda``: the same check on a GPU, with larger shapes (`CUDA_MODELS`: a step of milliseconds).
Ops are timed with CUDA events (`calibrate` on "cuda": device time, no free ops charged, the analytic H100
model's sync overhead), each module run after a round likewise (CUDA events around `run_local` on CUDA
tensors); the "wall" column is then the host's wall time of the run, launch overhead included.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from experiments.common import command_line

RESULTS = Path(__file__).resolve().parents[1] / "results"
LIMIT = 0.15
WARMUP = 3
#: small float32 shapes: a run takes milliseconds on one CPU thread
MODELS = {
    "tp_mlp": dict(layers=2, hidden=256, seq=128, batch=2, world_size=2, dtype="float32"),
    "tp_block": dict(layers=1, hidden=256, seq=128, batch=2, world_size=2, dtype="float32"),
    "sp_block": dict(layers=1, hidden=256, seq=128, batch=2, world_size=2, dtype="float32"),
    "fsdp_layers": dict(layers=2, hidden=256, seq=128, batch=2, world_size=2, dtype="float32"),
    "moe_block": dict(layers=1, hidden=256, seq=64, batch=2, world_size=2, dtype="float32", ffn=256, experts=4),
    "synthetic": dict(world_size=2, dtype="float32"),
}
#: on a GPU: shapes of gpu_overlap's "gpu" sizes (a step of ~1-10 ms on an H100), world size 2
CUDA_MODELS = {
    "tp_mlp": dict(layers=2, hidden=2048, seq=1024, batch=4, world_size=2),
    "tp_block": dict(layers=2, hidden=2048, seq=1024, batch=4, heads=16, world_size=2),
    "sp_block": dict(layers=2, hidden=2048, seq=1024, batch=4, heads=16, world_size=2),
    "fsdp_layers": dict(layers=4, hidden=2048, seq=1024, batch=4, world_size=2),
    "moe_block": dict(layers=2, hidden=1024, seq=1024, batch=4, ffn=2048, world_size=2),
    "synthetic": dict(world_size=2),
}


class ModuleRuns:
    """Runs of ``run_local(gm, args)``, one after each calibration round (`calibrate`'s
    ``after_round``), so the runs and the op timings share the machine's load; warm-up rounds' runs
    are not kept."""

    def __init__(self, gm, args, warmup: int, device: str = "cpu"):
        self.gm, self.args, self.warmup, self.device = gm, args, warmup, device
        self.cpu: list[float] = []  # thread CPU seconds on a CPU, CUDA-event seconds on a GPU
        self.wall: list[float] = []

    def __call__(self, round_index: int) -> None:
        import torch

        from solvercast.graph.local_run import run_local

        if self.device == "cuda":
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            w = time.perf_counter()
            begin.record()
            run_local(self.gm, self.args)
            end.record()
            torch.cuda.synchronize()
            if round_index >= self.warmup:
                self.cpu.append(begin.elapsed_time(end) / 1e3)
                self.wall.append(time.perf_counter() - w)
            return
        c, w = time.thread_time(), time.perf_counter()
        run_local(self.gm, self.args)
        if round_index >= self.warmup:
            self.cpu.append(time.thread_time() - c)
            self.wall.append(time.perf_counter() - w)


def check_model(name: str, params: dict, trials: int, runs: int, hot: bool = False, device: str = "cpu") -> dict:
    """Prediction and measurement of one model, medians over ``trials`` side-by-side trials."""
    import torch

    from solvercast import Schedule, extract_problem, simulate
    from solvercast.cost.calibrate import calibrate
    from solvercast.models import build
    from solvercast.ir.problem import Role
    from solvercast.graph.local_run import LocalCollectives, random_inputs

    gm = build(name, **params)
    args = random_inputs(gm, device=device)
    predicted, cpu, wall, comm = [], [], [], []
    for _ in range(trials):
        runs_of = ModuleRuns(gm, args, WARMUP, device)
        with tempfile.TemporaryDirectory() as cache:
            model = calibrate(gm, device, cache_dir=cache, mode=LocalCollectives,
                              clock="thread" if device == "cpu" else "wall", warmup=WARMUP, repeats=runs,
                              after_round=runs_of, hot=hot)
        problem = extract_problem(gm, cost_model=model)
        predicted.append(simulate(problem, Schedule.original(problem)).makespan / 1e9)
        comm.append(sum(t.duration for t in problem.tasks if t.role == Role.COMM) / 1e9)
        cpu.append(statistics.median(runs_of.cpu))
        wall.append(statistics.median(runs_of.wall))
    errors = [p / c - 1 for p, c in zip(predicted, cpu)]  # each trial's prediction against its own runs
    return {"model": name, "params": params, "tasks": problem.num_tasks, "predicted": statistics.median(predicted),
            "measured": statistics.median(cpu), "wall": statistics.median(wall), "comm": statistics.median(comm),
            "error": statistics.median(errors), "trial_errors": errors, "coverage": model.coverage(gm),
            "threads": torch.get_num_threads()}


def model_table(rows: list[dict], measured: str, digits: int, ok: bool) -> list[str]:
    """The report's table of models (times in ms with ``digits`` decimals; ``measured``: the device of the
    measured column), then the check's verdict and a blank line."""
    lines = [f"| model | params | tasks | predicted (ms) | measured {measured} (ms) | error | trial errors | wall (ms) "
             "| comm (ms) |", "|---|---|---:|---:|---:|---:|---|---:|---:|"]
    for r in rows:
        params = ",".join(f"{k}={v}" for k, v in r["params"].items() if k not in ("world_size", "dtype"))
        trial = " ".join(f"{e:+.1%}" for e in r["trial_errors"])
        ms = {k: f"{r[k] * 1e3:.{digits}f}" for k in ("predicted", "measured", "wall", "comm")}
        lines.append(f"| {r['model']} | {params} | {r['tasks']} | {ms['predicted']} | {ms['measured']} | "
                     f"{r['error']:+.1%} | {trial} | {ms['wall']} | {ms['comm']} |")
    return lines + ["", f"Check (|error| <= {LIMIT:.0%} for every model): {'passed' if ok else 'FAILED'}.", ""]


def write(rows: list[dict], out: Path, command: str, trials: int, runs: int, hot: bool, load: tuple,
          device: str = "cpu") -> None:
    ok = all(abs(r["error"]) <= LIMIT for r in rows)
    if device == "cuda":
        write_cuda(rows, out, command, trials, runs, ok)
        return
    lines = [
        "# Calibrated costs against measured CPU runs" + (" (hot: each op timed right after itself)" if hot else ""),
        "",
        f"Command: `{command}`",
        "",
        f"CPU, one thread (`torch.set_num_threads(1)`), float32, world size 2; {trials} trials per model, each a "
        f"fresh calibration ({runs} timed rounds over the distinct ops) with one module run after each round "
        "(median of the runs); the error is the median of the trials' errors (each trial's prediction against "
        "its own runs), the other figures are medians over the trials. "
        f"Times are thread CPU time (`time.thread_time`): the {os.cpu_count()} cores were shared with other "
        f"processes (1-minute load average {load[0]:.1f} at the start, {load[1]:.1f} at the end), so wall time "
        "mostly measured the wait for a core; its median is given for reference. Collectives run "
        "as `solvercast.graph.local_run.LocalCollectives` stand-ins, inline; the model prices them at the stand-ins' "
        "measured time on the comm stream, sync overhead 0 (`simulate` may overlap them with compute, which "
        "one CPU thread cannot: at most the `comm` column).",
        "",
        *model_table(rows, "CPU", 2, ok),
    ]
    lines += ["Each op is timed right after an untimed call of itself (`--hot`, as a loop timing one op does): its "
              "code and data are hot, and the prediction falls below the run." if hot else
              "Ops are timed in rounds over all distinct ops in program order; timing each op right after itself "
              "(`--hot`) predicts below the run: calibration_hot.md.", ""]
    lines += [f"- {r['model']}: {r['coverage']}" for r in rows]
    out.write_text("\n".join(lines) + "\n")


def write_cuda(rows: list[dict], out: Path, command: str, trials: int, runs: int, ok: bool) -> None:
    import torch

    lines = [
        f"# Calibrated costs against measured CUDA runs ({torch.cuda.get_device_name()}, torch {torch.__version__})",
        "",
        f"Command: `{command}`",
        "",
        f"{trials} trials per model, each a fresh calibration on CUDA ({runs} timed rounds over the distinct ops, "
        "CUDA events) with one module run after each round (CUDA events around `run_local`, the collectives' "
        "local stand-ins inline); the error is the median of the trials' errors, the other figures medians over "
        "the trials. Wall: the host's time of a run, launch overhead included.",
        "",
        *model_table(rows, "CUDA", 3, ok),
    ]
    lines += [f"- {r['model']}: {r['coverage']}" for r in rows]
    out.write_text("\n".join(lines) + "\n")


def main(argv=None) -> int:
    """Does simulate, with calibrated costs, predict the measured run of each zoo model? Writes
    experiments/results/calibration.md (calibration_hot.md with --hot, calibration_cuda.md with --device cuda); exit 1
    when an error exceeds 15%."""
    import torch

    ap = command_line("experiments.gpu.calibration", main.__doc__, __doc__)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--runs", type=int, default=11)
    ap.add_argument("--models", default=None, help="comma-separated subset (default: every model)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--out", default=None, help="default: experiments/results/calibration.md "
                    "(calibration_hot.md with --hot, calibration_cuda.md with --device cuda)")
    ap.add_argument("--hot", action="store_true",
                    help="time each op right after an untimed call of it (as a loop timing one op does)")
    args = ap.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda needs CUDA")
    models = CUDA_MODELS if args.device == "cuda" else MODELS
    default = "calibration_cuda.md" if args.device == "cuda" else "calibration_hot.md" if args.hot else "calibration.md"
    out = Path(args.out or RESULTS / default)
    torch.set_num_threads(1)
    rows = []
    load_start = os.getloadavg()[0]
    for name in (args.models.split(",") if args.models else models):
        row = check_model(name, models[name], args.trials, args.runs, args.hot, args.device)
        print(f"{name}: predicted {row['predicted'] * 1e3:.2f} ms, measured {row['measured'] * 1e3:.2f} ms "
              f"({'CUDA events' if args.device == 'cuda' else 'thread CPU'}), error {row['error']:+.1%}",
              file=sys.stderr, flush=True)
        rows.append(row)
    command = "python -m experiments.gpu.calibration " + " ".join(argv if argv is not None else sys.argv[1:])
    write(rows, out, command.strip(), args.trials, args.runs, args.hot, (load_start, os.getloadavg()[0]), args.device)
    return 0 if all(abs(r["error"]) <= LIMIT for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
