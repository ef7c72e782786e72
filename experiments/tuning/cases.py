"""The graphs the tuning studies share: PyTorch's reordering-test shapes and zoo graphs up to ~300 tasks
(the quality table of experiments/results/cpsat_quality.md), each at budget 1.0."""

from __future__ import annotations

from experiments.common import zoo_graphs
from solvercast import Schedule, extract_problem, lower_bounds, simulate
from solvercast.models import build
# the hand-built problems in the shapes of PyTorch's comm-reordering tests, shared with the tests
from solvercast.testing.shapes import SHAPES

ZOO = zoo_graphs("tp_mlp layers=8; tp_block layers=3; sp_block layers=3; fsdp_layers layers=2; fsdp_layers layers=4; "
                 "fsdp_layers layers=8; moe_block layers=4; synthetic tasks=150 seed=1; synthetic tasks=300 seed=2; "
                 "simple_fsdp layers=2; fsdp_tp layers=2; "
                 # the real-machinery models' other shapes up to ~300 tasks: one layer, the forward graphs, llama_tp
                 "simple_fsdp layers=1; fsdp_tp layers=1; llama_tp layers=2; simple_fsdp layers=3 backward=0; "
                 "fsdp_tp layers=3 backward=0; llama_tp layers=3 backward=0")


def label_of(name: str, params: dict) -> str:
    return f"{name} {' '.join(f'{k}={v}' for k, v in params.items())}"


def cases(only: str | None):
    """(label, problem) of every shape and zoo graph whose label contains ``only`` (all when None)."""
    for name, make in SHAPES.items():
        if not only or only in name:
            yield name, make()
    for name, params in ZOO:
        label = label_of(name, params)
        if not only or only in label:
            yield label, extract_problem(build(name, **params))


def at_budget_one(p):
    """``p`` with budget 1.0: the larger of the original order's peak and the memory bound."""
    return p.with_budget(max(simulate(p, Schedule.original(p)).peak_memory, lower_bounds(p).memory))
