"""``--hosts ssh`` without an SSH server (ops_scripts/cluster/hosts/ssh.py): the command
lines built, the remote pid's line, a start that fails, a real start and stop, the waits, and
the gather's merge of two hosts' trees, and ``dpc check`` refusing an ungathered run.

The ``ssh`` program here is a stand-in (:func:`fake_ssh`) that reads ssh's options as ssh
does, then runs the remote command on this machine with ``sh -c``, as sshd would on the
host: every command line ssh.py builds is really executed. A destination named
``unreachable`` fails as ssh does (exit 255, a message on stderr). The real ``ssh`` against
real ``sshd`` instances is tests/integration/test_ssh_hosts.py's.
"""

from __future__ import annotations

import io
import json
import signal
import time
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest
import tomli_w

from node.net.ports import free_port
from node.procs.rundir import RunDir
from node.procs.runlog import RunLogWriter
from ops_scripts.check.compose import run_check
from ops_scripts.cluster.hosts.placement import Host, HostsMode, Placement
from ops_scripts.cluster.hosts.ssh import (
    CONFIG_ENV,
    GATHERED_FILE,
    HostWatch,
    Mux,
    SshClient,
    collect,
    host_dir,
    node_command,
    parse_pid,
    run_collect,
    start_node,
)
from ops_scripts.errors import HostsError, IngestError
from ops_scripts.reconcile.tables import run_labels
from protocol.tuples import boundary

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

FAKE_SSH = """#!/bin/sh
# ssh's options, then the destination, then the command (run here, as sshd would there)
while [ $# -gt 0 ]; do
  case "$1" in
    -o|-F) shift 2 ;;
    -O) control=$2; shift 2 ;;
    *) break ;;
  esac
done
dest=$1; shift
echo "$dest ${control:-run} $*" >> "$(dirname "$0")/calls"
if [ "$dest" = unreachable ]; then
  echo "ssh: connect to host unreachable port 22: No route to host" >&2
  exit 255
fi
[ -n "$control" ] && exit 0
exec sh -c "$*"
"""


@pytest.fixture
def fake_ssh(tmp_path: Path) -> Callable[[], SshClient]:
    """A factory of clients whose ``ssh`` is the stand-in (module docstring)."""
    program = tmp_path / "bin" / "ssh"
    program.parent.mkdir()
    program.write_text(FAKE_SSH)
    program.chmod(0o755)
    return lambda: SshClient(control_path=None, config=None, program=str(program))


def _calls(client: SshClient) -> list[str]:
    path = Path(client.program).parent / "calls"
    return path.read_text().splitlines() if path.exists() else []


def _placement(where: dict[str, str], dest: dict[str, str] | None = None) -> Placement:
    hosts = {h: Host(h, h, ssh=(dest or {}).get(h, f"root@{h}")) for h in dict.fromkeys(where.values())}
    return Placement(HostsMode.SSH, "feedc0de", hosts, where)


# ------------------------------------------------------------------ command lines (pure)
def test_ssh_honours_the_users_config_unless_the_suite_names_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    client = SshClient.for_run(_placement({"s1": "10.0.0.1"}))
    argv = client.argv("root@10.0.0.1", "true")
    assert "-F" not in argv  # ~/.ssh/config as ssh reads it
    assert argv[-2:] == ["root@10.0.0.1", "true"]
    opts = [argv[i + 1] for i, a in enumerate(argv) if a == "-o"]
    assert "BatchMode=yes" in opts and "ControlMaster=no" in opts
    # The master's socket carries the run's tag, and stays short (107 bytes at most).
    path = next(o for o in opts if o.startswith("ControlPath=")).removeprefix("ControlPath=")
    assert "dpc-feedc0de-%C" in path and len(path.replace("%C", "x" * 40)) < 100
    monkeypatch.setenv(CONFIG_ENV, "/etc/dpc-test-ssh.conf")
    client = SshClient.for_run(_placement({"s1": "10.0.0.1"}))
    assert client.argv("h", "true")[1:3] == ["-F", "/etc/dpc-test-ssh.conf"]


def test_a_node_has_a_connection_of_its_own_and_only_connect_opens_a_master() -> None:
    client = SshClient(control_path="/tmp/dpc-x-%C", config=None)
    own = client.argv("h", "cmd", Mux.OWN)
    assert "ControlPath=none" in own and "ControlPersist=60" not in " ".join(own)
    master = client.argv("h", "true", Mux.OPEN)
    assert "ControlMaster=auto" in master and "ControlPersist=60" in master
    assert client.argv("h", None, control="exit")[-3:] == ["-O", "exit", "h"]
    with pytest.raises(HostsError, match="not an SSH destination"):
        client.argv("-oProxyCommand=evil", "true")


def test_the_node_command_forwards_the_dpc_variables_and_recovers_on_request() -> None:
    host = Host("10.0.0.1", "10.0.0.1")
    hd = host_dir(Path("/runs/r 1"), host)
    assert str(hd) == "/runs/r 1/hosts/10.0.0.1"
    cmd = node_command(host, hd, "n1a", recover=True,
                       environ={"DPC_TEST_MUTATION": "x", CONFIG_ENV: "/c", "HOME": "/root"})
    assert "'/runs/r 1/hosts/10.0.0.1/config.toml' n1a --run-dir '/runs/r 1/hosts/10.0.0.1'" in cmd
    assert cmd.endswith("--recover") and "exec env DPC_TEST_MUTATION=x " in cmd
    assert CONFIG_ENV not in cmd and "HOME" not in cmd
    assert "--recover" not in node_command(host, hd, "n1a", recover=False, environ={})


def test_the_remote_pid_is_the_first_pid_line() -> None:
    assert parse_pid(b"") is None
    assert parse_pid(b"Warning: Permanently added 'h'\ndpc ssh: pid 4242 on h\n") == 4242
    assert parse_pid(b"dpc ssh: pid 7 on a\nlog\ndpc ssh: pid 8 on a\n") == 7
    assert parse_pid(b"text dpc ssh: pid 9 on a\n") is None  # only at a line's start


# ------------------------------------------------------------------ real commands, fake ssh
def _source_config(tmp_path: Path) -> Path:
    raw = tomllib.loads((EXAMPLES / "basic.toml").read_text())
    for s in raw["sources"].values():
        s["port"] = free_port()
    path = tmp_path / "cluster.toml"
    path.write_text(tomli_w.dumps(raw))
    return path


def test_a_start_that_ssh_refuses_is_a_dead_handle_that_says_why(
        fake_ssh: Callable[[], SshClient], tmp_path: Path) -> None:
    client = fake_ssh()
    rd = RunDir(tmp_path / "run").ensure()
    placement = _placement({"s1": "10.0.0.1"}, {"10.0.0.1": "unreachable"})
    p = start_node(rd, placement, _source_config(tmp_path), "s1", client=client)
    assert p.wait(10) == 255 and not p.remote
    assert "No route to host" in (rd.logs / "s1.out").read_text()
    p.send_signal(signal.SIGTERM)  # nothing to signal: no remote pid
    assert [c for c in _calls(client) if " kill " in c] == []


def test_a_node_started_over_ssh_is_waited_for_and_stopped_on_its_host(
        fake_ssh: Callable[[], SshClient], tmp_path: Path) -> None:
    client = fake_ssh()
    rd = RunDir(tmp_path / "run").ensure()
    placement = _placement({"s1": "127.0.0.1", "c1": "127.0.0.1"})
    config = _source_config(tmp_path)
    watch = HostWatch(rd, placement, client)
    assert not watch.is_ready("s1") and watch.client_rows("c1") == 0
    p = start_node(rd, placement, config, "s1", client=client)
    try:
        assert p.remote and p.poll() is None
        hd = Path(host_dir(rd.path, placement.hosts["127.0.0.1"]))
        assert (hd / "config.toml").read_bytes() == config.read_bytes()  # copied there
        assert f"dpc ssh: pid {p.pid} on 127.0.0.1" in (rd.logs / "s1.out").read_text()
        t0 = time.monotonic()
        while not watch.is_ready("s1"):  # its marker is on its host, not in rd
            assert p.poll() is None, (rd.logs / "s1.out").read_text()
            assert time.monotonic() - t0 < 30, "s1 never became ready"
            time.sleep(0.05)
        assert not rd.is_ready("s1") and (hd / "status" / "s1.ready").exists()
        with RunLogWriter(hd / "clients" / "c1.arrow") as w:  # (asked by dpc log --count)
            w.write([boundary(1), boundary(2)], 1)
        assert watch.client_rows("c1") == 2
    finally:
        p.send_signal(signal.SIGTERM)
    assert p.wait(30) == 0, (rd.logs / "s1.out").read_text()  # a clean stop, on its host
    assert f"root@127.0.0.1 run kill -s TERM {p.pid}" in _calls(client)
    watch.clear_ready("s1")
    assert not watch.is_ready("s1")


# ------------------------------------------------------------------ gathering
def _host_tree(rd: RunDir, host: str, files: dict[str, str], config: str) -> None:
    root = rd.path / "hosts" / host
    for rel, text in {"config.toml": config, **files}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


@pytest.fixture
def two_hosts(tmp_path: Path) -> tuple[RunDir, Placement]:
    """A run of two hosts as they are when the run ends: A ran s1, B ran n1a and c1."""
    rd = RunDir(tmp_path / "run").ensure()
    config = tomli_w.dumps({"cluster": {"name": "x"}})
    rd.config.write_text(config)
    placement = _placement({"s1": "A", "n1a": "B", "c1": "B"})
    placement.write(rd.path)
    _host_tree(rd, "A", {"logs/s1.log": "s1 log\n", "sources/s1.arrow": "ARROW",
                         "status/s1.ready": "", ".config.12.tmp": "stray"}, config)
    _host_tree(rd, "B", {"logs/n1a.log": "n1a log\n", "replicas/n1a/n1.out.arrow": "ARROW",
                         "clients/c1.arrow": "ARROW", "status/c1.done": ""}, config)
    (rd.logs / "s1.out").write_text("dpc ssh: pid 9 on A\n")  # the launcher's own
    return rd, placement


def test_collect_merges_each_hosts_files_into_the_run_directory(
        fake_ssh: Callable[[], SshClient], two_hosts: tuple[RunDir, Placement]) -> None:
    rd, _ = two_hosts
    out = io.StringIO()
    before = io.StringIO()
    assert run_check(rd.path, out=before) == 2
    assert (f"hosts.json says ssh and the logs of c1, n1a, s1 (on B, A) are not gathered: "
            f"run dpc collect {rd.path}") in before.getvalue()
    with pytest.raises(IngestError, match=r"not gathered: run dpc collect"):  # reconcile too
        run_labels([rd.path])

    assert collect(rd.path, out, fake_ssh()) == {"A": 3, "B": 4}
    assert (rd.logs / "s1.log").read_text() == "s1 log\n"
    assert (rd.sources / "s1.arrow").read_text() == "ARROW"
    assert rd.is_ready("s1") and rd.is_done("c1")
    assert rd.client_log("c1").read_text() == "ARROW"
    assert (rd.replicas / "n1a" / "n1.out.arrow").exists()
    assert (rd.logs / "s1.out").read_text() == "dpc ssh: pid 9 on A\n"  # kept
    assert not (rd.path / ".config.12.tmp").exists()  # not the run's
    gathered = json.loads((rd.path / GATHERED_FILE).read_text())["hosts"]
    assert gathered["B"]["processes"] == ["c1", "n1a"] and gathered["A"]["ssh"] == "root@A"
    assert "collect: host A (ssh root@A): 3 files" in out.getvalue()

    after = io.StringIO()
    run_check(rd.path, out=after)
    assert "not gathered" not in after.getvalue()
    # Again: the same files, whole (each written aside, then renamed).
    (rd.path / "hosts" / "A" / "logs" / "s1.log").write_text("s1 log, longer now\n")
    assert collect(rd.path, io.StringIO(), fake_ssh()) == {"A": 3, "B": 4}
    assert (rd.logs / "s1.log").read_text() == "s1 log, longer now\n"


def test_collect_refuses_a_file_of_two_hosts_another_config_and_a_missing_host(
        fake_ssh: Callable[[], SshClient], two_hosts: tuple[RunDir, Placement]) -> None:
    rd, _ = two_hosts
    both = rd.path / "hosts" / "B" / "logs" / "s1.log"
    both.write_text("not B's\n")
    with pytest.raises(HostsError, match=r"logs/s1\.log is on host A and on host B"):
        collect(rd.path, io.StringIO(), fake_ssh())
    both.unlink()
    (rd.path / "hosts" / "B" / "config.toml").write_text(tomli_w.dumps({"cluster": {"name": "y"}}))
    with pytest.raises(HostsError, match=r"host B: its config\.toml differs"):
        collect(rd.path, io.StringIO(), fake_ssh())
    (rd.path / "hosts" / "B").rename(rd.path / "hosts" / "gone")
    with pytest.raises(HostsError, match=r"host B: .* does not exist"):
        collect(rd.path, io.StringIO(), fake_ssh())
    # Host A was gathered each time; B never: dpc check names B's processes.
    out = io.StringIO()
    assert run_check(rd.path, out=out) == 2
    assert "the logs of c1, n1a (on B) are not gathered" in out.getvalue()


def test_dpc_collect_on_a_run_of_this_machine_has_nothing_to_do(tmp_path: Path) -> None:
    rd = RunDir(tmp_path / "run").ensure()
    Placement(HostsMode.LOCAL, "t").write(rd.path)
    out = io.StringIO()
    assert run_collect(rd.path, out) == 0
    assert "nothing to collect" in out.getvalue()
    assert run_collect(tmp_path / "nope", io.StringIO()) == 2
