"""The clock fault on real processes (issue 47): what ``examples/scenarios/README.md``
("The clock fault") says DPC does with a skewed source, and ``dpc inject RUN skew``.

A source stamps its tuples and boundaries from its own clock, and SUnion times a bucket
from its first tuple's arrival on the replica's clock. The scenario skews s3 2 s ahead,
then s2 2 s behind, both past alpha*X (0.7 s): the replicas go UP_FAILURE though every
process is up, the client receives tentative results (ahead: made of s3's tuples alone,
stamped in the client's future) and the corrections after the heal, and ``dpc check`` is
valid. Every wait for an outcome polls a condition with a deadline.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from node.clock import now_us
from node.config.model import ClusterConfig
from node.procs.rundir import RunDir, read_source_log
from node.procs.runlog import read_log
from ops_scripts.check.history import read_history
from ops_scripts.cli import main as dpc
from ops_scripts.cluster.launch import Launched
from ops_scripts.harness.runner import play_scenario
from ops_scripts.harness.scenario import load_scenario
from protocol.tuples import Kind
from tests.integration.test_cluster import wait_for
from tests.integration.test_scenarios import drain_and_check_valid, running_scenario, state
from tests.paths import EXAMPLES

SCENARIO = EXAMPLES / "scenarios" / "skewed-source.toml"


def test_the_skewed_source_scenario_does_what_the_docs_say(tmp_path: Path) -> None:
    out = io.StringIO()
    outcome = play_scenario(load_scenario(SCENARIO), tmp_path / "run", out)
    assert outcome.code == 0 and not outcome.problems and outcome.injected == 2, out.getvalue()
    rd = RunDir(tmp_path / "run")
    report = json.loads(rd.check_json.read_text())
    assert {v["status"] for v in report["verdicts"]} == {"valid"}
    events = read_history(rd.history)
    fault = {e["id"]: e for e in events if e["event"] == "fault"}
    heal = {e["id"]: e["t"] for e in events if e["event"] == "heal"}
    assert [fault[i]["describe"] for i in (0, 1)] == ["skew s3 +2 s for 4 s",
                                                       "skew s2 -2 s for 4 s"]
    # each process took its skew, and its heal (node/procs/entry.py)
    s3, s2 = rd.process_log("s3").read_text(), rd.process_log("s2").read_text()
    assert s3.index("s3: clock skew now +2.000 s") < s3.index("s3: clock skew now +0.000 s")
    assert s2.index("s2: clock skew now -2.000 s") < s2.index("s2: clock skew now +0.000 s")
    rows = read_log(rd.client_log("c1"))

    def during(i: int) -> list[tuple[int, Any]]:
        return [(a, t) for a, t in rows if fault[i]["t"] <= a < heal[i]]

    def undos_after(i: int) -> list[int]:
        end = fault[i + 1]["t"] if i + 1 in fault else rows[-1][0] + 1
        return [a for a, t in rows if t.kind is Kind.UNDO and heal[i] <= a < end]

    # s3 ahead: tentative results made of its tuples, stamped more than 1 s after they
    # arrived (its clock is 2 s ahead of the client's); corrected only once s1 and s2
    # reach the times s3 stamped, about 2 s after the heal
    ahead = [(a, t) for a, t in during(0) if t.kind is Kind.TENTATIVE]
    assert ahead and any(t.tmax - a > 1_000_000 for a, t in ahead), ahead[:5]
    assert undos_after(0) and min(undos_after(0)) >= heal[0] + 1_500_000
    # s2 behind: every bucket waits for its boundaries; past alpha*X, tentative results
    # (none from the future), corrected after the heal
    behind = [(a, t) for a, t in during(1) if t.kind is Kind.TENTATIVE]
    assert behind and all(t.tmax <= a for a, t in behind)
    assert undos_after(1)
    # the replicas went UP_FAILURE during each skew, though no process and no link failed
    for i in (0, 1):
        went = {e["process"] for e in events if e["event"] == "state"
                and e["state"] == "UP_FAILURE" and fault[i]["t"] <= e["t"] < heal[i]}
        assert went == {"n1a", "n1b"}, (i, went)


# ------------------------------------------------------------------ dpc inject skew
@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[RunDir, ClusterConfig, list[Launched]]]:
    yield from running_scenario(SCENARIO, tmp_path)  # X = 1 s, alpha = 0.7


def ahead_of_now(rd: RunDir, source: str) -> int:
    """How far (µs) the newest tuple ``source`` logged is ahead of this process's clock."""
    return read_source_log(rd, source)[-1].time - now_us()


def test_inject_skews_a_source_through_a_restart_and_heals_it(
        running: Any, capsys: pytest.CaptureFixture[str]) -> None:
    rd, config, procs = running
    run = str(rd.path)
    assert dpc(["inject", run, "skew", "s3", "+2s"]) == 0
    assert "dpc inject: skew s3 +2 s" in capsys.readouterr().out
    assert rd.read_skew("s3") == 2.0
    wait_for(lambda: ahead_of_now(rd, "s3") > 1_500_000, 20, "s3's tuples 2 s ahead")
    assert "s3: clock skew now +2.000 s" in rd.process_log("s3").read_text()
    assert dpc(["inject", run, "skew", "s3", "-1s"]) == 2
    assert "s3 is skewed already (+2 s): `heal s3` first" in capsys.readouterr().err
    # a restarted source reads its skew file at start: still 2 s ahead
    assert dpc(["inject", run, "kill", "s3"]) == 0
    assert dpc(["inject", run, "restart", "s3"]) == 0
    wait_for(lambda: rd.process_log("s3").read_text().count("clock skew now +2.000 s") == 2,
             20, "the restarted s3 to take its skew")
    wait_for(lambda: len(rd.source_logs("s3")) == 2 and ahead_of_now(rd, "s3") > 1_500_000,
             20, "the restarted s3's tuples 2 s ahead")
    assert dpc(["inject", run, "heal", "s3"]) == 0
    assert rd.read_skew("s3") == 0.0
    wait_for(lambda: "s3: clock skew now +0.000 s" in rd.process_log("s3").read_text(), 20,
             "s3's clock true again")
    wait_for(lambda: abs(ahead_of_now(rd, "s3")) < 500_000, 20, "s3's tuples on time")
    # behind: silent for 1.5 s, then 1.5 s late
    assert dpc(["inject", run, "skew", "s3", "-1.5s"]) == 0
    wait_for(lambda: ahead_of_now(rd, "s3") < -1_200_000, 20, "s3's tuples 1.5 s behind")
    assert dpc(["inject", run, "heal", "--all"]) == 0
    assert rd.read_skew("s3") == 0.0
    wait_for(lambda: rd.process_log("s3").read_text().count("clock skew now +0.000 s") == 2,
             20, "heal --all to set s3's clock true")
    events = read_history(rd.history)
    assert [(e["event"], e.get("id")) for e in events] == [
        ("start", None), ("ready", None), ("fault", 0), ("fault", 1), ("heal", 1),
        ("heal", 0), ("fault", 2), ("heal_all", None)]
    assert events[2]["fault"] == {"fault": "skew", "process": "s3", "seconds": 2.0}
    assert events[2]["cut"] == events[2]["down"] == events[2]["impaired"] == []
    wait_for(lambda: state(config, "n1a") == state(config, "n1b") == "STABLE", 60,
             "both replicas to reconcile")
    drain_and_check_valid(rd, procs, restarted="s3")
