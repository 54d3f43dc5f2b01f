"""``--hosts ssh`` against real SSH servers (issue 47): every process started on its host by
the ordinary ``ssh`` client, its files gathered back, the run judged valid.

The hosts are network namespaces of this machine joined by a bridge (``netns.create``, the
same as ``--hosts netns`` makes), each running Debian's OpenSSH server (``sshd -D``) on its
own address, with a host key and an authorized key this test makes (``ssh-keygen``); the
launcher reaches them from the machine's own namespace through the bridge's control link.
The test's ssh client configuration (its key, a known-hosts file of its own) is given with
``DPC_SSH_CONFIG``: the user's ``~/.ssh`` is never touched. Every "host" shares this
machine's filesystem, but each keeps its part of the run in ``RUN_DIR/hosts/ADDRESS/``, so
a gather that did not happen leaves ``RUN_DIR`` without the logs and ``dpc check`` says so.

Skipped, with the reason in the summary, where this machine cannot make namespaces (not
root, no ``ip``) or has no OpenSSH server or client (``apt-get install openssh-server``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import tomli_w

from node.procs.rundir import RunDir
from node.procs.runlog import count_rows
from ops_scripts.check.history import read_history
from ops_scripts.cluster.hosts import netns
from ops_scripts.cluster.hosts.placement import (
    TEST_RANGE,
    Host,
    HostsMode,
    Placement,
    processes_of,
    run_tag,
)
from ops_scripts.cluster.hosts.ssh import CONFIG_ENV, GATHERED_FILE

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DPC = [sys.executable, "-m", "ops_scripts.cli"]
SSHD = Path("/usr/sbin/sshd")


def _unusable() -> str | None:
    """Why real SSH hosts cannot be made here (None: they can)."""
    why = netns.unusable()
    if why is not None:
        return why
    if not SSHD.exists():
        return f"no OpenSSH server ({SSHD}): apt-get install openssh-server"
    missing = [p for p in ("ssh", "ssh-keygen") if shutil.which(p) is None]
    if missing:
        return f"no OpenSSH client ({', '.join(missing)}): apt-get install openssh-client"
    return None


@dataclass(frozen=True)
class SshHosts:
    """Hosts with an sshd each, and the environment that makes ``dpc`` reach them."""

    addresses: list[str]
    env: dict[str, str]


def _wait(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _listens(address: str) -> bool:
    try:
        socket.create_connection((address, 22), timeout=0.5).close()
    except OSError:
        return False
    return True


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "dpc-test", "-f",
                    str(path)], check=True, capture_output=True)


@pytest.fixture
def ssh_hosts(tmp_path: Path) -> Iterator[Callable[[int], SshHosts]]:
    """A factory: ``make(n)`` gives ``n`` hosts, each a namespace with an sshd on port 22.
    Whatever happens, every sshd is stopped by its pid, what still runs in the namespaces
    (sessions, node processes of a failed run) is killed by its pid, the namespaces removed."""
    why = _unusable()
    if why is not None:
        pytest.skip(f"no real SSH hosts here: {why}")
    made: list[tuple[str, list[tuple[str, subprocess.Popen[bytes]]]]] = []

    def make(n: int) -> SshHosts:
        keys = tmp_path / "ssh"
        keys.mkdir()
        _keygen(keys / "host_key")
        _keygen(keys / "id")
        shutil.copyfile(keys / "id.pub", keys / "authorized_keys")
        tag = run_tag(keys)
        sshds: list[tuple[str, subprocess.Popen[bytes]]] = []
        made.append((tag, sshds))
        with netns.lock():
            net = list(TEST_RANGE.subnets(new_prefix=24))[netns.free_subnet()]
            hosts = {f"h{i}": Host(f"h{i}", str(net.network_address + 10 + i), f"dpc-{tag}-h{i}")
                     for i in range(n)}
            netns.create(Placement(HostsMode.NETNS, tag, hosts, {}, str(net.network_address + 1)))
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation dir
        for name, h in hosts.items():
            conf = keys / f"sshd-{name}.conf"
            conf.write_text(f"ListenAddress {h.address}:22\nHostKey {keys / 'host_key'}\n"
                            f"AuthorizedKeysFile {keys / 'authorized_keys'}\n"
                            "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
                            "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
                            f"PidFile {keys / f'sshd-{name}.pid'}\n")
            log = open(keys / f"sshd-{name}.log", "wb")  # noqa: SIM115 (the child holds it)
            sshds.append((h.netns or "", subprocess.Popen(
                ["ip", "netns", "exec", h.netns or "", str(SSHD), "-D", "-e", "-f", str(conf)],
                stdout=log, stderr=subprocess.STDOUT)))
            log.close()
        for (_, proc), h in zip(sshds, hosts.values(), strict=True):
            _wait(lambda h=h, proc=proc: _listens(h.address) or proc.poll() is not None, 20,
                  f"sshd on {h.address}")
            assert proc.poll() is None, (keys / f"sshd-{h.name}.log").read_text()
        config = keys / "ssh_config"
        config.write_text(f"Host *\n  User root\n  IdentityFile {keys / 'id'}\n"
                          f"  IdentitiesOnly yes\n  UserKnownHostsFile {keys / 'known_hosts'}\n"
                          "  StrictHostKeyChecking accept-new\n  LogLevel ERROR\n")
        return SshHosts([h.address for h in hosts.values()],
                        {**os.environ, CONFIG_ENV: str(config)})

    try:
        yield make
    finally:
        for tag, sshds in made:
            for _, proc in sshds:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            for ns, _ in sshds:  # what the sshds started and left (a failed run's processes)
                pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                                      text=True).stdout.split()
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)
            netns.destroy(tag)


def _cluster_at(addresses: list[str], path: Path) -> Path:
    """examples/basic.toml at a low rate, each process on a host of its own: ``host`` is
    that host's address, every control plane on its process's host; the last host's SSH
    destination given by the config (``[hosts."ADDRESS"] ssh``), the others' the address."""
    raw = tomllib.loads((EXAMPLES / "basic.toml").read_text())
    raw["cluster"].pop("control_host", None)
    procs = list(processes_of(raw))
    assert len(procs) <= len(addresses)
    for (_, table, key), address in zip(procs, addresses, strict=False):
        table[key] = address
    for source in raw["sources"].values():
        source["rate"] = 200.0
    raw["hosts"] = {addresses[len(procs) - 1]: {"ssh": f"root@{addresses[len(procs) - 1]}"}}
    path.write_text(tomli_w.dumps(raw))
    return path


def _dpc(env: dict[str, str], *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*DPC, *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_launch_over_ssh_runs_each_process_on_its_host_and_gathers_a_valid_run(
        ssh_hosts: Callable[[int], SshHosts], tmp_path: Path) -> None:
    hosts = ssh_hosts(6)
    cfg = _cluster_at(hosts.addresses, tmp_path / "basic-ssh.toml")
    rd = RunDir(tmp_path / "run")
    r = _dpc(hosts.env, "launch", str(cfg), "--hosts", "ssh", "--duration", "5",
             "--run-dir", str(rd.path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "stopped cleanly" in r.stdout
    names = ["s1", "s2", "s3", "n1a", "n1b", "c1"]
    for name, address in zip(names, hosts.addresses, strict=True):
        dest = f"root@{address}" if name == "c1" else address
        assert f"collect: host {address} (ssh {dest})" in r.stdout
        # It ran on its host (its address exists only in that host's namespace), in the
        # host's own part of the run directory, and its log was gathered from there.
        assert f"dpc ssh: pid {rd.read_pid(name)} on {address}" in (rd.logs / f"{name}.out").read_text()
        assert (rd.path / "hosts" / address / "logs" / f"{name}.log").exists()
        assert (rd.logs / f"{name}.log").read_bytes() == \
            (rd.path / "hosts" / address / "logs" / f"{name}.log").read_bytes()
    assert set(json.loads((rd.path / GATHERED_FILE).read_text())["hosts"]) == set(hosts.addresses)
    assert count_rows(rd.client_log("c1")) > 0
    events = [e["event"] for e in read_history(rd.history)]  # (merged with the states)
    assert events[0] == "start" and "ready" in events and "end" in events

    check = _dpc(hosts.env, "check", str(rd.path), timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "PASS" in check.stdout

    # Gathering again changes nothing (idempotent); the hosts' files are where they were.
    again = _dpc(hosts.env, "collect", str(rd.path), timeout=60)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"from {len(hosts.addresses)} host(s)" in again.stdout


def test_run_over_ssh_kills_a_replica_and_recovers_it_on_its_host(
        ssh_hosts: Callable[[int], SshHosts], tmp_path: Path) -> None:
    """A kill through ``dpc run``'s nemesis (SIGKILL sent over SSH to the remote pid), the
    replica restarted with ``--recover`` on its host, which takes its partner's state from
    the partner's host; the checker finds the run valid."""
    hosts = ssh_hosts(6)
    cfg = _cluster_at(hosts.addresses, tmp_path / "basic-ssh.toml")
    scenario = tmp_path / "kill.toml"
    scenario.write_text(f'[scenario]\nname = "ssh-kill"\ncluster = "{cfg}"\nsettle = 1.5\n'
                        'quiet = 3.0\nsource_rate = 200.0\n\n[scenario.settings]\nx = 1.0\n'
                        'alpha = 0.7\n\n[[faults]]\nat = 0.0\nfor = 1.5\nfault = "kill"\n'
                        'process = "n1b"\n')
    run = tmp_path / "run"
    r = _dpc(hosts.env, "run", str(scenario), "--hosts", "ssh", "--run-dir", str(run))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 of 1 fault(s) injected; checker: valid" in r.stdout
    rd = RunDir(run)
    n1b = hosts.addresses[4]
    recoveries = (rd.path / "hosts" / n1b / "replicas" / "n1b" / "recoveries.jsonl")
    assert recoveries.exists() and rd.replica_recoveries("n1b").exists()
    assert (rd.logs / "n1b.out").read_text().count("dpc ssh: pid") == 2  # started, restarted
