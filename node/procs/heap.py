"""The cyclic garbage collector as every node process runs it (DESIGN.md 7), in one place:
the processes set it at start-up, and the benches that time the data path set the same
(they had copies of an older young-generation size, and measured another runtime).

The data path allocates some ten objects per tuple, nearly all freed by reference counting
(tuples hold no cycles): a young generation of 500,000 objects lets them die before the
collector looks (at 50,000 it cost a replica 12% of its throughput: dpc bench throughput,
87,500 -> 100,000 tuples/s; the same as with the collector off). Start-up objects live as
long as the process: frozen, the collector never walks them.

:class:`GcClock` says what the collector costs where a bench times a part of the data path
(``dpc bench replay``'s ``gc s``: a replay's output tuples each hold an enum member, so the
collector tracks every one and its young collections walk them all).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType

__all__ = ["YOUNG_GENERATION", "GcClock", "runtime_gc", "tune_gc"]

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


class GcClock:
    """The collections of the cyclic GC (every generation) and the seconds they took, from
    entering to leaving (a ``gc.callbacks`` observer; a collection already running when
    the clock is entered is not counted)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.collections = 0
        self._began: float | None = None
        self._observer = self._observe  # (one bound method: what __exit__ removes)

    def _observe(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        elif self._began is not None:
            self.seconds += time.perf_counter() - self._began
            self.collections += 1
            self._began = None

    def __enter__(self) -> GcClock:
        gc.callbacks.append(self._observer)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        gc.callbacks.remove(self._observer)
