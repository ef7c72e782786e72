"""SPMD: the original and the lowered graph give the same results on every rank, with real
collectives (2 CPU processes, gloo).

The zoo graphs name a fake process group (``solvercast_fake_w2``) in their collectives'
``group_name`` argument. Each worker initializes a real gloo group, builds the model itself
(builds are deterministic, so every rank gets the same graph and node names), and re-targets
those arguments to the real group's ``group_name``. Each rank then extracts the problem, makes
the same seeded random 2-compute-stream schedule (collective order preserved) and lowers it,
and runs original and lowered on the same rank-specific inputs. Both issue their collectives
in the same order on every rank, so nothing deadlocks; the parent still bounds the run with a
timeout and kills the workers if it is exceeded.
"""

from __future__ import annotations

import os
import socket
import time
import traceback
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 2
TIMEOUT_S = 120.0
CASES = [("tp_block", {"layers": 2}), ("fsdp_layers", {"layers": 2})]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _retarget(gm, old: str, new: str) -> int:
    """Point every collective's group_name argument at ``new``; returns how many were changed."""
    changed = 0
    for node in gm.graph.nodes:
        if node.op == "call_function" and getattr(node.target, "namespace", None) == "_c10d_functional":
            args = list(node.args)
            for i, a in enumerate(args):
                if a == old:
                    args[i] = new
                    changed += 1
            node.args = tuple(args)
    gm.recompile()
    return changed


def _worker(rank: int, port: int, result_dir: str) -> None:
    import random  # noqa: PLC0415

    from solvercast import Role, Schedule, extract_problem, validate  # noqa: PLC0415
    from solvercast.fx.lower import anchor_nodes, lower  # noqa: PLC0415
    from solvercast.models import build  # noqa: PLC0415

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
                            timeout=timedelta(seconds=60))
    try:
        group = dist.group.WORLD.group_name
        lines = []
        for name, params in CASES:
            gm = build(name, world_size=WORLD, dtype="float32", **params)
            fake = gm.meta["solvercast"]["group_name"]
            assert _retarget(gm, fake, group) > 0
            problem = extract_problem(gm, compute_streams=2)

            # the same seeded schedule on every rank: random order, random streams, collectives in order
            rng = random.Random(1234)
            indeg = [len(p) for p in problem.preds]
            comms, next_comm, order = list(problem.comm_tasks), 0, []
            ready = [t for t in range(problem.num_tasks) if indeg[t] == 0]
            while ready:
                cands = [t for t in ready if problem.tasks[t].role != Role.COMM or comms[next_comm] == t]
                t = rng.choice(cands)
                ready.remove(t)
                order.append(t)
                next_comm += problem.tasks[t].role == Role.COMM
                for s in problem.succs[t]:
                    indeg[s] -= 1
                    if indeg[s] == 0:
                        ready.append(s)
            streams = {t: rng.choice(list(problem.allowed_streams(t))) for t in range(problem.num_tasks)}
            schedule = Schedule(order, streams)
            validate(problem, schedule)
            assert schedule.order != tuple(range(problem.num_tasks))
            low = lower(gm, problem, schedule)
            assert anchor_nodes(low)

            # replicated inputs (activations, LayerNorm params) are equal on all ranks; shards and
            # (for FSDP) the data differ per rank
            args = []
            for n in gm.graph.nodes:
                if n.op == "placeholder":
                    shared = name == "tp_block" and (n.name == "x" or "_ln" in n.name)
                    gen = torch.Generator().manual_seed(len(args) + (0 if shared else 1000 * (rank + 1)))
                    args.append(torch.randn(tuple(n.meta["val"].shape), generator=gen) * 0.1)
            with torch.no_grad():
                ref = gm(*args)
                out = low(*args)
                again = gm(*args)
            ref = list(ref) if isinstance(ref, (tuple, list)) else [ref]
            out = list(out) if isinstance(out, (tuple, list)) else [out]
            again = list(again) if isinstance(again, (tuple, list)) else [again]
            assert len(ref) == len(out)
            for a, b, c in zip(ref, out, again):
                assert torch.equal(a, c), f"{name}: the original graph is not deterministic on rank {rank}"
                assert torch.equal(a, b), f"{name}: lowered differs from original on rank {rank}"
            if name == "tp_block":
                # the collectives really communicated: from rank-specific weight shards, every rank
                # ends with the same (replicated) activations
                gathered = [torch.empty_like(out[0]) for _ in range(WORLD)]
                dist.all_gather(gathered, out[0].contiguous())
                assert all(torch.allclose(g, gathered[0], rtol=1e-5, atol=1e-6) for g in gathered)
                assert not torch.allclose(out[0], args[0], rtol=1e-3, atol=1e-4)
            lines.append(f"{name} ok anchors={len(anchor_nodes(low))}")
        with open(os.path.join(result_dir, f"rank{rank}.txt"), "w") as f:
            f.write("\n".join(lines))
    except BaseException:
        with open(os.path.join(result_dir, f"rank{rank}.err"), "w") as f:
            f.write(traceback.format_exc())
        raise
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="needs torch.distributed with gloo")
def test_spmd_original_and_lowered_agree(tmp_path):
    ctx = mp.start_processes(_worker, args=(_free_port(), str(tmp_path)), nprocs=WORLD, join=False,
                             start_method="spawn")
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while not ctx.join(timeout=max(0.1, min(1.0, deadline - time.monotonic()))):
            if time.monotonic() > deadline:
                pytest.fail(f"SPMD workers did not finish within {TIMEOUT_S:.0f} s")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
                p.join(5)
    results = [(tmp_path / f"rank{r}.txt").read_text().splitlines() for r in range(WORLD)]
    for lines in results:
        assert [line.split()[:2] for line in lines] == [[name, "ok"] for name, _ in CASES]
    assert results[0] == results[1]  # the same lowered graph on every rank
