"""The vectorized join's candidate pairs: the grid and the sort-merge find the same pairs
as a comparison of every left row with every right row (operators/vectorized/join.py)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from operators.vectorized.join import _band_pairs

side = st.lists(st.tuples(st.integers(0, 4), st.integers(-50, 400)), min_size=1, max_size=40)


def pairs(left: list[tuple[int, int]], right: list[tuple[int, int]], band: int,
          grid: bool) -> set[tuple[int, int]]:
    lc, lt = (np.array(c, dtype=np.int64) for c in zip(*left, strict=True))
    rc, rt = (np.array(c, dtype=np.int64) for c in zip(*right, strict=True))
    li, ri = _band_pairs(lc, lt, rc, rt, 5, band, grid=grid)
    found = list(zip(li.tolist(), ri.tolist(), strict=True))
    assert len(found) == len(set(found)), "a pair found twice"
    return set(found)


@settings(max_examples=300, deadline=None)
@given(side, side, st.integers(0, 120))
def test_grid_and_sort_merge_find_every_pair_within_the_band(
        left: list[tuple[int, int]], right: list[tuple[int, int]], band: int) -> None:
    every = {(i, j) for i, (a, s) in enumerate(left) for j, (b, t) in enumerate(right)
             if a == b and abs(s - t) <= band}
    assert pairs(left, right, band, grid=True) == every
    assert pairs(left, right, band, grid=False) == every


def test_a_grid_much_larger_than_the_rows_is_not_built() -> None:
    """A band of 1 over a span of 10^9 would be 10^9 cells: the sort-merge runs instead,
    with the same pairs."""
    left, right = [(0, 0), (1, 10**9)], [(0, 1), (1, 10**9 - 1), (1, 5)]
    assert pairs(left, right, 1, grid=True) == {(0, 0), (1, 1)}
