"""``map``: compute new attribute values from each input tuple (DESIGN.md section 3).

Spec: ``{"type": "map", "inputs": [s], "fields": {"out_name": "<expression>", ...}}``;
the output schema is the field names in the given order, each value the expression
(:mod:`operators.expr`) evaluated on the input tuple. Stateless, one input,
``preserves_ids``: every output keeps its input's kind, id, time and tmax, so an UNDO
passes through unchanged and no undo log is kept. The projection runs inline in one list
comprehension per run (no call per attribute).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from protocol.tuples import Tuple

from .base import Operator
from .errors import SpecError
from .expr import compile_map, runtime_error
from .registry import register
from .spec import Params
from .taxonomy import RecoveryClass

__all__ = ["Map"]


@register
class Map(Operator):
    """One output tuple per input tuple, with values ``fields`` computed from it."""

    type_name = "map"
    #: Each output is a function of one input tuple (operators/taxonomy.py).
    recovery_class = RecoveryClass.REPEATABLE
    n_inputs = 1
    preserves_ids = True

    def configure(self, params: Params) -> None:
        fields = params.get_raw("fields")
        if not isinstance(fields, Mapping) or not fields:
            raise SpecError(
                f"{self.describe()}: parameter 'fields' must be a non-empty table of "
                f"output name = expression, got {fields!r}"
            )
        for name, source in fields.items():
            if not isinstance(name, str) or not name:
                raise SpecError(
                    f"{self.describe()}: field name {name!r} must be a non-empty string"
                )
            if not isinstance(source, str):
                raise SpecError(
                    f"{self.describe()}: field '{name}' must be an expression string, got {source!r}"
                )
        self.fields: dict[str, str] = dict(fields)
        self.output_schema = tuple(self.fields)
        self._sources = tuple(self.fields.values())
        self._project = compile_map(self.describe(), self._sources, self.input_schemas[0])

    def on_data(self, port: int, tuples: Sequence[Tuple], out: list[Tuple]) -> None:
        try:
            mapped = self._project(tuples)
        except Exception as e:  # one of the expressions failed on some tuple: name it
            raise runtime_error(
                self.describe(), self._sources, self.input_schemas[0], tuples, e
            ) from e
        out.extend(mapped)
