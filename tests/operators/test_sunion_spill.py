"""SUnion with its kept input spilled to disk (operators/buckets.py) is the same SUnion.

The model machines of test_sunion_model.py (inputs cut silently or tentatively, healed with
UNDOs and late corrections, checkpoints, both reconciliations) drive two SUnions in
lockstep: the model's, all in memory, and a twin that keeps almost nothing in memory. Every
answer of every call must be equal, the model's final check holds, and at the end the
twin's snapshot (read back from disk) equals the in-memory one and its store holds exactly
the tuples its buckets' chunks name; clearing it leaves no segment on disk.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import settings

from operators import create
from operators.buckets import Spiller
from operators.sunion import SUnion
from protocol.tuples import Kind, boundary, make_tuple
from state.spill import SpillStore
from tests.operators.test_sunion_model import (
    DelayUndoModel,
    OnFailureCheckpointModel,
    SUnionModel,
    _case,
)


class _Twins:
    """Two SUnions driven alike; every answer compared, the first one's returned."""

    def __init__(self, a: SUnion, b: SUnion) -> None:
        self.a, self.b = a, b

    def __getattr__(self, name: str) -> Any:
        if name == "signals":  # compared, and the twin's cleared, by _check_signals
            return self.a.signals
        va, vb = getattr(self.a, name), getattr(self.b, name)
        if not callable(va):
            assert va == vb, f"{name}: {va!r} in memory, {vb!r} spilled"
            return va

        def both(*args: Any) -> Any:
            ra, rb = va(*args), vb(*args)
            assert ra == rb, f"{name}{args}: {ra!r} in memory, {rb!r} spilled"
            return ra

        return both


class _Spilled:
    """Mixed into a model machine: its SUnion gets a twin that spills."""

    #: The twin's memory bound (bytes; a tuple of the model is ~300) and spill step.
    limit_bytes = 1
    step = 20_000

    def __init__(self) -> None:
        super().__init__()  # type: ignore[call-arg]
        self.dir = Path(tempfile.mkdtemp(prefix="spill-"))
        m: Any = self
        twin = create("sunion", "u", m.u.input_schemas, {
            "bucket": m.u.width, "wait": m.u.wait, "process_wait": m.u.process_wait,
            "mode": m.mode, "recovery": m.recovery})
        assert isinstance(twin, SUnion)
        self.spiller = Spiller(SpillStore(self.dir, "u"), self.limit_bytes)
        self.spiller.STEP = self.step
        twin.set_spill(self.spiller)
        m.u = _Twins(m.u, twin)

    def _check_signals(self) -> None:
        m: Any = self
        assert m.u.a.signals == m.u.b.signals
        m.u.b.signals.clear()
        super()._check_signals()  # type: ignore[misc]

    def teardown(self) -> None:
        m: Any = self
        try:
            super().teardown()  # type: ignore[misc]
            a, b = m.u.a, m.u.b
            assert a.snapshot_state() == b.snapshot_state()
            held = sum(c.length for bk in b._buckets.values() for cs in bk.spilled or ()
                       for c in cs)
            assert self.spiller.stats().tuples == held
            b.clear()
            assert self.spiller.stats().segments == 0 and not list(self.dir.iterdir())
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


class SpilledCheckpoint(_Spilled, SUnionModel):
    pass


class SpilledSomeCheckpoint(_Spilled, SUnionModel):
    """A bound of a few tuples and a step of two: chunks and in-memory tails mixed."""

    limit_bytes = 1500
    step = 2


class SpilledOnFailure(_Spilled, OnFailureCheckpointModel):
    step = 3


class SpilledDelayUndo(_Spilled, DelayUndoModel):
    limit_bytes = 900


def _spilled_case(machine: Any) -> Any:
    # Fewer examples than the in-memory models: each one writes Arrow files.
    case = _case(machine)
    case.settings = settings(max_examples=50, stateful_step_count=50, deadline=None)
    return case


TestSpilledCheckpoint = _spilled_case(SpilledCheckpoint)
TestSpilledSomeCheckpoint = _spilled_case(SpilledSomeCheckpoint)
TestSpilledOnFailure = _spilled_case(SpilledOnFailure)
TestSpilledDelayUndo = _spilled_case(SpilledDelayUndo)


def test_a_long_failure_keeps_the_bound_and_replays_from_disk(tmp_path: Path) -> None:
    """One input silent for 10,000 buckets while the other sends (process mode): what is
    kept in memory stays under the bound, the rest is on disk; the checkpoint rewind
    replays it in order and the segments go once a checkpoint truncates them."""
    schema = ("k", "v")
    params = {"bucket": 10, "wait": 50, "process_wait": 10}
    u = create("sunion", "u", [schema, schema], params)
    assert isinstance(u, SUnion)
    spiller = Spiller(SpillStore(tmp_path, "u"), 64 * 1024)
    spiller.STEP = 500
    u.set_spill(spiller)
    ref = create("sunion", "u", [schema, schema], params)
    assert isinstance(ref, SUnion)
    point, point_ref = u.rewind_point(), ref.rewind_point()
    peak = 0
    for i in range(1, 10_001):
        batch = [make_tuple(Kind.STABLE, i, 10 * i, 10 * i, (i % 7, float(i))),
                 boundary(10 * (i + 1))]
        assert u.process(0, batch, 10 * i) == ref.process(0, batch, 10 * i)
        peak = max(peak, spiller.mem)
    assert u.in_failure and spiller.limit is not None
    assert peak <= spiller.limit + 1, "the kept tuples in memory outgrew the bound"
    assert spiller.stats().tuples > 9_000 and spiller.stats().segments > 1
    # The cut input heals: its boundary arrives, the node rewinds to the checkpoint.
    end = [boundary(100_010)]
    u.process(1, end, 100_020)
    ref.process(1, end, 100_020)
    u.rewind(point)
    ref.rewind(point_ref)
    assert u.replay(100_030) == ref.replay(100_030)
    assert not u.in_failure
    u.truncate()
    assert spiller.stats().segments == 0 and not list(tmp_path.iterdir())
