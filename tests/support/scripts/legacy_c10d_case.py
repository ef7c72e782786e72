"""Run in a fresh process by tests/end_to_end/test_correctness.py: a graph of legacy c10d ops (what make_fx
records from torch.distributed calls), traced under the fake default process group, which the test
process must not own. Prints one JSON line with what the test checks."""

import json

import torch
import torch.distributed as dist
from torch.fx.experimental.proxy_tensor import make_fx
from torch.testing._internal.distributed.fake_pg import FakeStore

from solvercast import Role, extract_problem, optimize


def step(x, w):
    y = x @ w
    dist.all_reduce(y)
    dist.barrier()
    z = y * 2
    dist.send(z, dst=1)
    r = torch.zeros_like(z)  # the fake group receives nothing: a known value
    dist.recv(r, src=1)
    return z + r


def main():
    dist.init_process_group("fake", rank=0, world_size=2, store=FakeStore())
    args = [torch.randn(64, 64), torch.randn(64, 64)]
    gm = make_fx(step, tracing_mode="fake")(*args)
    out = {}
    for preserve in (True, False):
        p = extract_problem(gm, preserve_collective_order=preserve)
        names = [t.name for t in p.tasks]
        out["roles"] = {t.name: t.role.value for t in p.tasks if t.name in ("allreduce_", "barrier", "send", "recv_")}
        out["recv_before_add"] = (names.index("recv_"), names.index("add")) in p.edges
        orders = []
        for method in ("list", "nondelay", "comm_priority", "heuristic", "cpsat"):
            res = optimize(gm, time_limit=1, method=method, preserve_collective_order=preserve,
                           memory_budget=float("inf"))
            order = [res.problem.tasks[t].name for t in res.schedule.order
                     if res.problem.tasks[t].role == Role.COMM]
            orders.append(order)
            expected = list(step(*[a.clone() for a in args]).shape)
            out.setdefault("values_equal", True)
            out["values_equal"] &= bool(torch.equal(gm(*args), res.gm(*args))) and expected == [64, 64]
        out[f"comm_orders_preserve_{preserve}"] = orders
    print(json.dumps(out))


if __name__ == "__main__":
    main()
