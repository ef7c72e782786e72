"""Every GPU measurement the project owes, in one command of under 8 minutes:

    python -m experiments.gpu.gpu_check                # on a machine with a CUDA GPU
    python -m experiments.gpu.gpu_check --list         # the plan: each part's command, time share and file

Parts, each run as its own process (``python -m experiments.gpu.<module> ...``) with small settings and a
time share of ``--budget`` seconds; its table goes to ``experiments/results/<name>_<tag>.md`` (``tag``: the
GPU's model, e.g. ``h100``):

* ``gpu_overlap``: predicted vs measured step time and peak with collectives running asynchronously on
  side streams (experiments/gpu/gpu_overlap.py, ``--device cuda --sizes gpu``);
* ``stream_microbench``: two kernels on two streams, event record + wait, and the fit of the device
  model's ``num_sms`` / ``sync_overhead`` (experiments/gpu/streams.py ``microbench``; rows also as JSON);
* ``gpu_streams``: optimized schedules on one and two compute streams run on the GPU: values, measured peak
  and step time (experiments/gpu/streams.py ``lowered``);
* ``compile_streams``: torch.compile with `SolvercastPass` on one and two compute streams: values equal
  eager's, side-stream blocks in Inductor's code, step time (experiments/gpu/compile_streams.py);
* ``calibration``: calibrated costs against measured CUDA runs of the zoo models
  (experiments/gpu/calibration.py ``--device cuda``).

A part that runs past its share is stopped; the rows it printed stay in its file, with a line saying so
(the tables print row by row). A part that fails leaves its error in its file. A summary of the parts
(status, seconds, file) is printed and written to ``experiments/results/gpu_check_<tag>.md``. Exit status
1 if a part failed (not for one stopped at its share). Without CUDA it says so and exits 0, measuring
nothing.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from experiments.common import command_line

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "experiments" / "results"
#: seconds for all parts together: under 8 minutes with the processes' start-up
BUDGET_S = 450.0


@dataclass(frozen=True)
class Part:
    name: str
    module: str
    args: tuple[str, ...]  # "{out}", "{json}": the part's files; "{profile}": the device profile to fit
    share: float  # of the budget
    writes_itself: bool = False  # the script writes {out} itself (else its stdout is the table)


PARTS = (
    Part("gpu_overlap", "experiments.gpu.gpu_overlap",
         ("--device", "cuda", "--sizes", "gpu", "--time-limit", "2", "--iters", "20"), 0.40),
    Part("stream_microbench", "experiments.gpu.streams",
         ("microbench", "--profile", "{profile}", "--iters", "20", "--json", "{json}"), 0.12),
    Part("gpu_streams", "experiments.gpu.streams", ("lowered", "--time-limit", "2", "--iters", "10"), 0.16),
    Part("compile_streams", "experiments.gpu.compile_streams", ("--iters", "20", "--time-limit", "2"), 0.16),
    Part("calibration", "experiments.gpu.calibration",
         ("--device", "cuda", "--trials", "1", "--runs", "5", "--out", "{out}"), 0.16, writes_itself=True),
)


def device_tag(name: str) -> str:
    """``h100`` for "NVIDIA H100 80GB HBM3": the model's name, else ``cuda``."""
    found = re.search(r"\b([A-Z]{1,2}\d{2,4})\b", name)
    return found.group(1).lower() if found else "cuda"


def profile_for(tag: str) -> str:
    """The device profile (solvercast.cost.device) of the GPU ``tag`` names, H100's for one without its own."""
    from solvercast.cost.device import PROFILES

    return tag if tag in PROFILES else "h100"


def command(part: Part, out: Path) -> list[str]:
    json_path = out.with_name(out.stem.replace(part.name, "stream_rows") + ".json")
    tag = out.stem[len(part.name) + 1:]
    return [sys.executable, "-m", part.module] + [a.format(out=out, json=json_path, profile=profile_for(tag))
                                                  for a in part.args]


def run_part(part: Part, out: Path, seconds: float) -> tuple[str, float]:
    """Run one part for at most ``seconds``; its table in ``out``. Returns (status, wall seconds)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    cmd = command(part, out)
    log = out.with_suffix(".log") if part.writes_itself else out
    start = time.perf_counter()
    with open(log, "w") as f:
        try:
            done = subprocess.run(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.PIPE, text=True,
                                  timeout=seconds)
            status = "ok" if done.returncode == 0 else f"failed (exit {done.returncode})"
            if done.returncode not in (0, 1) or (done.returncode == 1 and not part.writes_itself):
                f.write(f"\n\nFAILED (exit {done.returncode}):\n\n```\n{done.stderr[-4000:]}\n```\n")
            elif done.returncode == 1:  # calibration: a model outside the check's 15 %
                status = "ok (check failed: an error above 15 %)"
        except subprocess.TimeoutExpired:
            status = f"stopped at its share ({seconds:.0f} s)"
            f.write(f"\n\n(stopped at its time share of {seconds:.0f} s by experiments/gpu/gpu_check.py: the rows "
                    "above are those it finished)\n")
    if part.writes_itself and log.exists() and log.stat().st_size == 0:
        log.unlink()
    return status, time.perf_counter() - start


def main(argv=None) -> int:
    """Run every GPU measurement the project owes (gpu_overlap, the stream micro-benchmarks, lowered schedules on
    streams, torch.compile with several streams, calibration on CUDA) in under 8 minutes; tables in
    experiments/results/<part>_<gpu>.md, a summary in experiments/results/gpu_check_<gpu>.md. Without CUDA: a message,
    exit 0."""
    ap = command_line("experiments.gpu.gpu_check", main.__doc__, __doc__)
    ap.add_argument("--budget", type=float, default=BUDGET_S, help="seconds for all parts (default %(default)g)")
    ap.add_argument("--only", default=None, help="comma-separated parts: " + ",".join(p.name for p in PARTS))
    ap.add_argument("--out-dir", default=str(RESULTS), help="where the tables go (default experiments/results)")
    ap.add_argument("--tag", default=None, help="the files' suffix (default: the GPU's model, e.g. h100)")
    ap.add_argument("--list", action="store_true", help="print each part's command, share and file; run nothing")
    args = ap.parse_args(argv)
    parts = [p for p in PARTS if args.only is None or p.name in args.only.split(",")]
    out_dir = Path(args.out_dir)
    import torch

    cuda = torch.cuda.is_available()
    tag = args.tag or (device_tag(torch.cuda.get_device_name()) if cuda else "cuda")
    plan = [(p, out_dir / f"{p.name}_{tag}.md", args.budget * p.share) for p in parts]
    if args.list:
        for p, out, seconds in plan:
            print(f"{p.name}: {seconds:.0f} s -> {out}\n    {' '.join(command(p, out)[1:])}")
        return 0
    if not cuda:
        print("gpu_check: no CUDA device here (torch.cuda.is_available() is False), so nothing was measured. "
              "Run `python -m experiments.gpu.gpu_check` on a machine with a GPU; `--list` shows the plan.")
        return 0
    out_dir.mkdir(parents=True, exist_ok=True)
    name = torch.cuda.get_device_name()
    print(f"gpu_check on {name} (torch {torch.__version__}): {len(plan)} parts in at most {args.budget:.0f} s",
          flush=True)
    rows, failed = [], False
    for p, out, seconds in plan:
        print(f"[{p.name}] up to {seconds:.0f} s -> {out}", flush=True)
        status, wall = run_part(p, out, seconds)
        failed |= status.startswith("failed")
        print(f"[{p.name}] {status}, {wall:.0f} s", flush=True)
        rows.append(f"| {p.name} | `python {' '.join(command(p, out)[1:])}` | {status} | {wall:.0f} | "
                    f"[{out.name}]({out.name}) |")
    summary = out_dir / f"gpu_check_{tag}.md"
    summary.write_text("\n".join([
        f"# GPU measurements on {name} (torch {torch.__version__})", "",
        f"Command: `python -m experiments.gpu.gpu_check {' '.join(sys.argv[1:] if argv is None else argv)}`", "",
        "| part | command | status | s | table |", "|---|---|---|---:|---|", *rows, ""]))
    print(summary.read_text())
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
