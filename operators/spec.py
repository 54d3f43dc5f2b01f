"""Declarative specs: what a query network and each operator are built from.

The same structure is used by the cluster config (TOML) and by tests (plain dicts)::

    {
      "inputs": {"s1": ["key", "value"], "s2": ["key", "value"]},
      "operators": [
        {"name": "u", "type": "sunion", "inputs": ["s1", "s2"], "bucket": 100000},
        {"name": "f", "type": "filter", "inputs": ["u"], "where": "value > 10"},
        {"name": "out", "type": "soutput", "inputs": ["f"]}
      ],
      "outputs": ["out"]
    }

Every operator's output stream is named after the operator. Everything but ``name``,
``type`` and ``inputs`` is a parameter of the operator, read through :class:`Params`,
which gives every mistake (missing key, wrong type, unknown key) one clear message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from protocol.tuples import Schema

from .errors import SpecError

__all__ = ["NetworkSpec", "OperatorSpec", "Params", "attribute_index"]

_RESERVED = ("name", "type", "inputs")


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


_MISSING: Any = _Missing()


class Params:
    """Typed, validated access to one operator's parameters.

    Each getter raises :class:`SpecError` naming the operator and the key; a getter without
    ``default`` makes the parameter required (use :meth:`has` for optional ones). Call
    :meth:`finish` after reading: any key never read is a typo and is refused.
    """

    def __init__(self, owner: str, raw: Mapping[str, Any]) -> None:
        self.owner = owner
        self._raw = dict(raw)
        self._read: set[str] = set()

    def _fail(self, key: str, expected: str, got: object) -> SpecError:
        return SpecError(f"{self.owner}: parameter '{key}' must be {expected}, got {got!r}")

    def has(self, key: str) -> bool:
        return key in self._raw

    def _get(self, key: str, default: object) -> object:
        self._read.add(key)
        if key in self._raw:
            return self._raw[key]
        if default is _MISSING:
            raise SpecError(f"{self.owner}: missing required parameter '{key}'")
        return default

    def get_int(self, key: str, default: Any = _MISSING, *, minimum: int | None = None) -> int:
        v = self._get(key, default)
        if not isinstance(v, int) or isinstance(v, bool):
            raise self._fail(key, "an integer", v)
        if minimum is not None and v < minimum:
            raise self._fail(key, f"an integer >= {minimum}", v)
        return v

    def get_str(self, key: str, default: Any = _MISSING, *, choices: Sequence[str] = ()) -> str:
        v = self._get(key, default)
        if not isinstance(v, str):
            raise self._fail(key, "a string", v)
        if choices and v not in choices:
            raise self._fail(key, "one of " + ", ".join(repr(c) for c in choices), v)
        return v

    def get_str_list(self, key: str, default: Any = _MISSING) -> list[str]:
        v = self._get(key, default)
        if not isinstance(v, list | tuple) or not all(isinstance(x, str) for x in v):
            raise self._fail(key, "a list of strings", v)
        return list(v)

    def get_raw(self, key: str, default: Any = _MISSING) -> Any:
        """A parameter whose structure the operator validates itself."""
        return self._get(key, default)

    def finish(self) -> None:
        unknown = sorted(set(self._raw) - self._read)
        if unknown:
            raise SpecError(f"{self.owner}: unknown parameter(s) {', '.join(unknown)}")


def attribute_index(owner: str, schema: Schema, name: str, what: str = "attribute") -> int:
    """Position of ``name`` in ``schema``, or a SpecError listing what exists."""
    try:
        return schema.index(name)
    except ValueError:
        raise SpecError(
            f"{owner}: unknown {what} '{name}'; the input has {', '.join(schema) or 'no attributes'}"
        ) from None


@dataclass(frozen=True, slots=True)
class OperatorSpec:
    """One operator of a query network: its name (= its output stream), type, inputs, params."""

    name: str
    type: str
    inputs: tuple[str, ...]
    params: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], where: str = "operator") -> OperatorSpec:
        if not isinstance(raw, Mapping):
            raise SpecError(f"{where}: must be a table, got {raw!r}")
        name = raw.get("name")
        if not isinstance(name, str) or not name:
            raise SpecError(f"{where}: 'name' must be a non-empty string, got {name!r}")
        where = f"{where} '{name}'"
        kind = raw.get("type")
        if not isinstance(kind, str):
            raise SpecError(f"{where}: 'type' must be a string, got {kind!r}")
        inputs = raw.get("inputs")
        if not isinstance(inputs, list | tuple) or not all(isinstance(i, str) for i in inputs):
            raise SpecError(f"{where}: 'inputs' must be a list of stream names, got {inputs!r}")
        params = {k: v for k, v in raw.items() if k not in _RESERVED}
        return cls(name, kind, tuple(inputs), params)


@dataclass(frozen=True, slots=True)
class NetworkSpec:
    """A query network: named input streams with schemas, operators, output streams."""

    inputs: Mapping[str, Schema]
    operators: tuple[OperatorSpec, ...]
    outputs: tuple[str, ...]

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], where: str = "query network") -> NetworkSpec:
        if not isinstance(raw, Mapping):
            raise SpecError(f"{where}: must be a table, got {raw!r}")
        unknown = sorted(set(raw) - {"inputs", "operators", "outputs"})
        if unknown:
            raise SpecError(f"{where}: unknown key(s) {', '.join(unknown)}")
        inputs_raw = raw.get("inputs")
        if not isinstance(inputs_raw, Mapping) or not inputs_raw:
            raise SpecError(f"{where}: 'inputs' must map stream names to attribute lists")
        inputs: dict[str, Schema] = {}
        for stream, attrs in inputs_raw.items():
            if not isinstance(attrs, list | tuple) or not all(isinstance(a, str) for a in attrs):
                raise SpecError(f"{where}: inputs.{stream} must be a list of attribute names, got {attrs!r}")
            if len(set(attrs)) != len(attrs):
                raise SpecError(f"{where}: inputs.{stream} has duplicate attribute names")
            inputs[str(stream)] = tuple(attrs)
        ops_raw = raw.get("operators")
        if not isinstance(ops_raw, list) or not ops_raw:
            raise SpecError(f"{where}: 'operators' must be a non-empty list")
        ops = tuple(
            OperatorSpec.from_dict(o, f"{where}: operators[{i}]") for i, o in enumerate(ops_raw)
        )
        outputs = raw.get("outputs")
        if not isinstance(outputs, list | tuple) or not all(isinstance(o, str) for o in outputs):
            raise SpecError(f"{where}: 'outputs' must be a list of operator names, got {outputs!r}")
        return cls(inputs, ops, tuple(outputs))
