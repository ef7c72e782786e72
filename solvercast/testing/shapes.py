"""Small hand-built Problems in the shapes of PyTorch's own comm-reordering tests
(test/distributed/test_inductor_collectives.py, test_compute_comm_reordering.py): raise comms, sink
waits, two microbatches, DDP backward, FSDP prefetch. 20-30 tasks each, with buffers sized so that
reordering costs memory: at a budget of 1.0 x the original peak, the budget binds.

Durations are ns in the range the zoo produces (a few us per matmul and collective); sizes in bytes.
"""

from __future__ import annotations

from solvercast.ir.problem import Buffer, Machine, Problem, Role, Task

KIB = 1024


class ProblemBuilder:
    """Tasks in program order; every compute task and collective allocates one output buffer, a wait
    returns its collective's buffer (an alias, as `wait_tensor` does)."""

    def __init__(self, name: str):
        self.name = name
        self.tasks: list[Task] = []
        self.edges: set[tuple[int, int]] = set()
        self.buffer_of: dict[int, int] = {}  # task -> the buffer its output lives in
        self.buffers: list[dict] = []

    def _add(self, task: Task, inputs, size: int | None) -> int:
        t = len(self.tasks)
        self.tasks.append(task)
        for q in inputs:
            self.edges.add((q, t))
            if q in self.buffer_of:
                self.buffers[self.buffer_of[q]]["users"].add(t)
        if size is not None:
            self.buffer_of[t] = len(self.buffers)
            self.buffers.append({"name": f"{task.name}_out", "size": size, "producer": t, "users": set()})
        return t

    def input(self, name: str, size: int) -> int:
        """A graph input, resident all step; returns a pseudo id for `compute`'s inputs (negative)."""
        self.buffers.append({"name": name, "size": size, "producer": None, "users": set()})
        return -len(self.buffers)

    def compute(self, name: str, us: float, inputs=(), out_kib: int = 64) -> int:
        real = [q for q in inputs if q >= 0]
        t = self._add(Task(name, Role.COMPUTE, duration=int(us * 1000), op="mm"), real, out_kib * KIB)
        for q in inputs:
            if q < 0:
                self.buffers[-q - 1]["users"].add(t)
        return t

    def collective(self, name: str, us: float, source: int, out_kib: int, op: str = "all_gather"):
        """An asynchronous collective reading ``source`` (a task, or an input's pseudo id) and its wait."""
        c = self.compute_like_comm(name, us, source, out_kib, op)
        w = self._add(Task(f"wait_{name}", Role.WAIT, waits_for=c), [c], None)
        self.buffer_of[w] = self.buffer_of[c]
        self.buffers[self.buffer_of[c]]["users"].add(w)
        return c, w

    def compute_like_comm(self, name, us, source, out_kib, op):
        inputs = [source] if source >= 0 else []
        c = self._add(Task(name, Role.COMM, duration=int(us * 1000), op=op), inputs, out_kib * KIB)
        if source < 0:
            self.buffers[-source - 1]["users"].add(c)
        return c

    def build(self, outputs=()) -> Problem:
        out_buffers = {self.buffer_of[t] for t in outputs}
        buffers = tuple(Buffer(b["name"], b["size"], b["producer"], tuple(sorted(b["users"])),
                               is_output=i in out_buffers) for i, b in enumerate(self.buffers))
        return Problem(tuple(self.tasks), tuple(self.edges), buffers, Machine(sync_overhead=500), name=self.name)


def raise_comms(layers: int = 6) -> Problem:
    """Per layer ``ag_i(param_i) -> wait_i -> mm_i(x, gathered_i)``: each all-gather can be raised above
    the previous layers' matmuls, holding its gathered buffer longer."""
    b = ProblemBuilder("raise_comms")
    x = gathered_layers(b, b.compute("embed", 2.0, out_kib=64), layers, gather_us=4.0, gathered_kib=256,
                        mm_us=3.0, act_kib=64)
    return b.build(outputs=[x])


def gathered_layers(b: ProblemBuilder, x: int, layers: int, *, gather_us: float, gathered_kib: int, mm_us: float,
                    act_kib: int) -> int:
    """Per layer ``ag_i(shard_i) -> wait_i -> mm_i(x, gathered_i) -> relu_i``; returns the last relu."""
    for i in range(layers):
        shard = b.input(f"shard{i}", 64 * KIB)
        _, w = b.collective(f"ag{i}", gather_us, shard, out_kib=gathered_kib)
        h = b.compute(f"mm{i}", mm_us, [x, w], out_kib=act_kib)
        x = b.compute(f"relu{i}", 1.0, [h], out_kib=act_kib)
    return x


def sink_waits(layers: int = 6) -> Problem:
    """Per layer ``mm_i -> ar_i(mm_i) -> wait_i`` with the waits right after their collectives; the
    results are only needed at the end (a sum), so the waits can sink below the next layers."""
    b = ProblemBuilder("sink_waits")
    x = b.compute("embed", 2.0, out_kib=64)
    waits = []
    for i in range(layers):
        h = b.compute(f"mm{i}", 3.0, [x], out_kib=128)
        _, w = b.collective(f"ar{i}", 4.0, h, out_kib=128, op="all_reduce")
        waits.append(w)
        x = b.compute(f"relu{i}", 1.0, [h], out_kib=64)
    total = b.compute("sum", 1.0, [x] + waits, out_kib=16)
    return b.build(outputs=[total])


def two_microbatches(steps: int = 3) -> Problem:
    """Two independent microbatch chains ``mm -> all_reduce -> wait -> mm``: one's collective hides
    behind the other's compute when they interleave."""
    b = ProblemBuilder("two_microbatches")
    ends = []
    for mb in range(2):
        x = b.compute(f"in{mb}", 1.0, out_kib=64)
        for i in range(steps):
            h = b.compute(f"mm{mb}_{i}", 3.0, [x], out_kib=128)
            _, w = b.collective(f"ar{mb}_{i}", 3.0, h, out_kib=128, op="all_reduce")
            x = b.compute(f"act{mb}_{i}", 1.0, [w], out_kib=64)
        ends.append(x)
    return b.build(outputs=ends)


def ddp_backward(layers: int = 6) -> Problem:
    """Backward through a chain of layers, last layer first: each layer's weight gradient is
    all-reduced (a bucket) and waited on at the end, by the optimizer step."""
    b = ProblemBuilder("ddp_backward")
    g = b.compute("loss_grad", 1.0, out_kib=64)
    waits = []
    for i in reversed(range(layers)):
        wg = b.compute(f"grad_w{i}", 3.0, [g], out_kib=192)
        _, w = b.collective(f"ar_grad{i}", 4.0, wg, out_kib=192, op="all_reduce")
        waits.append(w)
        g = b.compute(f"grad_x{i}", 2.0, [g], out_kib=64)
    step = b.compute("optimizer_step", 1.0, waits + [g], out_kib=16)
    return b.build(outputs=[step])


def fsdp_prefetch(layers: int = 6) -> Problem:
    """FSDP forward: per layer ``ag(shard_i) -> wait -> mm(x, full_i) -> relu``; the gathered weight is
    large, so prefetching the next layer's all-gather (to hide it) keeps two gathered weights resident."""
    b = ProblemBuilder("fsdp_prefetch")
    x = gathered_layers(b, b.compute("embed", 1.0, out_kib=32), layers, gather_us=5.0, gathered_kib=512,
                        mm_us=4.0, act_kib=32)
    loss = b.compute("loss", 1.0, [x], out_kib=4)
    return b.build(outputs=[loss])


SHAPES = {f.__name__: f for f in (raise_comms, sink_waits, two_microbatches, ddp_backward, fsdp_prefetch)}
