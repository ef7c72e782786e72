"""FX graphs traced with make_fx on fake tensors, shared by the tests of several subpackages."""

from __future__ import annotations

import torch
from torch.fx.experimental.proxy_tensor import make_fx


def collective_graph(group_name):
    c = torch.ops._c10d_functional

    def f(x, y):
        ar = c.wait_tensor(c.all_reduce(x, "sum", group_name))
        ag = c.wait_tensor(c.all_gather_into_tensor(x, 4, group_name))
        rs = c.wait_tensor(c.reduce_scatter_tensor(ag, "sum", 4, group_name))
        a2a = c.wait_tensor(c.all_to_all_single(ag, [32] * 4, [32] * 4, group_name))
        bc = c.wait_tensor(c.broadcast(x, 0, group_name))
        arc = [c.wait_tensor(t) for t in c.all_reduce_coalesced([x, y], "sum", group_name)]
        agc = [c.wait_tensor(t) for t in c.all_gather_into_tensor_coalesced([x, y], 4, group_name)]
        rsc = [c.wait_tensor(t) for t in c.reduce_scatter_tensor_coalesced([ag, ag], "sum", 4, group_name)]
        z = x.clone()
        c.all_reduce_(z, "sum", group_name)
        return ar, ag, rs, a2a, bc, arc, agc, rsc, c.wait_tensor(z)

    # x: 32 x 64 bf16 = 4096 B; y: 16 x 64 bf16 = 2048 B
    return make_fx(f, tracing_mode="fake")(
        torch.randn(32, 64, dtype=torch.bfloat16), torch.randn(16, 64, dtype=torch.bfloat16)
    )
