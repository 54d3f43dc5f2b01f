"""node/procs/heap.py: the GC clock counts the collections within it, and only those."""

from __future__ import annotations

import gc

from node.procs.heap import GcClock


def test_the_gc_clock_counts_the_collections_within_it_and_only_those() -> None:
    with GcClock() as clock:
        for _ in range(3):
            gc.collect()
    assert clock.collections == 3 and clock.seconds > 0
    seconds = clock.seconds
    gc.collect()  # after: not counted, and the observer is gone
    assert clock.collections == 3 and clock.seconds == seconds
    assert all(cb.__self__ is not clock for cb in gc.callbacks if hasattr(cb, "__self__"))
