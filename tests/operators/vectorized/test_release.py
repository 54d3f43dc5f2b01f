"""A replay step's release built as a flow (operators/vectorized/release.py) is exactly the
per-tuple release: the same tuples, ids, order and waves, whether a bucket's tuples are
spilled, in memory or both, and whatever ties in time its ports hold."""

from __future__ import annotations

import tempfile

from hypothesis import given, settings
from hypothesis import strategies as st

from operators.buckets import Released
from operators.vectorized.engine import Stream
from operators.vectorized.release import _tuples, _waves, released_stream
from protocol.tuples import Kind, Tuple, boundary, make_tuple
from state.spill import Chunk, SpillStore

SCHEMA = ("key", "value")

# Per bucket, per port, its sources: each a list of times, spilled or not.
sources = st.lists(st.tuples(st.booleans(), st.lists(st.integers(0, 6), max_size=4)),
                   max_size=2)
buckets = st.lists(st.lists(sources, min_size=2, max_size=2), min_size=1, max_size=5)


@settings(max_examples=60, deadline=None)
@given(buckets, st.booleans())
def test_the_flow_release_is_the_per_tuple_release(spec: list, in_time_order: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = SpillStore(tmp, "rel")
        runs, out, first_id, value = [], [], 1, 0
        for b, ports in enumerate(spec):
            # Buckets in time order, as SUnion's are; else each bucket's times overlap
            # the others' (the release then sorts by bucket first).
            base = 10 * b if in_time_order else 0
            port_sources: list[list[Chunk | list[Tuple]]] = []
            for port in ports:
                srcs: list[Chunk | list[Tuple]] = []
                for spilled, times in port:
                    items = []
                    for t in sorted(times):
                        value += 1
                        items.append(make_tuple(Kind.STABLE, value, base + t, base + t,
                                                (value % 3, value)))
                    if spilled and items:
                        srcs += store.write([items])
                    else:
                        srcs.append(items)
                port_sources.append(srcs)
            n = sum(len(s) if isinstance(s, list) else s.length
                    for p in port_sources for s in p)
            runs.append(Released(len(out), first_id, port_sources, store))
            first_id += n
            out.append(boundary(10 * b + 9))
        flow = released_stream(SCHEMA, out, runs)
        plain = Stream(SCHEMA, batches=_waves(_tuples(out, runs)))
        assert flow.vectorized
        assert flow.batches() == plain.batches()
