"""The clock of a process: wall-clock microseconds, or virtual time in the simulation.

Role: the one place the runtime reads the time of day. Tuple times, arrival times, SUnion
deadlines and heartbeat times are all :func:`now_us`. A process normally reads the wall
clock; the deterministic simulation (``node/virtual_time.py``, ``ops_scripts/harness/simulate.py``)
runs a whole cluster in one process on a virtual clock and installs it with
:func:`use_clock` for the length of a run.

Invariant: between ``use_clock(f)`` and ``use_clock(None)``, every caller of
:func:`now_us` in the process gets ``f()``; the pure core never calls it (time is passed in).
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["now_us", "use_clock", "virtual"]


def _wall_us() -> int:
    return time.time_ns() // 1000


_clock: Callable[[], int] = _wall_us


def now_us() -> int:
    """Microseconds: the unit of tuple time, arrival and SUnion deadlines."""
    return _clock()


def use_clock(clock: Callable[[], int] | None) -> None:
    """Make :func:`now_us` read ``clock`` (``None``: the wall clock again)."""
    global _clock
    _clock = _wall_us if clock is None else clock


def virtual() -> bool:
    """Whether a simulation's clock is installed: its loop's time jumps over idle time, so
    nothing may wait there for a thread's work (do it inline instead)."""
    return _clock is not _wall_us
