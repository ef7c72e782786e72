"""Random FX programs and the checks every `optimize` result must pass on them.

A program is a random recipe of steps over a pool of ``n x n`` float32 tensors: matmuls, unary and
binary ops, views (``t``, ``view``), in-place ops (on values, views and graph inputs), ``out=``
writes, multi-output ops (``sort``, ``split``), and every functional collective, its in-place form
(``all_reduce_``) and the coalesced all-reduce, on two process groups, each waited a few steps
later. `trace_program` traces it with fake tensors or with real ones (``make_fx(f)(*real)``: then
``meta["val"]`` storages are not shared between a tensor and its views).

`check_optimize` runs `optimize` on a traced program (its defaults, but for sequence parallelism, whose
values only several ranks keep) and returns what went wrong, if anything: an
exception other than `SolvercastError`; different values on real inputs (outputs and mutated inputs,
bit for bit, collectives replaced by deterministic local stand-ins: `LocalCollectives`); a result
over its memory budget (the report's, or the lowered module's own program-order peak, anchors
included); a different schedule on a repeat call that the report did not announce (a search the
wall clock ended says so: "other ranks may get another schedule").
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import torch

from solvercast.errors import SolvercastError
from solvercast.fx.extract import extract_problem
from solvercast.graph.local_run import run_local
from solvercast.ir.engine import memory_profile
from solvercast.ir.schedule import Schedule
from solvercast.models import fake_group
from solvercast.pipeline.api import optimize
from solvercast.rewrites.decompose import DecomposeOptions

C10D = torch.ops._c10d_functional

METHODS = ("auto", "cpsat", "milp", "heuristic", "list", "nondelay", "comm_priority", "original")


# ---- programs -----------------------------------------------------------------------------------


@dataclass
class Program:
    """A random program: ``steps`` interpreted by `__call__` over ``inputs`` graph inputs."""
    seed: int
    n: int
    inputs: int
    steps: list[tuple] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)

    def __call__(self, *args):
        pool = list(args)
        pending = {}  # slot of a collective's result -> the collective's handle
        for step in self.steps:
            kind = step[0]
            if kind == "unary":
                _, fn, a = step
                pool.append(getattr(torch, fn)(pool[a]))
            elif kind == "binary":
                _, fn, a, b = step
                pool.append(getattr(torch, fn)(pool[a], pool[b]))
            elif kind == "view":
                _, how, a = step
                pool.append(pool[a].t() if how == "t" else pool[a].view(-1).view(self.n, self.n))
            elif kind == "inplace":
                _, fn, a, through_view = step
                target = pool[a].t() if through_view else pool[a]
                getattr(target, fn)(*((0.5,) if fn in ("mul_", "add_") else ()))
            elif kind == "out":
                _, a, b, c = step
                torch.add(pool[a], pool[b], out=pool[c])
            elif kind == "sort":
                values, indices = torch.sort(pool[step[1]], dim=1)
                pool += [values, indices.to(torch.float32)]
            elif kind == "split":
                lo, hi = torch.split(pool[step[1]], self.n // 2)
                pool.append(torch.cat([hi, lo]))
            elif kind == "collective":
                _, op, a, world, group = step
                x = pool[a]
                if op == "all_reduce":
                    handle = C10D.all_reduce(x, "sum", group)
                elif op == "all_reduce_":
                    handle = C10D.all_reduce_(x, "sum", group)
                elif op == "all_reduce_coalesced":
                    handle = C10D.all_reduce_coalesced([x, x * 3], "sum", group)
                elif op == "all_gather":
                    handle = C10D.all_gather_into_tensor(x, world, group)
                elif op == "reduce_scatter":
                    handle = C10D.reduce_scatter_tensor(x, "sum", world, group)
                else:
                    split = [self.n // world] * world
                    handle = C10D.all_to_all_single(x, split, split, group)
                pool.append(None)  # filled at the wait
                pending[len(pool) - 1] = (op, a, world, handle)
            elif kind == "wait":
                slot = step[1]
                op, a, world, handle = pending.pop(slot)
                if op == "all_reduce_coalesced":
                    w = [C10D.wait_tensor(h) for h in handle]
                    value = w[0] + w[1]
                else:
                    value = C10D.wait_tensor(handle)
                if op == "all_gather":
                    value = value.view(world, self.n, self.n).sum(0)
                elif op == "reduce_scatter":
                    value = value.repeat(world, 1)
                pool[slot] = pool[a] if op == "all_reduce_" else value
        return tuple(pool[i] for i in self.outputs)


def random_program(seed: int, n: int = 8, max_steps: int = 14) -> Program:
    """A random `Program`: 2-4 inputs, 3..``max_steps`` steps, 1-3 outputs (``n`` divisible by 4)."""
    rng = random.Random(seed)
    prog = Program(seed=seed, n=n, inputs=rng.randint(2, 4))
    groups = [(w, fake_group(w)) for w in (2, 4)]
    readable = list(range(prog.inputs))  # slots a step may read
    in_flight: dict[int, int] = {}  # result slot -> slot it was launched on (in-place: that buffer is busy)
    size = prog.inputs

    def usable() -> list[int]:
        busy = {a for slot, a in in_flight.items()}
        return [s for s in readable if s not in busy]

    for _ in range(rng.randint(3, max_steps)):
        free = usable()
        if in_flight and (rng.random() < 0.3 or not free):
            slot = rng.choice(sorted(in_flight))
            prog.steps.append(("wait", slot))
            del in_flight[slot]
            readable.append(slot)
            continue
        r = rng.random()
        a = rng.choice(free)
        if r < 0.2:
            prog.steps.append(("binary", "matmul", a, rng.choice(free)))
        elif r < 0.35:
            prog.steps.append(("unary", rng.choice(["tanh", "sigmoid", "relu", "neg"]), a))
        elif r < 0.45:
            prog.steps.append(("binary", rng.choice(["add", "mul"]), a, rng.choice(free)))
        elif r < 0.53:
            prog.steps.append(("view", rng.choice(["t", "view"]), a))
        elif r < 0.63:
            prog.steps.append(("inplace", rng.choice(["mul_", "add_", "sigmoid_"]), a, rng.random() < 0.3))
            continue  # no new slot
        elif r < 0.67 and len(free) >= 3:
            prog.steps.append(("out", *rng.sample(free, 3)))
            continue
        elif r < 0.72:
            prog.steps.append(("sort", a))
            readable += [size, size + 1]
            size += 2
            continue
        elif r < 0.76:
            prog.steps.append(("split", a))
        else:
            world, group = rng.choice(groups)
            op = rng.choice(["all_reduce", "all_reduce_", "all_reduce_coalesced", "all_gather", "reduce_scatter",
                             "all_to_all"])
            prog.steps.append(("collective", op, a, world, group))
            in_flight[size] = a if op == "all_reduce_" else -1
            size += 1
            continue
        readable.append(size)
        size += 1
    for slot in sorted(in_flight):
        prog.steps.append(("wait", slot))
        readable.append(slot)
    candidates = [s for s in readable if s >= prog.inputs] or readable
    prog.outputs = rng.sample(candidates, min(len(candidates), rng.randint(1, 3)))
    return prog


def program_inputs(prog: Program, seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(prog.n, prog.n, generator=gen) / math.sqrt(prog.n) for _ in range(prog.inputs)]


def trace_program(prog: Program, mode: str = "fake"):
    """``make_fx`` of the program: ``mode`` "fake" (fake tensors) or "real" (real tensors; the
    collectives run on the fake process groups of `solvercast.models.fake_group`)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    args = program_inputs(prog)
    if mode == "fake":
        return make_fx(prog, tracing_mode="fake")(*args)
    return make_fx(prog)(*args)


def identical(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Bit for bit, NaNs where NaNs are."""
    return x.dtype == y.dtype and x.shape == y.shape and bool(
        (torch.isnan(x) & torch.isnan(y) | (x == y)).all()) if x.is_floating_point() else torch.equal(x, y)


# ---- the checks ---------------------------------------------------------------------------------


@dataclass
class Case:
    seed: int
    trace: str  # "fake" or "real"
    method: str
    compute_streams: int
    budget: float | None  # ratio of the original peak; None = math.inf

    @classmethod
    def draw(cls, seed: int) -> "Case":
        rng = random.Random(seed * 7919 + 1)
        return cls(seed=seed, trace=rng.choice(["fake", "real"]), method=rng.choice(METHODS),
                   compute_streams=rng.choice([1, 2]), budget=rng.choice([0.9, 1.0, 1.0, 1.1, None]))


def check_optimize(case: Case, time_limit: float = 1.0) -> tuple[str, list[str]]:
    """(outcome, what went wrong) for ``case``'s program: outcome "ok" (optimized), "refused" (a
    `SolvercastError`), "untraceable" (torch cannot trace or run the program: not our finding), "failed"
    (the list says why; see the module doc)."""
    prog = random_program(case.seed)
    try:
        gm = trace_program(prog, case.trace)
    except Exception as e:  # noqa: BLE001 - a program torch cannot trace is no finding of ours
        return "untraceable", [f"{type(e).__name__}: {str(e)[:200]}"]
    args = program_inputs(prog, seed=1)
    ref_args = [a.clone() for a in args]
    try:
        ref = run_local(gm, ref_args) + ref_args
    except Exception as e:  # noqa: BLE001 - traced, but eager torch refuses it (e.g. an out= that overlaps an input)
        return "untraceable", [f"the original does not run: {type(e).__name__}: {str(e)[:160]}"]
    budget = math.inf if case.budget is None else case.budget
    # sequence parallelism moves rows between ranks, which one process's stand-ins cannot keep: the
    # distributed fuzz (`solvercast.testing.distributed_fuzz`, real collectives) judges it
    kwargs = dict(time_limit=time_limit, memory_budget=budget, compute_streams=case.compute_streams,
                  method=case.method, decomposition=DecomposeOptions(sequence_parallel=False))
    try:
        res = optimize(gm, **kwargs)
    except SolvercastError as e:
        return "refused", [f"{type(e).__name__}: {str(e)[:200]}"]
    except Exception as e:  # noqa: BLE001 - the finding
        return "failed", [f"stray {type(e).__name__}: {str(e)[:200]}"]
    problems = []
    low_args = [a.clone() for a in args]
    try:
        got = run_local(res.gm, low_args) + low_args
        if len(got) != len(ref) or not all(identical(x, y) for x, y in zip(ref, got)):
            problems.append("wrong values")
    except Exception as e:  # noqa: BLE001
        problems.append(f"lowered module fails: {type(e).__name__}: {str(e)[:200]}")
    report = res.report
    if report.memory_budget is not None and report.optimized_peak_memory > report.memory_budget:
        problems.append(f"report over budget: {report.optimized_peak_memory} > {report.memory_budget}")
    if report.memory_budget is not None:
        from torch.fx.experimental.proxy_tensor import make_fx

        # the lowered module's own values (anchors included), traced afresh, in its program order
        lowered = extract_problem(make_fx(res.gm, tracing_mode="fake")(*program_inputs(prog)))
        held = memory_profile(lowered, Schedule.original(lowered).order).peak
        if held > report.memory_budget:
            problems.append(f"lowered module holds {held} B > budget {report.memory_budget} B")
    again = optimize(gm, **kwargs)
    announced = "wall clock" in (report.solver_message or "") or "wall clock" in (again.report.solver_message or "")
    if again.gm.code != res.gm.code and not announced:
        problems.append("not deterministic: a repeat call lowered another program")
    return ("failed" if problems else "ok"), problems
