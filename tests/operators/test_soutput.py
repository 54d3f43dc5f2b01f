"""SOutput: unit tests with hand-computed outputs, and a stream-model property for rewinds."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from operators import OperatorError, create
from operators.soutput import SOutput, SOutputMode
from protocol.tuples import Kind, Tuple, boundary, make_tuple, rec_done, undo
from tests.operators.cases_fault import apply_undos, data_of

S, T = Kind.STABLE, Kind.TENTATIVE


def d(id: int, kind: Kind = S, v: int = 0) -> Tuple:
    return make_tuple(kind, id, id * 10, id * 10, (id, v))


def soutput() -> SOutput:
    op = create("soutput", "out", [("n", "v")], {})
    assert isinstance(op, SOutput)
    return op


def test_pass_through_keeps_ids_and_only_rising_boundaries() -> None:
    s = soutput()
    assert s.process(0, [d(3), boundary(30), d(7), boundary(30), boundary(20)], 0) == [
        d(3),
        boundary(30),
        d(7),
    ]
    assert s.process(0, [d(8, T), boundary(90)], 0) == [d(8, T), boundary(90)]
    assert (s.mode, s.last_stable_id, s.tentative_after) == (SOutputMode.NORMAL, 7, True)


def _emitted_then_checkpoint() -> tuple[SOutput, dict[str, object]]:
    """Emits S1 S2 (checkpoint here) S3 S4 T5 T6."""
    s = soutput()
    s.process(0, [d(1), d(2)], 0)
    snap = orjson.loads(orjson.dumps(s.snapshot()))
    s.process(0, [d(3), d(4), boundary(45), d(5, T), d(6, T)], 0)
    return s, snap


def test_rewind_drops_duplicates_then_undoes_the_tentative_suffix() -> None:
    s, snap = _emitted_then_checkpoint()
    assert s.rewind(snap) == []
    assert (s.mode, s.waiting_for) == (SOutputMode.DROP_DUPLICATES, 4)
    # The replay from the checkpoint: S3 S4 are duplicates; boundary 45 was already sent.
    assert s.process(0, [d(3), boundary(40)], 0) == []
    assert s.process(0, [d(4), boundary(45), d(5, v=1)], 0) == [undo(4), d(5, v=1)]
    assert (s.mode, s.last_stable_id) == (SOutputMode.RECONCILING, 5)
    assert s.process(0, [d(6, v=1), boundary(60)], 0) == [d(6, v=1), boundary(60)]
    assert s.end_reconciliation(70) == [rec_done(70)]
    assert s.mode is SOutputMode.NORMAL
    assert s.end_reconciliation(80) == []


def test_rewind_at_the_remembered_id_undoes_at_once() -> None:
    s = soutput()
    s.process(0, [d(1), d(2)], 0)
    snap = s.snapshot()
    s.process(0, [d(3, T)], 0)
    assert s.rewind(snap) == [undo(2)]
    assert s.mode is SOutputMode.RECONCILING
    assert s.process(0, [d(3)], 0) == [d(3)]


def test_rewind_without_tentatives_needs_no_undo() -> None:
    s = soutput()
    s.process(0, [d(1)], 0)
    snap = s.snapshot()
    s.process(0, [d(2), d(3)], 0)
    assert s.rewind(snap) == []
    assert s.process(0, [d(2), d(3), d(4)], 0) == [d(4)]
    assert s.mode is SOutputMode.NORMAL
    assert s.end_reconciliation() == []


def test_second_rewind_keeps_waiting_for_the_same_tuple() -> None:
    s, snap = _emitted_then_checkpoint()
    s.rewind(snap)
    assert s.process(0, [d(3)], 0) == []
    # Another restore before tuple 4 came back: still drop up to 4, still owe UNDO(4).
    assert s.rewind(snap) == []
    assert s.waiting_for == 4
    assert s.process(0, [d(3), d(4), d(5)], 0) == [undo(4), d(5)]


def test_skipped_awaited_id_still_ends_the_drop() -> None:
    s, snap = _emitted_then_checkpoint()
    s.rewind(snap)
    assert s.process(0, [d(3), d(5)], 0) == [undo(4), d(5)]


def test_forced_rec_done_before_the_first_tentative_of_a_new_failure() -> None:
    s, snap = _emitted_then_checkpoint()
    s.rewind(snap)
    s.process(0, [d(3), d(4), d(5)], 0)
    out = s.process(0, [d(6), d(7, T), d(8, T)], 9)
    assert out == [d(6), rec_done(9), d(7, T), d(8, T)]
    assert s.mode is SOutputMode.NORMAL
    assert s.end_reconciliation() == []


def test_undo_on_the_input_is_forwarded_and_reconciles() -> None:
    s = soutput()
    s.process(0, [d(1), d(2, T)], 0)
    assert s.process(0, [undo(1), d(2)], 0) == [undo(1), d(2)]
    assert s.mode is SOutputMode.RECONCILING
    assert s.process(0, [rec_done(5)], 0) == [rec_done(5)]  # an upstream's REC_DONE ends it
    assert s.mode is SOutputMode.NORMAL


def test_undo_while_dropping_is_refused() -> None:
    s, snap = _emitted_then_checkpoint()
    s.rewind(snap)
    with pytest.raises(OperatorError, match="while dropping"):
        s.process(0, [undo(2)], 0)


def test_snapshot_restore_keeps_modes() -> None:
    s, snap = _emitted_then_checkpoint()
    s.rewind(snap)
    s.process(0, [d(3)], 0)
    r = soutput()
    r.restore(orjson.loads(orjson.dumps(s.snapshot())))
    assert (r.mode, r.waiting_for, r.last_stable_id) == (SOutputMode.DROP_DUPLICATES, 4, 4)
    rest = [d(4), d(5), d(6, T)]
    assert r.process(0, rest, 3) == s.process(0, rest, 3) == [undo(4), d(5), rec_done(3), d(6, T)]


# ---------------------------------------------------------------------- stream model
@st.composite
def replays(draw: st.DrawFn) -> tuple[int, int, list[int], list[tuple[int, int, int]], int]:
    """A deterministic upstream (stable tuple i is always d(i, v=i)) whose first run
    emits n_stable stable then n_tent (wrong) tentative tuples; checkpoints of SOutput
    taken at stable ids; then rewinds: (checkpoint index, stable tuples replayed, tentative
    tuples after them); then a final complete replay to n_total and a new failure."""
    n_stable = draw(st.integers(0, 12))
    n_tent = draw(st.integers(0, 5))
    checkpoints = sorted(draw(st.lists(st.integers(0, n_stable), min_size=1, max_size=3)))
    n_total = draw(st.integers(n_stable, n_stable + n_tent + 6))
    rewinds = draw(
        st.lists(
            st.tuples(st.integers(0, len(checkpoints) - 1), st.integers(0, 20), st.integers(0, 3)),
            max_size=4,
        )
    )
    return n_stable, n_tent, checkpoints, rewinds, n_total


@settings(max_examples=200, deadline=None)
@given(replays(), st.integers(0, 3))
def test_rewinds_never_repeat_a_stable_tuple_nor_undo_one(
    plan: tuple[int, int, list[int], list[tuple[int, int, int]], int], final_tent: int
) -> None:
    n_stable, n_tent, checkpoints, rewinds, n_total = plan
    s = soutput()
    emitted: list[Tuple] = []
    snaps = []
    for i in range(1, n_stable + 1):
        emitted += s.process(0, [d(i, v=i)], i)
        while len(snaps) < len(checkpoints) and checkpoints[len(snaps)] == i:
            snaps.append(s.snapshot())
    while len(snaps) < len(checkpoints):  # checkpoints at 0 (before anything)
        snaps.insert(0, soutput().snapshot())
    emitted += s.process(0, [d(i, T, v=-i) for i in range(n_stable + 1, n_stable + n_tent + 1)], 50)
    for k, n_replayed, n_tent_after in [*rewinds, (len(snaps) - 1, n_total, 0)]:
        start = snaps[k]["state"]["last_stable_id"]
        emitted += s.rewind(snaps[k])
        last = min(start + n_replayed, n_total)
        emitted += s.process(0, [d(i, v=i) for i in range(start + 1, last + 1)], 60)
        emitted += s.process(
            0, [d(i, T, v=-i) for i in range(last + 1, last + 1 + n_tent_after)], 60
        )
    emitted += s.end_reconciliation(70)
    emitted += s.process(
        0, [d(i, T, v=-i) for i in range(n_total + 1, n_total + 1 + final_tent)], 80
    )
    stable_ids = [t.id for t in emitted if t.kind is S]
    assert len(stable_ids) == len(set(stable_ids)), "a stable tuple was emitted twice"
    final = apply_undos(emitted)  # also fails if an UNDO takes back a stable tuple
    assert data_of(final) == [d(i, v=i) for i in range(1, n_total + 1)] + [
        d(i, T, v=-i) for i in range(n_total + 1, n_total + 1 + final_tent)
    ]
    # REC_DONE sits between every UNDO and the next tentative tuple.
    pending = False
    for t in emitted:
        if t.kind is Kind.UNDO:
            pending = True
        elif t.kind is Kind.REC_DONE:
            pending = False
        elif t.kind is T:
            assert not pending, "a tentative tuple followed an UNDO before its REC_DONE"
