"""How long the event loop of a process was kept from its other tasks (a liveness gauge).

Role: a replica answers heartbeats from the same event loop that runs its data path and
its reconciliation. A turn that runs longer than the heartbeat interval risks a missed
heartbeat, and more than ``misses`` in a row make its consumers declare a live replica
failed: they switch away, and back, and new results stop (the defect behind issue 15's
flaky test_strategy_combinations: 200 ms replay steps and a 100,000-tuple subscription
replay sent in one turn). The replay and the publisher now bound their turns
(node/replica/manager.py, node/streams/publisher.py); this gauge is how an operator, a test
or a future bug sees that class of fault: ``/status`` reports ``loop_lag_max_ms`` and
``loop_stalls``, and every stall is logged as a warning.

Theory of operation: :meth:`LoopLag.run` sleeps ``period`` at a time and measures how much
later than asked it woke up: that lateness is the longest turn of some other task (or the
process being descheduled). Only real processes run it (node/procs/entry.py): the
simulation's virtual time has no lateness to measure.
"""

from __future__ import annotations

import asyncio
import logging

__all__ = ["LoopLag"]


class LoopLag:
    """The event loop's lateness in one process (module docstring). Times in seconds."""

    def __init__(self, owner: str, *, stall: float, period: float = 0.02,
                 log: logging.Logger) -> None:
        if not 0 < period < stall:
            raise ValueError(f"loop lag of {owner}: need 0 < period < stall, got {period}, {stall}")
        self.owner = owner
        self.stall = stall  # a lateness at least this long is a stall
        self.period = period
        self.max_lag = 0.0
        self.stalls = 0
        self._log = log

    def record(self, lag: float) -> None:
        """One measured lateness (seconds)."""
        self.max_lag = max(self.max_lag, lag)
        if lag >= self.stall:
            self.stalls += 1
            self._log.warning(
                "%s: the event loop was blocked for %.0f ms (>= %.0f ms, the heartbeat "
                "interval): heartbeat answers waited that long", self.owner, lag * 1e3,
                self.stall * 1e3)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            asked = loop.time() + self.period
            await asyncio.sleep(self.period)
            self.record(max(0.0, loop.time() - asked))

    def gauges(self) -> dict[str, float | int]:
        return {"loop_lag_max_ms": round(self.max_lag * 1e3, 1), "loop_stalls": self.stalls}
