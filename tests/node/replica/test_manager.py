"""The consistency manager's own tasks (node/replica/manager.py): the replay and the permission
requests it starts are owned by ``Manager.run``, cancelled and awaited when it ends, and a
failure of one ends ``run`` with it (a local failure, STYLE.md 8) instead of vanishing."""

from __future__ import annotations

import asyncio
import logging

import pytest

from node.config.load import load_config
from node.net.memory import MemoryTransport
from node.replica.manager import Manager, policy_of
from operators import QueryNetwork
from ops_scripts.harness.simulate import DEFAULT_CLUSTER

LOG = logging.getLogger("test.manager")


def make_manager() -> Manager:
    node = load_config(DEFAULT_CLUSTER).nodes["n1"]
    return Manager("n1a", "n1", policy_of(node, "n1a"), QueryNetwork(node.network), [],
                   MemoryTransport().for_process("n1a"), lambda out, now: None, lambda: 0,
                   log=LOG)


async def test_cancelling_run_cancels_and_awaits_the_tasks_it_started() -> None:
    manager = make_manager()
    run = asyncio.create_task(manager.run())
    closed = asyncio.Event()

    async def request() -> None:
        try:
            await asyncio.Event().wait()  # a partner that never answers
        finally:
            closed.set()

    task = manager._spawn(request(), "request to n1b")
    await asyncio.sleep(0)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert task.cancelled() and closed.is_set()


async def test_a_task_that_fails_ends_run_with_its_error() -> None:
    manager = make_manager()
    run = asyncio.create_task(manager.run())

    async def replay() -> None:
        raise RuntimeError("the replay broke")

    manager._spawn(replay(), "replay")
    async with asyncio.timeout(5):
        with pytest.raises(RuntimeError, match="the replay broke"):
            await run
