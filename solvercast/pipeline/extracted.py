"""What `optimize` reads from a graph before any budget (`Extracted`), and the one function that reads it:
the first phase of every solve, and of every rewrite plan the searches judge."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch.fx as fx

from solvercast.fx.extract import extract_problem
from solvercast.ir.problem import Problem
from solvercast.ir.schedule import Schedule
from solvercast.ir.simulate import SimResult, simulate


@dataclass(frozen=True)
class Extracted:
    """What `optimize` learns from the graph before any budget: the problem (no budget yet), the
    original order's schedule and simulation, and the seconds extraction took. `solvercast.pipeline.pareto` reuses
    it for every budget."""
    problem: Problem
    original: Schedule
    baseline: SimResult
    seconds: float


def extract_for_optimize(gm: fx.GraphModule, *, device="h100", compute_streams: int = 1, comm_ops=None,
                         cost_fn=None, cost_model=None, preserve_collective_order: bool | str = True,
                         freeable_inputs=()) -> Extracted:
    """`optimize`'s first phase: extract the problem and simulate the original order. ``freeable_inputs``: the
    inputs the runtime frees after their last use (`solvercast.fx.input_lifetimes`)."""
    t0 = time.perf_counter()
    problem = extract_problem(gm, device=device, compute_streams=compute_streams, comm_ops=comm_ops,
                              cost_fn=cost_fn, preserve_collective_order=preserve_collective_order,
                              cost_model=cost_model, freeable_inputs=freeable_inputs)
    return extracted_problem(problem, time.perf_counter() - t0)


def extracted_problem(problem: Problem, seconds: float = 0.0) -> Extracted:
    """``problem`` as an `Extracted`: its original order and that order's simulation (``seconds``: what reading
    it took)."""
    original = Schedule.original(problem)
    return Extracted(problem, original, simulate(problem, original), seconds)
