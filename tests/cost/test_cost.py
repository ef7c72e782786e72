"""Tests for solvercast.cost.model: profiles, roofline, occupancy, collectives, to_ns.

Expected values are derived by hand from the formulas in the module docstring,
with the datasheet constants written out literally.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.fx
from torch.fx.experimental.proxy_tensor import make_fx

from solvercast.cost import model as cost, roofline
from solvercast.cost.model import (
    A100,
    COLLECTIVE_OCCUPANCY,
    H100,
    H200,
    MIN_OCCUPANCY,
    UNBACKED_SIZE_FALLBACK,
    DeviceProfile,
    collective_kind_and_group,
    collective_time,
    compute_time,
    get_profile,
    is_collective,
    is_wait,
    node_bytes,
    node_cost,
    node_flops,
    occupancy,
    to_ns,
)

from tests.support import collective_graph

# H100 SXM datasheet constants, written out.
H100_BF16 = 989.4e12
H100_TF32 = 494.7e12
H100_HBM = 3.35e12
H100_LINK = 450e9  # 900 GB/s bidirectional / 2
ALPHA = 1e-6
LAUNCH = 2e-6


def trace(f, *args, mode="fake"):
    return make_fx(f, tracing_mode=mode)(*args)


def call_nodes(gm, target=None):
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    if target is not None:
        nodes = [n for n in nodes if n.target == target]
    return nodes


def only(gm, target):
    nodes = call_nodes(gm, target)
    assert len(nodes) == 1, nodes
    return nodes[0]


def trace_fake(f, *specs):
    """Trace ``f`` on fake tensors of the given (shape, dtype) specs, so huge
    shapes cost no memory."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode()
    with mode:
        args = [torch.empty(shape, dtype=dtype) for shape, dtype in specs]
    return make_fx(f, tracing_mode="fake")(*args)


# ---------------------------------------------------------------------------
# Profiles
# ---------------------------------------------------------------------------


def test_presets_have_datasheet_numbers():
    assert H100.peak_flops[torch.bfloat16] == H100_BF16
    assert H100.peak_flops[torch.float16] == H100_BF16
    assert H100.peak_flops[torch.float32] == H100_TF32
    assert H100.hbm_bandwidth == H100_HBM
    assert H100.link_bandwidth == H100_LINK
    assert H100.num_sms == 132
    assert A100.peak_flops[torch.bfloat16] == 312e12
    assert A100.hbm_bandwidth == 2.039e12
    assert A100.link_bandwidth == 300e9
    assert A100.num_sms == 108
    assert torch.float8_e4m3fn not in A100.peak_flops
    assert H200.peak_flops[torch.bfloat16] == H100_BF16
    assert H200.hbm_bandwidth == 4.8e12
    assert H200.link_bandwidth == 450e9


def test_get_profile_names_and_passthrough():
    assert get_profile("h100") is H100
    assert get_profile("H100") is H100
    assert get_profile(" A100 ") is A100
    assert get_profile("h200") is H200
    custom = dataclasses.replace(H100, name="mine", hbm_bandwidth=1e12)
    assert get_profile(custom) is custom


def test_get_profile_unknown_lists_names():
    with pytest.raises(ValueError) as e:
        get_profile("v100")
    msg = str(e.value)
    for name in ("a100", "h100", "h200"):
        assert name in msg
    with pytest.raises(TypeError):
        get_profile(3)


def test_profile_frozen_readonly_hashable():
    with pytest.raises(dataclasses.FrozenInstanceError):
        H100.name = "x"
    with pytest.raises(TypeError):
        H100.peak_flops[torch.bfloat16] = 1.0
    assert hash(H100) == hash(H100)
    assert H100 != H200


def test_custom_profile_and_validation():
    p = DeviceProfile(
        name="toy",
        peak_flops={torch.bfloat16: 100e12},
        vector_flops=10e12,
        hbm_bandwidth=1e12,
        link_bandwidth=100e9,
        link_latency=5e-6,
        launch_overhead=0.0,
        sync_overhead=1e-6,
        num_sms=10,
    )
    assert p.matmul_peak(torch.bfloat16) == 100e12
    assert p.matmul_peak(torch.float32) == 10e12  # not listed -> vector rate
    with pytest.raises(ValueError):
        dataclasses.replace(p, hbm_bandwidth=0.0)
    with pytest.raises(ValueError):
        dataclasses.replace(p, link_latency=-1.0)
    with pytest.raises(ValueError):
        dataclasses.replace(p, peak_flops={torch.bfloat16: -1.0})


# ---------------------------------------------------------------------------
# Compute: roofline
# ---------------------------------------------------------------------------


def test_big_bf16_mm_is_compute_bound_on_h100():
    n = 4096
    gm = trace_fake(torch.mm, ((n, n), torch.bfloat16), ((n, n), torch.bfloat16))
    mm = only(gm, torch.ops.aten.mm.default)
    flops = 2 * n**3
    nbytes = 3 * n * n * 2
    assert node_flops(mm) == flops
    assert node_bytes(mm) == nbytes
    t_compute = flops / H100_BF16  # ~139 us
    t_memory = nbytes / H100_HBM  # ~30 us
    assert t_compute > t_memory
    assert compute_time(mm, H100) == pytest.approx(t_compute + LAUNCH, rel=1e-12)
    assert compute_time(mm, "h100") == compute_time(mm, H100)


def test_fp32_mm_uses_tf32_rate_and_a100_rates():
    n = 4096
    gm = trace_fake(torch.mm, ((n, n), torch.float32), ((n, n), torch.float32))
    mm = only(gm, torch.ops.aten.mm.default)
    flops = 2 * n**3
    assert compute_time(mm, H100) == pytest.approx(flops / H100_TF32 + LAUNCH)
    assert compute_time(mm, A100) == pytest.approx(flops / 156e12 + 2e-6)


def test_elementwise_add_is_memory_bound():
    n = 1 << 24
    gm = trace_fake(torch.add, ((n,), torch.float32), ((n,), torch.float32))
    add = only(gm, torch.ops.aten.add.Tensor)
    assert node_flops(add) == 0
    nbytes = 3 * n * 4
    assert node_bytes(add) == nbytes
    assert compute_time(add, H100) == pytest.approx(nbytes / H100_HBM + LAUNCH)
    # More bandwidth -> faster.
    assert compute_time(add, H200) == pytest.approx(nbytes / 4.8e12 + LAUNCH)


def test_same_input_read_once():
    n = 1000
    gm = trace_fake(lambda x: x * x, ((n,), torch.float32))
    mul = only(gm, torch.ops.aten.mul.Tensor)
    assert node_bytes(mul) == 2 * n * 4


def test_unknown_op_is_memory_bound():
    n = 1 << 20
    gm = trace_fake(lambda x: torch.cumsum(x, 0), ((n,), torch.bfloat16))
    node = only(gm, torch.ops.aten.cumsum.default)
    assert node_flops(node) == 0
    assert compute_time(node, H100) == pytest.approx(2 * n * 2 / H100_HBM + LAUNCH)


def test_bmm_addmm_flops():
    b, m, k, n = 4, 256, 512, 128
    gm = trace_fake(torch.bmm, ((b, m, k), torch.float16), ((b, k, n), torch.float16))
    assert node_flops(only(gm, torch.ops.aten.bmm.default)) == 2 * b * m * n * k
    gm = trace_fake(
        torch.addmm, ((n,), torch.bfloat16), ((m, k), torch.bfloat16), ((k, n), torch.bfloat16)
    )
    node = only(gm, torch.ops.aten.addmm.default)
    assert node_flops(node) == 2 * m * n * k
    assert node_bytes(node) == (n + m * k + k * n + m * n) * 2


def test_attention_cpu_kernel_counts_flops():
    b, h, s, d = 2, 4, 256, 64
    spec = ((b, h, s, d), torch.bfloat16)
    gm = trace_fake(torch.nn.functional.scaled_dot_product_attention, spec, spec, spec)
    attn = [n for n in call_nodes(gm) if roofline.is_matmul_class(n.target)]
    assert len(attn) == 1
    # 2 matmuls (QK^T and PV), each 2*b*h*s*s*d FLOPs.
    assert node_flops(attn[0]) == 4 * b * h * s * s * d


def test_views_and_getitem_are_free():
    gm = trace_fake(lambda x: x.view(-1).unsqueeze(0).t(), ((64, 32), torch.float32))
    for node in call_nodes(gm):
        assert compute_time(node, H100) == 0.0
    gm = trace_fake(lambda x: torch.max(x, 0), ((64, 32), torch.float32))
    getitems = [n for n in call_nodes(gm) if n.target.__name__ == "getitem"]
    assert getitems and all(compute_time(n, H100) == 0.0 for n in getitems)
    placeholder = next(iter(gm.graph.nodes))
    assert compute_time(placeholder, H100) == 0.0


def test_inplace_op_is_not_free():
    def f(x):
        y = x.clone()
        y.add_(1)
        return y

    gm = trace(f, torch.randn(1024))
    node = only(gm, torch.ops.aten.add_.Tensor)
    assert compute_time(node, H100) > LAUNCH


def test_symbolic_sizes_use_hints():
    def f(x, w):
        return torch.relu(x @ w)

    x, w = torch.randn(64, 32), torch.randn(32, 16)
    sym = trace(f, x, w, mode="symbolic")
    fake = trace(f, x, w, mode="fake")
    mm_s = only(sym, torch.ops.aten.mm.default)
    assert any(isinstance(s, torch.SymInt) for s in mm_s.meta["val"].shape)
    mm_f = only(fake, torch.ops.aten.mm.default)
    assert node_flops(mm_s) == node_flops(mm_f) == 2 * 64 * 32 * 16
    assert node_bytes(mm_s) == node_bytes(mm_f)
    assert compute_time(mm_s, H100) == compute_time(mm_f, H100)
    r_s = only(sym, torch.ops.aten.relu.default)
    r_f = only(fake, torch.ops.aten.relu.default)
    assert occupancy(r_s, H100) == occupancy(r_f, H100)
    assert isinstance(node_flops(mm_s), int)


def test_unbacked_sizes_use_fallback():
    def f(m):
        return torch.nonzero(m).float() * 2

    gm = trace(f, torch.ones(10) > 0, mode="symbolic")
    mul = only(gm, torch.ops.aten.mul.Tensor)
    # out [u0, 1] float32 read + written; u0 has no hint -> fallback.
    assert node_bytes(mul) == 2 * UNBACKED_SIZE_FALLBACK * 4
    assert math.isfinite(compute_time(mul, H100))


# ---------------------------------------------------------------------------
# Occupancy
# ---------------------------------------------------------------------------


def test_occupancy_matmul_tiles():
    n = 4096
    gm = trace_fake(torch.mm, ((n, n), torch.bfloat16), ((n, n), torch.bfloat16))
    assert occupancy(only(gm, torch.ops.aten.mm.default), H100) == 1.0  # 1024 tiles
    # 1024 x 1024 out -> 8*8 = 64 tiles of 132 SMs.
    gm = trace_fake(torch.mm, ((1024, 64), torch.bfloat16), ((64, 1024), torch.bfloat16))
    assert occupancy(only(gm, torch.ops.aten.mm.default), H100) == pytest.approx(64 / 132)
    assert occupancy(only(gm, torch.ops.aten.mm.default), A100) == pytest.approx(64 / 108)
    # A single tile -> floor.
    gm = trace_fake(torch.mm, ((16, 16), torch.bfloat16), ((16, 16), torch.bfloat16))
    assert occupancy(only(gm, torch.ops.aten.mm.default), H100) == MIN_OCCUPANCY


def test_occupancy_elementwise():
    capacity = 132 * 2048 * 4
    for n, expected in (
        (100, MIN_OCCUPANCY),
        (capacity // 2, 0.5),
        (capacity * 10, 1.0),
    ):
        gm = trace_fake(torch.neg, ((n,), torch.float32))
        occ = occupancy(only(gm, torch.ops.aten.neg.default), H100)
        assert occ == pytest.approx(expected)
    # A reduction is parallelised over its input.
    gm = trace_fake(torch.sum, ((capacity // 4,), torch.float32))
    assert occupancy(only(gm, torch.ops.aten.sum.default), H100) == pytest.approx(0.25)


def test_occupancy_in_range_for_every_node():
    def f(x, w):
        return torch.softmax(x @ w, -1).sum()

    gm = trace(f, torch.randn(8, 8), torch.randn(8, 8))
    for node in gm.graph.nodes:
        occ = occupancy(node, H100)
        assert MIN_OCCUPANCY <= occ <= 1.0


# ---------------------------------------------------------------------------
# Collective formulas
# ---------------------------------------------------------------------------


def test_all_gather_and_reduce_scatter_ring():
    p, n = 8, 64 * 2**20
    expected = 7 * ALPHA + 7 / 8 * n / H100_LINK
    assert collective_time("all_gather", n, p, H100) == pytest.approx(expected)
    assert collective_time("reduce_scatter", n, p, H100) == pytest.approx(expected)
    assert collective_time("all_to_all", n, p, H100) == pytest.approx(expected)
    # ~ 7 us + 130.5 us
    assert collective_time("all_gather", n, p, "h100") == pytest.approx(137.5e-6, rel=2e-3)


def test_all_reduce_small_uses_latency_formula_large_uses_ring():
    p = 8
    small = 64 * 1024  # < 128 KiB
    assert collective_time("all_reduce", small, p, H100) == pytest.approx(
        3 * ALPHA + small / H100_LINK
    )
    large = 256 * 2**20
    assert collective_time("all_reduce", large, p, H100) == pytest.approx(
        14 * ALPHA + 2 * 7 / 8 * large / H100_LINK
    )
    at = H100.all_reduce_small_bytes
    assert collective_time("all_reduce", at, p, H100) == pytest.approx(
        14 * ALPHA + 2 * 7 / 8 * at / H100_LINK
    )
    # Non power of two: ceil(log2 6) = 3 steps.
    assert collective_time("all_reduce", small, 6, H100) == pytest.approx(
        3 * ALPHA + small / H100_LINK
    )


def test_broadcast_formula():
    n = 10**8
    assert collective_time("broadcast", n, 4, A100) == pytest.approx(3 * ALPHA + n / 300e9)


def test_group_size_one_is_free():
    for kind in cost.COLLECTIVE_KINDS:
        assert collective_time(kind, 10**9, 1, H100) == 0.0


def test_collective_time_errors():
    with pytest.raises(ValueError, match="all_gather"):
        collective_time("allgather", 10, 8, H100)
    with pytest.raises(ValueError):
        collective_time("all_reduce", -1, 8, H100)


# ---------------------------------------------------------------------------
# Collective nodes
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pg():
    import torch.distributed as dist

    if not dist.is_available():
        pytest.skip("torch.distributed not available")
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if not dist.is_initialized():
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=8)
    return dist.group.WORLD.group_name, dist.get_world_size()


def test_collective_kind_group_and_bytes(pg):
    group_name, world = pg
    gm = collective_graph(group_name)
    c = torch.ops._c10d_functional
    x_b, y_b = 4096, 2048

    def kg(op):
        return collective_kind_and_group(only(gm, op.default), default_group_size=3)

    # group_name-only ops resolve the registered group (not the default 3).
    assert kg(c.all_reduce) == ("all_reduce", world, x_b)
    assert kg(c.all_reduce_) == ("all_reduce", world, x_b)
    assert kg(c.broadcast) == ("broadcast", world, x_b)
    assert kg(c.all_reduce_coalesced) == ("all_reduce", world, x_b + y_b)
    # explicit group_size argument; all_gather counts the gathered output.
    assert kg(c.all_gather_into_tensor) == ("all_gather", 4, 4 * x_b)
    assert kg(c.all_gather_into_tensor_coalesced) == ("all_gather", 4, 4 * (x_b + y_b))
    # reduce_scatter counts its (full) input.
    assert kg(c.reduce_scatter_tensor) == ("reduce_scatter", 4, 4 * x_b)
    assert kg(c.reduce_scatter_tensor_coalesced) == ("reduce_scatter", 4, 2 * 4 * x_b)
    assert kg(c.all_to_all_single) == ("all_to_all", world, 4 * x_b)


def test_is_collective_and_is_wait(pg):
    gm = collective_graph(pg[0])
    colls = [n for n in gm.graph.nodes if is_collective(n)]
    waits = [n for n in gm.graph.nodes if is_wait(n)]
    assert len(colls) == 9
    assert len(waits) == 5 + 2 + 2 + 2 + 1
    assert not any(is_wait(n) for n in colls)
    mm_gm = trace(torch.mm, torch.randn(2, 2), torch.randn(2, 2))
    assert not any(is_collective(n) or is_wait(n) for n in mm_gm.graph.nodes)
    with pytest.raises(ValueError):
        collective_kind_and_group(only(mm_gm, torch.ops.aten.mm.default))


def _manual_all_reduce(group_name, shape=(1024, 1024), dtype=torch.float32):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        val = torch.empty(shape, dtype=dtype)
    g = torch.fx.Graph()
    x = g.placeholder("x")
    x.meta["val"] = val
    ar = g.call_function(torch.ops._c10d_functional.all_reduce.default, (x, "sum", group_name))
    ar.meta["val"] = val
    w = g.call_function(torch.ops._c10d_functional.wait_tensor.default, (ar,))
    w.meta["val"] = val
    g.output(w)
    return ar, w


def test_unknown_group_name_uses_default():
    ar, _ = _manual_all_reduce("no-such-group-xyz")
    assert collective_kind_and_group(ar) == ("all_reduce", 8, 4 * 2**20)
    assert collective_kind_and_group(ar, default_group_size=2) == ("all_reduce", 2, 4 * 2**20)


# ---------------------------------------------------------------------------
# node_cost
# ---------------------------------------------------------------------------


def test_node_cost_collective_and_wait():
    ar, w = _manual_all_reduce("no-such-group-xyz")
    n = 4 * 2**20
    t, occ = node_cost(ar, H100)
    assert t == pytest.approx(14 * ALPHA + 2 * 7 / 8 * n / H100_LINK)
    assert occ == COLLECTIVE_OCCUPANCY
    t4, _ = node_cost(ar, "h100", default_group_size=4)
    assert t4 == pytest.approx(6 * ALPHA + 2 * 3 / 4 * n / H100_LINK)
    assert node_cost(ar, H100, default_group_size=1) == (0.0, COLLECTIVE_OCCUPANCY)
    assert node_cost(w, H100) == (0.0, MIN_OCCUPANCY)


def test_node_cost_compute_and_override():
    n = 4096
    gm = trace_fake(torch.mm, ((n, n), torch.bfloat16), ((n, n), torch.bfloat16))
    mm = only(gm, torch.ops.aten.mm.default)
    t, occ = node_cost(mm, H100)
    assert t == compute_time(mm, H100)
    assert occ == occupancy(mm, H100) == 1.0

    assert node_cost(mm, H100, cost_fn=lambda node: 1.5e-3) == (1.5e-3, 1.0)
    assert node_cost(mm, H100, cost_fn=lambda node: None) == (t, 1.0)
    assert node_cost(mm, H100, cost_fn=lambda node: 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        node_cost(mm, H100, cost_fn=lambda node: -1.0)
    with pytest.raises(ValueError):
        node_cost(mm, H100, cost_fn=lambda node: float("nan"))


# ---------------------------------------------------------------------------
# to_ns
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "seconds, ns",
    [
        (0.0, 0),
        (0, 0),
        (1e-15, 1),  # positive never becomes free
        (0.4e-9, 1),
        (1e-9, 1),
        (1.4e-9, 1),
        (1.5e-9, 2),  # half up
        (2.5e-9, 3),  # half up, not to even
        (2.4999e-9, 2),
        (1e-3, 1_000_000),
        (139.0e-6, 139_000),
        (1.0, 1_000_000_000),
    ],
)
def test_to_ns(seconds, ns):
    assert to_ns(seconds) == ns
    assert isinstance(to_ns(seconds), int)


def test_to_ns_rejects_bad_values():
    for bad in (-1e-9, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            to_ns(bad)


def test_unsafe_view_after_bmm_is_free():
    gm = trace(lambda a, b: a @ b, torch.randn(2, 3, 4, 5), torch.randn(5, 6))
    views = call_nodes(gm, torch.ops.aten._unsafe_view.default)
    assert views
    assert all(compute_time(n, H100) == 0.0 for n in views)


# ---------------------------------------------------------------------------
# The CostModel protocol
# ---------------------------------------------------------------------------


def test_analytic_cost_model_is_the_cost_model_extract_uses():
    gm = trace_fake(lambda a, b: torch.relu(a @ b), ((256, 256), torch.bfloat16), ((256, 256), torch.bfloat16))
    model = cost.AnalyticCostModel(H100)
    assert isinstance(model, cost.CostModel)
    from solvercast import extract_problem

    p = extract_problem(gm, device="h100")
    assert extract_problem(gm, cost_model=model) == p
    mm = only(gm, torch.ops.aten.mm.default)
    t, occ = node_cost(mm, H100)
    assert model.duration(mm) == to_ns(t) and model.occupancy(mm) == occ
    assert model.collective_time("all_gather", 1 << 20, 8) == to_ns(collective_time("all_gather", 1 << 20, 8, H100))
    assert model.sync_overhead() == p.machine.sync_overhead == to_ns(H100.sync_overhead)


def test_cost_fn_overrides_durations_only():
    gm = trace_fake(lambda a, b: torch.relu(a @ b), ((256, 256), torch.bfloat16), ((256, 256), torch.bfloat16))
    model = cost.CostFnOverrides(cost.AnalyticCostModel(H100), lambda node: 1e-3 if node.name == "mm" else None)
    mm, relu = only(gm, torch.ops.aten.mm.default), only(gm, torch.ops.aten.relu.default)
    assert model.duration(mm) == 1_000_000
    assert model.duration(relu) == cost.AnalyticCostModel(H100).duration(relu)
    assert model.occupancy(mm) == occupancy(mm, H100)
    with pytest.raises(ValueError, match="cost_fn returned -1.0"):
        cost.CostFnOverrides(model, lambda node: -1.0).duration(mm)


def test_cache_key_is_built_from_values():
    key = cost.AnalyticCostModel(H100).cache_key()
    twin = dataclasses.replace(H100)  # another object with the same numbers
    assert twin is not H100 and cost.AnalyticCostModel(twin).cache_key() == key
    assert "0x" not in key and "h100" in key
    assert cost.AnalyticCostModel(dataclasses.replace(H100, sync_overhead=3e-6)).cache_key() != key
    assert cost.AnalyticCostModel(H100, default_group_size=4).cache_key() != key
    assert cost.AnalyticCostModel(A100).cache_key() != key

    def measured(node):
        return None

    def other(node):
        return 1.0

    with_fn = cost.CostFnOverrides(cost.AnalyticCostModel(H100), measured).cache_key()
    assert with_fn.startswith(key) and "0x" not in with_fn and "measured" in with_fn
    assert with_fn == cost.CostFnOverrides(cost.AnalyticCostModel(H100), measured).cache_key()
    assert with_fn != cost.CostFnOverrides(cost.AnalyticCostModel(H100), other).cache_key()

    class Table:
        def __call__(self, node):
            return None

        def cache_key(self):
            return "table-v3"

    assert cost.CostFnOverrides(cost.AnalyticCostModel(H100), Table()).cache_key().endswith("+cost_fn(table-v3)")
    import functools

    with pytest.raises(TypeError, match="cache_key"):
        cost.CostFnOverrides(cost.AnalyticCostModel(H100), functools.partial(other)).cache_key()
