"""The cyclic garbage collector as every node process runs it (DESIGN.md 7), in one place:
the processes set it at start-up, and the benches that time the data path set the same
(they had copies of an older young-generation size, and measured another runtime).

The data path allocates some ten objects per tuple, nearly all freed by reference counting
(tuples hold no cycles): a young generation of 500,000 objects lets them die before the
collector looks (at 50,000 it cost a replica 12% of its throughput: dpc bench throughput,
87,500 -> 100,000 tuples/s; the same as with the collector off). Start-up objects live as
long as the process: frozen, the collector never walks them.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["YOUNG_GENERATION", "runtime_gc", "tune_gc"]

#: Allocations (less deallocations) between two collections of the young generation.
YOUNG_GENERATION = 500_000


def tune_gc() -> None:
    """Freeze what exists now and set the runtime's thresholds (for the process's life)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_GENERATION, 50, 100)


@contextmanager
def runtime_gc() -> Iterator[None]:
    """:func:`tune_gc` within, the thresholds before and an unfrozen heap after."""
    old = gc.get_threshold()
    tune_gc()
    try:
        yield
    finally:
        gc.set_threshold(*old)
        gc.unfreeze()
