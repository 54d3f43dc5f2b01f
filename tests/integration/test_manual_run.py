"""A run made of ``dpc node`` processes started by hand is a run ``dpc check`` accepts.

Issue 47: only ``dpc launch`` wrote the config into the run directory, so ``dpc check
RUN_DIR`` refused a run of processes started by hand, or on several machines and gathered
("config.toml is missing"). Every process now records the config it ran
(node/config/text.py, ``RunDir.record_config``), and ``dpc check --config`` names one.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from node.procs.rundir import RunDir
from node.procs.runlog import count_rows
from tests.integration.test_cluster import small

DPC = [sys.executable, "-m", "ops_scripts.cli"]


def _wait(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_a_run_of_processes_started_by_hand_is_checked(tmp_path: Path) -> None:
    cfg = small("basic.toml", tmp_path, limit=10**7)
    rd = RunDir(tmp_path / "run")
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for group in (["s1", "s2", "s3"], ["n1a", "n1b"], ["c1"]):
            for name in group:
                procs[name] = subprocess.Popen([*DPC, "node", str(cfg), name, "--run-dir",
                                                str(rd.path)], stderr=subprocess.DEVNULL)
            _wait(lambda group=group: all(rd.is_ready(n) for n in group), 60, f"{group} ready")
        _wait(lambda: count_rows(rd.client_log("c1")) > 500, 60, "results at c1")
        for s in ("s1", "s2", "s3"):
            procs[s].send_signal(signal.SIGUSR1)  # end your stream
        _wait(lambda: rd.is_done("c1"), 60, "c1 to see the end of its stream")
    finally:
        for p in procs.values():
            p.send_signal(signal.SIGTERM)
        for p in procs.values():
            p.wait(30)
    assert rd.config.is_file()  # recorded by the processes themselves
    check = subprocess.run([*DPC, "check", str(rd.path)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout
    assert "eventual-consistency  client c1" in check.stdout
    # A run directory without its config: dpc check says how to name one, and takes it.
    rd.config.unlink()
    check = subprocess.run([*DPC, "check", str(rd.path)], capture_output=True, text=True)
    assert check.returncode == 2 and "--config CLUSTER.toml" in check.stdout, check.stdout
    check = subprocess.run([*DPC, "check", str(rd.path), "--config", str(cfg)],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout
