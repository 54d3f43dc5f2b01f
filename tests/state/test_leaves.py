"""Leaf deltas (state/leaves.py): applying the delta of two values of one shape gives the
second, leaves the first alone, and a delta between shapes is refused."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from state.leaves import apply_leaves, leaf_delta

scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1),
                    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=4))
plain = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=3), inner, max_size=4)),
    max_leaves=12)


def _reshaped(value: Any, leaves: st.DataObject) -> Any:
    """``value`` with some of its leaves replaced (same shape)."""
    if type(value) is dict and value:
        return {k: _reshaped(v, leaves) for k, v in value.items()}
    return leaves.draw(plain.filter(lambda x: not (type(x) is dict and x))) \
        if leaves.draw(st.booleans()) else value


@given(plain, st.data())
def test_a_delta_between_values_of_one_shape_rebuilds_the_new_one(old: Any,
                                                                   data: st.DataObject) -> None:
    new = _reshaped(old, data)
    before = copy.deepcopy(old)
    delta = leaf_delta(old, new)
    assert delta is not None
    assert orjson.dumps(apply_leaves(old, delta)) == orjson.dumps(new)
    assert orjson.dumps(old) == orjson.dumps(before)


@given(plain)
def test_a_value_against_itself_has_an_empty_delta(value: Any) -> None:
    assert leaf_delta(value, value) == []


def test_only_the_moved_leaves_travel() -> None:
    old = {"base": {"last_id": 5, "watermarks": [10, 10], "log": []}, "state": {"next": 2}}
    new = {"base": {"last_id": 9, "watermarks": [20, 20], "log": []}, "state": {"next": 2}}
    assert leaf_delta(old, new) == [[0, 9], [2, [20, 20]]]


def test_a_leaf_of_another_type_moves() -> None:
    assert leaf_delta({"a": 1}, {"a": True}) == [[0, True]]
    assert leaf_delta([1], [1.0]) == [[0, [1.0]]]


@pytest.mark.parametrize("old, new", [
    ({"a": 1}, {"a": 1, "b": 2}),       # a key added
    ({"a": 1, "b": 2}, {"a": 1}),       # a key gone
    ({"a": 1}, {"a": {"x": 1}}),        # a dict where there was a leaf
    ({"a": {"x": 1}}, {"a": 1}),
    (1, {"a": 1}),
])
def test_values_of_another_shape_have_no_delta(old: Any, new: Any) -> None:
    assert leaf_delta(old, new) is None


@pytest.mark.parametrize("delta", [[[3, 0]], [[-1, 0]], [["a", 0]], [[0]], [5]])
def test_a_delta_that_does_not_fit_is_refused(delta: Any) -> None:
    with pytest.raises(ValueError, match="not a leaf delta entry"):
        apply_leaves({"a": 1, "b": 2}, delta)
