"""Fixtures shared by the node tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.node.fault_world import World


@pytest.fixture(params=["tcp", "memory"])
async def world(request: pytest.FixtureRequest) -> AsyncIterator[World]:
    w = World(request.param)
    try:
        yield w
    finally:
        await w.close()
