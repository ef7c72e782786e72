"""experiments/gpu/gpu_overlap.py end to end on CPU (one small model, analytic costs, few steps): every order
gets a row, and each row's measured peak equals its predicted peak (the table's exact column)."""

import sys

import pytest


@pytest.mark.filterwarnings("ignore:dynamo_pgo force disabled")
def test_table_on_cpu(monkeypatch, capsys):
    from experiments.gpu import gpu_overlap

    monkeypatch.setattr(sys, "argv", ["gpu_overlap.py", "--device", "cpu", "--cost", "analytic", "--models",
                                      "tp_block", "--time-limit", "1", "--iters", "2"])
    gpu_overlap.main()
    rows = [line.split("|")[1:-1] for line in capsys.readouterr().out.splitlines() if line.startswith("| tp_block")]
    orders = [r[1].strip() for r in rows]
    assert orders[:3] == ["original", "solvercast-1", "solvercast-2"] and len(rows) in (3, 4)
    for r in rows:
        assert float(r[9]) == float(r[10])  # predicted peak MiB == measured peak MiB
