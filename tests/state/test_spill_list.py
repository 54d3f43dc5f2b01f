"""SpillList (state/spill_list.py) behaves as a list of the same tuples, whatever is on disk."""

from __future__ import annotations

import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.tuples import Kind, Tuple, boundary, make_tuple
from state.spill import SpillStore
from state.spill_list import SpillList

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
