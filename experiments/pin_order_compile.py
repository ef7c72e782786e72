"""Compile time of the zoo's DTensor models with SolvercastPass, with and without `solvercast.fx.pin_order`,
and whether the pass's order of collectives, waits and matmuls reaches Inductor's code.

Each model (one layer, its other parameters at their defaults) is compiled forward and backward on
CPU as tests/test_generated_code_order.py does, ``--repeats`` times per setting, alternating the
settings so that the load of a shared machine falls on both. Printed per run: the wall time of the
compile (it includes the pass: ``SolvercastPass(time_limit=1)`` on each graph), the pass's own time,
the time spent wrapping nodes in ``control_deps``, whether the code's order equals the pass's, and
the pass's makespans and gaps (the backward graph's, from its report). A first, unshown compile warms
the process up.

    .venv/bin/python experiments/pin_order_compile.py [--models llama_tp,simple_fsdp,fsdp_tp] [--repeats 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import solvercast.fx.pin_order as pin_module  # noqa: E402
from solvercast import SolvercastPass  # noqa: E402
from test_generated_code_order import _code_kinds, _compile_with_pass  # noqa: E402


class _TimedPass(SolvercastPass):
    """SolvercastPass that keeps each call's report and wall time."""

    def __init__(self, **options):
        super().__init__(**options)
        self.reports, self.seconds = [], 0.0

    def __call__(self, gm):
        start = time.perf_counter()
        out = super().__call__(gm)
        self.seconds += time.perf_counter() - start
        self.reports.append(self.last_result.report)
        return out


def run(name: str, pin: bool) -> dict:
    pinning = {"seconds": 0.0}
    original = pin_module.pin_order

    def timed_pin(graph):
        start = time.perf_counter()
        n = original(graph)
        pinning["seconds"] += time.perf_counter() - start
        return n

    pin_module.pin_order = timed_pin if pin else (lambda graph: 0)
    try:
        solver_pass = _TimedPass(time_limit=1)
        start = time.perf_counter()
        graphs, codes = _compile_with_pass(name, solver_pass=solver_pass, layers=1)
        wall = time.perf_counter() - start
    finally:
        pin_module.pin_order = original
    kept = [_code_kinds(code) == chosen for (_, chosen), code in zip(graphs, codes)]
    bwd = solver_pass.reports[-1]
    return {"model": name, "pin": pin, "compile_s": wall, "pass_s": solver_pass.seconds,
            "pin_s": pinning["seconds"], "order_kept": kept,
            "makespans_us": [(r.baseline_makespan / 1e3, r.optimized_makespan / 1e3) for r in solver_pass.reports],
            "gap_bwd": bwd.gap, "method_bwd": bwd.method}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="llama_tp,simple_fsdp,fsdp_tp")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    run(args.models.split(",")[0], True)  # warm-up, not shown: the first compile of a process pays imports
    print("| model | pinned | compile s | pass s | control_deps s | order kept (fwd, bwd) | makespan fwd, bwd (us) | gap bwd | method bwd |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        for r in range(args.repeats):
            for pin in ((True, False) if r % 2 == 0 else (False, True)):
                row = run(name, pin)
                spans = ", ".join(f"{a:.1f} -> {b:.1f}" for a, b in row["makespans_us"])
                print(f"| {name} | {'yes' if pin else 'no'} | {row['compile_s']:.1f} | {row['pass_s']:.1f} | "
                      f"{row['pin_s']:.3f} | {row['order_kept']} | {spans} | {100 * row['gap_bwd']:.2f}% | "
                      f"{row['method_bwd']} |", flush=True)


if __name__ == "__main__":
    main()
