"""Compare two sweep CSVs of the same grid: makespans and peaks that differ, row by row.

    .venv/bin/python experiments/compare_sweeps.py before.csv after.csv

Rows are matched by the sweep's key. Heuristic and original methods must agree exactly (they are
deterministic); a solver row is compared only where both runs proved their answer optimal (a solver
stopped by its time limit may legitimately end elsewhere on a loaded machine). Status, makespan and
peak are compared; timing columns are not. Exits 1 on any difference.
"""

from __future__ import annotations

import csv
import sys

from sweep import KEY, SOLVER_METHODS  # noqa: E402  (experiments/ is on sys.path when run as a script)

FIELDS = ("status", "optimized_makespan", "optimized_peak_memory", "method_used")


def _rows(path: str) -> dict[tuple, dict]:
    with open(path, newline="") as f:
        return {tuple(r[k] for k in KEY): r for r in csv.DictReader(f)}


def compare(before: dict, after: dict) -> tuple[list[str], dict]:
    diffs, counts = [], {"compared": 0, "solver_rows_not_proved": 0, "missing": 0}
    for key in sorted(set(before) | set(after)):
        a, b = before.get(key), after.get(key)
        if a is None or b is None:
            counts["missing"] += 1
            diffs.append(f"{key}: only in {'after' if a is None else 'before'}")
            continue
        if key[KEY.index("method")] in SOLVER_METHODS and not (
                a.get("solver_status") == b.get("solver_status") == "optimal"):
            counts["solver_rows_not_proved"] += 1
            continue
        counts["compared"] += 1
        for f in FIELDS:
            if a.get(f) != b.get(f):
                diffs.append(f"{key}: {f} {a.get(f)!r} -> {b.get(f)!r}")
    return diffs, counts


def main(argv: list[str]) -> int:
    diffs, counts = compare(_rows(argv[0]), _rows(argv[1]))
    print("\n".join(diffs) if diffs else "no differences")
    print(", ".join(f"{k} {v}" for k, v in counts.items()))
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
