import sys, time, math
from pathlib import Path
from experiments.benchmarks.public_graphs import loaded_graph
from solvercast import optimize, simulate, extract_problem, Schedule
from solvercast.heuristics import best_heuristic
from solvercast.rewrites.bucketing import BucketGraph, apply_buckets
g = sys.argv[1]
with loaded_graph(g, Path('/tmp/ap'), device="meta") as (gm, table, info):
    bgraph = BucketGraph(gm)
    import statistics
    sizes = sorted(s.input_bytes for s in bgraph.sites if s.kind == 'all_gather')
    plan = bgraph.greedy({'all_gather': sizes[len(sizes)//2] * 16})
    bg = apply_buckets(gm, plan, bgraph)
    p = extract_problem(bg, cost_fn=table.seconds)
    p0 = extract_problem(gm, cost_fn=table.seconds)
    peak0 = simulate(p0, Schedule.original(p0)).peak_memory
    for b in (peak0, int(peak0 * 1.1), None):
        q = p.with_budget(b)
        t = time.perf_counter()
        s = best_heuristic(q, memory_budget=b)
        r = simulate(q, s)
        print(b, s.method, r.makespan / 1e6, r.peak_memory / 2**30, round(time.perf_counter() - t, 1))
    for mode in ("group", False):
        p = extract_problem(bg, cost_fn=table.seconds, preserve_collective_order=mode)
        q = p.with_budget(peak0)
        s = best_heuristic(q, memory_budget=peak0)
        r = simulate(q, s)
        print(mode, s.method, r.makespan / 1e6, r.peak_memory / 2**30)
