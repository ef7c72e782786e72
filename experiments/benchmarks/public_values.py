"""Values kept on autoparallel's public graphs: a slice of each graph (its first nodes, through its first
collective-matmul sites and bucket sites of each kind), rewritten as the optimizer writes buckets and
collective-matmul chunks, scheduled and lowered, computes what the slice computes.

    python -m experiments.benchmarks.public_values [--graphs fw_64_2d,bw_64_2d] [--dir DIR] [--sites 4]

The graphs keep their real sizes (Llama-3 8B's), so a slice, not the whole graph, is run: on CPU, with
`solvercast.graph.local_run.LocalCollectives` for the collectives (deterministic stand-ins that keep each
rank's blocks apart: a gathered block ``r`` is the input times ``r + 1``) and `CpuStandIns` for the kernels
a CPU build of torch lacks (cuDNN attention: its outputs a deterministic function of its inputs, the same in
both runs; no rewrite touches it). Two lowered graphs per slice:

* **forced**: every bucket the slice allows among each kind's commonest key (the FSDP group's all_gathers
  and reduce_scatters: consecutive legal sites, `BucketGraph.greedy` with no size cap) and then every collective-matmul site at degree 4 (or the
  largest its sizes allow), ordered by the heuristics and lowered: each rewrite is exercised whether or not it
  pays;
* **optimize**: `optimize` on the slice with its defaults in the benchmark's costs: what it chose.

Each output is compared with the slice's: "bitwise" where every element is equal, else the largest
difference relative to the output's largest magnitude (bf16 matmuls over other sizes may block their sums
differently: close, not bitwise, as the optimizer's report says of decomposition).
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
import torch.fx as fx
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

from experiments.benchmarks.public_graphs import add_graph_arguments, chosen_graphs, loaded_graph, run_line
from experiments.common import below_commands, command_line, invocation

#: a slice ends past the waits of this many collective-matmul sites (and as many bucket sites)
SITES = 4


class CpuStandIns(TorchDispatchMode):
    """Runs a graph traced for another device on CPU: a ``device`` argument becomes the CPU, and a kernel the CPU
    build lacks is replaced by a deterministic function of its inputs with the outputs' shapes and dtypes (taken
    from the op's meta kernel). ``stood_in``: the ops replaced."""

    def __init__(self):
        super().__init__()
        self.stood_in: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if "device" in kwargs:
            kwargs["device"] = torch.device("cpu")
        try:
            return func(*args, **kwargs)
        except (NotImplementedError, RuntimeError) as e:
            if "CUDA" not in str(e) and "cuda" not in str(e) and "backend" not in str(e):
                raise
        self.stood_in.add(str(func))
        tensors = [a for a in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
        mix = sum(float(t.float().mean()) for t in tensors if t.numel() and t.dtype.is_floating_point)
        meta = func(*tree_map(lambda a: a.to("meta") if isinstance(a, torch.Tensor) else a, args),
                    **tree_map(lambda a: a.to("meta") if isinstance(a, torch.Tensor) else a, kwargs))

        def value(m):  # with the meta kernel's strides: later views of the output rely on them
            if not isinstance(m, torch.Tensor):
                return m
            out = torch.empty_strided(m.shape, m.stride(), dtype=m.dtype)
            if not m.dtype.is_floating_point:
                return out.zero_()
            pattern = torch.arange(m.numel(), dtype=torch.float32).remainder_(13).div_(13).add_(mix)
            return out.copy_(pattern.reshape(m.shape))

        return tree_map(value, meta)


def graph_slice(gm: fx.GraphModule, stop: int) -> fx.GraphModule:
    """The nodes of ``gm`` before position ``stop`` whose inputs are all in it, and the waits of its collectives,
    as a graph of their own: placeholders only those read, outputs every value a node left out (or ``gm``'s
    output) reads."""
    nodes = list(gm.graph.nodes)
    output = nodes[-1]
    kept: set[fx.Node] = set()
    for node in nodes[:stop]:
        if node.op == "placeholder" or all(i in kept for i in node.all_input_nodes):
            kept.add(node)
    for node in nodes[stop:-1]:  # a wait whose collective is kept: a launch is not left unwaited
        if node.all_input_nodes and all(i in kept for i in node.all_input_nodes) and "wait_tensor" in str(node.target):
            kept.add(node)
    read = {n for n in kept if n.op != "placeholder" and any(u not in kept or u is output for u in n.users)}
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for node in nodes:
        if node in kept and (node.op != "placeholder" or any(u in kept for u in node.users)):
            env[node] = graph.node_copy(node, lambda n: env[n])
    graph.output(tuple(env[n] for n in nodes if n in read))
    out = fx.GraphModule(gm, graph)
    out.meta.update(getattr(gm, "meta", {}))
    return out


def commonest_keys(by_key: dict) -> list[tuple]:
    """Per collective kind, the bucket key with the most sites (the FSDP group's all_gathers, reduce_scatters)."""
    kinds = {key[0] for key in by_key}
    return [max((k for k in by_key if k[0] == kind), key=lambda k: len(by_key[k])) for kind in sorted(kinds)]


def slice_end(gm: fx.GraphModule, sites: int = SITES) -> int:
    """The position past the waits of ``gm``'s first ``sites`` collective-matmul sites and, of each collective
    kind, its first ``sites`` bucket sites of the commonest key (`commonest_keys`)."""
    from solvercast.rewrites.bucketing import BucketGraph
    from solvercast.rewrites.decompose import matmul_sites

    position = {n.name: i for i, n in enumerate(gm.graph.nodes)}
    waits = [s.wait for s in matmul_sites(gm)[:sites]]
    by_key = BucketGraph(gm).by_key()
    for key in commonest_keys(by_key):
        waits += [s.wait for s in by_key[key][:sites]]
    if not waits:
        raise ValueError("the graph has no collective-matmul or bucket site: nothing to rewrite")
    return max(position[w] for w in waits) + 1


def forced_rewrites(gm: fx.GraphModule):
    """``gm`` with every legal bucket of each kind's commonest key and then every collective-matmul site split
    (degree 4 or its largest); (graph, one line of what was written)."""
    from solvercast.rewrites.bucketing import BucketGraph, BucketPlan, apply_buckets
    from solvercast.rewrites.decompose import DecomposePlan, apply_decomposition, matmul_sites

    graph = BucketGraph(gm)
    by_key = graph.by_key()
    keys = commonest_keys(by_key)
    said = []
    if keys:
        greedy = graph.greedy({key[0]: 1 << 60 for key in keys})
        mine = {s.collective for key in keys for s in by_key[key]}
        plan = BucketPlan(tuple(b for b in greedy.buckets if b[0] in mine))
        gm = apply_buckets(gm, plan, graph)
        said.append(plan.describe(graph.by_name))
    sites = {s.collective: s for s in matmul_sites(gm)}
    degrees = {n: 4 if 4 in s.degrees else max(s.degrees) for n, s in sites.items()}
    plan = DecomposePlan.of(degrees)
    gm = apply_decomposition(gm, plan, sites)
    said.append(plan.describe(sites))
    return gm, "; ".join(said)


def lowered_by_heuristics(gm: fx.GraphModule, cost_fn) -> fx.GraphModule:
    from solvercast.fx.extract import extract_problem
    from solvercast.fx.lower import lower
    from solvercast.heuristics import best_heuristic

    problem = extract_problem(gm, cost_fn=cost_fn)
    return lower(gm, problem, best_heuristic(problem))


def compared(expected: list, got: list) -> tuple[bool, float]:
    """(every output bitwise equal, the largest difference relative to its output's largest magnitude)."""
    if len(expected) != len(got):
        raise AssertionError(f"{len(got)} outputs, the slice has {len(expected)}")
    bitwise, worst = True, 0.0
    for a, b in zip(expected, got):
        if not isinstance(a, torch.Tensor):
            continue
        if a.shape != b.shape or a.dtype != b.dtype:
            raise AssertionError(f"an output of shape {tuple(b.shape)} {b.dtype}, the slice's is {tuple(a.shape)} {a.dtype}")
        if torch.equal(a, b):
            continue
        bitwise = False
        scale = float(a.float().abs().max()) or 1.0
        worst = max(worst, float((a.float() - b.float()).abs().max()) / scale)
    return bitwise, worst


def run_on_cpu(gm: fx.GraphModule, args: list) -> tuple[list, set[str]]:
    from solvercast.graph.local_run import LocalCollectives

    stand_ins = CpuStandIns()
    with torch.no_grad(), stand_ins, LocalCollectives():
        out = gm(*args)
    return (list(out) if isinstance(out, (tuple, list)) else [out]), stand_ins.stood_in


def check_graph(graph: str, directory: Path | None, sites: int, time_limit: float) -> dict:
    from solvercast import optimize
    from solvercast.graph.local_run import random_inputs

    with loaded_graph(graph, directory, device="meta") as (gm, table, info):
        piece = graph_slice(gm, slice_end(gm, sites))
        row = dict(graph=graph, nodes=len(piece.graph.nodes))
        args = random_inputs(piece, seed=0)
        start = time.perf_counter()
        expected, stood_in = run_on_cpu(piece, args)
        row["run_s"] = time.perf_counter() - start
        forced, row["forced"] = forced_rewrites(piece)
        lowered = lowered_by_heuristics(forced, table.seconds)
        got, _ = run_on_cpu(lowered, args)
        row["forced_same"] = compared(expected, got)
        res = optimize(piece, time_limit=time_limit, cost_fn=table.seconds)
        row["optimize"] = "; ".join(filter(None, (res.report.buckets, res.report.decomposition))) or "reordered only"
        got, _ = run_on_cpu(res.gm, args)
        row["optimize_same"] = compared(expected, got)
        row["stood_in"] = ", ".join(sorted(stood_in)) or "none"
    return row


def _same(result: tuple[bool, float]) -> str:
    bitwise, worst = result
    return "bitwise" if bitwise else f"close: {worst:.1e}"


def main(argv=None) -> int:
    """Do autoparallel's public graphs, rewritten with buckets and collective-matmul chunks, scheduled and
    lowered, compute what they computed? A markdown table to stdout (result: experiments/results/public_values.md)."""
    ap = command_line("experiments.benchmarks.public_values", main.__doc__, below_commands(__doc__))
    add_graph_arguments(ap, 10.0)
    ap.add_argument("--sites", type=int, default=SITES,
                    help="a slice ends past the waits of this many collective-matmul sites and bucket sites")
    args = ap.parse_args(argv)
    graphs = chosen_graphs(ap, args)
    print("# Values kept on slices of autoparallel's public graphs\n")
    print(f"Command: `{invocation('experiments.benchmarks.public_values')}` (a slice through {args.sites} sites of "
          f"each kind; `optimize` time limit {args.time_limit:g} s).\n")
    print(run_line())
    print("| graph | slice nodes | forced rewrites | forced: outputs | optimize chose | optimize: outputs | "
          "kernels stood in | one run s |")
    print("|---|---|---|---|---|---|---|---|")
    failed = 0
    for g in graphs:
        try:
            r = check_graph(g, args.dir, args.sites, args.time_limit)
        except Exception as e:  # a graph that fails is a row, the others still run
            failed += 1
            print(f"| {g} | failed: {type(e).__name__}: {str(e).splitlines()[0][:200]} | | | | | | |", flush=True)
            continue
        failed += r["forced_same"][1] > 1e-2 or r["optimize_same"][1] > 1e-2
        print(f"| {g} | {r['nodes']} | {r['forced']} | {_same(r['forced_same'])} | {r['optimize']} | "
              f"{_same(r['optimize_same'])} | {r['stood_in']} | {r['run_s']:.1f} |", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
