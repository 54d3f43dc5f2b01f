"""The operator registry: ``type`` name in a spec -> operator class.

Register with the :func:`register` class decorator. The conformance suite runs against
every registered operator, so registering is all a new operator needs to get tested
(the suite fails until the operator has a conformance case).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from protocol.tuples import Schema

from .base import Operator
from .errors import SpecError
from .spec import Params

__all__ = ["OPERATORS", "create", "register"]

OPERATORS: dict[str, type[Operator]] = {}

OperatorClass = TypeVar("OperatorClass", bound=type[Operator])


def register(cls: OperatorClass) -> OperatorClass:
    """Class decorator: make ``cls`` buildable from specs under ``cls.type_name``."""
    name = cls.type_name
    if not name:
        raise TypeError(f"{cls.__name__} has no type_name")
    if name in OPERATORS and OPERATORS[name] is not cls:
        raise TypeError(f"operator type {name!r} registered twice")
    OPERATORS[name] = cls
    return cls


def create(
    type_name: str, name: str, input_schemas: Sequence[Schema], params: Mapping[str, Any]
) -> Operator:
    """Build one operator; every spec mistake becomes a SpecError naming the operator."""
    cls = OPERATORS.get(type_name)
    if cls is None:
        raise SpecError(
            f"operator '{name}': unknown operator type '{type_name}'; "
            f"known types: {', '.join(sorted(OPERATORS))}"
        )
    return cls(name, input_schemas, Params(f"operator '{name}' ({type_name})", params))
