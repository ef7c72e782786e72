"""Time limits held with the rewrites on, at 10,000 tasks (heavy: minutes; `-m heavy`). The default run
checks the mechanism by counted work (tests/pipeline/test_buckets.py); these time the whole call.

The graph is `build("synthetic", tasks=10000, seed=7)`: its decomposition search once built a plan it
then refused (two sites splitting one matmul), and its bucket search once started plans its share could
not pay for (a 1 s call took 1.44 s)."""

import math
import time

import pytest

from solvercast import optimize
from solvercast.models import build

pytestmark = pytest.mark.heavy


@pytest.fixture(scope="module")
def synthetic():
    return build("synthetic", tasks=10000, seed=7)


@pytest.mark.parametrize("limit", [1.0, 2.0, 5.0, 60.0])
def test_a_call_with_the_defaults_returns_within_its_limit(synthetic, limit):
    t0 = time.perf_counter()
    res = optimize(synthetic, time_limit=limit, memory_budget=1.0)
    seconds = time.perf_counter() - t0
    assert seconds <= 1.2 * limit
    if res.report.analysed:
        assert res.optimized.peak_memory <= res.report.memory_budget
        assert res.report.phases["total"] <= seconds


def test_no_budget_at_all_and_two_streams_hold_it_too(synthetic):
    t0 = time.perf_counter()
    optimize(synthetic, time_limit=5.0, memory_budget=math.inf, compute_streams=2)
    assert time.perf_counter() - t0 <= 1.2 * 5.0
