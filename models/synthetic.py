"""Seeded random DAG of compute ops and collectives, built directly as an fx.Graph.

``width`` lanes of activations ``[rows, n]`` (``n`` from three feature sizes
around ``hidden``) evolve step by step. Each step appends one node:

* compute (share ``1 - comm_fraction``): ``mm`` with a weight placeholder
  (changes ``n``), ``add`` / ``mul`` with another lane of the same shape
  (cross-lane edges), ``relu``, or unary ``mul`` by a scalar;
* collective (share ``comm_fraction`` of all tasks): ``all_reduce``,
  ``all_gather_into_tensor`` (rows x W), ``reduce_scatter_tensor`` (rows / W)
  or ``all_to_all_single`` on a lane's value. Its ``wait_tensor`` is placed at
  a random later step, or right before the first user of the result,
  whichever comes first.

``tasks`` is the exact number of ``call_function`` nodes (collectives and
waits included); the graph also has ``width + 9`` placeholders and the output.
Every node's ``meta["val"]`` is computed by running the op on fake tensors of
one ``FakeTensorMode``. The result depends only on the parameters.
"""

from __future__ import annotations

import random
from typing import Any

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.passes.shape_prop import _extract_tensor_metadata

from ._tracing import divisible, fake_group, model_meta, require

SYNTHETIC_DEFAULTS: dict[str, Any] = {
    "tasks": 200,
    "seed": 0,
    "comm_fraction": 0.1,
    "width": 8,
    "hidden": 256,
    "world_size": 4,
    "dtype": "bfloat16",
}

_aten = torch.ops.aten
_c10d = torch.ops._c10d_functional
_COLL_KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
_COLL_WEIGHTS = (0.35, 0.25, 0.25, 0.15)


class _GroupInfo:
    def __init__(self, world_size: int, group_name: str):
        self.world_size, self.group_name = world_size, group_name


class _Lane:
    __slots__ = ("node", "pending", "due")

    def __init__(self, node: fx.Node):
        self.node = node          # current value (a wait's output once waited)
        self.pending = False      # node is an un-waited collective
        self.due = 0              # step at which the wait is placed at the latest


class _Builder:
    def __init__(self, mode: FakeTensorMode):
        self.graph = fx.Graph()
        self.mode = mode
        self.count = 0  # call_function nodes
        self.cache: dict[Any, tuple] = {}
        self.device = torch.device("cpu")

    def placeholder(self, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> fx.Node:
        node = self.graph.placeholder(name)
        with self.mode:
            val = torch.empty(shape, dtype=dtype)
        node.meta["val"] = val
        node.meta["tensor_meta"] = _extract_tensor_metadata(val)
        return node

    def call(self, target: Any, *args: Any) -> fx.Node:
        """Append ``target(*args)``; its ``meta["val"]`` is a fresh fake tensor.

        The op is really run on fake tensors the first time a signature
        (op, input shapes/strides/dtypes, constants) is seen; later nodes
        with the same signature get a new fake tensor with the recorded
        shape, stride and dtype (fake dispatch costs ~0.2-1 ms per op, this
        ~30 us, which keeps 10,000-task graphs fast).
        """
        key = (target, *(self._sig(a) for a in args))
        hit = self.cache.get(key)
        if hit is None:
            vals = fx.node.map_arg(args, lambda n: n.meta["val"])
            with self.mode:
                val = target(*vals)
            tmeta = _extract_tensor_metadata(val)  # immutable NamedTuple: shared by equal signatures
            self.cache[key] = (tuple(val.shape), tuple(val.stride()), val.dtype, tmeta)
        else:
            shape, stride, dtype, tmeta = hit
            val = self.mode.fake_tensor_converter.from_meta_and_device(
                self.mode, torch.empty_strided(shape, stride, dtype=dtype, device="meta"), self.device)
        node = self.graph.call_function(target, args)
        node.meta["val"] = val
        node.meta["tensor_meta"] = tmeta
        self.count += 1
        return node

    @staticmethod
    def _sig(a: Any) -> Any:
        if isinstance(a, fx.Node):
            v = a.meta["val"]
            return (tuple(v.shape), tuple(v.stride()), v.dtype)
        if isinstance(a, list):
            return tuple(a)
        return a


def synthetic(p: dict[str, Any]) -> fx.GraphModule:
    tasks, seed, cf, width, hidden, W = (p[k] for k in
                                         ("tasks", "seed", "comm_fraction", "width", "hidden", "world_size"))
    dt = p["dtype"]
    require(0.0 <= cf < 0.5, f"comm_fraction must be in [0, 0.5), got {cf}")
    require(tasks >= 1, f"tasks must be >= 1, got {tasks}")
    divisible(hidden, 2, "hidden (feature sizes hidden/2, hidden, 2*hidden)")
    divisible(hidden, W, "hidden (row count) across world_size")
    group = fake_group(W)

    rng = random.Random(seed)
    mode = FakeTensorMode()
    b = _Builder(mode)
    sizes = (hidden // 2, hidden, 2 * hidden)
    rows_base = hidden
    min_rows, max_rows = rows_base // W, rows_base * W

    lanes = [_Lane(b.placeholder(f"x{i}", (rows_base, rng.choice(sizes)), dt)) for i in range(width)]
    weights = {(ni, no): b.placeholder(f"w_{ni}x{no}", (ni, no), dt) for ni in sizes for no in sizes}

    # each loop step: a collective with probability q (its wait comes later),
    # so collectives / tasks = q / (1 + q) = comm_fraction
    q = cf / (1.0 - cf)
    max_delay = max(2, 2 * width)

    def shape(lane: _Lane) -> tuple[int, ...]:
        return tuple(lane.node.meta["val"].shape)

    def wait(lane: _Lane) -> None:
        lane.node = b.call(_c10d.wait_tensor.default, lane.node)
        lane.pending = False

    def use(lane: _Lane) -> fx.Node:
        if lane.pending:  # first user of a collective's result: wait right before it
            wait(lane)
        return lane.node

    def n_pending() -> int:
        return sum(1 for ln in lanes if ln.pending)

    def compute(lane: _Lane) -> None:
        r, n = shape(lane)
        choice = rng.random()
        if choice < 0.3:
            out = rng.choice(sizes)
            lane.node = b.call(_aten.mm.default, use(lane), weights[(n, out)])
            return
        if choice < 0.65:
            partners = [o for o in lanes if o is not lane and shape(o) == (r, n)]
            if partners:
                other = rng.choice(partners)
                op = _aten.add.Tensor if choice < 0.5 else _aten.mul.Tensor
                x = use(lane)
                lane.node = b.call(op, x, use(other))
                return
        if choice < 0.85:
            lane.node = b.call(_aten.relu.default, use(lane))
        else:
            lane.node = b.call(_aten.mul.Tensor, use(lane), 0.5)

    def collective(lane: _Lane) -> bool:
        r, _ = shape(lane)
        ok = {
            "all_reduce": True,
            "all_gather": r * W <= max_rows,
            "reduce_scatter": r % W == 0 and r // W >= min_rows,
            "all_to_all": r % W == 0,
        }
        kinds = [k for k in _COLL_KINDS if ok[k]]
        if not kinds:
            return False
        kind = rng.choices(kinds, weights=[_COLL_WEIGHTS[_COLL_KINDS.index(k)] for k in kinds])[0]
        x = use(lane)
        if kind == "all_reduce":
            node = b.call(_c10d.all_reduce.default, x, "sum", group)
        elif kind == "all_gather":
            node = b.call(_c10d.all_gather_into_tensor.default, x, W, group)
        elif kind == "reduce_scatter":
            node = b.call(_c10d.reduce_scatter_tensor.default, x, "sum", W, group)
        else:
            splits = [r // W] * W
            node = b.call(_c10d.all_to_all_single.default, x, splits, list(splits), group)
        lane.node, lane.pending = node, True
        lane.due = b.count + rng.randint(1, max_delay)
        return True

    while True:
        # waits whose random position has come
        for lane in lanes:
            if lane.pending and lane.due <= b.count:
                wait(lane)
        budget = tasks - b.count - n_pending()
        if budget <= 0:
            break
        lane = rng.choice(lanes)
        # waits are reserved in n_pending(), so an op costs 1 and a collective 2
        if budget >= 2 and rng.random() < q and collective(lane):
            continue
        compute(lane)

    for lane in sorted((ln for ln in lanes if ln.pending), key=lambda ln: ln.due):
        wait(lane)
    b.graph.output(tuple(lane.node for lane in lanes))

    gm = fx.GraphModule(torch.nn.Module(), b.graph, class_name="Synthetic")
    gm.meta["solvercast"] = model_meta("synthetic", p, _GroupInfo(W, group))
    return gm
