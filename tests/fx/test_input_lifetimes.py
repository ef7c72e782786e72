"""Which inputs the runtime frees (`solvercast.fx.input_lifetimes`), and that optimize's memory figures and
budget read them: a torch.compile backward frees its saved activations and tangents, holds its primals and
the inputs that reach an all_gather; every other graph's inputs are held."""

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from solvercast import Schedule, extract_problem, optimize
from solvercast.fx.input_lifetimes import FREED_INPUTS_META, input_lifetimes
from solvercast.ir.engine import memory_profile
from solvercast.models import fake_group

C10D = torch.ops._c10d_functional


def _backward_like():
    """Named as AOTAutograd names a backward's inputs: a parameter, a sharded parameter gathered again (cast
    first), a saved activation and the incoming gradient."""
    group = fake_group(4, tag="il")

    def bw(primals_1, shard, mm, tangents_1):
        w = C10D.wait_tensor(C10D.all_gather_into_tensor(shard.to(torch.bfloat16), 4, group)).float()
        g = tangents_1 @ w + mm * primals_1
        return g.t() @ mm

    gm = make_fx(bw, tracing_mode="fake")(torch.empty(16, 16), torch.empty(4, 16), torch.empty(16, 16),
                                          torch.empty(16, 16))
    for node, name in zip(gm.graph.find_nodes(op="placeholder"), ("primals_1", "shard_1", "mm_1", "tangents_1")):
        node.name = name  # the names AOTAutograd gives (make_fx appends its own suffix)
    gm.recompile()
    return gm


def test_a_backward_frees_its_saved_activations_and_tangents_and_holds_its_parameters():
    gm = _backward_like()
    found = input_lifetimes(gm)
    assert set(found.freed) == {"mm_1", "tangents_1"} and "backward" in found.rule
    assert input_lifetimes(gm, "held").freed == ()
    assert input_lifetimes(gm, ["mm_1"]).freed == ("mm_1",)
    gm.meta[FREED_INPUTS_META] = ["tangents_1"]
    assert input_lifetimes(gm).freed == ("tangents_1",)


def test_a_graph_without_tangents_holds_every_input():
    gm = make_fx(lambda a, b: (a @ b).relu(), tracing_mode="fake")(torch.empty(8, 8), torch.empty(8, 8))
    assert input_lifetimes(gm).freed == ()


def test_optimize_counts_peaks_and_its_budget_by_the_rule():
    gm = _backward_like()
    res = optimize(gm, time_limit=2)
    freed = extract_problem(gm, freeable_inputs=["mm_1", "tangents_1"])
    held = extract_problem(gm)
    assert res.report.baseline_peak_memory == memory_profile(freed, Schedule.original(freed).order).peak
    assert memory_profile(freed, Schedule.original(freed).order).peak < \
        memory_profile(held, Schedule.original(held).order).peak  # the rule changes the figure
    assert "2 of 4 freed" in res.report.inputs and "inputs           2 of 4" in str(res.report)
    assert res.optimized.peak_memory <= res.report.memory_budget
    kept = optimize(gm, time_limit=2, freeable_inputs="held")
    assert kept.report.baseline_peak_memory == memory_profile(held, Schedule.original(held).order).peak


def test_the_report_counts_freed_inputs_by_storage_as_the_memory_figures_do():
    """A backward one of whose saved inputs is a number (no tensor): the names freed outnumber the storages,
    and the report counts storages, as the peaks do (a DeepSeek-V3 backward said "1295 of 1215 freed")."""
    def bw(primals_1, mm, mm_t, n, tangents_1):
        return (tangents_1 + mm_t.t()) @ primals_1 * n + mm

    gm = make_fx(bw, tracing_mode="fake")(torch.empty(8, 8), torch.empty(8, 8), torch.empty(8, 8), 2,
                                          torch.empty(8, 8))
    for node, name in zip(gm.graph.find_nodes(op="placeholder"),
                          ("primals_1", "mm_1", "mm_t_1", "n_1", "tangents_1")):
        node.name = name
    gm.recompile()
    found = input_lifetimes(gm)
    assert len(found.freed) == 4  # mm_1, mm_t_1, n_1 and tangents_1 by name
    problem = extract_problem(gm, freeable_inputs=found.freed)
    inputs = [b for b in problem.buffers if b.is_input]
    freed = [b for b in inputs if b.freeable]
    assert len(freed) == 3 and found.describe(problem).startswith(f"3 of {len(inputs)} freed")
