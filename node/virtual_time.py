"""An asyncio event loop on virtual time, for the deterministic simulation (STYLE.md 1-2).

Role: FoundationDB-style simulation needs every timer of a cluster to fire in an order
that depends on nothing but the program and its seed. :class:`VirtualTimeLoop` is a plain
selector event loop whose :meth:`~VirtualTimeLoop.time` is a number it advances itself:
whenever the loop would block waiting for the next timer, it jumps to that timer's time at
once instead. Waiting costs nothing, so ten virtual seconds of a cluster run in a fraction
of a real second, and two runs of the same program interleave identically.

Theory of operation. ``BaseEventLoop._run_once`` asks its selector to wait ``timeout``
seconds (until the earliest timer; 0 when callbacks are ready; ``None`` when nothing is
scheduled at all). :class:`_JumpingSelector` polls the real selector without waiting (the
loop's self-pipe is registered there) and, if nothing is ready, advances the virtual time
by ``timeout``. With nothing scheduled and nothing ready, no event can ever come: that is a
deadlock of the simulated program, raised as :class:`SimulationDeadlock` rather than
hanging; so is a livelock (``SPIN_LIMIT`` loop turns in a row while time stands still).

Invariants: virtual time never goes backwards and moves only while the loop is idle; no
real I/O is awaited (the simulated network is ``node/net/memory.py``; files are written
synchronously); the loop is single-threaded.
"""

from __future__ import annotations

import asyncio
import selectors
import signal
from typing import Any

from node.errors import SimulationDeadlock

__all__ = ["VirtualTimeLoop"]


#: Loop turns in a row without virtual time moving before the program counts as livelocked
#: (a real program that busy-waits on ``sleep(0)`` would hang the simulation otherwise).
SPIN_LIMIT = 2_000_000


class _JumpingSelector(selectors.BaseSelector):
    """A selector that jumps the loop's virtual clock instead of sleeping."""

    def __init__(self, loop: VirtualTimeLoop) -> None:
        self._real = selectors.DefaultSelector()
        self._loop = loop

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._real.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.modify(fileobj, events, data)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = self._real.select(0)
        if ready or timeout == 0:
            self._loop.spin()
            return ready
        if timeout is None:
            raise SimulationDeadlock("nothing is scheduled and nothing can wake the loop")
        self._loop.advance(timeout)
        return []

    def close(self) -> None:
        self._real.close()

    def get_map(self) -> Any:
        return self._real.get_map()


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """A selector event loop whose clock starts at 0 and jumps over idle time."""

    def __init__(self) -> None:
        # A Ctrl-C landing inside the base constructor left a half-built loop whose __del__
        # then failed at exit ("no attribute '_ssock'": dpc simulate interrupted, its test
        # saw it once in a fresh clone's suite). SIGINT waits until the loop is whole: it is
        # delivered when the mask is restored, and a whole loop closes cleanly.
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            self._virtual_now = 0.0
            self._spins = 0
            super().__init__(selector=_JumpingSelector(self))
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)

    def spin(self) -> None:
        """One loop turn at the same virtual time."""
        self._spins += 1
        if self._spins > SPIN_LIMIT:
            self._spins = 0  # whoever catches it may still cancel the tasks on this loop
            raise SimulationDeadlock(
                f"livelock: {SPIN_LIMIT} loop turns without virtual time moving "
                f"(at t={self._virtual_now:.6f} s)")

    def time(self) -> float:
        return self._virtual_now

    def advance(self, seconds: float) -> None:
        if seconds > 0:
            self._virtual_now += seconds
            self._spins = 0
