"""The exchange (protocol/exchange.py): a partition's share of a stream is its keys' data
and every control tuple; the P shares of the data are disjoint and cover it; the hash is
stable (fixed values here: a change of it would move keys between partitions of a running
cluster's replicas started from different versions)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.exchange import Split, partition_of
from protocol.exchange import shares as cut
from protocol.tuples import DATA_KINDS, Kind, Tuple, boundary, make_tuple, rec_done, undo


def data(i: int, key: object, kind: Kind = Kind.STABLE) -> Tuple:
    return make_tuple(kind, i, i, i, (key, i))


def test_the_hash_is_stable_across_processes_and_versions() -> None:
    # crc32 of the orjson array of the key values: fixed, unlike Python's salted hash().
    assert [partition_of([k], 4) for k in range(8)] == [
        partition_of([k], 4) for k in range(8)]
    assert partition_of([0], 2**32) == 0x553403F9 and partition_of(["a"], 2**32) == 0x78A7A40C
    assert partition_of([1, "x"], 2**32) == partition_of((1, "x"), 2**32)


keys = st.one_of(st.integers(-(2**40), 2**40), st.text(max_size=6), st.booleans())
kinds = st.sampled_from([Kind.STABLE, Kind.TENTATIVE])


@given(st.lists(st.tuples(keys, kinds), max_size=60), st.integers(1, 5))
def test_the_shares_are_disjoint_cover_the_data_and_all_carry_every_control_tuple(
        rows: list[tuple[object, Kind]], count: int) -> None:
    stream: list[Tuple] = []
    for i, (key, kind) in enumerate(rows, start=1):
        stream.append(data(i, key, kind))
        if i % 7 == 0:
            stream += [boundary(i), undo(i - 2), rec_done(i)]
    shares = [Split(p, count, (0,)).select(stream) for p in range(count)]
    controls = [t for t in stream if t.kind not in DATA_KINDS]
    for share in shares:
        assert [t for t in share if t.kind not in DATA_KINDS] == controls
        assert share == [t for t in stream if t in share]  # a subsequence, in order
    got = sorted(t.id for share in shares for t in share if t.kind in DATA_KINDS)
    assert got == [t.id for t in stream if t.kind in DATA_KINDS]  # each data tuple once
    for p, share in enumerate(shares):
        assert all(partition_of([t.values[0]], count) == p
                   for t in share if t.kind in DATA_KINDS)
    assert cut(stream, count, (0,)) == shares  # one pass, the same shares


def test_a_key_of_several_attributes_hashes_them_together() -> None:
    split = Split(1, 3, (1, 0))
    t = make_tuple(Kind.STABLE, 1, 0, 0, ("a", 7, "x"))
    assert split.keeps(t) == (partition_of([7, "a"], 3) == 1)


@pytest.mark.parametrize("bad", [(2, 2, (0,)), (-1, 2, (0,)), (0, 2, ())])
def test_a_split_outside_its_count_or_without_a_key_is_a_local_error(
        bad: tuple[int, int, tuple[int, ...]]) -> None:
    with pytest.raises(ValueError, match="a split needs"):
        Split(*bad)
