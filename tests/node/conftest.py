"""Fixtures shared by the node tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.node.faults.fault_world import World
from tests.node.net.test_transport import assert_nothing_leaked, open_fds


@pytest.fixture(params=["tcp", "memory"])
async def world(request: pytest.FixtureRequest) -> AsyncIterator[World]:
    async with World(request.param) as w:
        yield w


@pytest.fixture
async def no_leaks() -> AsyncIterator[None]:
    """No task of the test still runs and no socket it opened is still open after it (used
    through ``LEAK_FREE``, tests/node/net/test_transport.py)."""
    before = open_fds()
    yield
    await assert_nothing_leaked(before)
