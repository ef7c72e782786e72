"""What pinning the pass's order (`solvercast.fx.pin_order`) costs in Inductor's generated code: kernels and
materialized buffers with and without it, next to Inductor alone, and whether the pass's order is kept.

    python -m experiments.benchmarks.pin_kernels > table.md
    python -m experiments.benchmarks.pin_kernels --models llama_tp,tp_mlp

Each zoo model at one layer (its other parameters at their defaults) is compiled on CPU by
``torch.compile`` three times: with ``SolvercastPass(time_limit=1)`` as Inductor's post-grad custom pass
(pinning on), with ``SolvercastPass(time_limit=1, pin=False)``, and with a post-grad pass that changes
nothing (Inductor alone). The DTensor models (``llama_tp``, ``simple_fsdp``, ``fsdp_tp``) are compiled
forward and backward as ``tests/end_to_end/test_generated_code_order.py`` does; the traced models
(``tp_mlp``, ``tp_block``, ``fsdp_layers``: aten graphs, ``fsdp_layers`` holds its own backward) are
compiled as one inference graph, their placeholders fed random tensors. Collectives run on the fake
process group (no communication), caches are off.

Counted in each output code (``run_and_get_code``), forward and backward summed:

* kernels: the kernels Inductor generates (``async_compile.cpp_pybinding`` / ``.cpp`` / ``.triton``
  definitions: one per fused group) plus the extern kernel calls (``extern_kernels.*``: matmuls);
* fused groups: the scheduler nodes Inductor's fusion leaves that generate code (fused or single pointwise and
  reduction nodes; extern calls and no-ops not counted), recorded by a post-fusion pass that changes nothing.
  On a GPU each is one Triton kernel; on CPU the C++ backend writes one kernel per run of such nodes between
  two flushes (before every extern call), so its kernel count also depends on which nodes end up adjacent,
  while this count says whether pinning split a fusion;
* buffers: ``empty_strided*`` allocations (materialized buffers; reused buffers are not counted again);
* order kept: whether the collectives, waits and matmuls in the code come in the order of the graph
  Inductor was given after the custom pass (for Inductor alone: the traced order).
"""

from __future__ import annotations

import os
import sys
import time

import torch

from experiments.common import below_commands, chosen, command_line, commit_label, invocation

DTENSOR = ("llama_tp", "simple_fsdp", "fsdp_tp")
TRACED = ("tp_mlp", "tp_block", "fsdp_layers")
SETTINGS = ("pinned", "unpinned", "inductor")

def _unchanged_pass():
    """A post-grad custom pass that leaves the graph as it is (Inductor alone, recorded the same way)."""
    from torch._inductor.custom_graph_pass import CustomGraphPass

    class Unchanged(CustomGraphPass):
        def __call__(self, graph):
            return None

        def uuid(self):
            return "unchanged"

    return Unchanged()


def _compile_traced(name: str, solver_pass, device: str = "cpu") -> tuple[list, list[str]]:
    """A traced zoo model compiled as one graph with ``solver_pass``, its inputs on ``device``: (graphs' kinds,
    output codes)."""
    from solvercast.models import build
    from tests.end_to_end.test_generated_code_order import _compile_graph_module

    return _compile_graph_module(build(name, layers=1), solver_pass, device)


class _FusedGroups:
    """Inductor's post-fusion custom pass that changes nothing and counts, per compiled graph, the scheduler nodes
    that generate a kernel of their own (`SchedulerNode`, `FusedSchedulerNode` and its kinds)."""

    def __init__(self) -> None:
        self.counts: list[int] = []

    def __call__(self, nodes):
        from torch._inductor.scheduler import FusedSchedulerNode, SchedulerNode

        self.counts.append(sum(isinstance(n, (SchedulerNode, FusedSchedulerNode)) for n in nodes))
        return nodes


def run(name: str, setting: str, dump: str | None = None, device: str = "cpu") -> dict:
    """One compile of model ``name`` (``setting``: one of `SETTINGS`): counts, order kept, seconds; the
    output codes are written to ``dump/<name>_<setting>_<i>.py`` when ``dump`` is given."""
    from solvercast import SolvercastPass
    from tests.end_to_end.test_generated_code_order import _code_counts, _code_kinds, _compile_with_pass

    solver_pass = {"pinned": lambda: SolvercastPass(time_limit=1), "unpinned": lambda: SolvercastPass(time_limit=1, pin=False),
                   "inductor": _unchanged_pass}[setting]()
    from torch._inductor import config as inductor_config

    fused = _FusedGroups()
    start = time.perf_counter()
    with inductor_config.patch(_post_fusion_custom_pass=fused):
        if name in DTENSOR:
            graphs, codes = _compile_with_pass(name, solver_pass=solver_pass, layers=1)
        else:
            graphs, codes = _compile_traced(name, solver_pass, device)
    seconds = time.perf_counter() - start
    if dump:
        os.makedirs(dump, exist_ok=True)
        for i, code in enumerate(codes):
            with open(os.path.join(dump, f"{name}_{setting}_{i}.py"), "w") as f:
                f.write(code)
    counts = [_code_counts(c) for c in codes]
    total = {k: sum(c[k] for c in counts) for k in counts[0]}
    kept = [_code_kinds(code) == chosen for (_, chosen), code in zip(graphs, codes)]
    return {"model": name, "setting": setting, "graphs": len(codes), **total, "fused": sum(fused.counts), "kept": kept, "seconds": seconds}


def main(argv=None) -> int:
    """Does pinning the pass's order add kernels or buffers to Inductor's code? Per model, the counts with
    pinning, without it and with Inductor alone, and whether the order is kept. A markdown table to stdout
    (result: experiments/results/pin_order.md, section "Kernels and buffers")."""
    ap = command_line("experiments.benchmarks.pin_kernels", main.__doc__, below_commands(__doc__))
    ap.add_argument("--models", default=",".join(DTENSOR + TRACED),
                    help=f"comma-separated, of {', '.join(DTENSOR + TRACED)} (default: all)")
    ap.add_argument("--dump", default=None, help="a folder to write each output code to (default: none)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="where the traced models' inputs live (cuda: Triton kernels; the DTensor models build "
                         "on a CPU mesh and stay on CPU)")
    args = ap.parse_args(argv)
    models = chosen(ap, args.models, DTENSOR + TRACED, "models")
    command = invocation("experiments.benchmarks.pin_kernels")
    print(f"Command: `{command}`; commit {commit_label()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"torch {torch.__version__}, "
          f"{torch.cuda.get_device_name() if args.device == 'cuda' else 'CPU'}.\n")
    print("| model | graphs | kernels pinned / unpinned / Inductor alone | fused groups pinned / unpinned / "
          "Inductor alone | extern calls | buffers pinned / unpinned / "
          "Inductor alone | order kept pinned | order kept unpinned | order kept Inductor alone | compile s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in models:
        rows = {}
        for setting in SETTINGS:
            try:
                rows[setting] = run(name, setting, args.dump,
                                    args.device if name in TRACED else "cpu")
            except Exception as e:  # a model that does not compile on this machine: say so, go on
                print(f"| {name} | {setting}: {type(e).__name__}: {str(e).splitlines()[0][:120]} ||||||||", flush=True)
                break
        else:
            r = [rows[s] for s in SETTINGS]
            secs = " / ".join(f"{x['seconds']:.0f}" for x in r)
            kept = lambda x: ", ".join("yes" if k else "no" for k in x["kept"])  # noqa: E731
            print(f"| {name} | {r[0]['graphs']} | {' / '.join(str(x['generated']) for x in r)} | "
                  f"{' / '.join(str(x['fused']) for x in r)} | {' / '.join(str(x['extern']) for x in r)} | {' / '.join(str(x['buffers']) for x in r)} | "
                  f"{kept(r[0])} | {kept(r[1])} | {kept(r[2])} | {secs} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
