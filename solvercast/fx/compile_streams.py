"""Multi-stream schedules in the form torch.compile reads: stream annotations and stream events.

`solvercast.fx.lower` expresses streams with solvercast's anchor ops, which eager PyTorch runs but
Inductor cannot lower. torch 2.13 carries streams in FX itself, and this module writes a schedule in
that form (checked against the installed torch: ``torch/_dynamo/variables/streams.py``,
``torch/_functorch/_aot_autograd/streams.py``, ``torch/_inductor/scheduler.py``):

* a node that runs on a side stream has ``node.meta["custom"]["stream"] = i``, where ``i`` indexes
  a stream object in dynamo's external-object registry (``torch._dynamo.graph_bytecode_inputs``);
  Inductor's scheduler reads it (``_populate_stream_assignments``), never fuses across streams and
  generates ``with stream<k>:`` blocks. Nodes on stream 0 (the caller's stream) stay unannotated;
* a value crossing streams: ``torch.ops.streams.record_event(e, producer_stream)`` right after its
  producer and ``torch.ops.streams.wait_event(e, consumer_stream)`` right before the consumer, with a
  fresh event ``e`` per (producer, consumer) pair. **Every consumer has its own event and its own
  wait**: PyTorch's open bug is that two waits on one event do not order both consumers;
* the order Inductor must keep is made explicit with its ``control_deps`` higher-order op
  (`torch._inductor.fx_passes.control_dependencies.preserve_node_ordering`, the mechanism
  AOTAutograd uses for user streams): the record depends on its producer, the wait on its record,
  and the consumer on its waits, so no reordering or fusion can move a consumer before its wait;
* a value read on a stream other than its producer's is bound with ``torch.ops.streams.record_stream``
  before its consumer, so the caching allocator keeps it until that stream is done;
* side streams wait for the caller's stream at their first task (the inputs were made there), and the
  caller's stream waits for each side stream's last task before the output (the final join).

Which stream each task runs on follows `solvercast.fx.lower` (FREE tasks: none; asynchronous
collectives: launched from stream 0; factory ops: stream 0; everything else: the schedule's stream).

`lower_for_compile(gm, problem, schedule)` returns a new GraphModule in this form (stream and event
indices from ``stream_index`` / ``new_event``, by default dynamo's registry);
`annotate_graph_in_place` does the same to an Inductor post-grad graph (what `SolvercastPass` calls
when ``compute_streams > 1``).
"""

from __future__ import annotations

import copy
import operator
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.fx as fx
from torch.fx.node import map_arg

from solvercast.errors import InvalidScheduleError
from solvercast.fx.lower import cross_stream_producers, exec_streams
from solvercast.graph.nodes import is_task
from solvercast.ir.problem import Problem, Role
from solvercast.ir.schedule import Schedule
from solvercast.ir.simulate import validate

__all__ = ["StreamPlan", "annotate_graph_in_place", "dynamo_registry", "lower_for_compile", "stream_of_node"]



def _stream_ops():
    """``torch.ops.streams`` (its ops are registered when dynamo's stream module is imported: lazily,
    since importing dynamo costs seconds)."""
    import torch._dynamo.variables.streams  # noqa: F401

    return torch.ops.streams


@dataclass(frozen=True)
class StreamPlan:
    """What the lowering added: ``events`` recorded (one per cross-stream edge, forks and joins
    included), ``waits`` (one per event: no event is waited on twice), ``bound`` record_stream calls,
    ``side_tasks`` tasks annotated with a side stream."""

    events: int
    waits: int
    bound: int
    side_tasks: int


def stream_of_node(node: fx.Node) -> int | None:
    """The stream index a node carries (``meta["custom"]["stream"]``), None for the caller's stream."""
    return (node.meta.get("custom") or {}).get("stream")


def dynamo_registry(device: torch.device) -> tuple[Callable[[int], int], Callable[[], int]]:
    """``(stream_index, new_event)`` backed by dynamo's external-object registry: stream 0 is the
    current stream of ``device``, every other id a new ``torch.Stream``, every event a new
    ``torch.Event``. Objects registered while torch.compile compiles a frame are recreated by the
    frame's bytecode at every call; outside a compile they stay registered for eager runs."""
    from torch._dynamo.variables.streams import get_current_stream, new_event, new_stream

    indices: dict[int, int] = {}

    def stream_index(stream_id: int) -> int:
        if stream_id not in indices:
            # CPU has no current accelerator stream; its streams are all the same no-op stream
            current = stream_id == 0 and device.type != "cpu"
            indices[stream_id] = get_current_stream(device) if current else new_stream(device=device)
        return indices[stream_id]

    return stream_index, new_event


def _exec_streams(gm: fx.GraphModule, graph: fx.Graph, problem: Problem, schedule: Schedule,
                  task_nodes: list[fx.Node]) -> list[int | None]:
    return exec_streams(gm, graph, problem, schedule, task_nodes)  # lowering's rules: both lowerings agree


def _cross_stream_edges(problem: Problem, exec_stream: list[int | None], pos: dict[int, int]) -> list[tuple[int, int]]:
    """(producer, consumer) pairs on different streams that need an event (`lower.cross_stream_producers`,
    the rule lowering follows)."""
    return [(p, t) for t in sorted(pos, key=pos.__getitem__) if exec_stream[t] is not None
            for p in cross_stream_producers(problem, t, exec_stream[t], pos, exec_stream.__getitem__)]


def _tensor_inputs_from(consumer: fx.Node, producer: fx.Node, free: set[fx.Node]) -> list[fx.Node]:
    """The consumer's tensor inputs that are the producer or views of it (``free``: the FREE tasks'
    nodes), i.e. what the consumer reads from the producer's stream."""
    out = []
    for inp in dict.fromkeys(consumer.all_input_nodes):
        stack, seen = [inp], set()
        while stack:
            n = stack.pop()
            if n is producer:
                out.append(inp)
                break
            if n in seen or n.op != "call_function" or (n not in free and n is not inp):
                continue
            seen.add(n)
            stack.extend(n.all_input_nodes)
    return [n for n in out if isinstance(n.meta.get("val"), torch.Tensor)]


def _task_nodes_by_index(graph: fx.Graph, problem: Problem) -> list[fx.Node]:
    """``graph``'s schedulable node of each of ``problem``'s tasks, by task index; raises
    `InvalidScheduleError` when they are not the problem's tasks."""
    by_name = {n.name: n for n in graph.nodes if is_task(n)}
    if len(by_name) != problem.num_tasks or any(t.name not in by_name for t in problem.tasks):
        raise InvalidScheduleError("the graph's schedulable nodes are not the problem's tasks: extract the "
                                   "problem from this graph")
    return [by_name[t.name] for t in problem.tasks]


def _reorder_to_schedule(graph: fx.Graph, task_nodes: list[fx.Node], schedule: Schedule,
                         output: fx.Node) -> list[fx.Node]:
    """Moves ``graph``'s nodes before ``output`` in this order: placeholders and get_attrs, the tasks in
    ``schedule``'s program order, everything else. Returns the placeholders and get_attrs."""
    placed = set(task_nodes)
    head = [n for n in graph.nodes if n.op in ("placeholder", "get_attr")]
    rest = [n for n in graph.nodes if n not in placed and n.op not in ("placeholder", "get_attr", "output")]
    for node in head + [task_nodes[t] for t in schedule.order] + rest:
        output.prepend(node)
    return head


def _annotate_side_streams(task_nodes: list[fx.Node], exec_stream: list[int | None],
                           stream_index: Callable[[int], int]) -> None:
    """``meta["custom"]["stream"]`` on every task that runs on a side stream."""
    for t, s in enumerate(exec_stream):
        if s:
            node = task_nodes[t]
            node.meta["custom"] = {**(node.meta.get("custom") or {}), "stream": stream_index(s)}


def _first_tensor_input(node: fx.Node) -> list[fx.Node]:
    return [n for n in node.all_input_nodes if isinstance(n.meta.get("val"), torch.Tensor)][:1]


def _first_and_last_side_tasks(schedule: Schedule,
                               exec_stream: list[int | None]) -> tuple[dict[int, int], dict[int, int]]:
    """Each side stream's first and last task in ``schedule``'s program order."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for t in schedule.order:
        s = exec_stream[t]
        if s:
            first.setdefault(s, t)
            last[s] = t
    return first, last


class _EventSync:
    """Writes into ``graph`` the events that order one stream after another, each wait tied to its record
    and its consumer by ``control_deps`` (module docstring); counts the records and the waits."""

    def __init__(self, graph: fx.Graph, owner: fx.GraphModule, streams_ops, stream_index: Callable[[int], int],
                 new_event: Callable[[], int]):
        # Inductor's pass, imported before the graph is touched: a torch without it fails with the graph whole
        from torch._inductor.fx_passes import control_dependencies
        from torch.utils._ordered_set import OrderedSet

        self.deps, self.ordered_set = control_dependencies, OrderedSet
        self.graph = graph
        self.owner = owner
        self.streams_ops = streams_ops
        self.stream_index = stream_index
        self.new_event = new_event
        self.records: list[fx.Node] = []
        self.waits = 0

    def record(self, after: fx.Node, stream: int) -> tuple[int, fx.Node]:
        """A fresh event recorded on ``stream`` right after ``after``: ``(event, its record node)``."""
        graph, control_deps = self.graph, self.deps.control_deps
        event = self.new_event()
        with graph.inserting_after(after):
            rec = graph.call_function(self.streams_ops.record_event.default, (event, self.stream_index(stream)))
        if stream:
            rec.meta["custom"] = {"stream": self.stream_index(stream)}
        if after.op == "call_function":  # ordered after its producer: control_deps((producer,), record)
            name = rec.name
            # replaces rec by a node of its name
            self.deps.preserve_node_ordering(graph, {rec: self.ordered_set([after])})
            rec = next(n for n in after.users if n.target is control_deps and n.name == name)
        self.records.append(rec)
        return event, rec

    def wait(self, event: int, rec: fx.Node, stream: int, consumer: fx.Node, values: list[fx.Node]) -> None:
        """wait_event(event, stream) right before ``consumer``, as control_deps((rec,), wait, *values):
        the consumer reads ``values`` through it, so nothing can run the consumer before its wait."""
        graph, deps = self.graph, self.deps
        with graph.inserting_before(consumer):
            node = graph.call_function(self.streams_ops.wait_event.default, (event, self.stream_index(stream)))
        sub = deps._create_subgraph_for_node(graph, node, values)
        name = deps.get_subgraph_name(self.owner, node.name)
        setattr(self.owner, name, sub)
        with graph.inserting_before(node):
            attr = graph.get_attr(name)
            ctrl = graph.call_function(deps.control_deps, ((rec,), attr, *values), name=f"{node.name}_ctrl")
        ctrl.meta["val"] = (None, *(v.meta.get("val") for v in values))
        if stream:
            ctrl.meta["custom"] = {"stream": self.stream_index(stream)}
        replace = {}
        with graph.inserting_after(ctrl):
            for i, v in reversed(list(enumerate(values))):
                item = graph.call_function(operator.getitem, (ctrl, i + 1))
                item.meta.update(v.meta)
                replace[v] = item
        consumer.args = map_arg(consumer.args, lambda n: replace.get(n, n))
        consumer.kwargs = map_arg(consumer.kwargs, lambda n: replace.get(n, n))
        graph.erase_node(node)
        self.waits += 1


def _bind_cross_stream_reads(graph: fx.Graph, problem: Problem, task_nodes: list[fx.Node],
                             exec_stream: list[int | None], pos: dict[int, int], streams_ops,
                             stream_index: Callable[[int], int]) -> tuple[dict, int]:
    """A record_stream before each consumer for every value it reads from another stream:
    ``(each consumer's syncs, how many values were bound)``, a sync being (producer node, producer stream,
    the consumer's inputs read from it)."""
    free = {task_nodes[t] for t, task in enumerate(problem.tasks) if task.role == Role.FREE}
    incoming: dict[int, list[tuple[fx.Node, int, list[fx.Node]]]] = {}
    bound = 0
    for p, t in _cross_stream_edges(problem, exec_stream, pos):
        consumer = task_nodes[t]
        values = _tensor_inputs_from(consumer, task_nodes[p], free)
        for value in values:  # the allocator must keep it until the consumer's stream is done with it
            with graph.inserting_before(consumer):
                graph.call_function(streams_ops.record_stream.default, (value, stream_index(exec_stream[t])))
            bound += 1
        incoming.setdefault(t, []).append((task_nodes[p], exec_stream[p], values))
    return incoming, bound


def annotate_graph_in_place(graph: fx.Graph, problem: Problem, schedule: Schedule, *,
                            stream_index: Callable[[int], int], new_event: Callable[[], int],
                            gm: fx.GraphModule | None = None) -> StreamPlan:
    """Reorder ``graph`` (whose schedulable nodes are ``problem``'s tasks, by name) to ``schedule``'s
    program order and write its streams in torch.compile's form (module docstring). ``graph`` must
    have an owning module (the control_deps subgraphs are stored on it). Raises
    `InvalidScheduleError` when the graph and the problem do not match."""
    streams_ops = _stream_ops()
    owner = gm if gm is not None else graph.owning_module
    if owner is None:
        raise InvalidScheduleError("the graph needs an owning module for its control_deps subgraphs")
    sync = _EventSync(graph, owner, streams_ops, stream_index, new_event)
    task_nodes = _task_nodes_by_index(graph, problem)
    output = next(n for n in graph.nodes if n.op == "output")
    head = _reorder_to_schedule(graph, task_nodes, schedule, output)
    pos = {t: i for i, t in enumerate(schedule.order)}
    exec_stream = _exec_streams(owner, graph, problem, schedule, task_nodes)
    _annotate_side_streams(task_nodes, exec_stream, stream_index)

    incoming, bound = _bind_cross_stream_reads(graph, problem, task_nodes, exec_stream, pos, streams_ops,
                                               stream_index)
    # fork: each side stream's first task waits for the caller's stream (where the inputs were made)
    first, last = _first_and_last_side_tasks(schedule, exec_stream)
    anchor = head[-1] if head else next(iter(graph.nodes))
    for s, t in first.items():
        incoming.setdefault(t, []).append((anchor, 0, []))
    for t, syncs in incoming.items():
        consumer = task_nodes[t]
        for producer, producer_stream, values in syncs:
            event, rec = sync.record(producer, producer_stream)
            sync.wait(event, rec, exec_stream[t], consumer, values or _first_tensor_input(consumer))
    # join: the caller's stream waits for each side stream's last task; the outputs pass through it
    for s, t in last.items():
        event, rec = sync.record(task_nodes[t], s)
        outputs = [n for n in dict.fromkeys(output.all_input_nodes) if isinstance(n.meta.get("val"), torch.Tensor)]
        sync.wait(event, rec, 0, output, outputs)
    graph.lint()
    return StreamPlan(events=len(sync.records), waits=sync.waits, bound=bound,
                      side_tasks=sum(1 for s in exec_stream if s))


def lower_for_compile(gm: fx.GraphModule, problem: Problem, schedule: Schedule, *,
                      stream_index: Callable[[int], int] | None = None,
                      new_event: Callable[[], int] | None = None) -> fx.GraphModule:
    """A new GraphModule: ``gm`` in ``schedule``'s order with its streams in torch.compile's form.
    Indices default to `dynamo_registry` for the device of ``gm``'s first tensor input. The plan is
    on ``out.meta["solvercast_streams"]``."""
    validate(problem.with_budget(None), schedule)
    out = fx.GraphModule(gm, copy.deepcopy(gm.graph), class_name=type(gm).__name__)
    out.meta = dict(getattr(gm, "meta", {}))
    if stream_index is None or new_event is None:
        device = next((n.meta["val"].device for n in gm.graph.nodes
                       if n.op == "placeholder" and isinstance(n.meta.get("val"), torch.Tensor)), torch.device("cpu"))
        default_index, default_event = dynamo_registry(device)
        stream_index = stream_index or default_index
        new_event = new_event or default_event
    plan = annotate_graph_in_place(out.graph, problem, schedule, stream_index=stream_index, new_event=new_event,
                                   gm=out)
    out.recompile()
    out.meta["solvercast_streams"] = plan
    return out
