"""Fixtures shared by the test modules (one definition each, instead of a twin per module)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def zoo_graph():
    """``zoo_graph(name, **params)``: `solvercast.models.build`, each graph traced once per test run
    (tests must not mutate the module they get)."""
    from solvercast.models import build

    cache = {}

    def get(name: str, **params):
        key = (name, tuple(sorted(params.items())))
        if key not in cache:
            cache[key] = build(name, **params)
        return cache[key]

    return get
