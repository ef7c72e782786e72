"""Typed errors: "no solution" is not "bug", and bad input says what to do."""

from __future__ import annotations


class SolvercastError(Exception):
    """Base class of every error solvercast raises on purpose."""


class ExtractionError(SolvercastError, ValueError):
    """The FX graph cannot be turned into a Problem (missing metadata, cycle, unknown shape)."""


class InvalidProblemError(SolvercastError, ValueError):
    """A Problem built by hand breaks one of its own invariants."""


class InvalidScheduleError(SolvercastError, ValueError):
    """A Schedule breaks a rule of the execution semantics (see DESIGN.md)."""


class UnsupportedProblemError(SolvercastError, ValueError):
    """The chosen method cannot schedule this problem (too large, streams or budget it does not
    model); the message names what works instead."""


class LoweringError(SolvercastError, ValueError):
    """The graph, the problem and the schedule do not belong together."""


class RewriteError(SolvercastError, ValueError):
    """A rewrite the graph cannot take (e.g. a bucket whose launch would wait on its own result)."""


class MeasureError(SolvercastError, ValueError):
    """The module cannot be measured: a distributed op without an asynchronous stand-in, or a
    collective without a duration."""


class UnhintedSizeError(ValueError):
    """A symbolic size has no hint and the caller asked for no fallback."""


class CaptureError(RuntimeError):
    """torch.compile did not hand the post-grad hook the graphs expected."""


class InfeasibleBudgetError(SolvercastError):
    """No method found a schedule within the memory budget.

    ``best_peak`` is the smallest peak (bytes) any method reached.
    """

    def __init__(self, message: str, best_peak: int | None = None):
        super().__init__(message)
        self.best_peak = best_peak
