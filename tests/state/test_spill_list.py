"""SpillList (state/spill_list.py) behaves as a list of the same tuples, whatever is on disk."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.tuples import Kind, Tuple, boundary, make_tuple
from state.buffer import OutputBuffer
from state.spill import SpillStore
from state.spill_list import SpillList
from tests.state.helpers import RD, B, S, T, U

ops = st.lists(st.one_of(
    st.tuples(st.just("extend"), st.integers(1, 7), st.booleans()),
    st.tuples(st.just("del_suffix"), st.integers(0, 40), st.booleans()),
    st.tuples(st.just("del_prefix"), st.integers(0, 40), st.booleans()),
    st.tuples(st.just("split_off"), st.integers(0, 40), st.booleans()),
), max_size=30)


@settings(max_examples=150, deadline=None)
@given(ops, st.integers(1, 2000), st.integers(1, 5))
def test_a_spill_list_is_a_list(steps: list[tuple[str, int, bool]], limit_bytes: int,
                                step: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        store = SpillStore(d, "l")
        xs = SpillList(store, limit_bytes)
        xs.STEP = step
        ref: list[Tuple] = []
        next_id = 1
        for op, n, flag in steps:
            if op == "extend":
                new = [make_tuple(Kind.TENTATIVE if flag else Kind.STABLE, next_id + i,
                                  next_id + i, next_id + i, (next_id + i, f"v{i}"))
                       for i in range(n)]
                if flag:
                    new.append(boundary(10 * next_id))  # control tuples are held too
                next_id += n
                xs.extend(new)
                ref.extend(new)
            elif op == "del_suffix":
                p = min(n, len(ref))
                del xs[p:]
                del ref[p:]
            elif op == "del_prefix":
                p = min(n, len(ref))
                del xs[:p]
                del ref[:p]
            else:  # split the rest off, check it, and keep one side
                p = min(n, len(ref))
                rest = xs.split_off(p)
                assert list(rest) == ref[p:] and list(xs) == ref[:p]
                if flag:
                    rest.clear()
                    del ref[p:]
                else:
                    xs.clear()
                    xs = rest
                    del ref[:p]
            assert len(xs) == len(ref)
            assert list(xs) == ref
            assert store.stats().tuples + xs.in_memory == len(ref)
            if ref:
                assert [xs[i] for i in range(len(ref))] == ref
                assert xs[-1] == ref[-1]
                a, b = len(ref) // 3, 2 * len(ref) // 3 + 1
                assert xs[a:b] == ref[a:b] and xs[b:] == ref[b:] and xs[:a] == ref[:a]
        del xs[:]
        assert store.stats().segments == 0


def test_only_prefixes_and_suffixes_are_deleted(tmp_path: object) -> None:
    xs = SpillList(SpillStore(str(tmp_path), "l"), 1)
    xs.extend([make_tuple(Kind.STABLE, i, i, i, (i,)) for i in range(1, 6)])
    with pytest.raises(TypeError, match="a prefix"):
        del xs[1:3]
    with pytest.raises(IndexError):
        xs[5]


@pytest.mark.parametrize("batch", [1, 7, 1000])
def test_a_catchup_sends_the_replay_of_its_moment_a_batch_at_a_time(tmp_path: Path,
                                                                     batch: int) -> None:
    """A spilled buffer's catch-up (what the publisher sends a resubscriber) is read back
    lazily: the very replay of the moment of the subscription, whatever the buffer does
    meanwhile (an UNDO, corrections, trims), and the segments it read from are released
    once it is read to the end, or closed."""
    store = SpillStore(tmp_path, "out")
    spilled = OutputBuffer("s", spill=SpillList(store, 1))
    plain = OutputBuffer("s")
    stream = [*(S(i) for i in range(1, 41)), B(400), RD, *(T(i) for i in range(41, 61))]
    for b in (spilled, plain):
        b.set_consumers(["c"])
        b.append(stream)
    assert store.stats().tuples > 40  # on disk, but for one tuple
    for s, t in [(40, 55), (12, 50), (10, 0)]:  # cases 2, 3 and 1 of state/buffer.py
        want = plain.replay(s, t)
        c = spilled.catchup(s, t)
        got = c.take(batch)
        if (s, t) == (10, 0):  # meanwhile: an UNDO, corrections, the consumer's ack
            for b in (spilled, plain):
                b.append([U(40), *(S(i) for i in range(41, 46))])
                b.ack("c", 30)
        while len(c):
            got += c.take(batch)
        assert got == want, (s, t)
    assert spilled.replay(30, 0) == plain.replay(30, 0)
    held = store.stats().segments
    spilled.catchup(30, 0).close()  # a subscription that ended before its replay was sent
    assert store.stats().segments == held
    reader = spilled.catchup(30, 0)
    spilled.append([U(45)])
    spilled.ack("c", 45)  # the buffer lets go of what the reader still reads
    assert reader.all()[0] == S(31)
