"""Leaf deltas of plain data: what changed in a snapshot, down to its scalars.

Upstream backup ships its secondary a *restart point* every M (operators/restart.py): every
operator's header, a few dozen counters, ids and watermarks of which a handful move between
two points. Shipping the changed operators whole (as passive standby does with its
snapshots) costs about 1.8 KB a point, where the paper's queue-trimming message is an
8-byte id per stream; a leaf delta sends only the moved numbers, about 0.2 KB.

The *leaves* of plain data (dicts with str keys, lists, scalars: what orjson round-trips)
are its values reached through dicts only, in sorted key order: a list, a scalar and an
empty dict are leaves. Two values have the same *shape* when their leaves have the same key
paths. A delta is ``[[index, new leaf], ...]`` over the old value's leaves, and exists only
between values of one shape (``leaf_delta`` answers None otherwise: send the value whole).

Invariant (tests/state/test_leaves.py, property-tested): for plain ``old`` and ``new`` of
one shape, ``apply_leaves(old, leaf_delta(old, new)) == new``, and ``old`` is not changed.
"""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["apply_leaves", "leaf_delta"]

Path = tuple[str, ...]


def _leaves(value: Any, path: Path = ()) -> list[tuple[Path, Any]]:
    if type(value) is dict and value:
        out: list[tuple[Path, Any]] = []
        for key in sorted(value):
            out.extend(_leaves(value[key], (*path, key)))
        return out
    return [(path, value)]


def leaf_delta(old: Any, new: Any) -> list[list[Any]] | None:
    """The leaves of ``new`` that differ from ``old``'s, by index; None when the two have
    different shapes (a key added or gone, a dict where there was a leaf)."""
    before, after = _leaves(old), _leaves(new)
    if len(before) != len(after) or any(p != q for (p, _), (q, _) in zip(before, after,
                                                                       strict=True)):
        return None
    # (compared as encoded: 1 == True == 1.0 in Python, not on the wire)
    return [[k, b] for k, ((_, a), (_, b)) in enumerate(zip(before, after, strict=True))
            if a != b or orjson.dumps(a) != orjson.dumps(b)]


def apply_leaves(old: Any, delta: list[list[Any]]) -> Any:
    """A fresh copy of ``old`` with ``delta`` applied. Raises ValueError when ``delta`` is
    not a delta over ``old`` (an index out of range, an entry not ``[index, leaf]``)."""
    copy = orjson.loads(orjson.dumps(old))
    paths = [p for p, _ in _leaves(copy)]
    for entry in delta:
        if type(entry) is not list or len(entry) != 2 or type(entry[0]) is not int \
                or not 0 <= entry[0] < len(paths):
            raise ValueError(f"not a leaf delta entry over {len(paths)} leaves: {entry!r}")
        index, leaf = entry
        path = paths[index]
        if not path:  # the value is itself one leaf
            copy = leaf
            continue
        node = copy
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = leaf
    return copy
