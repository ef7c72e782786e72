"""The large fuzz profile: random FX programs through `optimize`, every result checked (solvercast.testing.fuzz).

    python -m experiments.benchmarks.fuzz --cases 2000 [--first 0] [--workers 2] [--out experiments/results/fuzz.md]

Case ``i`` is `solvercast.testing.fuzz.Case.draw(i)`: a random program (fake or real traced), method, compute
stream count and budget. Each is optimized and checked: a result or a `SolvercastError`; the same values
as the original on real inputs; within its budget (the report's, and the lowered module's own
program-order peak with its anchors); the same lowered program on a repeat call. Writes the counts, the
refusals by error type, and every failure (with the case, to rerun it) to ``--out``.
"""

from __future__ import annotations

import collections
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from experiments.common import command_line, write_results

RESULTS = Path(__file__).resolve().parents[1] / "results"


def run_case(seed: int) -> tuple[int, str, str, list[str]]:
    import warnings

    from solvercast.testing.fuzz import Case, check_optimize

    warnings.filterwarnings("ignore")
    case = Case.draw(seed)
    try:
        outcome, why = check_optimize(case)
    except Exception as e:  # noqa: BLE001 - a crash of the checker itself is a failure too
        outcome, why = "failed", [f"checker crashed: {type(e).__name__}: {e}"[:300]]
    return seed, repr(case), outcome, why


def main(argv=None) -> int:
    """Does optimize hold up on random FX programs? Writes the counts, refusals and failures to --out (default
    experiments/results/fuzz.md; the hand-written sections below the counts are kept)."""
    ap = command_line("experiments.benchmarks.fuzz", main.__doc__, __doc__)
    ap.add_argument("--cases", type=int, default=2000)
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default=str(RESULTS / "fuzz.md"))
    args = ap.parse_args(argv)
    seeds = range(args.first, args.first + args.cases)
    counts: collections.Counter = collections.Counter()
    refusals: collections.Counter = collections.Counter()
    failures = []
    t0 = time.perf_counter()
    with ProcessPoolExecutor(args.workers) as pool:
        for i, (seed, case, outcome, why) in enumerate(pool.map(run_case, seeds, chunksize=4), 1):
            counts[outcome] += 1
            if outcome == "refused":
                refusals[why[0].split(":")[0]] += 1
            elif outcome == "failed":
                failures.append((seed, case, why))
            if i % 50 == 0 or i == len(seeds):
                el = time.perf_counter() - t0
                print(f"[{i}/{len(seeds)}] {el:.0f} s, eta {el / i * (len(seeds) - i):.0f} s: "
                      + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())), file=sys.stderr, flush=True)
    wall = time.perf_counter() - t0
    lines = [
        "# Fuzz: random FX programs through optimize", "",
        f"Command: `python -m experiments.benchmarks.fuzz --cases {args.cases} --first {args.first} "
        f"--workers {args.workers}` ({wall:.0f} s on {args.workers} workers).", "",
        "Each case: `solvercast.testing.fuzz.Case.draw(seed)` (program, fake or real trace, method, 1-2 compute streams, "
        "budget 0.9 / 1.0 / 1.1 / none, time limit 1 s), checked by `solvercast.testing.fuzz.check_optimize`.", "",
        "| outcome | runs |", "|---|---|",
        *[f"| {k} | {counts[k]} |" for k in ("ok", "refused", "untraceable", "failed")],
        f"| **total** | **{sum(counts.values())}** |", "",
        "`untraceable`: torch cannot trace or eagerly run the random program (e.g. an `out=` that overlaps "
        "its input): not a finding.", "",
        "Refusals (a `SolvercastError`: a budget no schedule meets, a method out of its range):", "",
        *[f"- {k}: {v}" for k, v in refusals.most_common()], "",
        f"Failures: {len(failures)}", "",
        *[f"- seed {seed}, {case}: {'; '.join(why)}" for seed, case, why in failures],
    ]
    write_results(args.out, lines)  # the sections written by hand below the counts kept
    print("\n".join(lines))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
