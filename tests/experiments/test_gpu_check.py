"""experiments/gpu/gpu_check.py without a GPU: it says so and exits 0, its plan names every owed part within
8 minutes, and every entry script answers --help."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from experiments.gpu import gpu_check

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here: gpu_check would measure")
def test_without_cuda_it_says_so_and_exits_0(tmp_path, capsys):
    assert gpu_check.main(["--out-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "no CUDA device" in out and "python -m experiments.gpu.gpu_check" in out
    assert list(tmp_path.iterdir()) == []  # nothing measured, nothing written


def test_plan_covers_every_owed_measurement_in_under_8_minutes(tmp_path, capsys):
    assert gpu_check.main(["--list", "--out-dir", str(tmp_path), "--tag", "h100"]) == 0
    out = capsys.readouterr().out
    names = {p.name for p in gpu_check.PARTS}
    assert names == {"gpu_overlap", "stream_microbench", "gpu_streams", "compile_streams", "calibration"}
    for name in names:
        assert str(tmp_path / f"{name}_h100.md") in out
    assert sum(p.share for p in gpu_check.PARTS) <= 1.0 and gpu_check.BUDGET_S < 8 * 60
    for part in gpu_check.PARTS:
        assert importlib.util.find_spec(part.module) is not None, part.module
    assert gpu_check.device_tag("NVIDIA H100 80GB HBM3") == "h100" and gpu_check.device_tag("Tesla") == "cuda"


ENTRIES = ["experiments.fingerprint", "experiments.benchmarks.sweep", "experiments.benchmarks.scale",
           "experiments.benchmarks.fuzz", "experiments.benchmarks.public_graphs", "experiments.benchmarks.autoparallel_trace",
           "experiments.benchmarks.collective_order", "experiments.benchmarks.pin_kernels", "experiments.benchmarks.zoo_buckets",
           "experiments.benchmarks.tp_rewrites", "experiments.tuning.cpsat", "experiments.tuning.heuristics",
           "experiments.tuning.fill_idle", "experiments.tuning.exact", "experiments.gpu.gpu_check",
           "experiments.gpu.gpu_overlap", "experiments.gpu.streams", "experiments.gpu.compile_streams",
           "experiments.gpu.calibration"]


@pytest.mark.parametrize("module", ENTRIES)
def test_entry_scripts_answer_help(module):
    done = subprocess.run([sys.executable, "-m", module, "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"python -m {module}" in done.stdout
