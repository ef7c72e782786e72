"""Random SPMD programs through `optimize`, judged with real collectives on several processes (gloo on CPU).

`solvercast.testing.fuzz` judges values on one process with stand-in collectives, and its programs seldom
hold a site a rewrite takes. Here the programs are built from the layers the rewrites are written for, and
every rank of a real process group runs them:

* FSDP: weight shards all-gathered back to back (a prefetch: bucketing merges them) or in one coalesced
  launch, each waited on and multiplied; gradients ``t(x) @ dy`` reduce-scattered or all-reduced back to
  back (one kind, one group; now and then of a view), in one coalesced all_reduce or reduce_scatter, in
  DDP's flat bucket (``split`` views of one buffer reduced in place by ``all_reduce_coalesced_``, the buffer
  written through a wait's result and read back through a reshape), or written with ``out=`` through a
  view into a buffer that ``all_reduce_`` reduces in place.
* TP: ``mm -> act -> mm -> all_reduce`` (a row-parallel matmul: decomposition's ``matmul_all_reduce``),
  then a residual add and row-wise work (RMSNorm, layer norm, a softmax written out; sequence parallelism
  takes the all_reduce); the sequence-parallel form ``all_gather -> mm -> act -> mm -> reduce_scatter``
  (``all_gather_matmul`` and ``matmul_reduce_scatter``); an ``all_to_all_single`` there and back.
* In-place ops on values, views and graph inputs between the layers.

One or two process groups: WORLD and a second one (each half of the ranks with 4 ranks or more, else a
second communicator over the same ranks). Programs name fake groups (`solvercast.models.fake_group`); each
rank points them at its real groups before `optimize`, so each rank optimizes the graph it would run.

Each input is replicated across the world, across the second group, or rank-specific, and the generator
keeps what a tensor-parallel program keeps: a residual added to an all_reduce's result and a norm's weight
are the same on every rank of that all_reduce's group (sequence parallelism rests on it). A program may
break it on purpose (``DistProgram.unproven``: reported with its findings).

`RankPool` starts ``ranks`` gloo processes once and runs cases in them one after another, a barrier per
case; a rank that hangs, dies or leaves its collectives out of step has the pool started again. For each
case every rank traces the same program (fake or real tensors), runs it on its own inputs with the real
collectives, calls `optimize`, and:

* records the lowered module's launches in program order, ``(group, op, input shapes)``; the ranks of
  each group must launch the same ones in the same order (unless the report says the wall clock ended a
  search: "other ranks may get another schedule"); and the ranks' launches and waits together must not
  deadlock (`deadlock`: ranks that share two groups may keep each group's order and still interleave the
  two differently; a deadlock is a finding even where announced);
* only then runs the lowered module, and compares its outputs and mutated inputs with the original's bit
  for bit, or within a tolerance where the report says a rewrite may sum in another order ("not
  bitwise");
* bounds `optimize` by an alarm and each rank's address space by ``RLIMIT_AS``, so a runaway call is a
  finding ("hang", "runaway memory"), not a stuck machine.

Outcomes: "ok", "refused" (a `SolvercastError` on every rank), "untraceable" (torch cannot trace or run the
program: no finding), "failed" (the reasons say why: wrong values, stray exception, hang, runaway memory,
ranks disagree on collectives, ranks would deadlock, ranks disagree on the outcome, lowered module fails,
crash). A rank that crashes before `optimize` is called (tracing, or running the original module: gloo
has died of SIGSEGV there) has the case run once more on fresh ranks (``retried`` says how the first run
ended); crashing there twice, the case is "untraceable". A rank killed by a signal running the lowered
module has the case run once more too: torch 2.13's functional all_gather on gloo corrupts the heap now and
then whatever the order (experiments/repros/gloo_functional_all_gather.py crashes it in a loop of four
collectives, no solvercast; the original modules crash there as well), so one crash there says nothing of
the lowered module, and the results list every such case; crashing there twice, the case fails. A crash
anywhere else (optimize, the memory oracle) is a failure at once.
"""

from __future__ import annotations

import dataclasses
import faulthandler
import math
import operator
import os
import queue
import random
import re
import resource
import signal
import socket
import time
import traceback
import warnings
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from solvercast.cost.device import H100, DeviceProfile
from solvercast.errors import MeasureError, SolvercastError
from solvercast.fx.input_lifetimes import input_lifetimes
from solvercast.graph.fxmeta import node_val
from solvercast.models import fake_group
from solvercast.pipeline.api import optimize
from solvercast.runtime.memory_oracle import live_bytes_peak
from solvercast.rewrites.decompose import DecomposeOptions
from solvercast.testing.fuzz import identical

C10D = torch.ops._c10d_functional

#: how far a value is replicated: on every rank, on every rank of the second group, or on this rank only
WORLD, SUB, RANK = 2, 1, 0
#: the methods cases draw, weighted: the defaults most, the others now and then
METHOD_WEIGHTS = {"auto": 10, "heuristic": 6, "cpsat": 2, "list": 1, "comm_priority": 1, "original": 1}
#: collectives with one input and one result per tensor of a list
COALESCED = ("all_reduce_coalesced", "all_reduce_coalesced_", "all_gather_coalesced", "reduce_scatter_coalesced")
#: collectives that write their inputs
IN_PLACE = ("all_reduce_", "all_reduce_coalesced_")
#: a value passes tolerance where the report says a rewrite may sum in another order
RTOL, ATOL = 1e-4, 1e-5


# ---- programs -----------------------------------------------------------------------------------


@dataclass
class DistProgram:
    """A random SPMD program: ``steps`` interpreted by `__call__` over the graph inputs ``inputs``
    (``(shape, replication)`` each). ``groups[g]``: the fake name and size of process group ``g`` (0: the
    world, 1: the second group)."""

    seed: int
    ranks: int
    groups: list[tuple[str, int]]
    inputs: list[tuple[tuple[int, ...], int]] = field(default_factory=list)
    steps: list[tuple] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    layers: list[str] = field(default_factory=list)  # the layer kinds, in order
    #: a row-wise value after an all_reduce reads something not replicated across that all_reduce's group
    unproven: bool = False

    def __call__(self, *args):
        pool = list(args)
        pending = {}  # first result slot -> (op, input slots, handle)
        for step in self.steps:
            kind = step[0]
            if kind == "mm":
                pool.append(torch.mm(pool[step[1]], pool[step[2]]))
            elif kind == "addmm":
                pool.append(torch.addmm(pool[step[1]], pool[step[2]], pool[step[3]]))
            elif kind == "act":
                fn = {"relu": torch.relu, "gelu": F.gelu, "silu": F.silu, "tanh": torch.tanh}[step[1]]
                pool.append(fn(pool[step[2]]))
            elif kind == "add":
                pool.append(pool[step[1]] + pool[step[2]])
            elif kind == "rms":
                x, w = pool[step[1]], pool[step[2]]
                pool.append(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w)
            elif kind == "layer_norm":
                x = pool[step[1]]
                pool.append(F.layer_norm(x, (x.shape[-1],), pool[step[2]], pool[step[3]]))
            elif kind == "softmax":
                x = pool[step[1]]
                e = (x - x.amax(-1, keepdim=True)).exp()
                pool.append(e / e.sum(-1, keepdim=True))
            elif kind == "t":
                pool.append(pool[step[1]].t())
            elif kind == "view":
                pool.append(pool[step[1]].view(step[2]))
            elif kind == "rows":
                pool.append(pool[step[1]][:step[2]])
            elif kind == "flat":
                pool.append(torch.cat([pool[a].reshape(-1) for a in step[1]]))
            elif kind == "split":
                pool += list(pool[step[1]].split(list(step[2])))
            elif kind == "inplace":
                _, fn, a, how = step
                target = _through(pool[a], how)
                getattr(target, fn)(*((0.5,) if fn in ("mul_", "add_") else ()))
            elif kind == "out":
                _, fn, a, b, c, how = step
                getattr(torch, fn)(pool[a], pool[b], out=_through(pool[c], how, like=pool[a]))
            elif kind == "launch":
                _, op, slots, g = step
                name, size = self.groups[g]
                x = pool[slots[0]]
                if op == "all_reduce":
                    handle = C10D.all_reduce(x, "sum", name)
                elif op == "all_reduce_":
                    handle = C10D.all_reduce_(x, "sum", name)
                elif op == "all_reduce_coalesced":
                    handle = C10D.all_reduce_coalesced([pool[s] for s in slots], "sum", name)
                elif op == "all_reduce_coalesced_":
                    handle = C10D.all_reduce_coalesced_([pool[s] for s in slots], "sum", name)
                elif op == "all_gather_coalesced":
                    handle = C10D.all_gather_into_tensor_coalesced([pool[s] for s in slots], size, name)
                elif op == "reduce_scatter_coalesced":
                    handle = C10D.reduce_scatter_tensor_coalesced([pool[s] for s in slots], "sum", size, name)
                elif op == "all_gather":
                    handle = C10D.all_gather_into_tensor(x, size, name)
                elif op == "reduce_scatter":
                    handle = C10D.reduce_scatter_tensor(x, "sum", size, name)
                else:
                    split = [x.shape[0] // size] * size
                    handle = C10D.all_to_all_single(x, split, split, name)
                first = len(pool)
                pool += [None] * (len(slots) if op in COALESCED else 1)  # filled at the wait
                pending[first] = (op, slots, handle)
            elif kind == "wait":
                first = step[1]
                op, slots, handle = pending.pop(first)
                if op in COALESCED:  # (in place too: each wait's result is its input, read through the wait)
                    for i, h in enumerate(handle):
                        pool[first + i] = C10D.wait_tensor(h)
                elif op == "all_reduce_":
                    C10D.wait_tensor(handle)
                    pool[first] = pool[slots[0]]  # the reduced input itself
                else:
                    pool[first] = C10D.wait_tensor(handle)
        return tuple(pool[i] for i in self.outputs)

    def rank_inputs(self, rank: int, salt: int = 1) -> list[torch.Tensor]:
        """Rank ``rank``'s graph inputs: a replicated input is the same on every rank it is replicated across,
        the others differ from rank to rank. Scaled by 1/sqrt(last dim), so that values stay near 1."""
        sub_size = self.groups[1][1] if len(self.groups) > 1 else self.ranks
        out = []
        for i, (shape, level) in enumerate(self.inputs):
            who = {WORLD: 0, SUB: 1 + rank // sub_size, RANK: 1000 + rank}[level]
            gen = torch.Generator().manual_seed(((self.seed * 7919 + salt) * 131 + i) * 4099 + who)
            out.append(torch.randn(shape, generator=gen) / math.sqrt(shape[-1]))
        return out


def _through(x: torch.Tensor, how: str, like: torch.Tensor | None = None) -> torch.Tensor:
    """``x`` itself, its transpose ("t"), a view of it in ``like``'s shape ("view") or its first half of rows
    ("rows"): where an in-place op or an ``out=`` writes."""
    if how == "t":
        return x.t()
    if how == "view":
        return x.view(-1).view(like.shape if like is not None else x.shape)
    if how == "rows":
        return x[: x.shape[0] // 2]
    return x


class _Builder:
    """Draws a `DistProgram` step by step, tracking each slot's shape, replication and base buffer."""

    def __init__(self, prog: DistProgram, rng: random.Random):
        self.prog, self.rng = prog, rng
        self.shape: list[tuple[int, ...]] = []
        self.level: list[int] = []
        self.base: list[int] = []  # the slot whose storage a slot views
        self.transposed: set[int] = set()  # slots that are a transpose's view (no flat view of them)
        self.busy: set[int] = set()  # bases an in-flight collective reads: no write until its wait
        self.locked: set[int] = set()  # bases an in-flight all_reduce_ writes: neither read nor write
        self.in_flight: dict[int, tuple] = {}  # first result slot -> (launch step, result slots)
        self.deferred: list[int] = []  # collectives waited on at the end
        self.results: list[int] = []  # values the program returns

    def input(self, shape, level: int) -> int:
        assert not self.prog.steps, "graph inputs come first"
        self.prog.inputs.append((tuple(shape), level))
        return self._slot(tuple(shape), level)

    def _slot(self, shape, level: int, base: int | None = None) -> int:
        self.shape.append(tuple(shape))
        self.level.append(level)
        self.base.append(len(self.shape) - 1 if base is None else base)
        return len(self.shape) - 1

    def op(self, kind: str, *args, shape, level: int | None = None, view_of: int | None = None,
           reads: list[int] | None = None) -> int:
        slots = [a for a in args if isinstance(a, int)] if reads is None else reads
        assert not any(self.base[s] in self.locked for s in slots), "reads a buffer an all_reduce_ writes"
        self.prog.steps.append((kind, *args))
        level = min(self.level[s] for s in slots) if level is None else level
        return self._slot(shape, level, None if view_of is None else self.base[view_of])

    def split(self, a: int, sizes: list[int]) -> list[int]:
        """Views of 1-D ``a``'s pieces of ``sizes`` elements."""
        self.prog.steps.append(("split", a, tuple(sizes)))
        return [self._slot((n,), self.level[a], self.base[a]) for n in sizes]

    def t(self, a: int) -> int:
        t = self.op("t", a, shape=self.shape[a][::-1], view_of=a)
        self.transposed.add(t)
        return t

    def mm(self, a: int, b: int) -> int:
        return self.op("mm", a, b, shape=(self.shape[a][0], self.shape[b][1]))

    def act(self, a: int) -> int:
        return self.op("act", self.rng.choice(["relu", "gelu", "silu", "tanh"]), a, shape=self.shape[a])

    def launch(self, op: str, slots: list[int], g: int) -> int:
        """The first result slot of a collective over group ``g`` (a coalesced one has one per input)."""
        _, size = self.prog.groups[g]
        assert not any(self.base[s] in self.locked for s in slots), "reads a buffer an all_reduce_ writes"
        step = ("launch", op, tuple(slots), g)
        self.prog.steps.append(step)
        spans_world = g == 0 or size == self.prog.ranks
        made = []
        for s in slots if op in COALESCED else slots[:1]:
            shape = list(self.shape[s])
            if op.startswith("all_gather"):
                shape[0] *= size
            elif op.startswith("reduce_scatter"):
                shape[0] //= size
            if op.startswith(("all_reduce", "all_gather")):
                level = WORLD if spans_world else max(SUB, self.level[s])
            else:
                level = RANK
            made.append(self._slot(shape, level, self.base[s] if op in IN_PLACE else None))
            (self.locked if op in IN_PLACE else self.busy).add(self.base[s])
        self.in_flight[made[0]] = (step, made)
        return made[0]

    def wait(self, first: int) -> list[int]:
        """Wait on the collective whose first result slot is ``first``; its result slots."""
        step, made = self.in_flight.pop(first)
        self.prog.steps.append(("wait", first))
        for s in step[2]:
            self.busy.discard(self.base[s])
            self.locked.discard(self.base[s])
        return made

    def readable(self, s: int) -> bool:
        """Neither an in-flight collective's result nor a buffer an all_reduce_ is writing."""
        return self.base[s] not in self.locked and not any(s in made for _, made in self.in_flight.values())

    def writable(self, s: int) -> bool:
        """Readable, and no in-flight collective reads it."""
        return self.readable(s) and self.base[s] not in self.busy


def random_dist_program(seed: int, ranks: int = 4, groups: int = 1,
                        sizes: tuple[int, int] | None = None) -> DistProgram:
    """A random `DistProgram` for ``ranks`` ranks over ``groups`` process groups (1 or 2): its inputs, 2-5
    layers (module docstring; 6-12 in a fifth of the programs), a few outputs. ``sizes``: the activations'
    (rows, hidden), drawn where None; both divisible by every group's size."""
    if ranks < 2 or ranks & (ranks - 1):
        raise ValueError(f"ranks must be a power of two of at least 2, got {ranks}")
    rng = random.Random(seed)
    names = [(fake_group(ranks), ranks)]
    if groups == 2:
        size = ranks // 2 if ranks >= 4 else ranks
        names.append((fake_group(size, tag="sub"), size))
    elif groups != 1:
        raise ValueError(f"groups must be 1 or 2, got {groups}")
    prog = DistProgram(seed=seed, ranks=ranks, groups=names)
    b = _Builder(prog, rng)

    # CPU-sized (a slowed device prices them as larger ones: `DistCase.slowdown`); a gradient's half of rows
    # still divides over the groups
    rows, hidden = rng.choice([16, 32, 64, 128, 256]), rng.choice([16, 32, 64, 128, 256])
    if sizes is not None:
        rows, hidden = sizes
    rows, hidden = max(rows, 4 * ranks), max(hidden, 2 * ranks)
    ffn = hidden * rng.choice([1, 2])

    # the activations: replicated across the world (tensor parallel) or this rank's own (data parallel)
    x_level = rng.choice([WORLD, WORLD, SUB, RANK]) if groups == 2 else rng.choice([WORLD, WORLD, RANK])
    h = b.input((rows, hidden), x_level)
    shards = {g: b.input((rows // size, hidden), RANK) for g, (_, size) in enumerate(names)}
    norm_w = b.input((hidden,), WORLD)
    norm_b = b.input((hidden,), WORLD)
    square = b.input((hidden, hidden), RANK)  # a buffer gradients are written into (out=) and reduced in place

    def weight(shape) -> int:  # this rank's shard
        return b.input(shape, RANK)

    # graph inputs come first: each layer's weights are made before any step
    # a fifth of the programs long: rewrites of one layer then meet another's (buckets that need each other)
    count = rng.randint(6, 12) if rng.random() < 0.2 else rng.randint(2, 5)
    layers = [rng.choice(["fsdp", "fsdp", "tp_mlp", "tp_mlp", "tp_seq", "tp_seq", "grads", "grads", "a2a",
                          "mutate"]) for _ in range(count)]
    plan = []
    for kind in layers:
        g = rng.randrange(len(names))
        size = names[g][1]
        if kind == "fsdp":
            k = rng.randint(1, 3)
            plan.append((kind, g, [weight((hidden // size, hidden)) for _ in range(k)]))
        elif kind in ("tp_mlp", "tp_seq"):
            plan.append((kind, g, [weight((hidden, ffn)), weight((ffn, hidden)), b.input((ffn,), WORLD)]))
        elif kind == "grads":
            plan.append((kind, g, [weight((rows, hidden)) for _ in range(rng.randint(2, 4))]))
        else:
            plan.append((kind, g, []))
    for kind, g, ws in plan:
        prog.layers.append(f"{kind}@{'world' if g == 0 else 'sub'}")
        if kind == "fsdp":
            h = _fsdp(b, h, ws, g)
        elif kind == "tp_mlp":
            h = _tp_mlp(b, h, ws, g, norm_w, norm_b)
        elif kind == "tp_seq":
            shards[g] = _tp_seq(b, shards[g], ws, g, norm_w)
        elif kind == "grads":
            _grads(b, h, ws, g, square)
        elif kind == "a2a":
            h = _a2a(b, h, g)
        else:
            _mutate(b, h)
    for first in b.deferred:
        b.results += b.wait(first)
    outs = [h, *shards.values(), *b.results]
    extra = [s for s in range(len(prog.inputs), len(b.shape)) if s not in outs]
    outs += rng.sample(extra, min(len(extra), rng.randint(0, 1)))
    prog.outputs = list(dict.fromkeys(outs))
    return prog


def _fsdp(b: _Builder, h: int, shards: list[int], g: int) -> int:
    """Weight shards all-gathered back to back (a prefetch; now and then one coalesced launch), then each
    waited on and multiplied: ``ag_i ... -> wait_i -> h = act(h @ W_i)``."""
    if len(shards) > 1 and b.rng.random() < 0.25:  # one coalesced launch for all of them
        firsts = [b.launch("all_gather_coalesced", shards, g)]
    else:
        firsts = [b.launch("all_gather", [w], g) for w in shards]
    for first in firsts:
        for w in b.wait(first):
            h = b.mm(h, w)
            if b.rng.random() < 0.7:
                h = b.act(h)
    return h


def _first_matmul(b: _Builder, x: int, ws: list[int]) -> int:
    """``x @ W1``, or now and then ``addmm(bias, x, W1)`` (a bias shared by every row)."""
    if b.rng.random() < 0.3:
        return b.op("addmm", ws[2], x, ws[0], shape=(b.shape[x][0], b.shape[ws[0]][1]))
    return b.mm(x, ws[0])


def _tp_mlp(b: _Builder, h: int, ws: list[int], g: int, norm_w: int, norm_b: int) -> int:
    """A row-parallel block: ``a = act(h @ W1 [+ b]); y = a @ W2; all_reduce(y) -> wait; h = norm(h + wait)``
    (the residual only where it is replicated across the group, unless the program breaks that on
    purpose)."""
    rng = b.rng
    a = b.act(_first_matmul(b, h, ws))
    y = b.mm(a, ws[1])
    inplace = rng.random() < 0.2
    first = b.launch("all_reduce_" if inplace else "all_reduce", [y], g)
    b.wait(first)
    z = first
    needed = WORLD if g == 0 or b.prog.groups[g][1] == b.prog.ranks else SUB
    if b.level[h] >= needed or rng.random() < 0.15:
        b.prog.unproven |= b.level[h] < needed
        z = b.op("add", h, z, shape=b.shape[z]) if rng.random() < 0.5 else b.op("add", z, h, shape=b.shape[z])
    norm = rng.choice(["rms", "layer_norm", "softmax", "none"])
    if norm == "rms":
        z = b.op("rms", z, norm_w, shape=b.shape[z])
    elif norm == "layer_norm":
        z = b.op("layer_norm", z, norm_w, norm_b, shape=b.shape[z])
    elif norm == "softmax":
        z = b.op("softmax", z, shape=b.shape[z])
    return z


def _tp_seq(b: _Builder, s: int, ws: list[int], g: int, norm_w: int) -> int:
    """The sequence-parallel block: ``all_gather(s) -> wait -> act(A @ W1 [+ b]) @ W2 -> reduce_scatter ->
    wait; s = rms(s + wait)``."""
    first = b.launch("all_gather", [s], g)
    b.wait(first)
    y = b.mm(b.act(_first_matmul(b, first, ws)), ws[1])
    back = b.launch("reduce_scatter", [y], g)
    b.wait(back)
    s = b.op("add", s, back, shape=b.shape[s])
    if b.rng.random() < 0.6:
        s = b.op("rms", s, norm_w, shape=b.shape[s])
    return s


def _grads(b: _Builder, h: int, dys: list[int], g: int, square: int) -> None:
    """Gradients ``t(h) @ dy_i`` reduced back to back over one group, in one of these styles:
    reduce_scatter or all_reduce each (now and then of a view: its first half of rows); one coalesced
    all_reduce or reduce_scatter; DDP's flat bucket (the gradients copied into one buffer, its ``split``
    views reduced in place by ``all_reduce_coalesced_``, the buffer written through one of them and read
    back through a reshape); or one written with ``out=`` through a view into a buffer reduced in place
    (``all_reduce_``). Their waits come at once or at the end of the program."""
    rng = b.rng
    hidden = b.shape[h][1]
    ht = b.t(h)
    grads = [b.mm(ht, dy) for dy in dys]
    style = rng.choice(["reduce_scatter", "all_reduce", "coalesced", "flat", "out_inplace"])
    if style == "out_inplace" and not b.writable(square):
        style = "all_reduce"
    after = []  # what reads the results once waited on
    if style == "out_inplace":
        how = rng.choice(["", "t", "view"])
        b.prog.steps.append(("out", rng.choice(["add", "mul"]), grads[0], grads[-1], square, how))
        b.level[square] = min(b.level[square], b.level[grads[0]], b.level[grads[-1]])
        firsts = [b.launch("all_reduce_", [square], g)]
        firsts += [b.launch("all_reduce", [gr], g) for gr in grads[1:-1]]
    elif style == "coalesced":
        firsts = [b.launch(rng.choice(["all_reduce_coalesced", "reduce_scatter_coalesced"]), grads, g)]
    elif style == "flat":
        flat = b.op("flat", tuple(grads), shape=(sum(hidden * hidden for _ in grads),), reads=grads)
        firsts = [b.launch("all_reduce_coalesced_", b.split(flat, [hidden * hidden] * len(grads)), g)]
        after = [flat]
    else:
        views = [b.op("rows", gr, hidden // 2, shape=(hidden // 2, hidden), view_of=gr, reads=[gr])
                 if rng.random() < 0.25 else gr for gr in grads]
        firsts = [b.launch(style, [v], g) for v in views]
    if rng.random() < 0.5 and not after:
        b.deferred += firsts
        return
    for first in firsts:
        b.results += b.wait(first)
    for flat in after:
        if rng.random() < 0.5:  # a write through the wait's result: rows of the flat buffer
            b.prog.steps.append(("inplace", "mul_", b.results[-len(grads)], ""))
        back = b.op("view", flat, (len(grads) * hidden, hidden), shape=(len(grads) * hidden, hidden), view_of=flat)
        if b.readable(square):
            back = b.mm(back, b.t(square))
        b.results.append(back)


def _a2a(b: _Builder, h: int, g: int) -> int:
    """``all_to_all(h) -> wait -> act -> all_to_all -> wait; h = h + that`` (an expert-parallel dispatch
    and combine)."""
    first = b.launch("all_to_all", [h], g)
    b.wait(first)
    back = b.launch("all_to_all", [b.act(first)], g)
    b.wait(back)
    return b.op("add", h, back, shape=b.shape[h])


def _mutate(b: _Builder, h: int) -> None:
    """An in-place op on ``h``, a graph input or an earlier value: on it, its transpose, a view of it or its
    first half of rows."""
    rng = b.rng
    r = rng.random()
    if r < 0.5:
        target = h
    elif r < 0.75:
        target = rng.randrange(len(b.prog.inputs))
    else:  # a value some later step or the output reads
        target = rng.randrange(len(b.prog.inputs), len(b.shape)) if len(b.shape) > len(b.prog.inputs) else h
    if not b.writable(target) or len(b.shape[target]) != 2:
        return
    square = b.shape[target][0] == b.shape[target][-1]
    how = rng.choice(["", "rows"] + ([] if target in b.transposed else ["view"]) + (["t"] if square else []))
    b.prog.steps.append(("inplace", rng.choice(["mul_", "add_", "sigmoid_"]), target, how))


def trace_dist_program(prog: DistProgram, mode: str = "fake"):
    """``make_fx`` of the program with fake tensors (``mode`` "fake") or real ones ("real"; the collectives
    then run on the fake process groups of `solvercast.models.fake_group`)."""
    args = prog.rank_inputs(0, salt=0)
    if mode == "fake":
        return make_fx(prog, tracing_mode="fake")(*args)
    return make_fx(prog)(*args)


# ---- cases --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DistCase:
    """One fuzz case: the program of ``seed`` on ``ranks`` ranks and ``groups`` process groups, traced
    ``trace`` ("fake" or "real"), and `optimize`'s options. ``tamper`` ("values" or "order") spoils the last
    rank's lowered module, to show that the checks catch it (`tamper`); "crash in PHASE" (a name of
    `PHASES`) kills the last rank with SIGSEGV as it begins that phase, as torch's own code has crashed;
    "crash once in PHASE" does so on the case's first run only."""

    seed: int
    ranks: int = 4
    trace: str = "fake"
    groups: int = 1
    method: str = "auto"
    compute_streams: int = 1
    budget: float | None = 1.0  # ratio of the original peak; None = math.inf
    time_limit: float = 0.5
    #: the H100 profile with every rate (FLOP/s, bytes/s) divided by this, its latencies kept: at the
    #: CPU-sized tensors of these programs, a slower device prices a step as the H100 prices one of larger
    #: tensors, where collective-matmul splits and sequence parallelism pay (1: the H100 itself, where
    #: fixed costs dominate and bucketing pays)
    slowdown: int = 1
    tamper: str | None = None

    @classmethod
    def draw(cls, seed: int, ranks: int = 4) -> "DistCase":
        """Case ``seed``: traced with real tensors on odd seeds, two process groups on every third seed (the
        mix the profile asks for, exactly), the rest drawn."""
        rng = random.Random(seed * 7919 + 3)
        methods, weights = zip(*METHOD_WEIGHTS.items())
        return cls(seed=seed, ranks=ranks, trace="real" if seed % 2 else "fake", groups=2 if seed % 3 == 0 else 1,
                   method=rng.choices(methods, weights)[0], compute_streams=rng.choice([1, 1, 2]),
                   budget=rng.choice([1.0, 1.0, None, 1.1]), time_limit=rng.choice([0.5, 1.0]),
                   slowdown=rng.choice([1, 1, 1024, 16384]))

    def options(self, prog: DistProgram, gm: torch.fx.GraphModule) -> dict:
        """`optimize`'s keyword arguments for ``gm``, ``prog`` traced: the rewrites at their defaults (on),
        telling sequence parallelism which inputs are the same on every rank, as the program's author knows
        (the world-replicated ones)."""
        placeholders = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
        same = tuple(name for name, (_, level) in zip(placeholders, prog.inputs) if level == WORLD)
        return dict(time_limit=self.time_limit, memory_budget=math.inf if self.budget is None else self.budget,
                    compute_streams=self.compute_streams, method=self.method, device=slowed(self.slowdown),
                    decomposition=DecomposeOptions(replicated_inputs=same))


def slowed(factor: int) -> DeviceProfile:
    """The H100 profile with its FLOP/s and bytes/s divided by ``factor`` (its latencies kept)."""
    if factor == 1:
        return H100
    return dataclasses.replace(H100, name=f"h100/{factor}",
                               peak_flops={k: v / factor for k, v in H100.peak_flops.items()},
                               vector_flops=H100.vector_flops / factor, hbm_bandwidth=H100.hbm_bandwidth / factor,
                               link_bandwidth=H100.link_bandwidth / factor)


@dataclass(frozen=True)
class Limits:
    """What bounds a case. A call past ``optimize_seconds`` is a hang; a rank past ``memory_bytes`` of
    address space above what it held at start is runaway memory."""

    #: the alarm on one `optimize` call (its time limit is 0.5-1 s; the rewrites' searches count work, not
    #: seconds, so four ranks on two cores take several times the limit)
    optimize_seconds: float = 60.0
    #: the alarm on tracing the program and on each run of a module
    run_seconds: float = 30.0
    #: gloo's timeout on a collective: longer than the alarms, so that ranks waiting on one that is stuck in
    #: `optimize` hear its verdict rather than time out first
    collective_seconds: float = 100.0
    #: the parent's wait on a whole case before it kills the ranks
    case_seconds: float = 300.0
    memory_bytes: int = 4 << 30
    #: the ranks' start: spawn (each imports torch afresh) or fork
    start_method: str = "spawn"


@dataclass
class CaseResult:
    """What a case gave: ``outcome`` (module docstring) and ``reasons``, and what the ranks' calls did."""

    case: DistCase
    outcome: str
    reasons: list[str] = field(default_factory=list)
    bucketed: bool = False  # a call merged collectives into shared launches
    decomposed: bool = False  # a call split collective-matmul sites into chunks
    sequence_parallel: bool = False  # a call wrote all_reduces as reduce_scatter + all_gather
    tolerant: bool = False  # compared within a tolerance: the report says a rewrite may sum in another order
    announced: bool = False  # the report says the wall clock ended a search
    announced_disagreement: bool = False  # ... and the ranks' launches differed (the lowered modules not run)
    max_diff: float = 0.0  # the largest |lowered - original| on any rank
    launches: int = 0  # collectives the lowered module launches (rank 0)
    unproven: bool = False
    #: at budget 1.0, the lowered module's peak was checked against the original's by the real-tensor oracle
    memory_checked: bool = False
    #: a rank crashed before `optimize` ran (tracing or running the original: torch's own code) or was
    #: killed by a signal in the lowered module; the case was run again on fresh ranks, and this says how
    #: the first run ended
    retried: str = ""
    #: the crash that had the case run again came before `optimize` ran (else in the lowered module)
    retried_before_optimize: bool = field(default=False, repr=False)
    seconds: float = 0.0

    def line(self) -> str:
        c = self.case
        return (f"seed {c.seed} ({c.trace}, {c.groups} group{'s' if c.groups > 1 else ''}, {c.method}, "
                f"{c.compute_streams} stream{'s' if c.compute_streams > 1 else ''}, budget {c.budget}, "
                f"{c.time_limit:g} s{f', device h100/{c.slowdown}' if c.slowdown > 1 else ''}"
                f"{', tamper ' + c.tamper if c.tamper else ''}"
                f"{', unproven replication' if self.unproven else ''}): {self.outcome}"
                + (f": {'; '.join(self.reasons)}" if self.reasons else "")
                + (f" (max |diff| {self.max_diff:.3g})" if self.outcome == "failed" and self.max_diff else ""))


# ---- one rank's side ----------------------------------------------------------------------------


class _Hang(BaseException):
    """The alarm: a BaseException, so that no ``except Exception`` on the way swallows it."""


@contextmanager
def _alarm(seconds: float):
    def ring(signum, frame):
        raise _Hang(f"past {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _is_memory(e: BaseException) -> bool:
    return isinstance(e, MemoryError) or "can't allocate memory" in str(e) or "bad_alloc" in str(e)


def _why(e: BaseException) -> str:
    return f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"


def retarget(gm, names: dict[str, str]) -> int:
    """Point every collective's group name from a key of ``names`` at its value; how many were changed."""
    changed = 0
    for node in gm.graph.nodes:
        if node.op == "call_function" and getattr(node.target, "namespace", None) == "_c10d_functional":
            args = list(node.args)
            for i, a in enumerate(args):
                if isinstance(a, str) and a in names:
                    args[i] = names[a]
                    changed += 1
            node.args = tuple(args)
    gm.recompile()
    return changed


def _launches(gm) -> list:
    """``gm``'s collective launches (no waits), in program order."""
    return [n for n in gm.graph.nodes if n.op == "call_function"
            and getattr(n.target, "namespace", None) == "_c10d_functional" and "wait_tensor" not in str(n.target)]


def _group_names(node) -> list[str]:
    return [a for a in node.args if isinstance(a, str)]


def _launch_key(node) -> tuple:
    """``(op, input shapes)`` of a launch."""
    shapes = tuple(tuple(v.shape) if isinstance(v := node_val(a), torch.Tensor) else None
                   for a in node.all_input_nodes)
    return node.target.__name__.split(".")[0], shapes


def launch_sequence(gm, labels: dict[str, str]) -> list[tuple]:
    """``gm``'s collective launches in program order: ``(group label, op, input shapes)`` each, the group
    label ``labels[group name]`` (a name not in ``labels`` stands as itself)."""
    out = []
    for node in _launches(gm):
        names = _group_names(node)
        group = next((labels[a] for a in names if a in labels), names[0] if names else "?")
        out.append((group, *_launch_key(node)))
    return out


def sync_events(gm, labels: dict[str, str]) -> list[tuple[str, str, int]]:
    """``gm``'s launches and waits in program order: ``("launch" or "wait", group label, the collective's
    index among its group's launches)``. A wait on what no launch of ``gm`` made (a graph input) is left out."""
    index: dict = {}  # launch node -> (label, index)
    count: dict[str, int] = {}
    out = []
    for node in gm.graph.nodes:
        if node.op != "call_function" or getattr(node.target, "namespace", None) != "_c10d_functional":
            continue
        if "wait_tensor" in str(node.target):
            launch = node.args[0]
            if isinstance(launch, torch.fx.Node) and launch.target is operator.getitem:  # a coalesced one's result
                launch = launch.args[0]
            if launch in index:
                out.append(("wait", *index[launch]))
            continue
        names = _group_names(node)
        label = next((labels[a] for a in names if a in labels), names[0] if names else "?")
        index[node] = (label, count.get(label, 0))
        count[label] = count.get(label, 0) + 1
        out.append(("launch", *index[node]))
    return out


def deadlock(events: dict[int, list[tuple]], partition: dict[str, list[list[int]]]) -> str | None:
    """Where ranks running ``events`` (`sync_events` by rank) would block for good, or None. A launch never
    blocks; a wait returns once every rank of its group has launched that collective (each group's
    collectives matched by their index: the ranks' per-group sequences are taken to agree)."""
    group_of = {(label, r): tuple(members) for label, groups in partition.items() for members in groups
                for r in members}
    at = {r: 0 for r in events}
    launched: dict[tuple, set[int]] = {}  # (group's ranks, label, index) -> ranks that launched it
    moved = True
    while moved:
        moved = False
        for r, seq in events.items():
            while at[r] < len(seq):
                kind, label, i = seq[at[r]]
                key = (group_of.get((label, r), (r,)), label, i)
                if kind == "launch":
                    launched.setdefault(key, set()).add(r)
                elif not set(key[0]) <= launched.get(key, set()):
                    break
                at[r] += 1
                moved = True
    stuck = {r: events[r][at[r]] for r in events if at[r] < len(events[r])}
    if not stuck:
        return None
    return ", ".join(f"rank {r} waits on {label} collective {i}" for r, (_, label, i) in sorted(stuck.items()))


def tamper(gm, how: str) -> bool:
    """Spoil a lowered module in place, to show that the checks catch it: "values" adds 2**-10 to its first
    output; "order" launches a collective before the one launched just before it in its group (where its
    inputs allow and the two differ in op or shapes). Whether it could."""
    graph = gm.graph
    if how == "values":
        output = next(n for n in graph.nodes if n.op == "output")
        outs = list(output.args[0])
        with graph.inserting_before(output):
            outs[0] = graph.call_function(torch.ops.aten.add.Tensor, (outs[0], 2.0 ** -10))
        output.args = (tuple(outs),)
    elif how == "order":
        position = {n: i for i, n in enumerate(graph.nodes)}
        launches = _launches(gm)
        for i, later in enumerate(launches):
            earlier = next((e for e in reversed(launches[:i]) if _group_names(e) == _group_names(later)), None)
            if earlier is not None and _launch_key(earlier) != _launch_key(later) \
                    and all(position[a] < position[earlier] for a in later.all_input_nodes):
                earlier.prepend(later)
                break
        else:
            return False
    else:
        raise ValueError(f"tamper: 'values' or 'order', got {how!r}")
    graph.lint()
    gm.recompile()
    return True


@dataclass
class _Rank:
    """This rank's view of the pool: ``names`` (fake group name -> the real one this rank is in),
    ``labels`` (real group name -> "world" or "sub"), ``partition`` (label -> the groups' rank lists, the
    same on every rank), ``control`` (a group of its own for the checks' messages)."""

    rank: int
    ranks: int
    names: dict[str, str]
    labels: dict[str, str]
    partition: dict[str, list[list[int]]]
    control: object
    limits: Limits
    #: tells the pool what this rank is doing now (a crash is reported with it)
    phase: Callable[[str], None] = lambda name: None

    def gather(self, obj) -> list:
        """``obj`` of every rank, by rank (a barrier too)."""
        out = [None] * self.ranks
        dist.all_gather_object(out, obj, group=self.control)
        return out


def _join_groups(rank: int, ranks: int, limits: Limits) -> _Rank:
    """The process groups every case uses, made once: WORLD, the second group (each half of the ranks with
    4 or more, else all of them again: another communicator), and a control group."""
    world = dist.group.WORLD
    size = ranks // 2 if ranks >= 4 else ranks
    halves = [list(range(i, i + size)) for i in range(0, ranks, size)]
    subs = [dist.new_group(h) for h in halves]  # every rank makes every group, in the same order
    mine = subs[rank // size]
    control = dist.new_group(list(range(ranks)))
    return _Rank(rank=rank, ranks=ranks,
                 names={fake_group(ranks): world.group_name, fake_group(size, tag="sub"): mine.group_name},
                 labels={world.group_name: "world", mine.group_name: "sub"},
                 partition={"world": [list(range(ranks))], "sub": halves}, control=control, limits=limits)


def _run(gm, args: list[torch.Tensor]) -> list[torch.Tensor]:
    """``gm`` on copies of ``args``: its outputs, then the inputs as it left them (mutated inputs count)."""
    args = [a.clone() for a in args]
    with torch.no_grad():
        out = gm(*args)
    return (list(out) if isinstance(out, (tuple, list)) else [out]) + args


def _max_diff(x: torch.Tensor, y: torch.Tensor) -> float:
    if x.shape != y.shape or x.dtype != y.dtype:
        return math.inf
    if not (torch.isnan(x) == torch.isnan(y)).all():
        return math.inf
    both = ~torch.isnan(x)
    return float((x[both] - y[both]).abs().max()) if both.any() else 0.0


def _where(e: BaseException) -> str:
    """The innermost frame that raised ``e``, as ``folder/file.py:line``."""
    frames = traceback.extract_tb(e.__traceback__)
    if not frames:
        return "?"
    f = frames[-1]
    return f"{'/'.join(f.filename.split(os.sep)[-2:])}:{f.lineno}"


def _first_difference(seqs: dict[int, list]) -> str | None:
    """Where the ranks' launch lists first differ, or None."""
    ranks = sorted(seqs)
    ref = seqs[ranks[0]]
    for r in ranks[1:]:
        if seqs[r] != ref:
            i = next((i for i, (a, b) in enumerate(zip(ref, seqs[r])) if a != b), min(len(ref), len(seqs[r])))
            show = lambda s: s[i][1:] if i < len(s) else "nothing"  # noqa: E731
            return (f"launch {i}: rank {ranks[0]} {show(ref)}, rank {r} {show(seqs[r])} "
                    f"({len(ref)} and {len(seqs[r])} launches)")
    return None


def _announced(res) -> bool:
    """Whether the report says the wall clock ended a search (ranks may then schedule differently)."""
    said = " ".join(filter(None, (res.report.solver_message, res.report.fallback)))
    return "wall clock" in said or "other ranks may get another schedule" in said


def _trace_on_every_rank(case: DistCase, me: _Rank, out: dict) -> tuple[DistProgram, torch.fx.GraphModule] | None:
    """The program, traced as every rank traces it, pointed at this rank's groups; None (``out`` says why)
    where any rank cannot trace it."""
    prog = gm = None
    me.phase("tracing")
    try:
        with _alarm(me.limits.run_seconds):
            prog = random_dist_program(case.seed, case.ranks, case.groups)
            gm = trace_dist_program(prog, case.trace)
            retarget(gm, me.names)
        traced = None
    except _Hang as e:
        traced = f"tracing hangs: {e}"
    except Exception as e:  # noqa: BLE001 - a program torch cannot trace is no finding of ours
        traced = _why(e)
    out["unproven"] = bool(prog is not None and prog.unproven)
    traced_all = me.gather(traced)
    if any(traced_all):
        out.update(outcome="untraceable", reasons=[next(t for t in traced_all if t)])
        return None
    return prog, gm


def _run_original_on_every_rank(gm: torch.fx.GraphModule, args: list[torch.Tensor], me: _Rank,
                                out: dict) -> list[torch.Tensor] | None:
    """The original on this rank's inputs, with the real collectives; None (``out`` says why) where it
    does not run on some rank."""
    me.phase("the original module")
    try:
        with _alarm(me.limits.run_seconds):
            ref = _run(gm, args)
        ran = None
    except BaseException as e:  # noqa: BLE001 - (the alarm too) other ranks may be left inside a collective
        ran = _why(e)
    ran_all = me.gather(ran)
    if any(ran_all):
        out.update(outcome="untraceable", desync=True,
                   reasons=[f"the original does not run: {next(r for r in ran_all if r)}"])
        return None
    return ref


def _optimize_under_limits(case: DistCase, me: _Rank, prog: DistProgram, gm: torch.fx.GraphModule,
                           out: dict) -> tuple:
    """`optimize` under the alarm and the address-space limit: ``(result or None, outcome, the refusal's
    error type, why)``."""
    res, kind, why = None, None, None
    me.phase("optimize")
    try:
        with _alarm(me.limits.optimize_seconds):
            res = optimize(gm, **case.options(prog, gm))
        outcome = "ok"
    except _Hang as e:
        outcome, why = "failed", f"hang: optimize {e}"
    except SolvercastError as e:
        outcome, kind, why = "refused", type(e).__name__, _why(e)
    except Exception as e:  # noqa: BLE001 - the finding
        if _is_memory(e):
            outcome, why = "failed", f"runaway memory in optimize: {_why(e)} (at {_where(e)})"
            out["desync"] = True  # what the failed allocation left half made is not worth trusting
        else:
            outcome, why = "failed", f"stray {_why(e)} (at {_where(e)})"
    return res, outcome, kind, why


def _note_lowered(res, labels: dict[str, str], out: dict) -> tuple[list[tuple], list[tuple[str, str, int]]]:
    """The lowered module's launches and sync events; ``out`` notes the rewrites taken and the launches."""
    seq, events = launch_sequence(res.gm, labels), sync_events(res.gm, labels)
    report = res.report
    rewrites = (report.buckets or "") + (report.decomposition or "")
    dec = res.decomposition
    out.update(bucketed=res.buckets is not None, decomposed=dec is not None and bool(dec.plan.degrees),
               sequence_parallel=dec is not None and bool(dec.sequence_parallel),
               tolerant="not bitwise" in rewrites, announced=_announced(res), launches=len(seq))
    return seq, events


def _disagreements(views: list, partition: dict[str, list[list[int]]], out: dict) -> tuple[list[str], bool]:
    """``(problems, agree)`` from every rank's ``(outcome, kind, launches, announced, events)``: the ranks
    must agree on the outcome, and on every group's launches; and their launches and waits together must
    not deadlock (ranks that share two groups, each group's order alike, may still interleave them
    differently)."""
    problems = []
    announced = any(v[3] for v in views)
    outcomes = {(v[0], v[1]) for v in views}
    if len(outcomes) > 1 and not announced:
        problems.append("ranks disagree on the outcome: " + ", ".join(
            f"rank {r} {v[0]}{f' ({v[1]})' if v[1] else ''}" for r, v in enumerate(views)))
    agree = all(v[0] == "ok" for v in views)
    if agree:
        for label, groups in partition.items():
            for members in groups:
                diff = _first_difference({r: [s for s in views[r][2] if s[0] == label] for r in members})
                if diff is not None:
                    agree = False
                    out["announced_disagreement"] = announced
                    if not announced:
                        problems.append(f"ranks disagree on collectives (group {label} of ranks "
                                        f"{members[0]}-{members[-1]}): {diff}")
    if agree:
        blocked = deadlock({r: v[4] for r, v in enumerate(views)}, partition)
        if blocked is not None:
            agree = False
            out["announced_disagreement"] = announced
            said = [r for r, v in enumerate(views) if v[3]]
            problems.append(f"ranks would deadlock: {blocked}" + (
                f" (the wall clock ended a search on rank{'s' if len(said) > 1 else ''} {', '.join(map(str, said))})"
                if said else ""))
    return problems, agree


def _run_lowered(lowered: torch.fx.GraphModule, args: list[torch.Tensor], me: _Rank,
                 out: dict) -> list[torch.Tensor] | None:
    """The lowered module on the same inputs, with the real collectives; None (``out`` says why) where it
    fails."""
    me.phase("the lowered module")
    try:
        with _alarm(me.limits.run_seconds):
            return _run(lowered, args)
    except BaseException as e:  # noqa: BLE001 - the finding; other ranks may be left inside a collective
        hang = isinstance(e, _Hang)
        what = "hang: the lowered module runs past" if hang else \
            "runaway memory in the lowered module:" if _is_memory(e) else "lowered module fails:"
        out.update(outcome="failed", desync=True, reasons=out["reasons"] + [
            f"{what} {_why(e) if not hang else f'{me.limits.run_seconds:g} s'}"])
        return None


def _compare_values(ref: list[torch.Tensor], got: list[torch.Tensor], args: list[torch.Tensor], out: dict) -> None:
    """``out`` fails where the lowered module's results (as many as the original's) differ from the
    original's: bit for bit, or within the tolerance where ``out`` says a rewrite may sum in another order."""
    diffs = [_max_diff(x, y) for x, y in zip(ref, got)]
    out["max_diff"] = max(diffs, default=0.0)
    if out["tolerant"]:
        bad = [i for i, (x, y) in enumerate(zip(ref, got))
               if not (x.shape == y.shape and torch.allclose(x, y, rtol=RTOL, atol=ATOL, equal_nan=True))]
        expected = f"within rtol {RTOL:g}, atol {ATOL:g}"
    else:
        bad = [i for i, (x, y) in enumerate(zip(ref, got)) if not identical(x, y)]
        expected = "bitwise"
    if bad:
        worst = max(bad, key=lambda i: diffs[i])
        n_out = len(got) - len(args)
        where = f"output {worst}" if worst < n_out else f"input {worst - n_out} as mutated"
        out.update(outcome="failed", reasons=out["reasons"] + [
            f"wrong values ({expected} expected): {len(bad)} of {len(got)} results differ, the most in {where}"])


def _run_case(case: DistCase, me: _Rank) -> dict:
    """One case on this rank (module docstring). Every rank reaches the same `_Rank.gather` calls in the
    same order whatever happens on it, so one rank's trouble is heard by all. Never raises."""
    out = dict(outcome="ok", reasons=[], desync=False, bucketed=False, decomposed=False, sequence_parallel=False,
               tolerant=False, announced=False, announced_disagreement=False, max_diff=0.0, launches=0,
               unproven=False)
    traced = _trace_on_every_rank(case, me, out)
    if traced is None:
        return out
    prog, gm = traced
    args = prog.rank_inputs(me.rank)
    ref = _run_original_on_every_rank(gm, args, me, out)
    if ref is None:
        return out

    res, outcome, kind, why = _optimize_under_limits(case, me, prog, gm, out)
    seq = events = None
    if res is not None:
        if case.tamper in ("values", "order") and me.rank == case.ranks - 1 and not tamper(res.gm, case.tamper):
            outcome, why = "failed", f"tamper {case.tamper!r} found nothing to spoil"
        seq, events = _note_lowered(res, me.labels, out)
    views = me.gather((outcome, kind, seq, out["announced"], events))
    problems, agree = _disagreements(views, me.partition, out)
    if outcome != "ok":
        out.update(outcome=outcome, reasons=[why] + problems)
        return out
    if problems:
        out.update(outcome="failed", reasons=problems)
    if not agree:  # the lowered modules would launch different collectives, or hang: not run
        return out

    got = _run_lowered(res.gm, args, me, out)
    if got is None:
        return out
    if len(got) != len(ref):
        out.update(outcome="failed", reasons=out["reasons"] + [f"wrong values: {len(got)} results, not {len(ref)}"])
        return out
    _compare_values(ref, got, args, out)
    if case.budget == 1.0 and me.rank == 0:
        me.phase("the memory oracle")
        out["memory_checked"], above = _above_original_peak(gm, res.gm, prog.rank_inputs(0))
        if above:
            out.update(outcome="failed", reasons=out["reasons"] + [above])
    return out


def _above_original_peak(gm: torch.fx.GraphModule, lowered: torch.fx.GraphModule,
                         args: list) -> tuple[bool, str | None]:
    """At budget 1.0: (whether the real-tensor memory oracle could run both modules, a message where ``lowered``
    holds more than ``gm``) (`solvercast.runtime.memory_oracle`, the inputs held or freed as their runtime does;
    it cannot run a collective it has no stand-in for)."""
    freed = input_lifetimes(gm).freed
    try:
        before = live_bytes_peak(gm, [a.clone() for a in args], freed).peak
        after = live_bytes_peak(lowered, [a.clone() for a in args], freed).peak
    except MeasureError:
        return False, None
    return True, (f"memory above the original order's at budget 1.0: {after} B against {before} B "
                  "(real-tensor oracle)" if after > before else None)


def _vm_bytes(pid: int | str = "self") -> int:
    """A process's address space (``VmSize``), 0 where it cannot be read (the process is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _rank_main(rank: int, ranks: int, port: int, inbox, outbox, phases, limits: Limits) -> None:
    """A rank of the pool: joins the groups, then runs the cases ``inbox`` hands it until None (or the
    parent is gone), each result to ``outbox``. Leaves after a case that left the ranks out of step."""
    parent = os.getppid()
    faulthandler.enable(all_threads=True)  # a crash leaves every thread's Python stack on stderr
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)  # four ranks share two cores
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=ranks,
                            timeout=timedelta(seconds=limits.collective_seconds))
    me = _join_groups(rank, ranks, limits)
    case = None

    def phase(name: str) -> None:
        # in shared memory, not the outbox: a queue's feeder thread may not have sent it when a crash comes
        phases[rank] = PHASES.index(name) + 1
        if rank == ranks - 1 and case.tamper in (f"crash in {name}", f"crash once in {name}"):
            os.kill(os.getpid(), signal.SIGSEGV)

    me.phase = phase
    # the address space this rank may take beyond what torch and gloo hold now
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    held = _vm_bytes()
    soft = held + limits.memory_bytes
    resource.setrlimit(resource.RLIMIT_AS, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))
    outbox.put(("ready", rank, None, held))
    while True:
        try:
            case = inbox.get(timeout=5.0)
        except queue.Empty:
            if os.getppid() != parent:
                break
            continue
        if case is None:
            break
        started = time.perf_counter()
        try:
            result = _run_case(case, me)
        except BaseException as e:  # noqa: BLE001 - a crash of the checker is a finding too, and out of step
            result = dict(outcome="failed", reasons=[f"checker crashed: {_why(e)} (at {_where(e)})"], desync=True)
        result["seconds"] = time.perf_counter() - started
        outbox.put(("result", rank, case.seed, result))
        if result.get("desync"):
            break
    outbox.close()
    outbox.join_thread()
    os._exit(0)  # no teardown: a group left out of step may block in it


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _combine(case: DistCase, results: dict[int, dict], seconds: float) -> CaseResult:
    """The case's result from its ranks': failed where any rank failed; refused or untraceable where every
    rank was. Each reason once, with the ranks that gave it."""
    outcomes = [results[r]["outcome"] for r in sorted(results)]
    if "failed" in outcomes:
        outcome = "failed"
    elif len(set(outcomes)) == 1:
        outcome = outcomes[0]
    else:
        outcome = "failed"
    said: dict[str, list[int]] = {}
    for r in sorted(results):
        for why in results[r]["reasons"]:
            said.setdefault(why, []).append(r)
    if outcome != "failed":  # a refusal or untraceable program: rank 0's words stand for all
        reasons = results[min(results)]["reasons"][:1]
    else:
        reasons = [why if len(rs) == len(results) else f"{why} (rank{'s' if len(rs) > 1 else ''} "
                   f"{', '.join(map(str, rs))})" for why, rs in said.items()]
    first = results[min(results)]
    return CaseResult(case=case, outcome=outcome, reasons=reasons,
                      bucketed=any(r.get("bucketed") for r in results.values()),
                      decomposed=any(r.get("decomposed") for r in results.values()),
                      sequence_parallel=any(r.get("sequence_parallel") for r in results.values()),
                      tolerant=any(r.get("tolerant") for r in results.values()),
                      announced=any(r.get("announced") for r in results.values()),
                      announced_disagreement=any(r.get("announced_disagreement") for r in results.values()),
                      max_diff=max((r.get("max_diff", 0.0) for r in results.values()), default=0.0),
                      launches=first.get("launches", 0), unproven=bool(first.get("unproven")),
                      memory_checked=any(r.get("memory_checked") for r in results.values()), seconds=seconds)


class RankPool:
    """``ranks`` gloo processes on 127.0.0.1 that run cases one after another (`run`). Started on first
    use, and again after a case that left the ranks out of step: a rank that hung, died, or failed inside
    a collective. Use it as a context manager, or call `close`."""

    def __init__(self, ranks: int = 4, limits: Limits | None = None):
        if ranks < 2 or ranks & (ranks - 1):
            raise ValueError(f"ranks must be a power of two of at least 2, got {ranks}")
        self.ranks = ranks
        self.limits = Limits() if limits is None else limits
        self.procs: list = []
        self.starts = 0  # how many times the ranks were started

    def __enter__(self) -> "RankPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        """Start the ranks and wait until every one has joined its groups. Raises `RuntimeError` if they
        do not within ``limits.case_seconds``."""
        ctx = mp.get_context(self.limits.start_method)
        port = _free_port()
        self.inboxes = [ctx.Queue() for _ in range(self.ranks)]
        self.outbox = ctx.Queue()
        self.phases = ctx.Array("i", self.ranks, lock=False)  # each rank's phase: 0 its start, else PHASES[i - 1]
        self.procs = [ctx.Process(target=_rank_main, args=(r, self.ranks, port, self.inboxes[r], self.outbox, self.phases,
                                                          self.limits), daemon=True) for r in range(self.ranks)]
        for p in self.procs:
            p.start()
        self.starts += 1
        self.held: dict[int, int] = {}  # rank -> its address space when its limit was set
        deadline = time.monotonic() + self.limits.case_seconds
        while len(self.held) < self.ranks:
            try:
                kind, rank, _, held = self.outbox.get(timeout=1.0)
                self.held[rank] = held
            except queue.Empty:
                dead = [r for r, p in enumerate(self.procs) if not p.is_alive()]
                if dead or time.monotonic() > deadline:
                    self.close(kill=True)
                    raise RuntimeError(f"the ranks did not start (exited: {dead}; ready: {sorted(self.held)})")

    def run(self, case: DistCase) -> CaseResult:
        """``case`` on every rank; a hang or a crash is a failed result, and the ranks are started afresh
        for the next case. A crash before `optimize` ran (every dead rank tracing or running the original
        module: torch's own code, gloo's included, with solvercast not yet called) is no finding of ours
        unless it is ours to cause: the case runs again once on fresh ranks, and where it crashes there
        again, torch cannot run the program ("untraceable"). A rank killed by a signal in the lowered
        module (gloo's heap corruption, module docstring) has the case run again too; crashing there
        again, the case fails."""
        first = self._run_once(case)
        if not first.retried:
            return first
        # (a crash tampered in "once" is not tampered in again)
        again = self._run_once(dataclasses.replace(case, tamper="") if (case.tamper or "").startswith("crash once") else case)
        if again.retried:
            before = first.retried_before_optimize and again.retried_before_optimize
            again.outcome = "untraceable" if before else "failed"
            again.reasons = [f"torch crashes running the original, twice: {first.retried}" if before else
                             f"crashes twice: {first.retried}; then {again.retried}"]
        again.retried = first.retried
        return again

    def _run_once(self, case: DistCase) -> CaseResult:
        if case.ranks != self.ranks:
            raise ValueError(f"a case for {case.ranks} ranks on a pool of {self.ranks}")
        if not self.procs:
            self.start()
        started = time.perf_counter()
        self.phases[:] = [0] * self.ranks
        for q in self.inboxes:
            q.put(case)
        results: dict[int, dict] = {}
        grown = [0] * self.ranks  # the most address space each rank took above its start, as sampled
        deadline = time.monotonic() + self.limits.case_seconds
        while len(results) < self.ranks:
            try:
                kind, rank, seed, payload = self.outbox.get(timeout=0.2)  # (and sample the ranks between)
            except queue.Empty:
                for r, p in enumerate(self.procs):
                    grown[r] = max(grown[r], _vm_bytes(p.pid) - self.held[r])
                dead = {r: p.exitcode for r, p in enumerate(self.procs) if not p.is_alive() and r not in results}
                late = time.monotonic() > deadline
                if not dead and not late:
                    continue
                self.close(kill=True)
                # past most of its headroom: a rank that dies there died of its memory limit (glibc aborts
                # where a thread's storage cannot be had; torch raises where a tensor's cannot)
                full = [r for r in range(self.ranks) if grown[r] > 0.8 * self.limits.memory_bytes]
                doing = {r: (["its start", *PHASES])[self.phases[r]] for r in dead}
                if full:
                    why = "runaway memory: " + ", ".join(
                        f"rank {r} took {grown[r] / 2**30:.2f} GiB of its {self.limits.memory_bytes / 2**30:.2f} GiB"
                        for r in full) + (" and died" if dead else "")
                elif dead:
                    why = "crash: " + ", ".join(f"rank {r} exited with {_exit_name(c)} in {doing[r]}"
                                                for r, c in dead.items())
                else:
                    missing = [r for r in range(self.ranks) if r not in results]
                    why = f"hang: ranks {missing} gave no answer within {self.limits.case_seconds:g} s"
                out = _combine(case, results, time.perf_counter() - started) if results else \
                    CaseResult(case=case, outcome="failed")
                # what the other ranks then said of their lost peer is no finding of its own
                out.outcome, out.reasons = "failed", [why] + [r for r in out.reasons if not _PEER_LOST.search(r)]
                before = all(phase in _BEFORE_OPTIMIZE for phase in doing.values())
                if dead and not full and (before or all(
                        phase == "the lowered module" and (dead[r] or 0) < 0 for r, phase in doing.items())):
                    out.retried, out.retried_before_optimize = why, before
                return out
            if kind == "result" and seed == case.seed:
                results[rank] = payload
        out = _combine(case, results, time.perf_counter() - started)
        if any(r.get("desync") for r in results.values()):
            self.close(kill=True)
        return out

    def close(self, kill: bool = False) -> None:
        """Stop the ranks (``kill``: at once, else after the case in hand)."""
        if not self.procs:
            return
        if not kill:
            for q in self.inboxes:
                q.put(None)
            for p in self.procs:
                p.join(10)
        for p in self.procs:
            if p.is_alive():
                p.kill()
                p.join(5)
        self.procs = []


#: a rank's phases in a case (`_Rank.phase`), and those before it calls `optimize`
PHASES = ("tracing", "the original module", "optimize", "the lowered module", "the memory oracle")
_BEFORE_OPTIMIZE = PHASES[:2]

_PEER_LOST = re.compile(r"closed by peer|reset by peer|Connection refused|Broken pipe|Timed out")


def _exit_name(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            pass
    return f"code {code}"


def run_cases(cases, ranks: int = 4, limits: Limits | None = None, progress=None) -> list[CaseResult]:
    """Every case of ``cases`` on one `RankPool`; ``progress(i, result)`` after each."""
    out = []
    with RankPool(ranks, limits) as pool:
        for i, case in enumerate(cases, 1):
            out.append(pool.run(case))
            if progress is not None:
                progress(i, out[-1])
    return out
