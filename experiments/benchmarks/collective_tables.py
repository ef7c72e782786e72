"""Collective timing tables as autoparallel's overlap-simulator runner reads them (``colls*.table``).

Adapted from ``autoparallel/tools/overlap_simulator/run.py`` (``CollectiveEstimationParser`` and
``NodeEstimator``) of https://github.com/meta-pytorch/autoparallel at commit
2cc2719f89033e8bd3405ebb5d9f31c79272e8c3, which carries this notice:

    Copyright (c) Facebook, Inc. and its affiliates. All rights reserved.

    This source code is licensed under the BSD license found in the
    LICENSE file in the root directory of this source tree.

(the license: experiments/data/autoparallel_llama3_8b/LICENSE). The port keeps run.py's rules, quirks
included, so that a collective here costs what it costs there:

* header: every whitespace-separated word ending in ``MB`` is a size column (``1MB (ms)`` gives 1); the
  second line is a separator and is skipped; each row is ``group_name group_size collective t_1 ... t_n`` in
  milliseconds; a short or unparsable row is skipped;
* a node's kind is found by substring of ``str(node.target)`` (``all_gather_into_tensor``,
  ``reduce_scatter_tensor``, ``all_reduce``); its group size is ``args[1]`` (all_gather) or ``args[2]``
  (reduce_scatter), none for all_reduce; its size is the bytes of its *input* (``args[0]``'s value) / 2**20;
* the first table row (in file order) with that group size, that kind and a group name that is a
  **substring** of the node's group name is used (quirk: group ``1`` also matches a node's group ``11``);
  with no group size (all_reduce), the first row of that kind whose name is a substring;
* interpolation: below 1 MB the 1 MB value; then ``int(size_mb)``, and if that is a column its value
  **without interpolation** (quirk: 1.9 MB costs the 1 MB value, 3.5 MB is interpolated between 2 and 4);
  otherwise linear between the surrounding columns; above the last column linear extrapolation from the
  last two, floored at 0;
* no matching row: run.py falls back to PyTorch's estimate of the node (``gather_node_runtime_estimations``:
  for a collective, ``estimate_collective_time``, whose NCCL estimator declines fake groups, so the
  analytical model of ``comm_analysis``); `torch_estimate_ms` is that estimate, and `TableEstimator` given
  it as ``fallback`` prices every collective the table misses with it, all_to_alls included (run.py's
  table knows none). Without a fallback `TableEstimator.seconds` returns None and the caller decides (the
  benchmark's "alpha-beta" pricing lets solvercast's model price it).
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.fx as fx

BYTES_PER_MB = 1024 * 1024
KINDS = ("all_gather_into_tensor", "reduce_scatter_tensor", "all_reduce")

Table = dict[tuple[str, int, str], dict[int, float]]


def parse_table(text: str) -> Table:
    """``(group_name, group_size, collective) -> {size_mb: time_ms}`` from a table's text (run.py's rules)."""
    lines = text.splitlines()
    result: Table = {}
    if len(lines) < 2:
        return result
    columns = []
    for part in lines[0].split():
        if part.endswith("MB"):
            try:
                columns.append(int(part.replace("MB", "")))
            except ValueError:
                continue
    for line in lines[2:]:
        parts = line.split()
        if not parts or len(parts) < 3 + len(columns):
            continue
        try:
            key = (parts[0], int(parts[1]), parts[2])
            result[key] = {size: float(parts[3 + i]) for i, size in enumerate(columns)}
        except (ValueError, IndexError):
            continue
    return result


def read_table(path: str | Path) -> Table:
    return parse_table(Path(path).read_text())


def remap_table(table: Table, mapping: dict[str, str], pg_config: dict) -> Table:
    """The table's rows under the repro's own group names and sizes: ``mapping`` (a repro's
    ``get_colls_group_mapping()``) names, for each of its groups, the table group whose rows price it; its size
    is ``pg_config``'s (run.py's ``_create_estimator``)."""
    out: Table = {}
    for repro_group, table_group in mapping.items():
        for (group, _, kind), times in table.items():
            if group == table_group:
                out[(repro_group, pg_config[repro_group]["size"], kind)] = times
    return out


def interpolate_ms(size_to_time: dict[int, float], size_mb: float) -> float:
    """run.py's ``interpolate_time``: milliseconds for ``size_mb`` (its quirks: module docstring)."""
    if not size_to_time:
        return 0.0
    sizes = sorted(size_to_time)
    if size_mb < 1.0:
        return size_to_time.get(1, size_to_time[sizes[0]])
    if int(size_mb) in size_to_time:
        return size_to_time[int(size_mb)]
    lower = upper = None
    for s in sizes:
        if s <= size_mb:
            lower = s
        if s >= size_mb and upper is None:
            upper = s
    if lower is None:
        if len(sizes) >= 2:
            s1, s2 = sizes[0], sizes[1]
            slope = (size_to_time[s2] - size_to_time[s1]) / (s2 - s1)
            return max(0.0, size_to_time[s1] + slope * (size_mb - s1))
        return size_to_time[sizes[0]]
    if upper is None:
        if len(sizes) >= 2:
            s1, s2 = sizes[-2], sizes[-1]
            slope = (size_to_time[s2] - size_to_time[s1]) / (s2 - s1)
            return max(0.0, size_to_time[s2] + slope * (size_mb - s2))
        return size_to_time[sizes[-1]]
    if lower == upper:
        return size_to_time[lower]
    t1, t2 = size_to_time[lower], size_to_time[upper]
    return t1 + (size_mb - lower) / (upper - lower) * (t2 - t1)


def _hint(x) -> int | None:
    if isinstance(x, int):
        return x
    node = getattr(x, "node", None)
    return getattr(node, "hint", None)


def _input_bytes(node: fx.Node) -> int | None:
    src = node.args[0] if node.args else None
    if not isinstance(src, fx.Node):
        return None
    val = src.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return None
    shape = [_hint(d) for d in val.shape]
    if any(s is None for s in shape):
        return None
    numel = 1
    for d in shape:
        numel *= d
    return numel * val.dtype.itemsize


def _group_name(node: fx.Node) -> str:
    """The ``group_name`` argument (run.py normalizes the call; these ops take it last, positionally or by name)."""
    if "group_name" in node.kwargs:
        return str(node.kwargs["group_name"])
    schema = getattr(node.target, "_schema", None)
    if schema is not None:
        for i, arg in enumerate(schema.arguments):
            if arg.name == "group_name" and i < len(node.args):
                return str(node.args[i])
    return ""


def collective_info(node: fx.Node) -> tuple[str, int | None, int, str] | None:
    """``(kind, group_size, input_bytes, group_name)`` of a collective node as run.py reads it, else None."""
    if node.op != "call_function":
        return None
    target = str(node.target)
    kind = next((k for k in KINDS if k in target), None)
    if kind is None:
        return None
    size_arg = {"all_gather_into_tensor": 1, "reduce_scatter_tensor": 2}.get(kind)
    group_size = _hint(node.args[size_arg]) if size_arg is not None and len(node.args) > size_arg else None
    nbytes = _input_bytes(node)
    if nbytes is None:
        return None
    return kind, group_size, nbytes, _group_name(node)


def torch_estimate_ms(node: fx.Node, override_bytes: int | None = None) -> float | None:
    """PyTorch's estimate of a collective node in milliseconds, as run.py's fallback gets it on groups
    without an NCCL estimator (its process groups registered); None for any other node. ``override_bytes``:
    PyTorch's bucketer sizing a bucket (input plus output bytes, its ``override_size``)."""
    import torch._inductor.comm_analysis as comm_analysis

    if node.op != "call_function" or getattr(node.target, "namespace", None) != "_c10d_functional" \
            or node.target is torch.ops._c10d_functional.wait_tensor.default:
        return None
    return comm_analysis.estimate_nccl_collective_runtime_from_fx_node(node, override_bytes, use_nccl_estimator=False)


class TableEstimator:
    """Collective times from a table, looked up as run.py's ``NodeEstimator.estimate`` does; ``fallback``
    (``(node, override_bytes) -> ms or None``, e.g. `torch_estimate_ms`) prices the collectives no row
    matches."""

    def __init__(self, table: Table, fallback=None):
        self.table = table
        self.fallback = fallback
        self.matched: set[str] = set()    # nodes the table priced
        self.unmatched: set[str] = set()  # collectives no row matched (the caller's fallback prices them)

    def ms(self, node: fx.Node, input_bytes: int | None = None) -> float | None:
        """Milliseconds of a collective a table row matches (None for others); ``input_bytes``: price it as
        if its input had that many bytes (a bucket a scheduler is sizing)."""
        info = collective_info(node)
        if info is None:
            return None
        kind, group_size, nbytes, group_name = info
        size_mb = (nbytes if input_bytes is None else input_bytes) / BYTES_PER_MB
        for (table_group, gs, cn), size_to_time in self.table.items():
            if cn == kind and table_group in group_name and (group_size is None or gs == group_size):
                return interpolate_ms(size_to_time, size_mb)
        return None

    def seconds(self, node: fx.Node) -> float | None:
        """Seconds for a collective a table row matches, else the fallback's (None without one, and for
        any other node); records which."""
        ms = self.ms(node)
        if ms is not None:
            self.matched.add(node.name)
            return ms / 1e3
        ms = self.fallback(node, None) if self.fallback is not None else None
        if ms is not None or collective_info(node) is not None:
            self.unmatched.add(node.name)
        return None if ms is None else ms / 1e3
