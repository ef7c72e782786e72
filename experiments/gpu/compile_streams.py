"""torch.compile with solvercast's streams: values and step time, 1 vs 2 compute streams (CUDA only).

    python -m experiments.gpu.compile_streams > experiments/results/compile_streams_<gpu>.md

For each function below, compiled three ways: plain ``torch.compile``; with `SolvercastPass`
(``compute_streams=1``) as Inductor's post-grad pass; with ``compute_streams=2`` (the streams written
in torch.compile's form by `solvercast.fx.compile_streams`). Reports whether the outputs equal eager
(``torch.testing.assert_close``), how many compute tasks the pass put on the second stream, how many output codes Inductor wrote and how
many side-stream blocks they hold,
and the step time (CUDA events, median of ``--iters`` after warm-up). The functions have independent
branches of unequal size, where a second stream can pay: small elementwise chains beside a matmul,
and two matmuls too small to fill the GPU.
"""

from __future__ import annotations

from unittest import mock

import torch

from experiments.common import command_line
from solvercast import SolvercastPass
from solvercast.runtime.measure import cuda_median_ns


def branches(x, w1, w2, w3):
    a = torch.relu(x @ w1) @ w2            # a big matmul chain
    b = torch.tanh(x[:, :64] * 3 + 1).sum(1, keepdim=True)  # small elementwise work beside it
    c = torch.sigmoid(x[:64] @ w3)         # a small matmul
    return a + b, c


def two_small_matmuls(x, w1, w2):
    return torch.relu(x @ w1).sum() + torch.relu(x @ w2).sum()


CASES = {
    "branches": (branches, lambda: [torch.randn(4096, 4096), torch.randn(4096, 4096) / 64, torch.randn(4096, 4096) / 64,
                                    torch.randn(4096, 1024) / 64]),
    "two_small_matmuls": (two_small_matmuls, lambda: [torch.randn(256, 1024), torch.randn(1024, 256) / 32,
                                                      torch.randn(1024, 256) / 32]),
}


def main(argv=None) -> None:
    """Does torch.compile with solvercast's streams give eager's values, and does a second stream pay? Table to stdout
    (experiments/results/compile_streams_h100.md). Needs CUDA."""
    ap = command_line("experiments.gpu.compile_streams", main.__doc__, __doc__)
    ap.add_argument("--iters", type=int, default=50, help="timed calls per variant (CUDA events, median)")
    ap.add_argument("--time-limit", type=float, default=5.0, help="SolvercastPass's time limit per graph")
    args = ap.parse_args(argv)
    from torch._inductor.utils import run_and_get_code

    if not torch.cuda.is_available():
        raise SystemExit("needs CUDA")

    print(f"# torch.compile with solvercast's streams on {torch.cuda.get_device_name()} (torch {torch.__version__})\n")
    print(f"Command: `python -m experiments.gpu.compile_streams --iters {args.iters} --time-limit {args.time_limit:g}`\n")
    print("| function | variant | equals eager | compute tasks the pass put on stream 1 | output codes | "
          "side-stream blocks | step us |")
    print("|---|---|---|---:|---:|---:|---:|")
    for name, (fn, make) in CASES.items():
        inputs = [t.cuda() for t in make()]
        ref = fn(*inputs)
        for variant, pass_ in (("torch.compile", None), ("solvercast 1 stream", SolvercastPass(time_limit=args.time_limit)),
                               ("solvercast 2 streams", SolvercastPass(time_limit=args.time_limit, compute_streams=2))):
            torch._dynamo.reset()
            with mock.patch.object(torch._inductor.config, "post_grad_custom_post_pass", pass_):
                compiled = torch.compile(fn)
                out, codes = run_and_get_code(compiled, *inputs)  # Inductor's output code, every graph
                try:
                    torch.testing.assert_close(out, ref, rtol=1e-3, atol=1e-3)
                    same = "yes"
                except AssertionError as e:
                    same = f"NO ({str(e).splitlines()[0]})"
                us = cuda_median_ns(lambda: compiled(*inputs), args.iters, warmup=5) / 1e3
            blocks = sum(c.count("with stream") for c in codes)
            # whether a missing side-stream block is the pass's choice (one stream) or the compiler's
            side = "-" if pass_ is None or pass_.last_result is None or pass_.last_result.schedule is None else \
                sum(1 for t, stream in pass_.last_result.schedule.streams.items()
                    if stream == 1 and pass_.last_result.problem.tasks[t].role.value == "compute")
            print(f"| {name} | {variant} | {same} | {side} | {len(codes)} | {blocks} | {us:.1f} |", flush=True)
    torch._dynamo.reset()


if __name__ == "__main__":
    main()
