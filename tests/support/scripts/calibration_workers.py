"""Run as two processes by tests/cost/test_calibrate.py: one gloo group of 2 local ranks.

    python tests/support/scripts/calibration_workers.py RANK WORKDIR

Each rank:
1. times real gloo collectives (`measure_collectives`), records them under torch.profiler (each rank
   writes its Chrome trace) and builds profile-guided models from its own trace, with and without
   agreement;
2. calibrates one small graph with its own cache, rank 1's timings made 5x slower, without agreement,
   then again from that cache with agreement (the default), and optimizes with the agreed costs.
Writes WORKDIR/rank{RANK}.json with what the test checks.
"""

import importlib
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.fx.experimental.proxy_tensor import make_fx
from torch.profiler import ProfilerActivity, profile

#: bytes of the collectives timed and traced (float32 buffers, divisible by the group of 2)
SIZES = (65536, 1 << 20, 8 << 20)
SLOWER = 5.0  # rank 1's op timings are this much slower than it measured


def step(x, w1, w2):
    return (torch.relu(x @ w1) @ w2).sum(0)


def main() -> None:
    rank, workdir = int(sys.argv[1]), Path(sys.argv[2])
    dist.init_process_group("gloo", init_method=f"file://{workdir / 'store'}", rank=rank, world_size=2)
    torch.set_num_threads(1)
    cal = importlib.import_module("solvercast.cost.calibrate")  # the module (solvercast.cost.calibrate is also the function)
    from solvercast import optimize
    from solvercast.cost.profiled import profile_cost_model

    out: dict = {"rank": rank, "sizes": list(SIZES)}
    rows = cal.measure_collectives(SIZES, kinds=("all_reduce", "all_gather"), repeats=3)
    out["rows"] = [[r.kind, r.nbytes, r.group_size, r.seconds] for r in rows]

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for nbytes in SIZES:
            x = torch.ones(nbytes // 4)
            dist.all_reduce(x)
            gathered = torch.empty(nbytes // 4)
            dist.all_gather_into_tensor(gathered, x[: nbytes // 8].clone())
    trace = str(workdir / f"collectives_trace{rank}.json")
    prof.export_chrome_trace(trace)
    out["profile_own_key"] = profile_cost_model(trace, agree=False).cache_key()
    out["profile_agreed_key"] = profile_cost_model(trace).cache_key()

    if rank == 1:  # measured costs made to differ between the ranks
        measured = cal.time_calls

        def slower(*args, **kwargs):
            return {k: v * SLOWER for k, v in measured(*args, **kwargs).items()}

        cal.time_calls = slower
    args = [torch.randn(32, 64), torch.randn(64, 128), torch.randn(128, 64)]
    gm = make_fx(step, tracing_mode="fake")(*args)
    own = cal.calibrate(gm, "cpu", cache_dir=str(workdir / f"cache{rank}"), agree=False, repeats=3)
    # every op is cached now: this call (the cache trusted as it is) measures nothing and agrees on the ranks'
    # own tables
    trusted = cal.CacheTrust(check_ops=0, noisy_median_over_min=float("inf"))
    agreed = cal.calibrate(gm, "cpu", cache_dir=str(workdir / f"cache{rank}"), repeats=3, trust=trusted)
    res = optimize(gm, cost_model=agreed, time_limit=2.0)
    out.update(own=dict(own.seconds), agreed=dict(agreed.seconds), agreed_key=agreed.cache_key(),
               order=list(res.schedule.order), streams=sorted(res.schedule.streams.items()),
               durations=[t.duration for t in res.problem.tasks])
    (workdir / f"rank{rank}.json").write_text(json.dumps(out))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
