"""A replica's ``POST /fault`` action, driven in-process (the replica of examples/basic.toml
built over memory, never run): it cuts, shapes, stalls the replay and heals, and refuses a
bad body without changing anything. The fault vocabulary itself (node/faults/ops.py) is in
test_ops.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from node.config.load import load_config
from node.errors import ActionError
from node.net.memory import MemoryTransport
from node.procs.rundir import RunDir
from node.replica.runtime import Replica
from tests.node.faults.fault_world import CLEAN
from tests.node.net.test_transport import LEAK_FREE
from tests.paths import EXAMPLES

pytestmark = LEAK_FREE


# ---------------------------------------------------------------------------- control plane
@pytest.fixture
def replica(tmp_path: Path) -> Iterator[Replica]:
    """Replica n1a of examples/basic.toml, built in-process over memory and never run:
    enough for its ``POST /fault`` action (the control plane hands it the JSON body)."""
    config = load_config(EXAMPLES / "basic.toml")
    r = Replica(config, "n1a", RunDir(tmp_path).ensure(), MemoryTransport().for_process("n1a"))
    yield r
    for writer in r.output_logs.values():
        writer.close()


async def test_the_fault_action_cuts_shapes_and_heals(replica: Replica) -> None:
    act, faults = replica._fault_action, replica.faults
    assert await act({"cut": ["s3"]}) == {
        "cut": ["s3"], "rules": {"s3": {"direction": "both", "kind": "blackhole"}}
    }
    await act({"cut": ["s2", "n1b"], "direction": "in"})
    await act({"cut": ["s1"], "kind": "reset", "direction": "both"})
    assert await act({"shape": ["s3"], "delay": 0.2, "bandwidth": 5e4, "slow": 0.01}) == {
        "shapes": {"s3": {"delay": 0.2, "bandwidth": 5e4, "slow": 0.01}}
    }
    await act({"shape": ["s2"], "bandwidth": None, "slow": 1})
    st = faults.status()
    assert st["rules"] == {
        "n1b": {"direction": "in", "kind": "blackhole"},
        "s1": {"direction": "both", "kind": "reset"},
        "s2": {"direction": "in", "kind": "blackhole"},
        "s3": {"direction": "both", "kind": "blackhole"},
    }
    assert st["shapes"]["s2"] == {"delay": 0.0, "bandwidth": None, "slow": 1.0}
    assert await act({"heal": ["s3", "n1b"]}) == {"healed": ["n1b", "s3"], "cut": ["s1", "s2"]}
    assert await act({"stall": "replay"}) and not replica.manager.replay_gate.is_set()
    assert await act({"heal": "all"}) == {"healed": ["s1", "s2"], "cut": []}
    assert faults.status() == CLEAN and replica.manager.replay_gate.is_set()


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ({}, 'send {"cut": [names]}'),
        ({"cut": ["s3"], "heal": "all"}, 'send {"cut": [names]}'),
        ({"delay": 1}, 'send {"cut": [names]}'),
        ({"cut": "s3"}, "'cut': the names must be a list of process names, got 's3'"),
        ({"heal": None}, "'heal': the names must be a list of process names, got None"),
        ({"cut": ["nobody"]}, "unknown process(es) ['nobody']"),
        ({"shape": ["n1a"], "delay": 1}, "unknown process(es) ['n1a']"),
        ({"cut": ["s3"], "delay": 1}, "unknown key(s) ['delay'] with 'cut': it takes"),
        ({"heal": "all", "kind": "reset"}, "unknown key(s) ['kind'] with 'heal'"),
        ({"cut": ["s3"], "direction": "up"}, "direction must be one of 'both', 'in', 'out'"),
        ({"cut": ["s3"], "kind": None}, "kind must be one of 'blackhole', 'reset', got None"),
        ({"cut": ["s3"], "kind": "reset", "direction": "out"}, "a reset cuts both ways"),
        ({"shape": ["s3"]}, "give a delay > 0, a bandwidth or a slow > 0"),
        ({"shape": ["s3"], "bandwidth": -5}, "bandwidth must be a finite number"),
        ({"shape": ["s3"], "delay": "1s"}, "delay must be a finite number of seconds >= 0"),
        ({"shape": ["s3"], "slow": True}, "slow must be a finite number of seconds >= 0"),
        ({"stall": "everything"}, 'send {"stall": "replay"}'),
    ],
)
async def test_the_fault_action_refuses_bad_bodies_and_changes_nothing(
    replica: Replica, body: dict[str, Any], why: str
) -> None:
    await replica._fault_action({"cut": ["s2"], "direction": "out"})
    before = replica.faults.status()
    with pytest.raises(ActionError) as caught:
        await replica._fault_action(body)
    assert why in str(caught.value)
    assert replica.faults.status() == before
