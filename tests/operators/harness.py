"""The operator conformance harness: how an operator declares its conformance case.

Every registered operator must have exactly one :class:`Case` (``test_conformance`` fails
otherwise). Case modules are ``tests/operators/cases_*.py``; each calls :func:`case` at
import time. The suite then checks, for every case and many seeds:

* snapshot -> orjson round trip -> restore into a fresh instance -> same future output;
* replay determinism (two fresh instances, same calls, same output);
* undo + redo equals straight-through (a suffix of one port's input first arrives
  TENTATIVE, possibly wrong or incomplete, then ``UNDO(last stable id)`` and the stable
  suffix; with UNDOs applied the output equals the all-stable run's);
* boundary propagation (output boundaries increase; no later stable tuple is older);
* tentative taint (no STABLE output after the first TENTATIVE input until an UNDO).
"""

from __future__ import annotations

import importlib
import pkgutil
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from operators.base import Operator
from protocol.tuples import Schema, Tuple

__all__ = ["CASES", "Case", "Step", "case", "load_cases"]


@dataclass(frozen=True)
class Step:
    """One call: feed ``batch`` on ``port`` at time ``now``."""

    port: int
    batch: Sequence[Tuple]
    now: int = 0


@dataclass(frozen=True)
class Case:
    type_name: str
    params: Mapping[str, Any]
    input_schemas: tuple[Schema, ...]
    #: An all-STABLE input script (data tuples with per-port increasing ids from 1, and
    #: BOUNDARY tuples), drawn from the given seeded random.
    script: Callable[[random.Random], list[Step]]
    #: For operators that need a nudge to reconcile after corrections arrived
    #: (SUnion: an UNDO_START); returns the outputs. None for ordinary operators.
    reconcile: Callable[[Operator, int], list[Tuple]] | None = None
    #: Free-form notes on what the case exercises.
    notes: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)


CASES: dict[str, Case] = {}


def case(c: Case) -> Case:
    if c.type_name in CASES:
        raise ValueError(f"two conformance cases for {c.type_name!r}")
    CASES[c.type_name] = c
    return c


def load_cases() -> dict[str, Case]:
    """Import every ``tests/operators/cases_*.py`` module (they register themselves)."""
    import tests.operators as pkg

    for info in pkgutil.iter_modules(pkg.__path__):
        if info.name.startswith("cases_"):
            importlib.import_module(f"tests.operators.{info.name}")
    return CASES
