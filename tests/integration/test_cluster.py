"""Real processes on loopback: a replicated cluster from a config file, in STABLE operation.

Every test waits on conditions (ready markers, end-of-stream markers, log lines), never on
fixed sleeps, and stops every process it started, by pid.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from node.config.load import load_config
from node.config.model import ClusterConfig
from node.net.ports import free_port
from node.procs.rundir import RunDir
from node.procs.runlog import count_rows, read_tuples
from ops_scripts.cluster.launch import Launched, restart_process, start_cluster, stop_cluster
from ops_scripts.cluster.processes import alive, runs_node
from ops_scripts.errors import ProcessError
from protocol.codec import VERSION, encode
from protocol.messages import Subscribe
from protocol.tuples import Kind
from tests.paths import ROOT

EXAMPLES = ROOT / "examples"
DPC = shutil.which("dpc", path=str(Path(sys.executable).parent)) or "dpc"


def dpc(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DPC, *args], capture_output=True, text=True, timeout=timeout, check=False, cwd=ROOT)


def wait_for(cond: Callable[[], bool], timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def small(example: str, tmp_path: Path, limit: int = 3000) -> Path:
    """The example with every source limited (a run is short and ends by itself) and every
    port moved to a free one (other runs on this machine may hold the example's ports)."""
    text = (EXAMPLES / example).read_text()
    cfg = tmp_path / example
    lines = []
    for line in text.splitlines():
        m = re.match(r"^(\s*(?:port|data_port|control_port)\s*=\s*)\d+(.*)$", line)
        lines.append(f"{m.group(1)}{free_port()}{m.group(2)}" if m else line)
        if line.strip().startswith("[sources.") and "." not in line.strip()[len("[sources."):-1]:
            lines.append(f"limit = {limit}")
    cfg.write_text("\n".join(lines) + "\n")
    load_config(cfg)  # still valid
    return cfg


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Callable[[Path], tuple[ClusterConfig, RunDir, list[Launched]]]]:
    started: list[tuple[list[Launched], RunDir]] = []

    def start(config_path: Path) -> tuple[ClusterConfig, RunDir, list[Launched]]:
        config = load_config(config_path)
        rd = RunDir(tmp_path / "run")
        rd.ensure()
        shutil.copyfile(config_path, rd.path / "config.toml")
        (rd.path / "run.json").write_text(json.dumps({"config": str(config_path)}))
        procs = start_cluster(config, rd)
        started.append((procs, rd))
        return config, rd, procs

    yield start
    for procs, rd in started:  # always stop what we started, by pid
        stop_cluster(procs, rd, drain=False)


@pytest.mark.parametrize("example", ["basic.toml", "chain4.toml", "weather.toml"])
def test_example_runs_and_passes_check(example: str, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    r = dpc("launch", str(small(example, tmp_path)), "--duration", "2", "--run-dir", str(run_dir))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "stopped cleanly" in r.stdout
    # No process of the run outlived launch (each was stopped by its pid).
    pids = [int(m) for m in re.findall(r"pid (\d+)", r.stdout)]
    assert pids and not [p for p in pids if Path(f"/proc/{p}").exists()
                         and "zombie" not in Path(f"/proc/{p}/status").read_text()]
    c = dpc("check", str(run_dir))
    assert c.returncode == 0, c.stdout + c.stderr
    verdicts = json.loads((run_dir / "check.json").read_text())
    statuses = [v["status"] for v in verdicts["verdicts"]]
    assert statuses and set(statuses) == {"valid"}
    # Both replicas of every node produced the same, non-empty output stream. Boundaries
    # aside: they are promises whose steps follow how input arrived (a replica that
    # subscribed 0.2 s after its partner got both sources' first boundaries in one replay
    # and emitted one boundary where the partner emitted two: weather.toml, once).
    config = load_config(run_dir / "config.toml")
    for node in config.nodes.values():
        for stream in node.outputs:
            logs = [read_tuples(run_dir / "replicas" / r.name / f"{stream}.arrow")
                    for r in node.replicas]
            stripped = [[t for t in log if t.kind is not Kind.BOUNDARY] for log in logs]
            assert stripped[0] and all(s == stripped[0] for s in stripped), f"replicas of {node.name} differ"


CYCLE_NODE = """
[nodes.n2]
inputs = ["n1.out"]
  [[nodes.n2.operators]]
  name = "u"
  type = "sunion"
  inputs = ["n1.out"]
  [[nodes.n2.operators]]
  name = "out"
  type = "soutput"
  inputs = ["u"]
  [[nodes.n2.replicas]]
  name = "n2a"
  data_port = 17301
  control_port = 17401
"""


@pytest.mark.parametrize(
    ("mutation", "message"),
    [
        (lambda t: t.replace('type = "soutput"', 'type = "soutpt"', 1), "unknown operator type"),
        (lambda t: t.replace('stream = "n1.out"', 'stream = "n9.out"', 1), "n9"),
        (lambda t: t + "\n[sources.extra]\nschema = [\"a\"]\nport = 17001\nrate = 1.0\n", "17001"),
        (lambda t: t.replace("[cluster]", "[cluster]\nbogus = 1", 1), "bogus"),
        (lambda t: t.replace("control_port = 17201", "", 1), "control_port"),  # missing field
        (lambda t: t.replace("control_port = 17201", 'control_port = "17201"', 1), "integer"),  # wrong type
        (lambda t: t.replace('inputs = ["s1", "s2", "s3"]', 'inputs = ["s1", "s2", "s3", "n2.out"]', 2)
         + CYCLE_NODE, "cycle"),
    ],
)
def test_bad_config_exits_before_any_process_starts(mutation: Callable[[str], str], message: str,
                                                     tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(mutation((EXAMPLES / "basic.toml").read_text()))
    run_dir = tmp_path / "run"
    r = dpc("launch", str(bad), "--duration", "1", "--run-dir", str(run_dir))
    assert r.returncode == 2
    assert "bad.toml" in r.stderr and message in r.stderr, r.stderr
    assert not run_dir.exists()  # nothing was started



def test_a_process_that_does_not_start_stops_the_launch_with_exit_1(tmp_path: Path) -> None:
    cfg = small("basic.toml", tmp_path)
    s1 = load_config(cfg).sources["s1"]
    run_dir = tmp_path / "run"
    with socket.create_server((s1.host, s1.port)):  # s1's port is taken: s1 cannot serve
        r = dpc("launch", str(cfg), "--duration", "2", "--run-dir", str(run_dir))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "source s1 failed to start" in r.stdout
    assert "dpc launch: the cluster did not start: s1 failed to start" in r.stdout
    pids = [int(m) for m in re.findall(r"pid (\d+)", r.stdout)]
    assert pids and not [p for p in pids if Path(f"/proc/{p}").exists()
                         and "zombie" not in Path(f"/proc/{p}/status").read_text()]


def test_restarting_what_the_cluster_does_not_have_is_a_process_error(tmp_path: Path) -> None:
    config = load_config(small("basic.toml", tmp_path))
    rd = RunDir(tmp_path / "run").ensure()
    out = io.StringIO()
    with pytest.raises(ProcessError, match=r"cannot restart .nosuch.: not a source or replica"):
        restart_process(config, rd, "nosuch", out)  # not a process of the cluster


@pytest.mark.slow
def test_a_restart_that_does_not_come_up_in_time_is_stopped(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A restart that times out stops the process it started, by its pid: left running it
    would come up later beside the next restart of the same name."""
    import ops_scripts.cluster.launch as launch

    config = load_config(small("basic.toml", tmp_path))
    rd = RunDir(tmp_path / "run").ensure()
    out = io.StringIO()
    monkeypatch.setattr(launch, "READY_TIMEOUT", 0.01)  # no process is ready that fast
    with pytest.raises(ProcessError, match=r"source s1 did not restart within 0.01 s .exit None; stopped."):
        restart_process(config, rd, "s1", out)
    pid = int(re.findall(r"pid (\d+)", out.getvalue())[0])
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()


def _http(url: str, method: str = "GET", token: str | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_control_plane_status_metrics_and_token(cluster: Callable[..., tuple[ClusterConfig, RunDir, list[Launched]]],
                                                 tmp_path: Path) -> None:
    config, rd, _procs = cluster(small("basic.toml", tmp_path, limit=10**9))
    replica = next(iter(config.nodes.values())).replicas[0]
    base = f"http://{replica.control_address}:{replica.control_port}"
    assert json.loads(_http(base + "/health")[1])["ok"] is True

    def out_count() -> int:
        st = json.loads(_http(base + "/status")[1])
        return int(sum(st["counters"]["tuples_out"].values()))

    wait_for(lambda: out_count() > 0, what="the replica to produce output")
    status = json.loads(_http(base + "/status")[1])
    assert status["state"] == "STABLE" and status["name"] == replica.name
    assert all(i["connected"] for i in status["inputs"].values())
    families = {f.name: f for f in text_string_to_metric_families(_http(base + "/metrics")[1].decode())}
    assert "dpc_tuples_in" in families and "dpc_checkpoints" in families
    # The "visible" list: state, time in state, tentative, undo, replay progress.
    for name in ("dpc_consistency_state", "dpc_time_in_state_seconds", "dpc_tentative_out",
                 "dpc_undo_out", "dpc_replay_replayed_tuples", "dpc_replay_to_replay_tuples"):
        assert name in families, sorted(families)
    # Mutating requests need the token.
    assert _http(base + "/checkpoint", "POST")[0] == 401
    assert _http(base + "/checkpoint", "POST", token="wrong")[0] == 403
    code, body = _http(base + "/checkpoint", "POST", token=config.token)
    assert code == 200 and json.loads(body)["taken"] is True
    s = dpc("status", str(rd.path))
    assert s.returncode == 0 and replica.name in s.stdout and "STABLE" in s.stdout


def _garbage(host: str, port: int, payload: bytes, *, close_mid: bool = False) -> None:
    with socket.create_connection((host, port), timeout=5) as sock:
        sock.sendall(payload)
        if not close_mid:
            sock.settimeout(10)
            try:
                while sock.recv(4096):  # the node closes the connection on us
                    pass
            except (ConnectionResetError, TimeoutError):
                pass


def test_bad_input_to_a_data_port_is_refused_and_the_output_stays_correct(
    cluster: Callable[..., tuple[ClusterConfig, RunDir, list[Launched]]], tmp_path: Path
) -> None:
    config, rd, procs = cluster(small("basic.toml", tmp_path, limit=4000))
    replica = next(iter(config.nodes.values())).replicas[0]
    host, port = replica.host, replica.data_port
    _garbage(host, port, b"GET / HTTP/1.1\r\n\r\n")  # garbage bytes
    _garbage(host, port, b"\x7f\xff\xff\xff\x01\x01")  # oversized length prefix
    _garbage(host, port, b"\x00\x00\x01\x00" + bytes([VERSION]) + b"\x02[",  # disconnect
             close_mid=True)  # mid-frame
    _garbage(host, port, encode(Subscribe("no.such.stream", "intruder", 0, 0)))  # unknown stream
    silent = socket.create_connection((host, port), timeout=5)  # connects, never speaks
    log = rd.process_log(replica.name)
    try:
        # Each is refused by the handshake (node/net/auth.py), before any handler sees it.
        expected = ["exceeds the limit", "in the middle of a frame",
                    "sent a Subscribe before the handshake", "no handshake within"]
        wait_for(lambda: all(e in log.read_text() for e in expected), timeout=60,
                 what="a logged refusal for each bad peer")
    finally:
        silent.close()
    refusals = [line for line in log.read_text().splitlines() if "ERROR" in line]
    assert len(refusals) >= 5 and all(re.search(r"(peer|from) 127\.0\.0\.1:\d+", line)
                                      for line in refusals)
    # The node kept serving: the run drains and the client's stream is correct.
    assert stop_cluster(procs, rd, drain=True)
    c = dpc("check", str(rd.path))
    assert c.returncode == 0, c.stdout + c.stderr


def test_demo_shows_a_failure_and_its_correction_on_real_processes(tmp_path: Path) -> None:
    r = subprocess.run([DPC, "demo", "--seconds", "1"], capture_output=True, text=True, timeout=300,
                       check=False, cwd=tmp_path)
    out = r.stdout
    assert r.returncode == 0, out + r.stderr
    assert re.search(r"n1a=UP_FAILURE\s+out=\d+\s+tentative=[1-9]", out), out  # live states
    assert re.search(r"n1a=STABLE\s+out=\d+\s+tentative=[1-9]\d*\s+undo=1 reconciled=1", out), out
    avail = re.search(r"availability: c1 received \d+, tentative (\d+), undos (\d+)", out)
    assert avail and int(avail.group(1)) > 0 and int(avail.group(2)) >= 1, out
    # (The table's columns are as wide as its longest subject: "node n1 (state digests)"
    # now that the demo's run records digests.)
    assert re.search(r"^eventual-consistency\s+client c1 \(n1\.out\)\s+valid ", out, re.M), out
    assert "-> PASS" in out
    # The run's history holds its start-up and its cut, so the delays they caused are
    # excused: a passing demo never reads "Delay_new ... EXCEEDED" (it once did).
    assert "EXCEEDED" not in out, out


def interruptible() -> None:
    # A suite started in the background by a non-interactive shell inherits SIGINT ignored,
    # and so would dpc launch (Python installs its KeyboardInterrupt handler only where
    # SIGINT is not ignored): give the child the terminal's default, as Ctrl-C finds it.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_stops_launch_and_every_process_cleanly(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([DPC, "launch", str(small("basic.toml", tmp_path, limit=10**9)),
                             "--run-dir", str(run_dir)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, cwd=ROOT, preexec_fn=interruptible)
    rd = RunDir(run_dir)
    try:
        wait_for(lambda: run_dir.exists() and rd.is_ready("c1"), timeout=60, what="the cluster to start")
        wait_for(lambda: count_rows(rd.client_log("c1")) > 100, what="the client to receive data")
        proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:  # it did not stop: stop it and the processes it started
            proc.kill()
            for name in ("c1", "n1a", "n1b", "s1", "s2", "s3"):
                pid = rd.read_pid(name) if run_dir.exists() else None
                if pid is not None and alive(pid) and runs_node(pid, name, rd):
                    os.kill(pid, signal.SIGKILL)
    assert proc.returncode == 0, out
    assert "interrupted" in out and "stopped cleanly" in out
    pids = [int(m) for m in re.findall(r"pid (\d+)", out)]
    assert len(pids) == 6
    assert not [p for p in pids if Path(f"/proc/{p}").exists()]
    assert dpc("check", str(run_dir)).returncode == 0
