"""The join's eviction by arrival order (``Join._evict``) leaves exactly the state, the
trackers and the output of the full scan it replaced (``Join._evict_by_scan``), whether the
arrivals are in time order (behind a SUnion: the fast path) or go back in time (the scan
fallback), and across snapshot / restore."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from operators import create
from operators.join import Join
from protocol.tuples import Kind, Tuple, boundary, make_tuple

KV = ("key", "value")


class ScanJoin(Join):
    """The reference: every eviction scans every key (the join before arrival order)."""

    def _evict(self, side: int, floor: int) -> None:
        self._evict_by_scan(side, floor)


def _join(cls: type[Join]) -> Join:
    op = create("join", "j", [KV, KV], {"on": [["key", "key"]], "band": 5})
    op.__class__ = cls
    return op


def _observe(op: Join) -> Any:
    return (op.snapshot()["state"], list(op._min_time), list(op._min_seq), op.oldest_seq())


# A step: (port, tuples as (time, key), or a boundary time, or "restore").
_STEP = st.one_of(
    st.tuples(st.integers(0, 1), st.lists(st.tuples(st.integers(0, 60), st.integers(0, 3)),
                                          min_size=1, max_size=6)),
    st.tuples(st.integers(0, 1), st.integers(0, 70)),
    st.just("restore"),
)


@settings(max_examples=300, deadline=None)
@given(steps=st.lists(_STEP, max_size=40), in_order=st.booleans())
def test_eviction_by_arrival_order_equals_the_full_scan(steps: list[Any], in_order: bool) -> None:
    fast, ref = _join(Join), _join(ScanJoin)
    ids, clock = [0, 0], [0, 0]
    for step in steps:
        if step == "restore":
            snap = fast.snapshot()
            fast = _join(Join)
            fast.restore(snap)
            continue
        port, what = step
        batch: list[Tuple]
        if isinstance(what, int):
            batch = [boundary(what)]
        else:
            batch = []
            for time, key in what:
                ids[port] += 1
                if in_order:  # arrivals never go back in time (what a SUnion upstream does)
                    clock[port] = time = max(clock[port], time)
                batch.append(make_tuple(Kind.STABLE, ids[port], time, time, (key, ids[port])))
        assert fast.process(port, batch) == ref.process(port, batch)
        assert _observe(fast) == _observe(ref)
