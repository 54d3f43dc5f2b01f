"""``filter``: pass the input tuples for which a predicate holds (DESIGN.md section 3).

Spec: ``{"type": "filter", "inputs": [s], "where": "<expression>"}``; the expression
language is :mod:`operators.expr`. Stateless, one input, ``preserves_ids``: a passing tuple
is forwarded as the *same object* (its id, time, tmax and values unchanged), so an UNDO
passes through unchanged and no undo log is kept. The output schema is the input's.
The predicate runs inline in one list comprehension per run (no call per tuple).
"""

from __future__ import annotations

from collections.abc import Sequence

from protocol.tuples import Tuple

from .base import Operator
from .expr import compile_filter, runtime_error
from .registry import register
from .spec import Params
from .taxonomy import RecoveryClass

__all__ = ["Filter"]


@register
class Filter(Operator):
    """Forward the tuples where ``where`` is true (Python truthiness)."""

    type_name = "filter"
    #: Each output is one input tuple, kept or not (operators/taxonomy.py).
    recovery_class = RecoveryClass.REPEATABLE
    n_inputs = 1
    preserves_ids = True

    def configure(self, params: Params) -> None:
        self.where = params.get_str("where")
        self.output_schema = self.input_schemas[0]
        self._select = compile_filter(self.describe(), self.where, self.output_schema)

    def on_data(self, port: int, tuples: Sequence[Tuple], out: list[Tuple]) -> None:
        try:
            selected = self._select(tuples)
        except Exception as e:  # the predicate failed on some tuple: name it
            raise runtime_error(
                self.describe(), (self.where,), self.output_schema, tuples, e
            ) from e
        out.extend(selected)
