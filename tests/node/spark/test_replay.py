"""The ``spark`` replay engine (node/spark/replay.py) on a real Spark session.

A query network's replay steps after the first run as Spark tasks: each task reads its job
(and the spilled buckets, by path) and writes its result; the node restores the operators
from it. Every call returns what the per-tuple replay returns, and the operators end in its
state. A session that cannot start fails the replay loudly, with the reason.
"""

from __future__ import annotations

import logging
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from node.errors import NodeError
from node.spark.replay import SparkReplayer
from operators import NetworkOutput, QueryNetwork
from tests.operators.vectorized.test_replay import scenario, spec

log = logging.getLogger("test")


class SparkNetwork(QueryNetwork):
    """Replays as the manager does with the engine ``spark``."""

    replayer: SparkReplayer

    def replay(self, now: int) -> NetworkOutput:
        return self.replay_elsewhere(now, self.replayer.run)


@pytest.mark.parametrize("kind", ["join", "map-aggregate"])
def test_a_replay_on_spark_equals_the_per_tuple_replay(spark: Any, tmp_path: Path,
                                                       kind: str) -> None:
    replayer = SparkReplayer({}, tmp_path / "jobs", "dpc replay test", log)
    inproc, remote = QueryNetwork(spec(kind, 400)), SparkNetwork(spec(kind, 400))
    remote.replayer = replayer
    remote.set_engine("spark")
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        inproc.set_spill(a, 0)
        remote.set_spill(b, 0)
        assert scenario(remote, 3, 2) == scenario(inproc, 3, 2)
        assert remote.snapshot() == inproc.snapshot()
    assert replayer.state == "ready" and replayer.jobs >= 2 and replayer.tuples > 0
    assert not list((tmp_path / "jobs").iterdir())  # each job's files went with it


def test_a_session_that_cannot_start_fails_the_replay_with_its_reason(
        spark: Any, tmp_path: Path) -> None:
    # The process's session runs on local[*]: one on another master cannot start beside it.
    replayer = SparkReplayer({"spark.master": "local[1]"}, tmp_path, "dpc replay test", log)
    with pytest.raises(NodeError, match=r"the Spark session did not start: ValueError: .*"
                                        r"already running"):
        replayer.run([])
    assert replayer.state == "failed"


def test_a_running_jobs_eta_is_at_the_pace_of_the_jobs_before(tmp_path: Path) -> None:
    """What /status shows while a Spark job runs (the SUnions' bookkeeping is done by
    then: the replay's own pace would say 0 s)."""
    replayer = SparkReplayer({}, tmp_path, "dpc replay test", log)
    assert replayer.eta() is None  # no job running
    replayer.running = (1_000, time.monotonic())
    assert replayer.eta() is None  # running, but no pace yet
    replayer.jobs, replayer.tuples, replayer.seconds = 2, 4_000, 2.0  # 2,000 tuples/s
    assert 0.4 < (replayer.eta() or 0) <= 0.5
    replayer.running = (1_000, time.monotonic() - 10)
    assert replayer.eta() == 0.0  # (slower than before: never negative)
