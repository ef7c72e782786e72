"""Tests for solvercast.models: workload graphs traced to FX with fake tensors."""

from __future__ import annotations

import operator

import pytest
import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensor

from solvercast.models import build, describe, group_is_registered, list_models
from solvercast.graph.nodes import classify, is_collective, is_wait

EXPECTED_KINDS = {
    "tp_mlp": {"all_reduce"},
    "tp_block": {"all_reduce"},
    "sp_block": {"all_gather", "reduce_scatter"},
    "fsdp_layers": {"all_gather", "reduce_scatter"},
    "moe_block": {"all_to_all"},
    "synthetic": {"all_reduce", "all_gather", "reduce_scatter", "all_to_all"},
}

CASES = [(name, {}) for name in EXPECTED_KINDS] + [
    ("tp_mlp", {"world_size": 2, "layers": 2}),
    ("tp_mlp", {"world_size": 8, "microbatches": 2, "dtype": "float32"}),
    ("tp_block", {"world_size": 2, "layers": 2}),
    ("tp_block", {"world_size": 4, "layers": 1, "microbatches": 2}),
    ("sp_block", {"world_size": 2, "layers": 2}),
    ("sp_block", {"world_size": 8, "layers": 1}),
    ("fsdp_layers", {"world_size": 2, "layers": 2, "dtype": "float32"}),
    ("fsdp_layers", {"world_size": 8, "layers": 3}),
    ("moe_block", {"world_size": 2, "layers": 2}),
    ("moe_block", {"world_size": 8, "experts": 16, "shared_ffn": 0}),
    ("synthetic", {"world_size": 2, "tasks": 300, "seed": 3, "hidden": 64}),
    ("synthetic", {"world_size": 8, "tasks": 150, "comm_fraction": 0.2, "dtype": "float32", "hidden": 64}),
]

def _case_id(case) -> str:
    name, params = case
    return name + "".join(f"-{k}{v}" for k, v in params.items())


def _vals(v):
    if isinstance(v, (tuple, list)):
        for x in v:
            yield from _vals(x)
    elif v is not None:
        yield v


def _real_like(val: torch.Tensor) -> torch.Tensor:
    if val.dtype.is_floating_point:
        return torch.randn(tuple(val.shape), dtype=val.dtype)
    return torch.randint(0, 2, tuple(val.shape), dtype=val.dtype)


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_graph_well_formed(case, zoo_graph):
    name, params = case
    gm = zoo_graph(name, **params)
    gm.graph.lint()
    nodes = list(gm.graph.nodes)
    assert nodes and nodes[-1].op == "output"

    for node in nodes:
        if node.op in ("call_function", "placeholder"):
            assert "val" in node.meta, f"{node.name} has no meta['val']"
            vals = list(_vals(node.meta["val"]))
            assert vals and all(isinstance(v, FakeTensor) for v in vals), node.name
        if node.op == "call_function" and node.target is operator.getitem:
            assert node.users, f"dead getitem {node.name}"

    # every collective has exactly one wait, and every wait follows a collective
    kinds = set()
    n_coll = n_wait = 0
    for node in nodes:
        if is_collective(node):
            n_coll += 1
            kinds.add(classify(node).collective.name)
            users = list(node.users)
            assert len(users) == 1 and is_wait(users[0]), f"{node.name} users: {users}"
        elif is_wait(node):
            n_wait += 1
            (src,) = node.all_input_nodes
            assert is_collective(src)
            assert node.users, f"wait {node.name} is dead"
    assert n_coll == n_wait > 0
    assert EXPECTED_KINDS[name] <= kinds

    info = gm.meta["solvercast"]
    assert info["model"] == name
    ws = params.get("world_size", describe(name)["defaults"]["world_size"])
    assert info["world_size"] == ws
    for node in nodes:
        if is_collective(node):
            assert classify(node).group_name == info["group_name"]
    if group_is_registered(ws):
        from torch.distributed.distributed_c10d import _resolve_process_group

        assert _resolve_process_group(info["group_name"]).size() == ws


@pytest.mark.parametrize("case", CASES[: len(EXPECTED_KINDS)] + CASES[len(EXPECTED_KINDS)::2], ids=_case_id)
def test_graph_runs_eagerly(case, zoo_graph):
    """With the registered fake process group the graph runs on real CPU
    tensors and produces outputs of the traced shapes."""
    name, params = case
    gm = zoo_graph(name, **params)
    info = gm.meta["solvercast"]
    if not group_is_registered(info["world_size"]):
        pytest.skip(f"no fake process group of size {info['world_size']} is registered: collectives cannot run")
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    torch.manual_seed(0)
    args = [_real_like(n.meta["val"]) for n in placeholders]
    out = gm(*args)
    (expected,) = [n.args[0] for n in gm.graph.nodes if n.op == "output"]
    outs = out if isinstance(out, (tuple, list)) else (out,)
    exp = expected if isinstance(expected, (tuple, list)) else (expected,)
    assert len(outs) == len(exp)
    for o, e in zip(outs, exp):
        assert tuple(o.shape) == tuple(e.meta["val"].shape)
        assert o.dtype == e.meta["val"].dtype


@pytest.mark.parametrize("name", list(EXPECTED_KINDS))
def test_deterministic(name):
    params = {"world_size": 2} if name != "synthetic" else {"tasks": 120, "world_size": 2}
    a, b = build(name, **params), build(name, **params)
    assert a.code == b.code
    assert [n.name for n in a.graph.nodes] == [n.name for n in b.graph.nodes]


# captured from torch.compile (several groups, opaque mesh inputs): tested in tests/end_to_end/test_real_models.py
REAL_MODELS = {"llama_tp", "simple_fsdp", "fsdp_tp"}


def test_list_and_describe():
    assert set(list_models()) == set(EXPECTED_KINDS) | REAL_MODELS
    all_info = describe()
    for name in list_models():
        d = describe(name)
        assert d == all_info[name]
        assert d["description"] and "world_size" in d["defaults"]


def test_default_graphs_are_small(zoo_graph):
    for name in list_models():
        assert len(zoo_graph(name).graph.nodes) <= 250, name


def test_wait_placed_where_value_is_used(zoo_graph):
    # tp_mlp: the wait sits right before the residual add that consumes it
    gm = zoo_graph("tp_mlp")
    for node in gm.graph.nodes:
        if is_wait(node):
            assert node.next.op == "call_function" and node in node.next.all_input_nodes
    # fsdp: reduce_scatter waits are deferred to the optimizer step at the end
    gm = build("fsdp_layers", layers=3)
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    rs = [n for n in gm.graph.nodes if is_collective(n) and classify(n).collective.name == "reduce_scatter"]
    assert len(rs) == 3
    assert all(order[next(iter(n.users))] > order[rs[-1]] for n in rs)


def test_fsdp_scales():
    gm = build("fsdp_layers", layers=8)
    assert len(gm.graph.nodes) >= 300
    ag = [n for n in gm.graph.nodes if is_collective(n) and classify(n).collective.name == "all_gather"]
    rs = [n for n in gm.graph.nodes if is_collective(n) and classify(n).collective.name == "reduce_scatter"]
    assert len(ag) == 16 and len(rs) == 8  # forward + backward gathers, one grad reduce_scatter per layer


def test_big_sizes_use_no_real_memory():
    gm = build("tp_block", layers=1, hidden=8192, heads=64, seq=8192, batch=8, world_size=8)
    out = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]
    assert tuple(out.meta["val"].shape) == (8, 8192, 8192)


@pytest.mark.parametrize("tasks", [200, 2000])
def test_synthetic_size(tasks):
    gm = build("synthetic", tasks=tasks)
    n = len(gm.graph.nodes)
    assert abs(n - tasks) <= 0.1 * tasks
    calls = [x for x in gm.graph.nodes if x.op == "call_function"]
    assert len(calls) == tasks
    n_coll = sum(1 for x in calls if is_collective(x))
    assert 0.05 * tasks <= n_coll <= 0.2 * tasks


def test_synthetic_seed():
    a = build("synthetic", tasks=300, seed=1)
    b = build("synthetic", tasks=300, seed=1)
    c = build("synthetic", tasks=300, seed=2)
    assert a.code == b.code
    assert a.code != c.code


def test_synthetic_waits_not_all_adjacent():
    gm = build("synthetic", tasks=500, seed=5)
    gaps = []
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    for node in gm.graph.nodes:
        if is_wait(node):
            gaps.append(order[node] - order[node.args[0]])
    assert max(gaps) > 1 and min(gaps) >= 1


def test_synthetic_no_collectives():
    gm = build("synthetic", tasks=100, comm_fraction=0.0)
    assert not any(is_collective(n) or is_wait(n) for n in gm.graph.nodes)
    assert sum(1 for n in gm.graph.nodes if n.op == "call_function") == 100


@pytest.mark.parametrize(
    "name, params, match",
    [
        ("no_such_model", {}, "valid models"),
        ("tp_mlp", {"bogus": 1}, "valid parameters"),
        ("tp_mlp", {"layers": 0}, "layers"),
        ("tp_mlp", {"layers": "two"}, "integer"),
        ("tp_mlp", {"dtype": "int7"}, "dtype"),
        ("tp_mlp", {"world_size": 3}, "divisible"),
        ("tp_block", {"heads": 6}, "divisible"),
        ("sp_block", {"seq": 130}, "divisible"),
        ("fsdp_layers", {"hidden": 250, "world_size": 4}, "divisible"),
        ("moe_block", {"experts": 6}, "divisible"),
        ("moe_block", {"topk": 9}, "topk"),
        ("synthetic", {"comm_fraction": 0.9}, "comm_fraction"),
        ("synthetic", {"world_size": 0}, "world_size"),
    ],
)
def test_bad_inputs(name, params, match):
    with pytest.raises(ValueError, match=match):
        build(name, **params)
