"""CEC on real processes: a replica whose log ends in a torn frame recovers from it.

(The other two cases of issue 19, a replica recovering from its own disk while its partner
is in UP_FAILURE and both replicas of a node killed at once, are the example scenarios
``cec-recover-alone`` and ``cec-double-kill``, played by tests/integration/test_scenarios.py.)

A SIGKILL in the middle of an append leaves part of a frame at the log's end; the
frame's output never left the replica (it is published only after the append returned).
Here a killed replica's log gets such a tail (a frame header promising more bytes than
follow), then the replica is restarted with ``--recover``: it must cut the torn tail off,
say so, recover from the frames before it, and the run must be valid.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from node.config.model import ClusterConfig
from node.procs.rundir import RunDir
from ops_scripts.cli import main as dpc
from ops_scripts.cluster.launch import Launched
from ops_scripts.cluster.status import fetch_status
from tests.integration.test_cluster import wait_for
from tests.integration.test_scenarios import drain_and_check_valid, running_scenario
from tests.paths import EXAMPLES

pytestmark = pytest.mark.slow


@pytest.fixture
def cec_cluster(tmp_path: Path) -> Iterator[tuple[RunDir, ClusterConfig, list[Launched]]]:
    yield from running_scenario(EXAMPLES / "scenarios" / "cec-double-kill.toml", tmp_path)


def _status(config: ClusterConfig, replica: str) -> dict[str, Any]:
    return fetch_status(config, replica) or {}


def test_a_torn_final_frame_is_cut_off_and_the_replica_recovers(cec_cluster: Any) -> None:
    rd, config, procs = cec_cluster
    run = str(rd.path)
    wait_for(lambda: (_status(config, "n1a").get("cec") or {}).get("frames", 0) > 20, 60,
             "n1a to write CEC frames")
    assert dpc(["inject", run, "kill", "n1a"]) == 0
    log_dir = rd.replica_cec("n1a")
    last = sorted(log_dir.glob("*.ceclog"))[-1]
    size = last.stat().st_size
    payload = json.dumps({"h": {}, "torn": "x" * 500}).encode()
    # A frame header and the first 40 bytes of its payload: the rest never reached the file.
    with open(last, "ab") as f:
        f.write(struct.pack("<IIq", len(payload), 12345, 2**61) + payload[:40])
    assert last.stat().st_size == size + 16 + 40
    assert dpc(["inject", run, "restart", "n1a"]) == 0
    wait_for(lambda: _status(config, "n1a").get("state") == "STABLE", 60,
             "n1a to recover from its log and rejoin")
    text = rd.process_log("n1a").read_text()
    # Exactly the torn tail was cut off (the frames after it are the new incarnation's).
    assert f"the CEC log's last frame was torn by the crash: {16 + 40} bytes cut off" in text
    assert "n1a: recovering from its CEC log" in text
    assert dpc(["inject", run, "heal", "--all"]) == 0
    drain_and_check_valid(rd, procs, restarted="n1a")
    (recovery,) = [json.loads(line) for line in
                   rd.replica_recoveries("n1a").read_text().splitlines()]
    assert recovery["from"] == "its CEC log" and recovery["parts"] >= 1
