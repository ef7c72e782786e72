"""What the tests share, imported as ``from tests.support import ...`` (the repository root is on
``sys.path`` through pytest's ``pythonpath``):

* `brute_force`, `topological_orders`, `collective_order_ok` (oracle.py): every topological order and
  stream assignment of a tiny problem, judged by simulate; `reference_times`: the timing rules written
  plainly, the engine's check;
* `SHAPES`, `ProblemBuilder` (`solvercast.testing.shapes`, which the tuning studies use too): small
  hand-built Problems in the shapes of PyTorch's own comm-reordering tests;
* `two_group_collectives` (problems.py): two collectives of two process groups whose best schedule
  reorders them;
* `collective_graph` (graphs.py): every functional collective of one group, traced on fake tensors;
* `SCRIPTS`: the folder of the scripts tests run in fresh processes (scripts/: calibration_workers.py,
  legacy_c10d_case.py, legacy_group_case.py), run by path, never imported.

Fixtures are in tests/conftest.py.
"""

from pathlib import Path

from solvercast.testing.shapes import SHAPES, ProblemBuilder
from tests.support.graphs import collective_graph
from tests.support.oracle import brute_force, collective_order_ok, reference_times, topological_orders
from tests.support.problems import two_group_collectives

SCRIPTS = Path(__file__).resolve().parent / "scripts"

__all__ = ["SCRIPTS", "SHAPES", "ProblemBuilder", "brute_force", "collective_graph", "collective_order_ok",
           "reference_times", "topological_orders", "two_group_collectives"]
