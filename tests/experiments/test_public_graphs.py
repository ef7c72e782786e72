"""autoparallel's collective tables are read and interpolated as its run.py does, and a vendored Llama-3 8B
repro graph is traced, extracted by solvercast and simulated in its original order."""

import pytest
import torch
import torch.distributed as dist
import torch.fx as fx

from experiments.benchmarks import public_graphs
from experiments.benchmarks.collective_tables import TableEstimator, interpolate_ms, parse_table, torch_estimate_ms

TINY = """\
  Group    Group Size  Collective                1MB (ms)    2MB (ms)    4MB (ms)
-------  ------------  ----------------------  ----------  ----------  ----------
      1             8  all_reduce                     0.1         0.2         0.6
      0             8  reduce_scatter_tensor          1.0         2.0         4.0
      0             8  all_gather_into_tensor         0.5
"""


def test_table_is_parsed_with_its_size_columns():
    table = parse_table(TINY)
    # the short all_gather row is skipped, as run.py skips it
    assert table == {("1", 8, "all_reduce"): {1: 0.1, 2: 0.2, 4: 0.6},
                     ("0", 8, "reduce_scatter_tensor"): {1: 1.0, 2: 2.0, 4: 4.0}}


@pytest.mark.parametrize("size_mb, ms", [
    (0.5, 0.1),   # below 1 MB: the 1 MB value
    (1.9, 0.1),   # int(1.9) = 1 is a column: its value, not interpolated (run.py's quirk)
    (2.5, 0.2),   # int(2.5) = 2 is a column
    (3.0, 0.4),   # between 2 and 4: 0.2 + (3 - 2) / 2 * 0.4
    (3.5, 0.5),   # 0.2 + 1.5 / 2 * 0.4
    (6.0, 1.0),   # above 4: extrapolated from the last two, 0.6 + 2 * 0.2
])
def test_interpolation_follows_run_py(size_mb, ms):
    assert interpolate_ms({1: 0.1, 2: 0.2, 4: 0.6}, size_mb) == pytest.approx(ms)


def _collective(graph, op, mb, *args):
    x = graph.placeholder(f"x{len(graph.nodes)}")
    x.meta["val"] = torch.empty(int(mb * 2**20) // 2, dtype=torch.bfloat16, device="meta")
    return graph.call_function(op, (x, *args))


def test_lookup_by_kind_group_size_and_group_name_substring():
    c10d = torch.ops._c10d_functional
    g = fx.Graph()
    ar = _collective(g, c10d.all_reduce.default, 3, "sum", "11")  # group "1" is a substring of "11": matched
    rs = _collective(g, c10d.reduce_scatter_tensor.default, 6, "sum", 8, "0")
    rs4 = _collective(g, c10d.reduce_scatter_tensor.default, 6, "sum", 4, "0")  # no row of group size 4
    est = TableEstimator(parse_table(TINY))
    assert est.seconds(ar) == pytest.approx(0.4e-3)
    assert est.seconds(rs) == pytest.approx(6.0e-3)  # 4.0 + 2 * 1.0
    assert est.seconds(rs4) is None
    assert est.matched == {ar.name, rs.name} and est.unmatched == {rs4.name}
    priced = TableEstimator(parse_table(TINY), fallback=lambda node, override: 7.0 if node is rs4 else None)
    assert priced.seconds(rs4) == pytest.approx(7.0e-3) and priced.seconds(ar) == pytest.approx(0.4e-3)
    assert priced.unmatched == {rs4.name}


def test_vendored_forward_graph_is_read_extracted_and_simulated():
    from solvercast import simulate
    from solvercast.fx.extract import extract_problem
    from solvercast.ir.schedule import Schedule

    initialized = dist.is_initialized()  # a default group made by an earlier test stays as it is
    with public_graphs.loaded_graph("fw_64_1d") as (gm, table, info):
        assert info["nodes"] == 3997 and info["world"] == 64 and info["table"] == "colls8_8.table"
        assert public_graphs.collective_counts(gm) == "291/0/0"
        # getitems make_fx leaves without a value: 96 of a None item (nothing to derive), 64 of an int (derived)
        assert info["missing"] == 160
        problem = extract_problem(gm, cost_fn=table.seconds)
        assert any("values derived for 64 nodes" in note for note in problem.notes)
        result = simulate(problem, Schedule.original(problem))
        # its all_gathers run on a group of 64, which no row of the 8-GPU table matches: PyTorch's
        # estimate prices them, as run.py does
        assert len(table.matched) == 0 and len(table.unmatched) == 291
        gather = next(n for n in gm.graph.nodes if n.name in table.unmatched)
        assert table.seconds(gather) == pytest.approx(torch_estimate_ms(gather) / 1e3)
        assert torch_estimate_ms(gather) > 0
    assert dist.is_initialized() == initialized
    assert len(problem.tasks) > 3000 and result.makespan > 0 and result.peak_memory > 0


def test_vendored_backward_graph_reads_its_tables_and_waits_on_inputs():
    from solvercast import simulate
    from solvercast.graph.nodes import waits_on_inputs
    from solvercast.fx.extract import extract_problem
    from solvercast.ir.schedule import Schedule

    with public_graphs.loaded_graph("bw_64_2d") as (gm, table, info):
        assert info["nodes"] == 5502 and info["world"] == 8 and info["missing"] == 0
        assert public_graphs.collective_counts(gm) == "211/180/33"
        # reduce_scatters its forward graph launched reach it as inputs, still in flight: read as finished
        assert len(waits_on_inputs(gm.graph)) == 17
        problem = extract_problem(gm, cost_fn=table.seconds)
        # the reduce_scatters of the tensor-parallel group "1": the table has reduce_scatter rows for "0" only
        assert len(table.matched) == 391 and len(table.unmatched) == 33
        assert all(name.startswith("reduce_scatter") for name in table.unmatched)
        result = simulate(problem, Schedule.original(problem))
        # under its runtime's rule (a torch.compile backward frees its saved activations and tangents) it holds
        # less at its peak than with every input held, and says why
        freed, rule = public_graphs.runtime_rule_problem(gm, table.seconds)
        lighter = simulate(freed, Schedule.original(freed))
    assert len(problem.tasks) > 5000 and result.makespan > 0
    assert "tangents" in rule and lighter.peak_memory < result.peak_memory
    assert lighter.makespan == result.makespan


def test_vendored_deepseek_forward_graph_with_data_dependent_splits_is_read_and_extracted():
    """DeepSeek-V3's forward (MoE): it imports triton for a user kernel (a stand-in here, where torch has none),
    its all_to_alls' split sizes are read from routing counts (416 unbacked symbols, given the even split),
    26 waits wait on a wait, and its groups are priced through the repro's table mapping (EP groups "513",
    "521" by the table's group "1", FSDP "0" by "0")."""
    import sys

    from solvercast import simulate
    from solvercast.fx.extract import extract_problem
    from solvercast.graph.fxmeta import hint_int
    from solvercast.ir.schedule import Schedule

    with public_graphs.loaded_graph("dsv3_fw_64") as (gm, table, info):
        # the stand-in is gone, and torch's cached answer to "is triton installed" is still the true one
        import importlib.util

        from torch.utils._triton import has_triton_package
        assert "triton" not in sys.modules or hasattr(sys.modules["triton"], "__file__")
        assert has_triton_package() == (importlib.util.find_spec("triton") is not None)
        assert info["nodes"] == 8161 and info["world"] == 64 and info["table"] == "colls8_8.table"
        assert public_graphs.collective_counts(gm) == "377/0/0 + 78 A2A"
        a2a = [n for n in gm.graph.nodes if "all_to_all_single" in str(n.target)]
        # 26 layers, two all_to_alls each with 8 input and 8 output splits read from data
        assert info["even_splits"] == 26 * 2 * 16
        first = a2a[0]
        rows = first.args[0].meta["val"].shape[0]
        assert hint_int(first.meta["val"].shape[0], fallback=None) == rows  # 8 even splits in, 8 out
        # flex attention has a FLOP formula; the user kernel none: the report lists it as priced by bytes
        from solvercast.graph.nodes import schemaless_ops
        priced_by_bytes = schemaless_ops(gm.graph)
        assert [k for k in priced_by_bytes if "flex" in k] == []
        assert [v for k, v in priced_by_bytes.items() if "triton_kernel_wrapper" in k] == [26]
        problem = extract_problem(gm, cost_fn=table.seconds)
        # the table has no all_to_all rows: PyTorch's estimate prices them, as run.py does
        assert len(table.matched) == 377 and table.unmatched == {n.name for n in a2a}
        result = simulate(problem, Schedule.original(problem))
        by_name = {t.name: t for t in problem.tasks}
        assert all(by_name[n.name].duration > 0 for n in a2a)
    assert len(problem.tasks) > 7000 and result.makespan > 0 and result.peak_memory > 0


def test_buckets_of_the_vendored_backward_graph_are_priced_by_the_table_at_their_summed_bytes():
    """The forward graph's FSDP all_gathers (group "0", 8 ranks) merged by solvercast's bucketing: each
    launch priced by the table row at the members' summed input bytes, as the benchmark prices PyTorch's
    buckets (`table_prices` with the bytes PyTorch sizes a bucket by: input plus output)."""
    from solvercast.fx.extract import extract_problem
    from solvercast.graph.collectives import collective_kind_and_group
    from solvercast.rewrites.bucketing import BucketGraph, apply_buckets
    from experiments.benchmarks.collective_tables import BYTES_PER_MB, collective_info

    with public_graphs.loaded_graph("bw_64_2d", device="meta") as (gm, table, info):
        graph = BucketGraph(gm)
        sizes = sorted(s.input_bytes for s in graph.sites if s.kind == "all_gather")
        plan = graph.greedy({"all_gather": 8 * sizes[len(sizes) // 2]})
        assert plan.buckets
        bucketed = apply_buckets(gm, plan, graph)
        problem = extract_problem(bucketed, cost_fn=table.seconds)
        by_name = {n.name: n for n in gm.graph.nodes}
        launches = [n for n in bucketed.graph.nodes if n.name.startswith("bucket_all_gather")
                    and collective_info(n) is not None]
        assert len(launches) == len(plan.buckets)
        durations = {t.name: t.duration for t in problem.tasks}
        price = public_graphs.table_prices(table)
        for launch, bucket in zip(launches, plan.buckets):
            summed = sum(collective_info(by_name[m])[2] for m in bucket)
            assert collective_info(launch)[2] == summed
            row = next(t for (g, gs, kind), t in table.table.items() if kind == "all_gather_into_tensor" and g == "0")
            expected_ms = interpolate_ms(row, summed / BYTES_PER_MB)
            assert durations[launch.name] == round(expected_ms * 1e6)
            # the price PyTorch's bucketer is given for the same bucket, sized as input + output bytes
            _, ranks, _ = collective_kind_and_group(launch)
            assert price(by_name[bucket[0]], summed * (ranks + 1)) == pytest.approx(expected_ms)


@pytest.mark.heavy
def test_script_prints_a_row_per_graph(capsys):
    assert public_graphs.main(["--graphs", "fw_64_1d", "--time-limit", "2"]) == 0
    out = capsys.readouterr().out
    assert "| fw_64_1d | 3997 | 3703 | 291/0/0 | 0 / 291 |" in out


def test_the_compute_floor_bounds_pytorch_s_bucketed_step_and_solvercast_s():
    """The floor `--floors` reports is a bound: PyTorch's bucketed step and solvercast's own are no shorter."""
    from experiments.benchmarks.torch_overlap import unavailable_reason
    from solvercast import optimize, simulate
    from solvercast.fx.extract import extract_problem
    from solvercast.ir.schedule import Schedule

    row = public_graphs.compute_floor("fw_64_1d", None)
    assert row["colls"] == "291/0/0" and row["floor"] > 0
    if unavailable_reason() is None:
        assert row["floor"] <= row["torch"].makespan
    with public_graphs.loaded_graph("fw_64_1d", device="meta") as (gm, table, info):
        res = optimize(gm, time_limit=5, cost_fn=table.seconds)
        judged = extract_problem(res.gm, cost_fn=table.seconds)
        assert row["floor"] <= simulate(judged, Schedule.original(judged)).makespan
