"""Errors of the operator layer: bad specs (caught at build) and misuse at run time."""

from __future__ import annotations

from protocol.errors import DPCError

__all__ = ["Fallback", "OperatorError", "SpecError"]


class SpecError(DPCError):
    """A query-network spec is invalid. The message names the operator, the key,
    what was expected and what was found."""


class OperatorError(DPCError):
    """An operator was fed something it cannot process (a local misuse, fails fast)."""


class Fallback(OperatorError):
    """A vectorized operator cannot compute this batch with the per-tuple operators' exact
    result (operators/vectorized/expr.py): its caller evaluates the batch's tuples with the
    per-tuple code instead. Caught there, never a failure."""
