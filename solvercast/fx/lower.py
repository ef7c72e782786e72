"""Schedule -> FX: write a schedule back into a GraphModule.

``lower(gm, problem, schedule)`` returns a NEW GraphModule (``gm`` is left
untouched) whose nodes run in the schedule's program order (placeholders
first, then ``get_attr`` nodes, then the tasks, the output last), with the
anchor ops of `solvercast.graph.ops` wherever a value crosses streams or a task
runs off stream 0. The bracket convention is described in `solvercast.graph.ops`:

* a task that runs on stream ``s != 0`` reads at least one input through
  ``wait_and_bind(v, s, tokens)`` (which makes ``s`` current) and is followed
  by ``record(y, s)`` (its token; the caller's stream is current again);
* a task on stream 0 reads an input produced on another stream through
  ``wait_and_bind(v, 0, [token])``; the producer's token is a
  ``record(y, 0)`` placed right after a stream-0 producer when some other
  stream needs it (graph inputs count as produced on stream 0 at the start);
* graph outputs produced off stream 0 are bound back to stream 0, and the
  first output also waits for the last work of any side stream that stream 0
  has not waited for yet (the final join), so the caller sees everything done.

Which stream a task runs on in the lowered graph:

* FREE tasks (views, getitem, anchors): none — they launch no kernel and sit
  outside brackets; dependencies are traced through them to the real
  producers (as in `Problem.sync_preds`);
* asynchronous collectives: launched from stream 0, whatever comm stream the
  schedule names; the collective library runs them on its stream and their
  ``wait_tensor`` synchronizes, so they get no anchors of their own;
* a wait on stream ``s != 0``: a bracket whose ``wait_and_bind`` is a pure
  stream switch (its result unused), so ``wait_tensor`` still reads the
  collective itself and `extract_problem` recognises it on the lowered graph;
* a task without tensor inputs (a factory op) cannot be bracketed: it runs on
  stream 0;
* every other task: its stream in the schedule.

Waits already implied by earlier ones are left out (each stream keeps a
vector clock of what it has waited for), but a value read on a stream other
than its producer's is always bound (``record_stream``) so the caching
allocator keeps it alive. Anchors that ``gm`` already contains (lowering a
lowered graph again) are stripped first. Dead code is eliminated, except
collectives, waits, anchors and ops with side effects.
"""

from __future__ import annotations

import copy
import operator
from collections.abc import Callable, Mapping

import torch
import torch.fx as fx
from torch.fx.node import map_arg

from solvercast.graph import ops
from solvercast.errors import InvalidScheduleError, LoweringError
from solvercast.fx.values import derive_values
from solvercast.graph.fxmeta import attribute
from solvercast.gc_paused import gc_paused
from solvercast.graph.nodes import is_distributed, is_task
from solvercast.ir.problem import Problem, Role
from solvercast.ir.schedule import Schedule
from solvercast.ir.simulate import validate

__all__ = ["lower", "strip_anchors", "anchor_nodes", "LoweringError"]

_INPUT = -1  # pseudo-task: "a graph input, produced on stream 0 before the graph runs"
_NO_STREAM = None


def cross_stream_producers(problem: Problem, t: int, stream: int, pos: Mapping[int, int],
                           stream_of: Callable[[int], int | None]) -> list[int]:
    """The tasks on streams other than ``stream`` (where task ``t`` runs) that ``t`` must wait for, in
    order, given the program positions ``pos`` and each task's stream: its `Problem.sync_preds`, where an
    asynchronous collective stands for its wait once the wait comes first. A wait is not synchronized with
    its own collective (the collective library does that)."""
    task = problem.tasks[t]
    producers: dict[int, None] = {}
    for p in problem.sync_preds[t]:
        if task.role == Role.WAIT and p == task.waits_for:
            continue
        if problem.is_async_comm(p):
            wait = problem.wait_of[p]
            if wait == t:
                continue
            if wait in pos and pos[wait] < pos[t]:
                p = wait
            # else (a write to a buffer the collective reads, before its wait): order the task after the
            # collective's launch on stream 0, as in the original program
        if p in pos and stream_of(p) != stream:
            producers[p] = None
    return list(producers)


# ---- small helpers -----------------------------------------------------------------------------

def graph_module(root: torch.nn.Module, graph: fx.Graph) -> fx.GraphModule:
    """A GraphModule of ``graph`` named after ``root``'s class, with ``root``'s meta, whose Python code is
    generated on its first call (or first look at ``.code``), as Inductor's modules are: generating it
    is half of lowering's time at 10,000 tasks, and `SolvercastPass` on a torch.compile graph never runs it."""
    try:
        from torch.fx._lazy_graph_module import _LazyGraphModule as module_class  # noqa: PLC0415
    except ImportError:  # a torch without lazy graph modules: generate the code now
        module_class = fx.GraphModule
    out = module_class(root, graph, class_name=type(root).__name__)
    out.meta = dict(getattr(root, "meta", {}))
    return out


def _remove_dead_code(graph: fx.Graph) -> None:
    """`fx.Graph.eliminate_dead_code` with `_keep` as the impurity test, asking `_keep` only of nodes nobody uses
    (torch asks every node first: a third of lowering's time at 10,000 tasks)."""
    for node in reversed(graph.nodes):
        if not node.users and not _keep(node):
            graph.erase_node(node)


def _keep(node: fx.Node) -> bool:
    """Impure for dead-code elimination: side effects, distributed ops (collectives, waits), anchors, modules."""
    if node.op in ("placeholder", "output", "call_module"):
        return True
    if node.op == "get_attr":
        return False
    if is_distributed(node) or ops.is_anchor(node.target):
        return True
    try:
        return node.is_impure()
    except Exception:  # e.g. an owning module not set: be conservative
        return True


def _val(node: fx.Node, gm: fx.GraphModule | None = None):
    if "val" in node.meta:
        return node.meta["val"]
    if "example_value" in node.meta:
        return node.meta["example_value"]
    if node.op == "get_attr" and gm is not None:
        try:
            return attribute(gm, node.target)
        except AttributeError:
            return None
    return None


def _is_tensor(node, gm=None) -> bool:
    return isinstance(node, fx.Node) and isinstance(_val(node, gm), torch.Tensor)


def _anchor_val(op, value: fx.Node, tokens: dict):
    """The anchor's meta["val"], without running the op on fake tensors (a fake dispatch costs ~0.3 ms, and
    a two-stream schedule of 10,000 tasks has ~12,000 anchors). ``wait_and_bind`` returns an alias of its
    input: its value's own metadata (same storage, shape and strides). ``record`` returns a fresh 0-byte
    token that holds nothing: one per device and lowering (``tokens``), made once by the op itself."""
    v = value.meta.get("val")
    if not isinstance(v, torch.Tensor):
        return None
    if op is ops.wait_and_bind:
        return v
    key = (v.device, v.dtype, type(v))
    token = tokens.get(key)
    if token is None:
        try:
            token = tokens[key] = ops.record(v, 0)
        except Exception:
            return None
    return token


def anchor_nodes(gm: fx.GraphModule) -> list[fx.Node]:
    """The anchor op nodes of ``gm`` in graph order."""
    return [n for n in gm.graph.nodes if n.op == "call_function" and ops.is_anchor(n.target)]


def _strip(graph: fx.Graph) -> set[str]:
    """Remove anchors in place (readers of ``wait_and_bind`` read its input again)."""
    removed = set()
    for node in reversed(list(graph.nodes)):
        if node.op == "call_function" and ops.is_anchor(node.target):
            if node.target in (ops.wait_and_bind, torch.ops.solvercast.wait_and_bind):
                node.replace_all_uses_with(node.args[0])
            removed.add(node.name)
    for node in reversed(list(graph.nodes)):
        if node.name in removed and node.op == "call_function" and ops.is_anchor(node.target):
            for user in list(node.users):  # a record read only by removed wait_and_binds
                if user.name not in removed:
                    raise LoweringError(f"anchor {node.name!r} is read by {user.name!r}, which is not an anchor")
            graph.erase_node(node)
    return removed


def strip_anchors(gm: fx.GraphModule) -> fx.GraphModule:
    """A copy of ``gm`` without anchor ops (a lowered graph back to plain program order),
    dead code eliminated as in `lower`."""
    graph = copy.deepcopy(gm.graph)
    _strip(graph)
    _remove_dead_code(graph)  # e.g. the getitem a record of a tuple read
    graph.lint()
    return graph_module(gm, graph)


# ---- lowering ------------------------------------------------------------------------------------

@gc_paused()
def lower(gm: fx.GraphModule, problem: Problem, schedule: Schedule, *, check: bool = True) -> fx.GraphModule:
    """Write ``schedule`` (of ``problem``, extracted from ``gm``) into a new GraphModule.

    With ``check`` the schedule is validated first (`validate`, ignoring the
    memory budget) and the lowered graph is linted. Raises `LoweringError` when ``problem`` does not describe
    ``gm`` (task count or names differ) and `InvalidScheduleError` for a
    schedule that breaks the execution rules.
    """
    if check:
        validate(problem.with_budget(None) if problem.machine.memory_budget is not None else problem, schedule)
    graph = copy.deepcopy(gm.graph)
    _fill_values(gm, graph)
    task_nodes = [n for n in graph.nodes if is_task(n)]
    if len(task_nodes) != problem.num_tasks:
        raise LoweringError(f"the problem has {problem.num_tasks} tasks but the graph has {len(task_nodes)} "
                            "schedulable nodes: extract the problem from this graph")
    for t, (node, task) in enumerate(zip(task_nodes, problem.tasks)):
        if node.name != task.name:
            raise LoweringError(f"task {t} is {task.name!r} but graph node {t} is {node.name!r}: "
                                "extract the problem from this graph")
    if len(schedule.order) != problem.num_tasks or sorted(schedule.order) != list(range(problem.num_tasks)):
        raise InvalidScheduleError("schedule order must list every task once")

    _Lowering(gm, graph, problem, schedule, task_nodes).run()
    _remove_dead_code(graph)
    if check:  # FX's own consistency check of what lowering built (5% of lowering, 10,000 tasks, 2 streams)
        graph.lint()
    out = graph_module(gm, graph)
    if hasattr(gm, "_solvercast_name"):
        out._solvercast_name = gm._solvercast_name
    return out


def _fill_values(gm: fx.GraphModule, graph: fx.Graph) -> None:
    """Values for the nodes of ``graph`` (a copy of ``gm``'s) that ``gm`` left without ``meta["val"]``, as
    extraction derived them (`solvercast.fx.values`): lowering reads them, and the lowered module has them."""
    derived = derive_values(gm)
    if derived.values:
        by_name = {n.name: v for n, v in derived.values.items()}
        for node in graph.nodes:
            if node.name in by_name:
                node.meta["val"] = by_name[node.name]


def exec_streams(gm, graph: fx.Graph, problem: Problem, schedule: Schedule,
                 task_nodes: list[fx.Node]) -> list[int | None]:
    """The stream each task runs on once lowered (None: no stream of its own, a free task)."""
    rules = _Lowering(gm, graph, problem, schedule, task_nodes)
    return [rules._exec_stream(t) for t in range(problem.num_tasks)]


class _Lowering:
    def __init__(self, gm, graph: fx.Graph, problem: Problem, schedule: Schedule, task_nodes: list[fx.Node]):
        self.gm = gm
        self.graph = graph
        self.problem = problem
        self.schedule = schedule
        self.streams = schedule.stream_list(problem)
        self.task_nodes = task_nodes
        self.task_of: dict[fx.Node, int] = {n: t for t, n in enumerate(task_nodes)}
        self.token_vals: dict = {}  # (device, dtype, tensor type) -> the value every such record's token shares

    # -- setup ------------------------------------------------------------------------------
    def run(self) -> None:
        graph, problem = self.graph, self.problem
        removed = _strip(graph)
        _remove_dead_code(graph)
        live = set(graph.nodes)
        self.live_tasks = [t for t in self.schedule.order
                           if self.task_nodes[t] in live and self.task_nodes[t].name not in removed]
        # program order: placeholders, get_attr, tasks by the schedule, output
        output = next(n for n in graph.nodes if n.op == "output")
        head = [n for n in graph.nodes if n.op == "placeholder"] + [n for n in graph.nodes if n.op == "get_attr"]
        for node in head + [self.task_nodes[t] for t in self.live_tasks]:
            output.prepend(node)
        self.pos = {t: i for i, t in enumerate(self.live_tasks)}
        self.head_end = head[-1] if head else None
        self._check_fx_order()  # the FX data dependencies must hold too

        self.exec = [self._exec_stream(t) for t in range(problem.num_tasks)]
        self.known: dict[int, dict[int, int]] = {}  # stream -> {stream: latest position waited for}
        self.clock: dict[int, dict[int, int]] = {_INPUT: {0: -1}}  # task -> vector clock of its token
        self.tokens: dict[int, fx.Node] = {}  # task (or _INPUT per placeholder) -> record node
        self.input_tokens: dict[fx.Node, fx.Node] = {}
        self.last_on: dict[int, int] = {}  # side stream -> last task on it
        self.sources_memo: dict[fx.Node, frozenset[int]] = {}

        for t in self.live_tasks:
            self._lower_task(t)
        self._lower_output(output)

    def _check_fx_order(self) -> None:
        seen = set()
        for node in self.graph.nodes:
            for inp in node.all_input_nodes:
                if inp not in seen:
                    raise InvalidScheduleError(f"order is not topological: {node.name!r} is issued before its input "
                                               f"{inp.name!r}")
            seen.add(node)

    def _exec_stream(self, t: int):
        task = self.problem.tasks[t]
        if task.role == Role.FREE:
            return _NO_STREAM
        if self.problem.is_async_comm(t):
            return 0
        node = self.task_nodes[t]
        if not any(_is_tensor(n, self.gm) for n in node.all_input_nodes):
            return 0
        return self.streams[t]

    # -- where values come from ---------------------------------------------------------------
    def _sources(self, node: fx.Node) -> frozenset[int]:
        """Tasks (or _INPUT) whose stream a value lives on: looks through FREE nodes and
        anchors; an asynchronous collective's value is ready after its wait."""
        memo = self.sources_memo.get(node)
        if memo is not None:
            return memo
        t = self.task_of.get(node)
        if node.op in ("placeholder", "get_attr"):
            out = frozenset((_INPUT,))
        elif t is None or self.exec[t] is _NO_STREAM:
            out = frozenset().union(*(self._sources(i) for i in node.all_input_nodes)) if node.all_input_nodes \
                else frozenset()
        elif self.problem.is_async_comm(t):
            out = frozenset((self.problem.wait_of[t],))
        else:
            out = frozenset((t,))
        self.sources_memo[node] = out
        return out

    def _stream_of(self, p: int) -> int:
        return 0 if p == _INPUT else self.exec[p]

    def _position(self, p: int) -> int:
        return -1 if p == _INPUT else self.pos[p]

    def _needs_wait(self, s: int, p: int) -> bool:
        r = self._stream_of(p)
        return r != s and self.known.setdefault(s, {}).get(r, -2) < self._position(p)

    def _waited(self, s: int, p: int) -> None:
        known = self.known.setdefault(s, {})
        for r, k in self.clock[p].items():
            if known.get(r, -2) < k:
                known[r] = k

    # -- anchors --------------------------------------------------------------------------------
    def _token(self, p: int, value: fx.Node | None = None) -> fx.Node:
        """The record node of task p (created right after it if it is on stream 0)."""
        if p == _INPUT:
            tok = self.input_tokens.get(value)
            if tok is None:
                root = value
                while root.op not in ("placeholder", "get_attr"):  # a view of an input: record the input
                    root = next(i for i in root.all_input_nodes if _INPUT in self._sources(i))
                tok = self.input_tokens.get(root)
                if tok is None:
                    anchor = self.head_end
                    if self.input_tokens:
                        anchor = list(self.input_tokens.values())[-1]
                    tok = self._record_after(anchor, root, 0)
                    self.input_tokens[root] = tok
                self.input_tokens[value] = tok
            return tok
        tok = self.tokens.get(p)
        if tok is None:
            tok = self.tokens[p] = self._emit_record(p)
        return tok

    def _record_after(self, where: fx.Node, value: fx.Node, stream: int) -> fx.Node:
        with self.graph.inserting_after(where):
            tok = self.graph.create_node("call_function", ops.record, (value, stream), name="record")
        val = _anchor_val(ops.record, value, self.token_vals)
        if val is not None:
            tok.meta["val"] = val
        return tok

    def _emit_record(self, t: int) -> fx.Node:
        node = self.task_nodes[t]
        val = _val(node, self.gm)
        where, value = node, None
        if isinstance(val, torch.Tensor):
            value = node
        elif isinstance(val, (tuple, list)):
            idx = next((i for i, v in enumerate(val) if isinstance(v, torch.Tensor)), None)
            if idx is not None:
                with self.graph.inserting_after(node):
                    value = self.graph.call_function(operator.getitem, (node, idx))
                value.meta["val"] = val[idx]
                where = value
        if value is None:  # no tensor result: record on a tensor it read (the bracket's bound input)
            value = next((n for n in node.all_input_nodes if _is_tensor(n, self.gm)), None)
        if value is None:
            cur = node.prev
            while cur.op != "root" and not _is_tensor(cur, self.gm):
                cur = cur.prev
            if cur.op == "root":
                raise LoweringError(f"cannot make a token for {node.name!r}: no tensor value before it")
            value = cur
        return self._record_after(where, value, self.exec[t])

    def _bind(self, consumer: fx.Node, value: fx.Node, stream: int, tokens: list[fx.Node]) -> fx.Node:
        with self.graph.inserting_before(consumer):
            bound = self.graph.create_node("call_function", ops.wait_and_bind, (value, stream, list(tokens)),
                                           name="wait_and_bind")
        val = _anchor_val(ops.wait_and_bind, value, self.token_vals)
        if val is not None:
            bound.meta["val"] = val
        return bound

    def _lower_task(self, t: int) -> None:
        s = self.exec[t]
        if s is _NO_STREAM:
            return
        problem = self.problem
        node = self.task_nodes[t]
        task = problem.tasks[t]
        is_wait = task.role == Role.WAIT
        # producers on other streams this task depends on (ordered)
        pending = dict.fromkeys(cross_stream_producers(problem, t, s, self.pos, self._stream_of))

        tensor_inputs = [n for n in dict.fromkeys(node.all_input_nodes) if _is_tensor(n, self.gm)]
        plan: dict[fx.Node, list[fx.Node]] = {}  # value to bind -> tokens it waits for
        owner: dict[int, fx.Node] = {}  # producer -> the first value read from it
        if not is_wait:
            for v in tensor_inputs:
                cross = [p for p in self._sources(v) if self._stream_of(p) != s and
                         (p == _INPUT or self.pos.get(p, self.pos[t]) < self.pos[t])]
                if cross:
                    plan[v] = []
                    for p in cross:
                        owner.setdefault(p, v)
                        pending.pop(p, None)
        # wait for the latest token of each stream first: it may cover the earlier ones
        waits = []
        for p in sorted(set(owner) | set(pending), key=self._position, reverse=True):
            if self._needs_wait(s, p):
                waits.append(p)
                self._waited(s, p)
        if (s != 0 or any(p not in owner for p in waits)) and not plan:
            if not tensor_inputs:
                return  # cannot happen for s != 0 (see _exec_stream); nothing to bind waits to
            plan[tensor_inputs[0]] = []
        first = next(iter(plan), None)
        for p in waits:
            v = owner.get(p, first)
            plan[v].append(self._token(p, v))

        replace: dict[fx.Node, fx.Node] = {}
        for v, waits in plan.items():
            bound = self._bind(node, v, s, waits[::-1])
            if not is_wait:
                replace[v] = bound
        if replace:
            node.args = map_arg(node.args, lambda n: replace.get(n, n))
            node.kwargs = map_arg(node.kwargs, lambda n: replace.get(n, n))

        clock = dict(self.known.get(s, {}))
        clock[s] = self.pos[t]
        self.clock[t] = clock
        self.known[s] = dict(clock)
        if s != 0:
            self.last_on[s] = t
            self.tokens[t] = self._emit_record(t)  # closes the bracket

    def _lower_output(self, output: fx.Node) -> None:
        values = [n for n in dict.fromkeys(output.all_input_nodes) if _is_tensor(n, self.gm)]
        plan: dict[fx.Node, list[fx.Node]] = {}
        owner: dict[int, fx.Node] = {}
        for v in values:
            cross = [p for p in self._sources(v) if self._stream_of(p) != 0]
            if cross:
                plan[v] = []
                for p in cross:
                    owner.setdefault(p, v)
        # the final join: the last task of every side stream that stream 0 has not waited for
        waits = []
        for p in sorted(set(owner) | set(self.last_on.values()), key=self._position, reverse=True):
            if self._needs_wait(0, p):
                waits.append(p)
                self._waited(0, p)
        if waits and not plan:
            if values:
                plan[values[0]] = []
            else:  # no tensor output: a stand-alone join (its result unused) on the last tensor value
                cur = output.prev
                while cur.op != "root" and not _is_tensor(cur, self.gm):
                    cur = cur.prev
                if cur.op == "root":
                    return
                plan[cur] = []
        first = next(iter(plan), None)
        for p in waits:
            plan[owner.get(p, first)].append(self._token(p))
        replace = {}
        for v, waits in plan.items():
            bound = self._bind(output, v, 0, waits[::-1])
            if v in values:
                replace[v] = bound
        if replace:
            output.args = map_arg(output.args, lambda n: replace.get(n, n))

