"""The rewrite protocol (`solvercast.pipeline.rewrite_search`): a kind registered beside the shipped ones is
searched in its turn within its share, reported and kept, with nothing else to change."""

from __future__ import annotations

import dataclasses

import pytest
import torch.fx as fx

from solvercast import optimize
from solvercast.pipeline import api
from solvercast.pipeline.rewrite_registry import REWRITES
from solvercast.pipeline.rewrite_search import Rewrite, RewriteChoice, RewriteShare


@dataclasses.dataclass
class CopyChoice(RewriteChoice):
    @property
    def rewritten(self) -> bool:
        return bool(self.plan)

    def summary(self) -> str:
        return f"copied the graph{self.gain()}" if self.plan else "left the graph alone"


def _copy_kind(rewrites: bool, seen: dict) -> Rewrite:
    """A kind whose one plan is a copy of the graph (the same program): kept where ``rewrites``."""

    def options(value, cost_model):
        return None if value is False else {"on": True}

    def search(gm, extracted, extract, budget, opts, limits, say):
        seen["limits"], seen["options"] = limits, opts
        copy = fx.GraphModule(gm, fx.Graph())
        copy.graph.graph_copy(gm.graph, {})
        copy.recompile()
        ex = extract(copy)
        step = extracted.baseline.makespan
        return CopyChoice(("copy",) if rewrites else (), copy if rewrites else gm, ex if rewrites else extracted,
                          step, step, tried=[("copy", step)])

    return Rewrite("copy", options, search, lambda t: RewriteShare(0.05, 0.01, 1e-4))


@pytest.mark.parametrize("rewrites", [True, False])
def test_a_registered_kind_is_searched_reported_and_kept(rewrites, monkeypatch, zoo_graph):
    seen = {}
    monkeypatch.setattr(api, "REWRITES", REWRITES + (_copy_kind(rewrites, seen),))
    res = optimize(zoo_graph("tp_mlp"), time_limit=3, method="heuristic")
    assert seen["options"] == {"on": True}
    limits = seen["limits"]
    assert limits.plan_work == pytest.approx(0.01 * 3 * 1.0e6)
    # its own share, plus whatever the searches before it left
    assert limits.work_limit >= 0.05 * 3 * 1.0e6
    assert [name for name, _ in res.report.rewrites] == ["buckets", "decomposition", "copy"]
    assert res.report.rewrite("copy").startswith("copied the graph" if rewrites else "left the graph alone")
    assert ("copy" in res.rewrites) == rewrites
    assert "copy" in res.report.to_dict()["rewrites"]
    # turned off by name, the kind does not run
    seen.clear()
    off = optimize(zoo_graph("tp_mlp"), time_limit=3, method="heuristic", rewrites={"copy": False})
    assert not seen and off.report.rewrite("copy") is None



def test_rewrite_kinds_are_named_once():
    assert len({r.name for r in REWRITES}) == len(REWRITES)
