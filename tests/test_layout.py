"""The package's layout rules, read from the source with `ast` (nothing is imported):

* subpackages are floors that import downward only (`FLOORS`); two subpackages on one floor do not
  import each other;
* no import cycle between modules, counting imports inside functions too;
* no import of a solvercast module inside a function (a sign of a module on the wrong floor);
* no private name (``_x``) imported from another module;
* every error class lives in ``solvercast/errors.py``;
* functions stay short: none in ``solvercast/`` over `LONGEST_FUNCTION` lines, at most `LONG_FUNCTIONS` of
  `LONG_FUNCTION` lines or more; `optimize`'s docstring documents every parameter under ``Args:``;
* code comments and docstrings speak of the code, not of how it was written (`HISTORY_WORDS`).

    .venv/bin/python -m pytest tests/test_layout.py -q
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: source folder -> the package it installs as (pyproject's package-dir)
SOURCES = {"solvercast": "solvercast", "heuristics": "solvercast.heuristics", "models": "solvercast.models"}
#: floor of each part of the package: a module imports only from lower floors and from its own part
FLOORS = {
    "solvercast.errors": 0, "solvercast.gc_paused": 0,
    "solvercast.ir": 1,  # Problem, Schedule, engine, simulate, bounds, budgets: no torch.fx
    "solvercast.graph": 2,  # what an FX node is: metadata, op facts, node kinds, collective kinds
    "solvercast.cost": 3,  # device profiles, roofline, cost models, calibration
    "solvercast.fx": 4, "solvercast.models": 4,  # FX <-> IR (extract, lower, pinning, streams); workloads
    "solvercast.solvers": 5, "solvercast.heuristics": 5,  # methods on the IR, side by side
    "solvercast.rewrites": 5,  # graph rewrites the optimizer may choose (bucketing): FX in, FX out
    "solvercast.runtime": 6,  # measuring lowered modules, pictures
    "solvercast.pipeline": 7,  # methods registry, time plan, portfolio, pareto, report, api, cli
    "solvercast.testing": 8,  # random problems and programs for tests and experiments
    "solvercast": 9,  # the public names
}
#: function lengths (the ``def`` to its last line, docstring included): a longer function is phases to name
LONGEST_FUNCTION, LONG_FUNCTION, LONG_FUNCTIONS = 120, 100, 3
#: words that narrate how the code came to be rather than what it does
HISTORY_WORDS = re.compile(r"\b(sessions?|sittings?|reviews?|reviewer|helper agent|workplace|"
                           r"first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|"
                           r"thirteenth|fourteenth|fifteenth) (session|sitting|review)|"
                           r"\b(session|sitting|a review|reviewer|(?<!OR-Tools )(?<!PyTorch )issue \d+|20\d\d-\d\d-\d\d)\b", re.I)


def modules() -> dict[str, Path]:
    out = {}
    for folder, package in SOURCES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([package, *parts])] = path
    return out


MODULES = modules()


def part(module: str) -> str:
    """The `FLOORS` key a module belongs to (its longest matching prefix)."""
    for n in range(module.count(".") + 1, 0, -1):
        prefix = ".".join(module.split(".")[:n])
        if prefix in FLOORS:
            return prefix
    raise AssertionError(f"{module} is on no floor: add its part to FLOORS")


def imports(module: str) -> list[tuple[str, int, bool, list[str]]]:
    """(imported solvercast module, line, inside a function, names taken) for each import of ``module``."""
    path = MODULES[module]
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue  # annotations only
            if isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    up = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    base = ".".join(up + ([base] if base else []))
                if base.startswith("solvercast"):
                    for alias in child.names:
                        sub = f"{base}.{alias.name}"
                        if sub in MODULES:
                            found.append((sub, child.lineno, in_function, []))
                        else:
                            found.append((base, child.lineno, in_function, [alias.name]))
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name.startswith("solvercast"):
                        found.append((alias.name, child.lineno, in_function, []))
            visit(child, inner)

    visit(tree, False)
    return [(m, line, inner, names) for m, line, inner, names in found if m in MODULES]


GRAPH = {m: imports(m) for m in MODULES}


def test_every_module_is_on_a_floor():
    for module in MODULES:
        part(module)


def test_floors_import_downward_only():
    wrong = []
    for module, found in GRAPH.items():
        if module == "solvercast":
            continue
        for target, line, _, _ in found:
            mine, theirs = part(module), part(target)
            if mine != theirs and FLOORS[theirs] >= FLOORS[mine] and theirs != "solvercast.errors":
                wrong.append(f"{MODULES[module].relative_to(ROOT)}:{line} imports {target} "
                             f"(floor {FLOORS[theirs]} from floor {FLOORS[mine]})")
    assert not wrong, "\n".join(wrong)


def test_no_import_cycle():
    edges = {m: sorted({t for t, *_ in found if t != m and not t == m.rsplit(".", 1)[0]}) for m, found in GRAPH.items()}
    # a package's __init__ importing its own modules is how a package exports them: not a cycle edge back
    state, stack, cycles = {}, [], []

    def walk(m):
        state[m] = "open"
        stack.append(m)
        for t in edges[m]:
            if state.get(t) == "open":
                cycles.append(" -> ".join(stack[stack.index(t):] + [t]))
            elif t not in state:
                walk(t)
        stack.pop()
        state[m] = "done"

    for m in sorted(edges):
        if m not in state:
            walk(m)
    assert not cycles, "\n".join(cycles)


def test_no_solvercast_import_inside_a_function():
    inside = [f"{MODULES[m].relative_to(ROOT)}:{line} imports {t}" for m, found in GRAPH.items()
              for t, line, in_function, _ in found if in_function]
    assert not inside, "\n".join(inside)


def test_no_private_name_from_another_module():
    private = [f"{MODULES[m].relative_to(ROOT)}:{line} takes {n} from {t}" for m, found in GRAPH.items()
               for t, line, _, names in found for n in names
               if n.startswith("_") and not n.startswith("__") and t != m]
    assert not private, "\n".join(private)


def _layout_block() -> str:
    readme = (ROOT / "README.md").read_text()
    block = readme[readme.index("## Layout"):]
    start = block.index("```")
    return block[start:block.index("```", start + 3)]


def test_readme_layout_names_every_module():
    """README's layout is the map a newcomer reads: every module of the three packages is named in it (by its
    file name without ``.py``), so a new module cannot land unmapped."""
    import re

    named = set(re.findall(r"[A-Za-z_][A-Za-z_0-9]*", _layout_block()))
    missing = [str(path.relative_to(ROOT)) for path in sorted(MODULES.values())
               if path.stem != "__init__" and path.stem not in named]
    assert not missing, "README's layout does not name: " + ", ".join(missing)


def test_error_classes_live_in_errors():
    elsewhere = []
    for module, path in MODULES.items():
        if module == "solvercast.errors":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            # a private exception used as a signal inside one module (models/_capture's stop) is no error type
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_") and any(
                    re.search(r"(Error|Exception)$", ast.unparse(b)) for b in node.bases):
                elsewhere.append(f"{path.relative_to(ROOT)}:{node.lineno} class {node.name}")
    assert not elsewhere, "\n".join(elsewhere)


@pytest.mark.parametrize("folder", ["solvercast", "heuristics", "models", "tests", "experiments"])
def test_comments_speak_of_the_code(folder):
    said = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        if path == Path(__file__):  # its own pattern names the words
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if HISTORY_WORDS.search(line.replace('scope="session"', "")):  # pytest's fixture scope
                said.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not said, "\n".join(said)


def test_functions_stay_short():
    lengths = sorted(((node.end_lineno - node.lineno + 1, f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
                      for path in sorted((ROOT / "solvercast").rglob("*.py"))
                      for node in ast.walk(ast.parse(path.read_text()))
                      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))), reverse=True)
    too_long = [f"{where} ({n} lines)" for n, where in lengths if n > LONGEST_FUNCTION]
    assert not too_long, "over the longest a function may be: " + ", ".join(too_long)
    long = [f"{where} ({n} lines)" for n, where in lengths if n >= LONG_FUNCTION]
    assert len(long) <= LONG_FUNCTIONS, f"more than {LONG_FUNCTIONS} functions of {LONG_FUNCTION} lines or more: " \
                                        + ", ".join(long)


def test_optimize_documents_every_parameter_under_args():
    tree = ast.parse(MODULES["solvercast.pipeline.api"].read_text())
    optimize = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "optimize")
    doc = ast.get_docstring(optimize)
    args = doc[doc.index("Args:"):doc.index("Returns:")]
    documented = set(re.findall(r"^\s{4}(\w+):", args, re.M))
    parameters = [a.arg for a in (*optimize.args.args, *optimize.args.kwonlyargs)]
    assert [p for p in parameters if p not in documented] == []
    assert documented <= set(parameters)  # no option documented that the function does not take
