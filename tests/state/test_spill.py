"""The spill store (state/spill.py): tuples come back exactly, cuts and releases free disk."""

from __future__ import annotations

import math
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.tuples import Kind, Tuple, make_tuple
from state.errors import StateError
from state.spill import SegmentReader, SpillStore, estimate_tuple_bytes, segment_plan

S, T = Kind.STABLE, Kind.TENTATIVE


def run(first: int, n: int, values: list[tuple[object, ...]], kind: Kind = S) -> list[Tuple]:
    return [make_tuple(kind, first + i, 10 * (first + i), 10 * (first + i) + 1, values[i])
            for i in range(n)]


def bits(v: object) -> object:
    """Floats by their bits (so -0.0 != 0.0 and nan == nan), the rest by type and value."""
    return ("f", struct.pack("<d", v)) if isinstance(v, float) else (type(v).__name__, v)


def same(a: list[Tuple], b: list[Tuple]) -> bool:
    return [(*t[:4], tuple(map(bits, t[4]))) for t in a] == \
        [(*t[:4], tuple(map(bits, t[4]))) for t in b]


scalars = st.one_of(
    st.integers(-2**63, 2**63 - 1), st.floats(), st.text(max_size=5),
    st.booleans(), st.none(),
)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_runs_read_back_exactly_whatever_the_types(tmp_path_factory: pytest.TempPathFactory,
                                                   data: st.DataObject) -> None:
    """Columns all of one type are typed columns, others orjson text: either way, every
    value comes back of the same type with the same bits."""
    store = SpillStore(tmp_path_factory.mktemp("spill"), "u")
    arity = data.draw(st.integers(0, 3))
    column_kind = [data.draw(st.sampled_from(["int", "float", "str", "bool", "mixed"]))
                   for _ in range(arity)]
    one = {"int": st.integers(-2**63, 2**63 - 1), "float": st.floats(),
           "str": st.text(max_size=8), "bool": st.booleans(), "mixed": scalars}
    sizes = data.draw(st.lists(st.integers(1, 6), min_size=1, max_size=4))
    runs, first = [], 1
    for n in sizes:
        values = [tuple(data.draw(st.one_of(one[k], st.none())) for k in column_kind)
                  for _ in range(n)]
        runs.append(run(first, n, values, data.draw(st.sampled_from([S, T]))))
        first += n
    chunks = store.write(runs)
    for r, c in zip(runs, chunks, strict=True):
        assert same(store.read(c), r)
        assert (c.first_id, c.last_id, c.length) == (r[0][1], r[-1][1], len(r))
        assert c.n_tent == sum(t[0] is T for t in r)


def test_special_floats_keep_their_bits(tmp_path: Path) -> None:
    store = SpillStore(tmp_path, "u")
    values = [(math.nan,), (-0.0,), (math.inf,), (-math.inf,), (5e-324,)]
    [c] = store.write([run(1, 5, values)])
    back = store.read(c)
    assert same(back, run(1, 5, values))
    assert math.isnan(back[0][4][0]) and math.copysign(1, back[1][4][0]) == -1


@pytest.mark.parametrize("other", [0, "x", True])
def test_special_floats_keep_their_bits_beside_other_types(tmp_path: Path, other: object) -> None:
    """A column of mixed types is orjson text, which has no NaN or infinity (orjson writes
    them as null): an undo log can hold them, so they are stored by their bits."""
    store = SpillStore(tmp_path, "u")
    nan = struct.unpack("<d", b"\x01\x00\x00\x00\x00\x00\xf8\xff")[0]  # a NaN with a payload
    values = [(other,), (math.inf,), (-math.inf,), (math.nan,), (nan,), (-0.0,), (None,)]
    [c] = store.write([run(1, len(values), values)])
    assert same(store.read(c), run(1, len(values), values))


def test_ints_beyond_64_bits_cannot_be_spilled_and_say_so(tmp_path: Path) -> None:
    store = SpillStore(tmp_path, "u")
    with pytest.raises(StateError, match=r"spill u: value 0: cannot store"):
        store.write([run(1, 1, [(2**70,)])])


def test_a_cut_keeps_the_ids_an_undo_keeps_and_counts_the_tentatives(tmp_path: Path) -> None:
    store = SpillStore(tmp_path, "u")
    stable, tentative = run(1, 3, [(i,) for i in range(3)]), run(4, 4, [(i,) for i in range(4)], T)
    [c] = store.write([stable + tentative])
    assert store.cut(c, 5) == 2  # ids 6, 7 (tentative) removed
    assert [t[1] for t in store.read(c)] == [1, 2, 3, 4, 5]
    assert (c.last_id, c.n_tent, store.stats().tuples) == (5, 2, 5)
    assert store.cut(c, 9) == 0  # nothing above 9
    assert store.cut(c, 0) == 2  # everything: the chunk is released with its segment
    assert store.stats().segments == 0 and not list(tmp_path.iterdir())


def test_a_segment_is_deleted_when_its_last_chunk_is_released(tmp_path: Path) -> None:
    store = SpillStore(tmp_path, "u")
    a, b = store.write([run(1, 2, [(1,), (2,)]), run(3, 1, [(3,)])])
    [c] = store.write([run(4, 1, [(4,)])])
    assert store.stats().segments == 2 and store.stats().tuples == 4
    store.release(a)
    assert store.stats().segments == 2
    store.release(b)
    assert store.stats().segments == 1 and len(list(tmp_path.iterdir())) == 1
    assert store.read(c)[0][1] == 4
    with pytest.raises(StateError, match="was released"):
        store.read(a)
    stats = store.stats()
    assert (stats.tuples, stats.written_tuples, stats.deleted_segments) == (1, 4, 1)
    store.close()
    assert not list(tmp_path.iterdir())


def test_a_new_store_deletes_what_a_dead_process_of_its_name_left(tmp_path: Path) -> None:
    old = SpillStore(tmp_path, "u")
    old.write([run(1, 1, [(1,)])])
    other = SpillStore(tmp_path, "v")
    other.write([run(1, 1, [(1,)])])
    SpillStore(tmp_path, "u")  # a restarted replica's SUnion u
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v-000001.arrow"]


def test_many_chunks_are_read_at_once_from_each_segment_file_once(tmp_path: Path) -> None:
    """gather finds chunks in the order given, across segments, from each segment's
    one mapped table, also for chunks detached for another process (each with a segment
    object of its own): one table per *file*, not per chunk."""
    store = SpillStore(tmp_path, "rows")
    first = store.write([run(1 + 10 * k, 10, [(k, float(i)) for i in range(10)])
                         for k in range(50)])
    second = store.write([run(1001, 5, [(-1, 0.5)] * 5)])
    order = [*first[::-1], *second, *first[:3]]
    expect = [t for c in order for t in store.read(c)]
    for reader, chunks in ((store, order),
                           (SegmentReader("task"), [store.detached(c) for c in order])):
        firsts, which = segment_plan(chunks)
        assert len(firsts) == 2 and which == [0] * 50 + [1] + [0] * 3
        segments, rows = reader.gather(chunks)
        table = segments.take(rows)
        got = [make_tuple(Kind(k), i, tm, tx, (a, b)) for k, i, tm, tx, a, b in
               zip(*(table.column(n).to_pylist() for n in range(6)), strict=True)]
        assert same(got, expect)
    store.release(first[0])
    with pytest.raises(StateError, match="was released"):
        store.gather([first[1], first[0]])


def test_empty_runs_are_refused(tmp_path: Path) -> None:
    with pytest.raises(StateError, match="must hold tuples"):
        SpillStore(tmp_path, "u").write([[]])


def test_the_size_estimate_grows_with_the_values() -> None:
    small = make_tuple(S, 1, 1, 1, (1,))
    big = make_tuple(S, 1, 1, 1, ("x" * 1000, 2.5, 3))
    assert 100 < estimate_tuple_bytes(small) < estimate_tuple_bytes(big)
