"""Ranks that must launch alike compare their schedules (`solvercast.pipeline.rank_agreement`): two gloo
processes optimize one graph of two process groups; where one rank's schedule differs (as when the wall
clock ended its search), every rank keeps the original order, and where they agree each keeps its own."""

import multiprocessing as mp
import os
import socket

import pytest
import torch.distributed as dist

from solvercast import Schedule, optimize
from solvercast.models import build
from solvercast.pipeline.rank_agreement import agree_across_ranks, peers, schedule_digest
from solvercast.pipeline.solve import schedules_must_agree


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, port: int, out) -> None:
    try:
        os.environ["OMP_NUM_THREADS"] = "1"
        gm = build("fsdp_tp", layers=1)  # traced on its own fake group before the real one exists
        if dist.is_initialized():  # the fake default group the trace made
            dist.destroy_process_group()
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
        res = optimize(gm, time_limit=5, method="heuristic", bucketing=False, decomposition=False)
        alike = agree_across_ranks(res, lambda: None)  # the fallback is never asked for when ranks agree
        original = optimize(gm, time_limit=5, method="original", bucketing=False, decomposition=False)
        mine = res if rank == 0 else original  # rank 1's search "ended another way"
        split = agree_across_ranks(mine, lambda: original)
        out.put((rank, schedules_must_agree(res.problem), peers(), alike is res,
                 schedule_digest(res) != schedule_digest(original), split is original,
                 any("ranks chose 2 different schedules" in n for n in split.report.notes),
                 split.schedule == Schedule.original(split.problem)))
        dist.destroy_process_group()
    except BaseException as e:  # noqa: BLE001 - the parent reports it
        out.put((rank, repr(e)))


def test_ranks_that_chose_different_schedules_all_keep_the_original_order():
    ctx = mp.get_context("spawn")
    out, port = ctx.Queue(), _free_port()
    procs = [ctx.Process(target=_rank, args=(r, port, out)) for r in range(2)]
    for p in procs:
        p.start()
    try:
        results = sorted(out.get(timeout=240) for _ in procs)
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    for r in results:
        assert len(r) > 2, f"rank {r[0]} raised {r[1]}"
        rank, must_agree, ranks, kept_alike, schedules_differ, fell_back, said, is_original = r
        assert must_agree and ranks == 2  # two groups free to interleave, and a group to exchange over
        if not schedules_differ:
            pytest.fail("the heuristic kept the original order here: the test cannot tell the fallback apart")
        assert kept_alike and fell_back and said and is_original, r


def test_without_a_process_group_nothing_is_exchanged():
    assert peers() == 1
    res = optimize(build("fsdp_tp", layers=1), time_limit=5, method="heuristic", bucketing=False,
                   decomposition=False)
    assert agree_across_ranks(res, lambda: None) is res
