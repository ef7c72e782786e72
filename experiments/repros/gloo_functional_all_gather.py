"""torch 2.13 on CPU: three functional all_gathers in flight, their waits, then an all_to_all, on a gloo
group of two ranks (of four), in a loop, corrupt the heap now and then: a rank dies of SIGSEGV or SIGABRT
("malloc(): unaligned tcache chunk detected") within some thousands of steps. No solvercast code runs here.

    python experiments/repros/gloo_functional_all_gather.py [--steps 20000] [--eager]

``--eager`` runs the same collectives through torch.distributed's own calls (``async_op=True`` works, waited
in the same places). The distributed fuzz (`solvercast.testing.distributed_fuzz`) met this as a rank killed
in the original or the lowered module, now and then, on the same program: a loop of one fuzz program's
original module, run alone, crashed too. That is why the fuzz runs a case again after such a crash and fails
it only when it repeats. Rates measured: experiments/results/fuzz_distributed_gloo.md.
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

C10D = torch.ops._c10d_functional


def rank_main(rank: int, steps: int, port: int, eager: bool) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=4)
    halves = [dist.new_group(h) for h in ([0, 1], [2, 3])]
    group = halves[rank // 2]
    x = torch.randn(16, 8)
    for _ in range(steps):
        if eager:
            gathered = [torch.empty(32, 8) for _ in range(3)]
            works = [dist.all_gather_into_tensor(g, x, group=group, async_op=True) for g in gathered]
            for w in works:
                w.wait()
            out = torch.empty(16, 8)
            dist.all_to_all_single(out, x, [8, 8], [8, 8], group=group)
        else:
            launched = [C10D.all_gather_into_tensor(x, 2, group.group_name) for _ in range(3)]
            gathered = [C10D.wait_tensor(g) for g in launched]
            out = C10D.wait_tensor(C10D.all_to_all_single(x, [8, 8], [8, 8], group.group_name))
    dist.barrier()
    if rank == 0:
        print(f"{'eager' if eager else 'functional'}: {steps} steps on 4 ranks, no crash", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--eager", action="store_true")
    args = ap.parse_args()
    port = 20000 + os.getpid() % 20000
    try:
        mp.spawn(rank_main, args=(args.steps, port, args.eager), nprocs=4)
    except mp.ProcessExitedException as e:
        print(f"{'eager' if args.eager else 'functional'}: {e}", flush=True)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
