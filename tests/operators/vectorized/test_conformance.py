"""The operator conformance suite's cases (tests/operators/cases_*.py), run vectorized.

Every operator type with a vectorized implementation (``engine.VECTORIZED``) takes its
conformance case's all-stable script, each call a wave of its own (as the query network
feeds a replay), cut into three replay steps: ``run_step`` must emit exactly what the
per-tuple operator emits for the script, call by call, and leave it in exactly its state
(``snapshot()``, undo log included). A step may fall back to the per-tuple operator (a
late tuple, a type the vectorized code cannot compute exactly); across the seeds every
type must also have run vectorized, or this suite would test nothing new.
"""

from __future__ import annotations

import random
import struct
from itertools import pairwise
from typing import Any

import pytest

from operators.vectorized.engine import VECTORIZED, Stream, run_step
from tests.operators.test_conformance import SEEDS, build, case_for

TYPES = sorted(VECTORIZED)


def bits(t: Any) -> tuple[Any, ...]:
    """A tuple with its floats as their bits (-0.0 is not 0.0 here)."""
    return (*t[:4], tuple(struct.pack("<d", v) if isinstance(v, float) else v for v in t[4]))


def run(type_name: str, seed: int) -> tuple[list[Any], list[Any], bool]:
    c = case_for(type_name)
    steps = c.script(random.Random(seed))
    per_tuple, vectorized = build(c), build(c)
    expected = [bits(t) for s in steps for t in per_tuple.process(s.port, s.batch, s.now)]
    got: list[Any] = []
    any_vectorized = False
    n_ports = len(c.input_schemas)
    cuts = [0, len(steps) // 3, 2 * len(steps) // 3, len(steps)]
    for lo, hi in pairwise(cuts):
        if lo == hi:
            continue
        inputs = [Stream(c.input_schemas[p],
                         batches=[(w, list(steps[w].batch)) for w in range(lo, hi)
                                  if steps[w].port == p and steps[w].batch])
                  for p in range(n_ports)]
        out = run_step(vectorized, inputs, list(range(n_ports)), steps[hi - 1].now)
        any_vectorized |= out.vectorized
        got += [bits(t) for t in out.tuples()]
    assert vectorized.snapshot() == per_tuple.snapshot(), f"{type_name} seed {seed}: state"
    return got, expected, any_vectorized


@pytest.mark.parametrize("type_name", TYPES)
def test_the_vectorized_operator_conforms(type_name: str) -> None:
    ran_vectorized = 0
    for seed in SEEDS:
        got, expected, vectorized = run(type_name, seed)
        assert got == expected, f"{type_name} seed {seed}"
        ran_vectorized += vectorized
    assert ran_vectorized, f"{type_name}: no seed ran vectorized"


def test_every_vectorized_type_is_a_registered_operator_with_a_case() -> None:
    assert set(TYPES) == {"aggregate", "filter", "join", "map", "soutput", "union"}
    for t in TYPES:
        case_for(t)
