"""Run in a fresh process by tests/fx/test_fences.py: legacy c10d all_reduces and barriers on the default
group (4 fake ranks) and on a sub-group of 2, traced with make_fx under the fake default process group
(which the test process must not own). Prints one JSON line with what the test checks."""

import json

import torch
import torch.distributed as dist
from torch.fx.experimental.proxy_tensor import make_fx
from torch.testing._internal.distributed.fake_pg import FakeStore

from solvercast import extract_problem
from solvercast.cost.model import collective_kind_and_group, collective_time
from solvercast.cost.device import get_profile


def main():
    dist.init_process_group("fake", rank=0, world_size=4, store=FakeStore())
    pair = dist.new_group([0, 1])

    def step(x, y):
        dist.all_reduce(x)
        dist.all_reduce(y, group=pair)
        dist.barrier()  # fences: synchronous comm ops of their group's communicator
        dist.barrier(group=pair)
        return x + y

    gm = make_fx(step, tracing_mode="fake")(torch.randn(1024, 1024), torch.randn(1024, 1024))
    p = extract_problem(gm, device="h100", default_group_size=8)
    nodes = {n.name: n for n in gm.graph.nodes}
    out = {"sizes": {}, "durations": {}, "expected": {}, "groups": {}, "comm_streams": p.machine.comm_streams}
    for t in p.tasks:
        if t.op.startswith("c10d.allreduce_"):
            kind, size, nbytes = collective_kind_and_group(nodes[t.name])
            out["sizes"][t.name] = size
            out["durations"][t.name] = t.duration
            out["expected"][t.name] = [collective_time(kind, nbytes, p_, get_profile("h100")) for p_ in (4, 2)]
            out["groups"][t.name] = t.group
        elif t.op.startswith("c10d.barrier"):
            out.setdefault("fence_groups", {})[t.name] = t.group
    print(json.dumps(out))


if __name__ == "__main__":
    main()
