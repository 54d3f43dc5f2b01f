"""The vectorized SOutput after a checkpoint rewind (DROP_DUPLICATES): the replayed rows
up to the awaited id dropped, the UNDO at the drop's end among the boundaries exactly where
the per-tuple SOutput puts it, and the same state after, over any cut into steps. (The
conformance suite runs its pass-through; the replay property test whole networks.)"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from operators import create
from operators.soutput import SOutput
from operators.vectorized.engine import Stream, run_step
from protocol.tuples import Kind, Tuple, boundary, make_tuple


def emitted(tentative: int) -> tuple[SOutput, SOutput]:
    """Two SOutputs that emitted S1..S6 then ``tentative`` tentative tuples, rewound to a
    checkpoint taken after S2: both drop the replay up to id 6."""
    pair = []
    for _ in range(2):
        op = create("soutput", "out", [("n", "v")], {})
        assert isinstance(op, SOutput)
        op.process(0, [d(1), d(2), boundary(20)], 0)
        point = op.rewind_point()
        op.process(0, [d(k) for k in range(3, 7)], 0)
        op.process(0, [d(7 + k, Kind.TENTATIVE) for k in range(tentative)], 0)
        op.rewind(point)
        assert op.dropping_duplicates
        pair.append(op)
    return pair[0], pair[1]


def d(id: int, kind: Kind = Kind.STABLE) -> Tuple:
    return make_tuple(kind, id, id * 10, id * 10, (id, id % 3))


@st.composite
def replays(draw: st.DrawFn) -> list[list[Tuple]]:
    """The replay: ids rising from 3 (the awaited 6 maybe skipped), a boundary after any
    of them, cut into waves."""
    ids = sorted(draw(st.sets(st.integers(3, 12), max_size=9)))
    waves: list[list[Tuple]] = [[]]
    for i in ids:
        waves[-1].append(d(i))
        if draw(st.booleans()):
            waves[-1].append(boundary(i * 10 + draw(st.sampled_from([-5, 0, 5]))))
            if draw(st.booleans()):
                waves.append([])
    return waves


@settings(max_examples=400, deadline=None)
@given(replays(), st.integers(0, 2), st.integers(1, 3))
def test_the_vectorized_drop_equals_the_per_tuple_one(waves: list[list[Tuple]],
                                                      tentative: int, steps: int) -> None:
    per_tuple, vectorized = emitted(tentative)
    expected = [t for w in waves for t in per_tuple.process(0, w, 0)]
    got: list[Tuple] = []
    cut = max(1, -(-len(waves) // steps))
    ran_vectorized = False
    for lo in range(0, len(waves), cut):
        batches = [(w, waves[w]) for w in range(lo, min(lo + cut, len(waves))) if waves[w]]
        out = run_step(vectorized, [Stream(per_tuple.input_schemas[0], batches=batches)],
                       [0], 0)
        ran_vectorized |= out.vectorized
        got += out.tuples()
    assert got == expected
    assert vectorized.snapshot() == per_tuple.snapshot()
    assert ran_vectorized or not any(waves)


def test_the_undo_comes_after_the_boundaries_before_the_awaited_row() -> None:
    per_tuple, vectorized = emitted(2)
    wave = [d(4), boundary(45), d(6), boundary(65), d(7), boundary(75)]
    out = run_step(vectorized, [Stream(per_tuple.input_schemas[0], batches=[(0, wave)])],
                   [0], 0)
    assert out.vectorized
    kinds = [(t.kind.name, t.id) for t in out.tuples()]
    assert kinds == [("BOUNDARY", 0), ("UNDO", 6), ("BOUNDARY", 0), ("STABLE", 7),
                     ("BOUNDARY", 0)]
    assert out.tuples() == per_tuple.process(0, wave, 0)
