"""The large distributed fuzz profile: random SPMD programs through `optimize`, judged on real collectives
(`solvercast.testing.distributed_fuzz`: gloo ranks on 127.0.0.1).

    python -m experiments.benchmarks.fuzz_distributed --cases 2000 --ranks 4 [--first 0] [--out FILE]
    python -m experiments.benchmarks.fuzz_distributed --seeds 17,42 --ranks 4 --out /tmp/rerun.md

Case ``i`` is `solvercast.testing.distributed_fuzz.DistCase.draw(i, ranks)`: a program of FSDP and TP layers
(all_gathers before matmuls, matmuls before reduce_scatters and all_reduces, row-wise work after them,
collectives of one kind back to back, in-place, coalesced and ``out=`` writes), traced with real tensors on
odd seeds, on two process groups on every third seed; a method, 1-2 compute streams, a budget (1.0, 1.1 or
none), a time limit of 0.5 or 1 s, the H100's costs or a slowed H100's (where splits pay at these sizes).
Every rank optimizes the program and runs the original and the lowered module on its own inputs with the
real collectives: the ranks of each group must launch the same collectives in the same order, and every
rank's values must be the original's (bitwise, or within a tolerance where the report says a rewrite sums
in another order). All cases run in one pool of ranks, started again after a hang or a crash.

Writes the counts (by outcome, tracing mode and group count), how many calls bucketed, split and wrote
sequence-parallel, the refusals by type and every failure with its seed to ``--out``; hand-written sections
below the counts (``## ...``) are kept.
"""

from __future__ import annotations

import collections
import datetime
import re
import sys
import time
from pathlib import Path

from experiments.common import command_line, write_results, commit_label, invocation
from solvercast.testing.distributed_fuzz import DistCase, Limits, RankPool

RESULTS = Path(__file__).resolve().parents[1] / "results"
MODULE = "experiments.benchmarks.fuzz_distributed"
OUTCOMES = ("ok", "refused", "untraceable", "failed")


def failure_class(reason: str) -> str:
    """A failure's reason without its particulars (ranks, sizes, values): what groups the failures."""
    reason = re.sub(r" \(ranks? [\d, ]+\)$", "", reason)
    if reason.startswith("stray "):
        kind = reason[len("stray "):].split(":")[0]
        where = re.search(r"\(at ([^)]+)\)$", reason)
        return f"stray {kind}" + (f" at {where.group(1)}" if where else "")
    if reason.startswith("wrong values"):
        return reason.split(":")[0]
    if reason.startswith("ranks disagree on collectives"):
        return "ranks disagree on collectives (group " + reason.split("(group ")[1].split(" ")[0] + ")"
    if reason.startswith("memory above the original"):
        return reason.split(":")[0]
    if reason.startswith("ranks would deadlock"):
        return "ranks would deadlock" + (" (the wall clock ended a search on some)" if "wall clock" in reason else "")
    return re.sub(r"\d+(\.\d+)?", "N", reason.split(";")[0])[:100]


def main(argv=None) -> int:
    """Do optimize's results hold up on several processes with real collectives: the same values on every
    rank, the same collectives in the same order on the ranks of each group? Writes the counts, the rewrites
    the calls took, the refusals and every failure to --out (default experiments/results/fuzz_distributed.md;
    the hand-written sections below the counts are kept). Exit status 1 if any case failed."""
    ap = command_line(MODULE, main.__doc__, __doc__)
    ap.add_argument("--cases", type=int, default=2000)
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--seeds", default="", help="comma-separated seeds to run instead of --first/--cases")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--every", type=int, default=10, help="print progress every this many cases")
    ap.add_argument("--out", default=str(RESULTS / "fuzz_distributed.md"))
    args = ap.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",") if s] or list(range(args.first, args.first + args.cases))

    results = []
    t0 = time.perf_counter()
    pool = RankPool(args.ranks, Limits())
    try:
        for i, seed in enumerate(seeds, 1):
            results.append(pool.run(DistCase.draw(seed, args.ranks)))
            if results[-1].outcome == "failed":
                print(results[-1].line(), file=sys.stderr, flush=True)
            if i % args.every == 0 or i == len(seeds):
                el = time.perf_counter() - t0
                counts = collections.Counter(r.outcome for r in results)
                print(f"[{i}/{len(seeds)}] {el:.0f} s ({i / el * 60:.1f} cases/min), "
                      f"eta {el / i * (len(seeds) - i):.0f} s, pool starts {pool.starts}: "
                      + ", ".join(f"{k} {counts[k]}" for k in OUTCOMES if counts[k]), file=sys.stderr, flush=True)
    except KeyboardInterrupt:  # the cases run so far are still written
        print(f"interrupted after {len(results)} cases", file=sys.stderr)
    finally:
        pool.close(kill=True)
    wall = time.perf_counter() - t0
    lines = report_lines(results, args, wall, pool.starts)
    write_results(args.out, lines)  # the sections written by hand below the counts kept
    print("\n".join(lines))
    return 1 if any(r.outcome == "failed" for r in results) else 0


def report_lines(results, args, wall: float, starts: int) -> list[str]:
    """The results file's generated part (no ``## `` headings: those are the hand-written sections')."""
    n = len(results)
    counts = collections.Counter(r.outcome for r in results)

    def table(title: str, key, values) -> list[str]:
        rows = [f"| {title} | " + " | ".join(OUTCOMES) + " | total |", "|---" * (len(OUTCOMES) + 2) + "|"]
        for v in values:
            c = collections.Counter(r.outcome for r in results if key(r) == v)
            rows.append(f"| {v} | " + " | ".join(str(c[o]) for o in OUTCOMES) + f" | {sum(c.values())} |")
        return rows

    ok = [r for r in results if r.outcome in ("ok", "failed")]
    refusals = collections.Counter(r.reasons[0].split(":")[0] for r in results if r.outcome == "refused" and r.reasons)
    untraceable = collections.Counter(r.reasons[0][:120] for r in results if r.outcome == "untraceable" and r.reasons)
    failures = [r for r in results if r.outcome == "failed"]
    classes: dict[str, list[int]] = collections.defaultdict(list)
    for r in failures:
        for name in dict.fromkeys(failure_class(why) + (" [unproven replication]" if r.unproven and
                                                       why.startswith("wrong values") else "") for why in r.reasons):
            classes[name].append(r.case.seed)
    tolerant = [r for r in results if r.outcome == "ok" and r.tolerant]
    retried = [r for r in results if r.retried]
    return [
        "# Distributed fuzz: random SPMD programs through optimize, on real collectives", "",
        f"Run at {commit_label()} on {datetime.date.today().isoformat()}: `{invocation(MODULE)}` "
        f"({n} cases on {args.ranks} gloo ranks in {wall:.0f} s, {n / max(wall, 1e-9) * 60:.1f} cases/min; "
        f"the ranks started {starts} time{'s' if starts != 1 else ''}).", "",
        "Each case: `solvercast.testing.distributed_fuzz.DistCase.draw(seed, ranks)` (module docstrings of "
        "`solvercast.testing.distributed_fuzz` and this script); rerun one with `--seeds SEED`.", "",
        "| outcome | runs |", "|---|---|",
        *[f"| {k} | {counts[k]} |" for k in OUTCOMES],
        f"| **total** | **{n}** |", "",
        *table("tracing", lambda r: r.case.trace, ("fake", "real")), "",
        *table("groups", lambda r: r.case.groups, (1, 2)), "",
        f"Rewrites, over the {len(ok)} calls that returned (ok or failed after): bucketed "
        f"{sum(r.bucketed for r in ok)}, collective-matmul splits {sum(r.decomposed for r in ok)}, sequence "
        f"parallel {sum(r.sequence_parallel for r in ok)}; compared within a tolerance (the report says a rewrite "
        f"may sum in another order) {len(tolerant)}, their largest |diff| "
        f"{max((r.max_diff for r in tolerant), default=0.0):.3g} where they passed; the wall clock ended a search (announced: "
        f"ranks may disagree) {sum(r.announced for r in ok)}, of which the ranks' launches differed (their lowered "
        f"modules not run) {sum(r.announced_disagreement for r in ok)}. Real-traced graphs hold values of several fake "
        "modes, which the rewrites decline (docs/rewrites.md). Memory: at budget 1.0 the lowered module's peak "
        "checked against the original order's by the real-tensor oracle (`solvercast.runtime.memory_oracle`, rank "
        f"0's inputs) in {sum(r.memory_checked for r in ok)} calls (the others' budgets are 1.1 or none, or hold a "
        "collective the oracle has no stand-in for).", "",
        "Refusals (a `SolvercastError` on every rank):", "",
        *([f"- {k}: {v}" for k, v in refusals.most_common()] or ["- none"]), "",
        "Untraceable (torch cannot trace or run the program; no finding):", "",
        *([f"- {k}: {v}" for k, v in untraceable.most_common()] or ["- none"]), "",
        "Run again (a rank crashed before `optimize` was called, in tracing or in the original module: torch's "
        "code; or was killed by a signal in the lowered module, where torch 2.13's functional all_gather on gloo "
        "corrupts the heap now and then whatever the order, experiments/repros/gloo_functional_all_gather.py; "
        "the second run's outcome is the case's, and a second crash in the lowered module fails it):", "",
        *([f"- seed {r.case.seed}: first {r.retried}; then {r.outcome}" for r in retried] or ["- none"]), "",
        f"Failures: {len(failures)}. `unproven replication`: the program adds to an all_reduce's result a value "
        "that differs between ranks of its group (on purpose, now and then), which sequence parallelism must not "
        "fold (it folds only what `solvercast.graph.replication` proves alike; the case tells optimize which "
        "inputs are).", "",
        *[f"- {k}: {len(v)} (seeds {', '.join(map(str, v[:12]))}{', ...' if len(v) > 12 else ''})"
          for k, v in sorted(classes.items(), key=lambda kv: -len(kv[1]))], "",
        *[f"- {r.line()}" for r in failures],
    ]


if __name__ == "__main__":
    sys.exit(main())
