"""The generic undo/redo (operators/base.py) from an undo log spilled to disk.

The conformance checks of test_conformance.py, with every operator that keeps an undo log
keeping at most one entry of it in memory (``set_log_spill``, state/spill_list.py): undo/redo
still equals the straight-through run (every UNDO cut, rebuild and re-feed reads the log
back from disk), snapshots still restore, and the log really went to disk.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from operators import Operator, create
from state.spill import SpillStore
from tests.operators import test_conformance as conformance
from tests.operators.harness import Case


@pytest.fixture
def spilled_logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[SpillStore]:
    stores: list[SpillStore] = []

    def build(c: Case) -> Operator:
        op = create(c.type_name, "op", c.input_schemas, c.params)
        store = SpillStore(tmp_path, f"op{len(stores)}")
        stores.append(store)
        op.set_log_spill(store, 1)
        return op

    monkeypatch.setattr(conformance, "build", build)
    return stores


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("type_name", conformance.LOGGING_TYPES)
def test_undo_redo_from_a_spilled_log_equals_straight_through(
        type_name: str, seed: int, spilled_logs: list[SpillStore]) -> None:
    c = conformance.case_for(type_name)
    steps = c.script(random.Random(seed))
    rng = random.Random(seed + 2000)
    for _ in range(4):
        conformance.check_undo_redo(c, steps, rng)
    assert sum(s.stats().written_tuples for s in spilled_logs) > 0


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("type_name", conformance.LOGGING_TYPES)
def test_snapshots_of_a_spilled_log_restore(type_name: str, seed: int,
                                             spilled_logs: list[SpillStore]) -> None:
    c = conformance.case_for(type_name)
    conformance.check_snapshots(c, c.script(random.Random(seed)), random.Random(seed + 1000))
    assert sum(s.stats().written_tuples for s in spilled_logs) > 0
