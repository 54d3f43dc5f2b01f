"""The event-loop gauge (node/procs/looplag.py): a task that keeps the loop from the others
shows as lag, and a lag of a heartbeat interval or more is a stall, counted and logged."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from node.procs.looplag import LoopLag

LOG = logging.getLogger("test.looplag")


async def test_a_blocking_turn_shows_as_lag_and_a_long_one_as_a_stall(
        caplog: pytest.LogCaptureFixture) -> None:
    lag = LoopLag("n1a", stall=0.1, period=0.01, log=LOG)
    watch = asyncio.create_task(lag.run())
    await asyncio.sleep(0)  # the watch asks for its first wake-up
    time.sleep(0.15)  # noqa: ASYNC251  # a turn that holds the loop, as a 150 ms replay step did
    while lag.max_lag == 0.0:  # the watch wakes up late and records it  # noqa: ASYNC110
        await asyncio.sleep(0.001)
    watch.cancel()
    # It asked to wake 10 ms after it slept, and the loop was held 150 ms from then.
    assert lag.max_lag >= 0.13 and lag.stalls == 1
    assert lag.gauges()["loop_stalls"] == 1
    assert "n1a: the event loop was blocked for" in caplog.text


def test_stall_and_period_are_checked() -> None:
    with pytest.raises(ValueError, match="0 < period < stall"):
        LoopLag("n1a", stall=0.01, period=0.02, log=LOG)
