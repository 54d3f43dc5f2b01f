"""``union``: merge n >= 1 streams of one schema, in arrival order (DESIGN.md section 3).

Spec: ``{"type": "union", "inputs": [s1, s2, ...]}``; every input must have the same
schema, which is the output schema. Each data tuple is forwarded with a new id (the
output stream numbers its own tuples), its time, tmax and values unchanged. Not
deterministic across arrival orders (paper: union is the classic order-dependent
operator); SUnion is the deterministic merge. No state: :meth:`oldest_seq` is None, but
the generic undo log still maps an UNDO on one input to the output ids it produced.
Output boundaries are the min input watermark (every output time is an input time).
"""

from __future__ import annotations

from collections.abc import Sequence

from protocol.tuples import Tuple

from .base import Operator
from .errors import SpecError
from .registry import register
from .spec import Params
from .taxonomy import RecoveryClass

__all__ = ["Union"]


@register
class Union(Operator):
    """Forward every data tuple of every input, renumbered, in arrival order."""

    type_name = "union"
    #: One output per input, ports in the order one SUnion fixes (operators/taxonomy.py).
    recovery_class = RecoveryClass.REPEATABLE
    n_inputs = None

    def configure(self, params: Params) -> None:
        first = self.input_schemas[0]
        for i, schema in enumerate(self.input_schemas[1:], start=1):
            if schema != first:
                raise SpecError(
                    f"{self.describe()}: all inputs must have the same schema; input 0 has "
                    f"({', '.join(first)}) but input {i} has ({', '.join(schema)})"
                )
        self.output_schema = first

    def on_data(self, port: int, tuples: Sequence[Tuple], out: list[Tuple]) -> None:
        emit = self.emit
        for t in tuples:
            emit(out, t[2], t[3], t[4])
