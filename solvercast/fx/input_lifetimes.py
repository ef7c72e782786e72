"""Which graph inputs the runtime that runs a graph frees after their last use (rule M1's freeable inputs).

A budget is a promise about the device, so the inputs counted as freed must be the ones the runtime frees:

* **torch.compile's backward** frees its saved activations and tangents as it goes (AOTAutograd clears the
  saved tensors before the compiled backward runs; Inductor's ``call(args)`` clears ``args`` and drops each
  buffer after its last use); the module keeps its parameters, and the caller the forward's inputs.
  AOTAutograd names a backward's inputs after what they are: ``tangents_*`` for the gradients coming in,
  ``primals_*`` for the forward's own inputs (parameters, the user's inputs) that the backward reads, the
  forward's value names for saved activations. A graph with a ``tangents_*`` input is read as such a
  backward: every input is freed but the ``primals_*`` and the inputs that reach an all_gather (through views
  and casts: sharded parameters gathered again).
* **Anything else** (a forward or inference graph, a module run eagerly, a graph of unknown origin): the
  caller holds what it passed, so every input stays resident.

The reading goes by each input's name as its author gave it: a placeholder's
``meta["solvercast_source_name"]`` where a retrace renamed it (``make_fx`` of a module names its inputs
``arg0_1``, ...: `experiments.benchmarks.public_graphs` records the repro's own names there), else its name.
``gm.meta["solvercast_freed_inputs"]`` (names), where a capture knows better, overrides the reading, and
`optimize`'s ``freeable_inputs`` overrides both.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch.fx as fx

from solvercast.graph.collectives import kind_of_op
from solvercast.graph.fxmeta import op_target
from solvercast.graph.nodes import NodeKind, classify
from solvercast.ir.problem import Problem

__all__ = ["FREED_INPUTS_META", "SOURCE_NAME_META", "InputLifetimes", "input_lifetimes"]

#: ``gm.meta`` key naming the inputs the runtime frees after their last use (a capture that knows them)
FREED_INPUTS_META = "solvercast_freed_inputs"
#: placeholder ``meta`` key: the input's name as the graph's author gave it, where a retrace renamed it
SOURCE_NAME_META = "solvercast_source_name"

_CASTS = ("aten._to_copy.default", "prims.convert_element_type.default", "aten.to.dtype", "aten.clone.default")


@dataclass(frozen=True)
class InputLifetimes:
    """The inputs counted as freed after their last use, and the rule that chose them (for the report)."""

    freed: tuple[str, ...]
    rule: str

    def describe(self, problem: Problem | None) -> str:
        """Counted by input storage of ``problem`` (None: none), as the memory figures count them: an input
        that is no tensor, shares a storage or is read by nothing (held all the same) is not one freed."""
        buffers = [b for b in problem.buffers if b.is_input] if problem is not None else []
        return f"{sum(b.freeable for b in buffers)} of {len(buffers)} freed after their last use ({self.rule})"


def input_lifetimes(gm: fx.GraphModule, requested: str | Iterable[str] = "auto") -> InputLifetimes:
    """The inputs of ``gm`` its runtime frees (see the module doc). ``requested``: "auto" (the reading above),
    "held" (none freed: the caller holds every input), or the names of the freed inputs."""
    inputs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if requested == "held":
        return InputLifetimes((), "every input held, as asked")
    if requested != "auto":
        names = tuple(requested)
        return InputLifetimes(names, "as asked")
    given = getattr(gm, "meta", {}).get(FREED_INPUTS_META) if isinstance(getattr(gm, "meta", None), dict) else None
    if given is not None:
        return InputLifetimes(tuple(given), "as the capture recorded")
    source = {n: n.meta.get(SOURCE_NAME_META, n.name) for n in inputs}
    if not any(name.startswith("tangents_") for name in source.values()):
        return InputLifetimes((), "every input held: no tangents_* input, so no torch.compile backward; the caller "
                                  "holds what it passes")
    freed = tuple(n.name for n in inputs if not source[n].startswith("primals_") and not _reaches_all_gather(n))
    return InputLifetimes(freed, "a torch.compile backward (tangents_* inputs): saved activations and tangents "
                                 "freed, primals_* and inputs that reach an all_gather held")


def _reaches_all_gather(node: fx.Node) -> bool:
    """Whether ``node`` feeds an all_gather directly or through views and casts (a sharded parameter)."""
    seen, stack = set(), [node]
    while stack:
        n = stack.pop()
        for user in n.users:
            if user in seen or user.op != "call_function":
                continue
            seen.add(user)
            record = kind_of_op(op_target(user.target))
            if record is not None and record.name == "all_gather":
                return True
            if classify(user).kind is NodeKind.VIEW or str(op_target(user.target)) in _CASTS:
                stack.append(user)
    return False
