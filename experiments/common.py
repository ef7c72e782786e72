"""What the experiment scripts share: their command lines, the graphs they name, and their markdown tables.
Standard library only: `tuning/heuristics.py compare`'s worker imports the scripts on a base commit's code too."""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path


def command_line(module: str, question: str, doc: str | None = None) -> argparse.ArgumentParser:
    """The parser of ``python -m <module>``. Its description: ``question`` (what the command answers and where
    its results go: the docstring of the script's ``main``) as one paragraph, its lines joined, then ``doc``
    (the module's docstring, or the part of it below the commands) after a blank line, as written."""
    question = " ".join(question.split())
    return argparse.ArgumentParser(prog=f"python -m {module}", formatter_class=argparse.RawDescriptionHelpFormatter,
                                   description=question if doc is None else f"{question}\n\n{doc}")


def invocation(module: str, argv: list[str] | None = None) -> str:
    """The command a result names: ``python -m <module>`` and its arguments (``argv``, else the process's), quoted
    as a shell would need them."""
    args = sys.argv[1:] if argv is None else argv
    return f"python -m {module} " + " ".join(shlex.quote(a) for a in args)


def below_commands(doc: str) -> str:
    """A module docstring without its first paragraph (the summary) and the second (its command lines)."""
    return doc.split("\n\n", 2)[2]


def names(csv: str) -> set[str]:
    """The names of a comma-separated option (empty: none)."""
    return set(filter(None, csv.split(",")))


def chosen(ap: argparse.ArgumentParser, csv: str, known, what: str = "names") -> list[str]:
    """The names of a comma-separated option in the order written; ``ap.error`` (exit 2) for one not in
    ``known``."""
    picked = [n for n in csv.split(",") if n]
    unknown = [n for n in picked if n not in known]
    if unknown:
        ap.error(f"unknown {what} {unknown}; expected some of {', '.join(known)}")
    return picked


def zoo_graphs(spec: str) -> list[tuple[str, dict]]:
    """Zoo graphs as ``(name, build's parameters)`` from ``"tp_mlp layers=8; synthetic tasks=150 seed=1"``:
    entries split by ``;``, each a model name and its integer parameters, in the order written."""
    out = []
    for entry in filter(None, (e.strip() for e in spec.split(";"))):
        name, *params = entry.split()
        out.append((name, {k: int(v) for k, v in (p.split("=") for p in params)}))
    return out


def print_table_head(title: str, columns: list[str]) -> None:
    """A markdown table's title (and a blank line), its header row and its separator, to stdout."""
    print(f"{title}\n")
    print("| " + " | ".join(columns) + " |")
    print("|---" * len(columns) + "|")


def commit_label() -> str:
    """The checkout's commit, "(with uncommitted changes)" when tracked files differ from it, for a result's
    header line; "unknown" outside a git checkout."""
    here = Path(__file__).resolve().parent
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=here,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, cwd=here).stdout.strip()
        return rev + (" (with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def write_results(path: str | Path, lines: list[str]) -> None:
    """Write ``lines`` to ``path``, keeping the sections written by hand below them (from the first "## "
    heading of the file as it was), so that a rerun replaces the counts and not the findings."""
    out = Path(path)
    kept = ""
    if out.exists():
        text = out.read_text()
        kept = text[text.index("\n## "):] if "\n## " in text else ""
    out.write_text("\n".join(lines) + "\n" + kept)
