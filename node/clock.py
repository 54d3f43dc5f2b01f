"""The clock of a process: wall-clock microseconds (possibly skewed), or virtual time in the simulation.

Role: the one place the runtime reads the time of day. Tuple times, arrival times, SUnion
deadlines and heartbeat times are all :func:`now_us`. A process normally reads the wall
clock; the deterministic simulation (``node/virtual_time.py``, ``ops_scripts/harness/simulate.py``)
runs a whole cluster in one process on a virtual clock and installs it with
:func:`use_clock` for the length of a run.

A process's wall clock may be *skewed* (issue 47, the clock fault): :func:`set_offset` adds
a fixed number of microseconds to it, as a machine whose clock is wrong would. The process
entry point (``node/procs/entry.py``) sets it from ``RUN_DIR/status/<name>.skew`` at start
and on SIGUSR2; ``dpc inject RUN skew NAME +2s`` and ``dpc run``'s ``skew`` fault write that
file (``ops_scripts/harness/nemesis.py``). What DPC does with a skewed source:
``examples/scenarios/README.md``, "The clock fault".

Invariants: between ``use_clock(f)`` and ``use_clock(None)``, every caller of
:func:`now_us` in the process gets ``f()``; otherwise it gets the wall clock plus
:func:`offset_us`. A virtual clock is never skewed: :func:`set_offset` refuses while one is
installed, and :func:`use_clock` refuses to install one while an offset is in force (every
process of a simulation shares one clock, so a skew of one of them cannot be expressed).
The pure core never calls :func:`now_us` (time is passed in). :func:`now_us` stays one call
of a prebuilt function: an offset rebuilds that function, it adds no branch to every read.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from node.errors import NodeError

__all__ = ["now_us", "offset_us", "set_offset", "use_clock", "virtual"]


def _wall_us() -> int:
    return time.time_ns() // 1000


_clock: Callable[[], int] = _wall_us
_virtual: Callable[[], int] | None = None  # the simulation's clock, while installed
_offset: int = 0  # µs added to the wall clock (the clock fault)


def now_us() -> int:
    """Microseconds: the unit of tuple time, arrival and SUnion deadlines."""
    return _clock()


def _install() -> None:
    """Rebuild :data:`_clock` from the virtual clock or the wall clock and the offset."""
    global _clock
    if _virtual is not None:
        _clock = _virtual
    elif _offset == 0:
        _clock = _wall_us
    else:
        ns, off = time.time_ns, _offset

        def skewed() -> int:
            return ns() // 1000 + off

        _clock = skewed


def use_clock(clock: Callable[[], int] | None) -> None:
    """Make :func:`now_us` read ``clock`` (``None``: the wall clock again, with the offset)."""
    global _virtual
    if clock is not None and _offset != 0:
        raise NodeError(f"cannot install a virtual clock: this process's clock is skewed by "
                        f"{_offset} µs (set_offset(0) first)")
    _virtual = clock
    _install()


def set_offset(us: int) -> None:
    """Skew the wall clock: :func:`now_us` returns the wall clock plus ``us`` microseconds
    from now on (0: the true wall clock again). Refused under a virtual clock."""
    global _offset
    if isinstance(us, bool) or not isinstance(us, int):
        raise NodeError(f"clock offset must be an int of microseconds, got {us!r}")
    if _virtual is not None:
        raise NodeError("skew needs real processes: a virtual clock (the simulation) is "
                        "shared by every process it runs")
    _offset = us
    _install()


def offset_us() -> int:
    """The skew in force (µs added to the wall clock; 0: none)."""
    return _offset


def virtual() -> bool:
    """Whether a simulation's clock is installed: its loop's time jumps over idle time, so
    nothing may wait there for a thread's work (do it inline instead)."""
    return _virtual is not None
