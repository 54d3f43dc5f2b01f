"""Sources as real processes (issue 13): a source that falls behind goes on, a killed and
restarted source resumes its stream, and a cluster over real data with event time.

Every wait for an outcome polls a condition with a deadline; a pause's length is the fault
itself (a schedule), not a wait for a result. Every process started is stopped by its pid.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from node.config.load import load_config
from node.net.ports import free_port
from node.procs.rundir import RunDir, read_source_log
from tests.integration.test_cluster import wait_for
from tests.paths import ROOT


def node_process(config: Path, name: str, rd: RunDir) -> subprocess.Popen[bytes]:
    """``dpc node CONFIG NAME --run-dir RUN``, as ``dpc launch`` starts one; its pid recorded."""
    out = open(rd.path / "logs" / f"{name}.out", "ab")  # noqa: SIM115 (owned by the child)
    proc = subprocess.Popen([sys.executable, "-m", "ops_scripts.cli", "node", str(config), name,
                             "--run-dir", str(rd.path)], stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True, cwd=ROOT)
    out.close()
    rd.write_pid(name, proc.pid)
    return proc


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test started; each is stopped (resumed first, if paused) by its pid."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGCONT)
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def logged(rd: RunDir, source: str) -> int:
    """Tuples in a running source's log (each batch is flushed before it is sent)."""
    if not rd.source_log(source).exists():
        return 0
    return len(read_source_log(rd, source))


# ------------------------------------------------------------------ defect 1: a stall
def test_a_paused_source_keeps_producing_after_it_resumes(
        tmp_path: Path, processes: list[subprocess.Popen[bytes]]) -> None:
    """A source at 5,000 tuples/s stopped for 2.5 s (longer than 10,000 / rate = 2 s) used
    to take its first capped batch after the pause for the end of its data, and ended its
    stream for good."""
    rate, pause = 5000.0, 2.5
    cfg = tmp_path / "one.toml"
    cfg.write_text(f"""
[cluster]
name = "one"
token = "t"
[sources.s1]
schema = ["k", "v"]
port = {free_port()}
rate = {rate}
[nodes.n1]
inputs = ["s1"]
  [[nodes.n1.operators]]
  name = "u"
  type = "sunion"
  inputs = ["s1"]
  [[nodes.n1.operators]]
  name = "out"
  type = "soutput"
  inputs = ["u"]
  [[nodes.n1.replicas]]
  name = "n1a"
  data_port = {free_port()}
  control_port = {free_port()}
""")
    load_config(cfg)
    rd = RunDir(tmp_path / "run").ensure()
    s1 = node_process(cfg, "s1", rd)
    processes.append(s1)
    wait_for(lambda: rd.is_ready("s1") and logged(rd, "s1") > 1000, 60, "s1 to produce")
    s1.send_signal(signal.SIGSTOP)
    time.sleep(pause)  # the fault's length
    before = logged(rd, "s1")
    s1.send_signal(signal.SIGCONT)
    # Everything due during the pause, then at least one more second of production.
    wait_for(lambda: logged(rd, "s1") > before + pause * rate + rate, 60,
             "s1 to catch up and go on producing after the pause")
    assert s1.poll() is None
    text = rd.process_log("s1").read_text()
    assert "end of stream" not in text, text[-2000:]
    ids = [t.id for t in read_source_log(rd, "s1")]
    assert ids == list(range(1, len(ids) + 1))
