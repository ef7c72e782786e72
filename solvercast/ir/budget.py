"""The one reading of a memory budget argument, for `optimize` and every heuristic alike."""

from __future__ import annotations

import math
from collections.abc import Callable

from solvercast.ir.problem import format_bytes


def resolve_budget(memory_budget: int | float | None, original_peak: Callable[[], int],
                   default: int | None) -> int | None:
    """Bytes of the budget ``memory_budget`` stands for, or None for no budget.

    An int: bytes. A float: a ratio of the original order's simulated peak (1.0 = never worse than
    the graph's own order; ``original_peak()`` is called only then). ``math.inf``: no budget. None:
    ``default`` (`optimize` passes the original peak, the heuristics the machine's budget). Raises
    ValueError for anything else (a bool, a negative number, a ratio that is not > 0, NaN).
    """
    if memory_budget is None:
        return default
    if isinstance(memory_budget, bool) or not isinstance(memory_budget, (int, float)):
        raise ValueError(f"memory_budget must be bytes (int), a ratio (float), math.inf or None, got {memory_budget!r}")
    if isinstance(memory_budget, float):
        if math.isinf(memory_budget) and memory_budget > 0:
            return None
        if not memory_budget > 0 or math.isinf(memory_budget):
            raise ValueError(f"a memory_budget ratio must be > 0, got {memory_budget!r}")
        return int(memory_budget * original_peak())
    if memory_budget < 0:
        raise ValueError(f"memory_budget must be a non-negative number of bytes, got {memory_budget!r}")
    return int(memory_budget)


def budget_label(budget: int | None, ratio: float | None) -> str:
    """A budget as the user gave it: ``none``, ``1.02x`` (a ratio of the original peak) or bytes."""
    return "none" if budget is None else f"{ratio:g}x" if ratio is not None else format_bytes(budget)
