"""Real processes: a node with three replicas (examples/three.toml), one of them dead while the
two others fail and must reconcile (issue 13, defect 3).

The issue's reproduction: n1c killed (``kill -9``: its port refuses connections), then s3 cut
from n1a and n1b for 3 s, healed. Before the fix both stayed in UP_FAILURE, producing only
tentative output, until n1c came back ("cannot ask partner n1c: Connection refused" every
0.5 s): permission waited for every partner. Now a replica needs the grant of every partner
it can reach (node/replica/consistency.py), so n1a and n1b reconcile in turn on each other's
grant while n1c is still dead. X is scaled to 1 s (alpha = 0.8) as in test_dpc.py; every wait
for an outcome polls a condition.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from node.faults.ops import Cut, Heal
from ops_scripts.cluster.launch import stop_cluster
from ops_scripts.cluster.status import fetch_status
from ops_scripts.harness.fault import send_fault
from tests.integration.test_cluster import wait_for
from tests.integration.test_dpc import Cluster, client_live, dpc_config

LIVE = ("n1a", "n1b")
CUT_S = 3.0  # the cut of s3, longer than alpha*X = 0.8 s


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Callable[[Path], Cluster]]:
    started: list[Cluster] = []

    def start(path: Path) -> Cluster:
        c = Cluster(path, tmp_path)
        started.append(c)
        return c

    yield start
    for c in started:  # always stop what we started, by pid
        stop_cluster(c.procs, c.rd, drain=False)


def test_a_dead_third_replica_does_not_block_the_two_others(
        cluster: Callable[[Path], Cluster], tmp_path: Path) -> None:
    c = cluster(dpc_config(tmp_path, "three.toml"))
    wait_for(lambda: client_live(c), 60, what="the client to receive results as they are made")
    c.kill("n1c")
    began = time.monotonic()
    for r in LIVE:
        send_fault(c.config, r, Cut(("s3",)))

    def failing() -> bool:
        sts = [c.status(r) for r in LIVE]
        return all(st["state"] == "UP_FAILURE" and sum(st["counters"]["tentative_out"].values())
                   for st in sts)

    # The cut lasts its 3 s, and until both replicas produce tentative output.
    wait_for(lambda: time.monotonic() - began >= CUT_S and failing(), 60,
             "n1a and n1b in UP_FAILURE, tentative, for the length of the cut")
    for r in LIVE:
        send_fault(c.config, r, Heal(("s3",)))
    wait_for(lambda: all(c.status(r)["state"] == "STABLE" for r in LIVE), 60,
             "n1a and n1b STABLE again while n1c is dead")
    assert fetch_status(c.config, "n1c", timeout=1) is None  # still dead
    for r in LIVE:
        st = c.status(r)
        assert st["counters"]["reconciliations"] >= 1, (r, st["counters"])
        # On the live partner's grant, with n1c out of the count (it refused the connection).
        assert st["counters"]["self_grants"] == 0, (r, st["counters"])
        assert st["consistency"]["partners"]["n1c"]["counts"] is False, st["consistency"]
    # n1c comes back, recovers from a STABLE partner; the run ends correct and converged.
    c.restart("n1c")
    wait_for(lambda: c.status("n1c")["recovery"]["recovering"] is None, 60, "n1c to rejoin")
    final = c.drain()
    c.check()  # eventual consistency; no stable tuple undone or duplicated
    digests = {r: json.dumps(st["state_hashes"], sort_keys=True) for r, st in final.items()}
    assert len(digests) == 3 and len(set(digests.values())) == 1, digests
