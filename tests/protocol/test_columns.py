"""protocol/columns.py: tuples as columns and back, exactly; the wire form validated."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings

from protocol.columns import Columns, decode_columns, encode_columns
from protocol.errors import LocalProtocolError, RemoteProtocolError
from protocol.tuples import Kind, Tuple, boundary, make_tuple, rec_done, undo

from .strategies import batch_tuples


def exact(tuples: list[Tuple]) -> list[tuple[Tuple, tuple[type, ...]]]:
    return [(t, tuple(map(type, t.values))) for t in tuples]


@given(tuples=batch_tuples(max_size=30))
@settings(max_examples=300, deadline=None)
def test_tuples_survive_columns_and_the_wire_exactly(tuples: tuple[Tuple, ...]) -> None:
    columns = Columns.from_tuples(tuples)
    assert exact(columns.to_tuples()) == exact(list(tuples))
    back = decode_columns(encode_columns(columns))
    assert exact(back.to_tuples()) == exact(list(tuples))
    assert back == columns


def test_a_column_of_one_python_type_is_typed_and_a_mixed_one_is_json() -> None:
    tuples = [make_tuple(Kind.STABLE, 1, 10, 10, (1, 1.5, "a", True, None, 1)),
              boundary(20),
              make_tuple(Kind.TENTATIVE, 2, 30, 30, (None, 2.5, "b", False, None, "x"))]
    schema = Columns.from_tuples(tuples).batch.schema
    assert [f.type for f in schema][4:] == [pa.int64(), pa.float64(), pa.string(), pa.bool_(),
                                            pa.null(), pa.binary()]
    assert schema.field(9).metadata == {b"dpc": b"json"}
    assert schema.field(8).metadata is None


def test_ints_beyond_int64_and_bools_beside_ints_keep_their_types() -> None:
    tuples = [make_tuple(Kind.STABLE, 1, 1, 1, (2**64 - 1, True)),
              make_tuple(Kind.STABLE, 2, 1, 1, (-1, 1))]
    back = decode_columns(encode_columns(Columns.from_tuples(tuples))).to_tuples()
    assert exact(back) == exact(tuples)


def test_control_tuples_read_back_without_values() -> None:
    tuples = [undo(3), make_tuple(Kind.STABLE, 4, 1, 1, ("a",)), rec_done(5)]
    assert Columns.from_tuples(tuples).to_tuples() == tuples


def test_slice_and_concat_keep_rows_in_order() -> None:
    tuples = [make_tuple(Kind.STABLE, i, i, i, (i,)) for i in range(1, 11)]
    c = Columns.from_tuples(tuples)
    parts = [c.slice(0, 3), c.slice(3, 3), c.slice(3)]
    assert Columns.concat(parts).to_tuples() == tuples
    assert list(c.ids()) == list(range(1, 11)) and len(c.slice(8)) == 2


@pytest.mark.parametrize(("tuples", "expected"), [
    ([make_tuple(Kind.STABLE, 1, 1, 1, (1,)), make_tuple(Kind.STABLE, 2, 1, 1, ())],
     "tuple 1 has 0 values, the batch's data tuples before it 1"),
    ([make_tuple(Kind.BOUNDARY, 0, 1, 1, (1,))], "tuple 0: a BOUNDARY carries no values"),
    ([make_tuple(Kind.STABLE, 1, 1, 1, (float("inf"),))], "must be a finite float"),
    ([make_tuple(Kind.STABLE, 1, 1, 1, ([1],))], "must be a str, int, float, bool or None"),
    ([make_tuple(Kind.STABLE, 1, 1, 1, (2**64,))], "an int beyond 64 bits"),
    ([make_tuple(Kind.STABLE, 2**63, 1, 1, ())], "tuple 0 must be a Tuple"),
    ([make_tuple(Kind.STABLE, 1.0, 1, 1, ())], "tuple 0 must be a Tuple"),  # type: ignore[arg-type]
    ([(0, 1, 1, 1, ())], "tuple 0 must be a Tuple"),
])
def test_what_the_wire_cannot_carry_is_a_local_error(tuples: list[Tuple], expected: str) -> None:
    with pytest.raises(LocalProtocolError, match=expected.replace("(", r"\(")):
        Columns.from_tuples(tuples)


def test_garbage_is_a_remote_error() -> None:
    good = encode_columns(Columns.from_tuples([make_tuple(Kind.STABLE, 1, 1, 1, (1,))]))
    for bad in (b"", b"\x00" * 8, good[:-9], good[: len(good) // 2], good + good):
        with pytest.raises(RemoteProtocolError, match=r"^columns: "):
            decode_columns(bad)
