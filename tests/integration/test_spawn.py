"""A local cluster's processes are forked from a warm fork server
(ops_scripts/cluster/spawn.py): each is the ``dpc node`` it would be if exec'd, as the rest
of the tooling sees it (its command line, its own session, its output file, its exit code)
and with the launcher's environment at its start, not the fork server's."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from node.procs.entry import MUTATION_ENV
from node.procs.rundir import RunDir
from ops_scripts.cluster.launch import wait_until
from ops_scripts.cluster.processes import runs_node
from ops_scripts.cluster.spawn import spawn_node
from tests.integration.test_cluster import small

pytestmark = pytest.mark.slow


def test_a_forked_node_is_the_dpc_node_command(tmp_path: Path) -> None:
    config = small("basic.toml", tmp_path)
    rd = RunDir(tmp_path / "run").ensure()
    out = rd.path / "logs" / "s1.out"
    proc = spawn_node(["node", str(config), "s1", "--run-dir", str(rd.path)], out)
    try:
        assert wait_until(lambda: rd.is_ready("s1"), 30)
        assert runs_node(proc.pid, "s1", rd)  # /proc/PID/cmdline: what processes.py checks
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        assert "-m ops_scripts.cli node" in cmdline and "--run-dir" in cmdline
        assert os.getpgid(proc.pid) == proc.pid  # a session of its own: stop signals its group
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0  # a clean stop, as when exec'd
    finally:
        proc.send_signal(signal.SIGKILL)
    assert "source s1" in rd.process_log("s1").read_text()


def test_a_forked_node_gets_the_launchers_environment_and_says_why_it_failed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = small("basic.toml", tmp_path)
    rd = RunDir(tmp_path / "run").ensure()
    out = rd.path / "logs" / "n1a.out"
    spawn_node(["node", str(config), "nobody", "--run-dir", str(rd.path)], out).wait(30)
    # The fork server runs by now; a variable set afterwards still reaches the next child.
    monkeypatch.setenv(MUTATION_ENV, "no-such-mutation")
    proc = spawn_node(["node", str(config), "n1a", "--run-dir", str(rd.path)], out)
    assert proc.wait(30) != 0
    text = out.read_text()
    assert "no process named 'nobody'" in text
    assert f"{MUTATION_ENV}='no-such-mutation' is no test mutation" in text
