"""Operators: the deterministic, sans-IO data path of a node (DESIGN.md section 3).

Importing this package registers every operator type (see :mod:`operators.registry`).
"""

from . import aggregate, filter, join, map, soutput, sunion, union  # noqa: F401  (registers)
from .base import NO_TIME, Operator, Plain, tuple_from_plain, tuple_to_plain
from .errors import OperatorError, SpecError
from .network import NetworkOutput, QueryNetwork
from .registry import OPERATORS, create, register
from .spec import NetworkSpec, OperatorSpec, Params

__all__ = [
    "NO_TIME",
    "OPERATORS",
    "NetworkOutput",
    "NetworkSpec",
    "Operator",
    "OperatorError",
    "OperatorSpec",
    "Params",
    "Plain",
    "QueryNetwork",
    "SpecError",
    "create",
    "register",
    "tuple_from_plain",
    "tuple_to_plain",
]
