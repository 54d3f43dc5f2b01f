"""``dpc launch`` as a user runs it: its start-up in the history, crashes restarted, and
``dpc inject`` kills left to ``dpc inject restart`` (ops_scripts/harness/supervisor.py).

The class these tests draw (issue 13, items 2 and 6): a cluster run by hand used to have no
history, so ``dpc inject`` + ``dpc check`` judged the cold start against k*X; and a dead
source ended the whole cluster.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from node.procs.rundir import RunDir, read_source_log
from ops_scripts.check.history import read_history
from tests.integration.test_cluster import small

DPC = [sys.executable, "-m", "ops_scripts.cli"]


def _wait(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _events(rd: RunDir) -> list[dict]:
    return read_history(rd.history) if rd.history.exists() else []


@pytest.fixture
def launched(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], RunDir, Path]]:
    cfg = small("basic.toml", tmp_path, limit=10**7)
    rd = RunDir(tmp_path / "run")
    out = open(tmp_path / "launch.out", "wb")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen([*DPC, "launch", str(cfg), "--duration", "14", "--run-dir",
                             str(rd.path)], stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc, rd, tmp_path / "launch.out"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # it stops every process it started
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
        out.close()


def test_launch_records_start_up_restarts_a_crash_and_leaves_injected_kills(
        launched: tuple[subprocess.Popen[bytes], RunDir, Path]) -> None:
    proc, rd, log = launched
    _wait(lambda: any(e["event"] == "ready" for e in _events(rd)), 60, "the ready event")
    # Each node's class in the taxonomy of Hwang et al. (basic.toml: SUnion, filter, join).
    assert "node n1: 2 replica(s), ha dpc, query network repeatable" in log.read_text()
    # A crash the harness did not make: the source is SIGKILLed behind launch's back.
    s3 = rd.read_pid("s3")
    assert s3 is not None
    os.kill(s3, signal.SIGKILL)
    _wait(lambda: any(e["event"] == "heal" for e in _events(rd)), 30, "the crash's restart")
    crash = next(e for e in _events(rd) if e["event"] == "fault")
    assert crash["down"] == ["s3"] and "crash of s3" in crash["describe"]
    assert rd.read_pid("s3") != s3
    # A kill made by dpc inject is the user's: launch waits for their restart and adopts it.
    run = str(rd.path)
    assert subprocess.run([*DPC, "inject", run, "kill", "n1a"]).returncode == 0
    _wait(lambda: "killed by dpc inject" in log.read_text(), 10, "launch to see the kill")
    assert subprocess.run([*DPC, "inject", run, "restart", "n1a"]).returncode == 0
    _wait(lambda: "n1a is back" in log.read_text(), 10, "launch to adopt n1a")
    assert proc.wait(120) == 0, log.read_text()

    events = _events(rd)
    kinds = [e["event"] for e in events]
    assert kinds[0] == "start" and kinds.index("ready") < kinds.index("fault")
    assert kinds[-1] == "end" and "state" in kinds  # the replicas' states merged in
    ids = [t.id for t in read_source_log(rd, "s3")]
    assert ids == list(range(1, len(ids) + 1))  # the restarted source resumed its ids
    check = subprocess.run([*DPC, "check", run], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout
    report = json.loads(rd.check_json.read_text())
    assert {v["status"] for v in report["verdicts"]} == {"valid"}, check.stdout
