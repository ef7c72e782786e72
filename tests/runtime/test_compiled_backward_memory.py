"""The input rule checked against the runtime itself: a backward that torch.compile's Inductor compiles (CPU,
its generated C++ and ``call(args)``), run under the CPU allocator's profiler, holds what the memory model
says under `input_lifetimes`' rule (saved activations and tangents freed after their last use, primals
held), and not what it says with every input held.

The backward graph is the one Inductor's post-grad passes see (where `SolvercastPass` runs), captured by a
post-grad pass of its own. The allocator's count starts before the forward, so that the saved activations'
releases are seen; the backward's share is its peak above the count at its start. The tangent is the one
input the runtime makes inside the backward (autograd materializes the output's gradient as it starts),
so the model's count of it moves from the resident inputs to the backward's share.
"""

import shutil

import pytest
import torch
import torch.fx as fx
from torch.profiler import ProfilerActivity, profile

from solvercast import Schedule, extract_problem
from solvercast.fx.input_lifetimes import input_lifetimes
from solvercast.ir.engine import memory_profile

pytestmark = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                                reason="Inductor's CPU backend needs a C++ compiler")

D = 256


def _compiled_backward_share() -> tuple[int, fx.GraphModule]:
    """The allocator's peak in the backward above its count at the backward's start, and the graph."""
    import torch._inductor.config as inductor_config
    from torch._inductor.custom_graph_pass import CustomGraphPass

    graphs: list[fx.GraphModule] = []

    class Capture(CustomGraphPass):
        def __call__(self, graph: fx.Graph) -> None:
            graphs.append(fx.GraphModule(torch.nn.Module(), graph))

        def uuid(self):
            return None

    with inductor_config.patch(post_grad_custom_post_pass=Capture(), fx_graph_cache=False):
        return _run_and_count(graphs)


def _run_and_count(graphs: list[fx.GraphModule]) -> tuple[int, fx.GraphModule]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(D, D), torch.nn.ReLU(), torch.nn.Linear(D, D), torch.nn.Tanh(),
                                torch.nn.Linear(D, D))
    compiled = torch.compile(model, backend="inductor")
    compiled(torch.randn(64, D)).sum().backward()  # compiled here, counted below
    model.zero_grad(set_to_none=True)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        x = torch.randn(64, D)  # held by the caller, as primals are
        loss = compiled(x).sum()
        with torch.profiler.record_function("the backward"):
            loss.backward()
    events = prof.profiler.kineto_results.events()
    start = next(e for e in events if e.name() == "the backward").start_ns()
    now, at_start, high = 0, None, 0
    for e in sorted((e for e in events if e.name() == "[memory]"), key=lambda e: e.start_ns()):
        if at_start is None and e.start_ns() >= start:
            at_start = high = now
        now += e.nbytes()
        if at_start is not None:
            high = max(high, now)
    backward = next(g for g in reversed(graphs) if any(n.name.startswith("tangents") for n in g.graph.nodes))
    return high - at_start, backward


def _model_share(gm: fx.GraphModule, freed) -> int:
    problem = extract_problem(gm, freeable_inputs=freed)
    peak = memory_profile(problem, Schedule.original(problem).order).peak
    tangents = sum(n.meta["val"].untyped_storage().nbytes() for n in gm.graph.nodes
                   if n.op == "placeholder" and n.name.startswith("tangents"))
    return peak - (problem.initial_resident_bytes - tangents)


def test_inductor_backward_holds_what_the_runtime_rule_says():
    real, backward = _compiled_backward_share()
    lifetimes = input_lifetimes(backward)
    assert lifetimes.freed and all(not name.startswith("primals") for name in lifetimes.freed)
    by_rule = _model_share(backward, lifetimes.freed)
    held = _model_share(backward, ())
    assert abs(real - by_rule) <= 16, (real, by_rule)  # the loss's scalar gradient: 4 bytes
    assert held - real >= 64 * D * 4  # every input held is a saved activation's worth off, at least
