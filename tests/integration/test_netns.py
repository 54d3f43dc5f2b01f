"""Every process on a host of its own, partitions cut by the kernel (``--hosts netns``).

Issue 47: a cluster had only ever run on one host, its control planes bound and addressed
at one cluster-wide ``control_host`` (a replica restarted with ``--recover`` asked *its own
host* for its partner's state and waited forever), and its partitions were made inside its
own processes. Here each process runs in a network namespace of its own, with its own
address on one bridge, and a partition is an nftables rule in the hosts' namespaces: TCP
meets silence (blackhole) or resets as on a real network.

What is asserted, on real processes: kernel cuts between a source and both replicas longer
than alpha*X give tentative results, then corrections; a replica killed and restarted with
``--recover`` rebuilds from its partner *on another host*; a split of a node's two replicas;
the same scenario played with the in-process rules and with the kernel (the history names
each); ``dpc launch --hosts netns`` with ``dpc status`` / ``dpc inject`` reaching replicas
on their hosts, and ``dpc launch --cleanup``; a ``dpc torture --hosts netns`` run. Skipped,
with the reason in the summary, where this machine cannot make namespaces or cut links
(not root, no ``ip``, no ``nft``).
"""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest
import tomli_w

from node.config.load import load_config
from node.procs.rundir import RunDir
from node.procs.runlog import read_log
from ops_scripts.check.history import read_history
from ops_scripts.cluster.hosts import netns
from ops_scripts.cluster.hosts.placement import HostsMode, processes_of, read_placement, run_tag
from ops_scripts.harness import kernel
from ops_scripts.harness.runner import play_scenario
from ops_scripts.harness.scenario import load_scenario
from ops_scripts.harness.torture import TortureOptions, run_torture
from protocol.tuples import Kind
from tests.integration.test_cluster import small

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DPC = [sys.executable, "-m", "ops_scripts.cli"]

_why = netns.unusable() or kernel.unusable()
pytestmark = pytest.mark.skipif(_why is not None, reason=f"no real hosts here: {_why}")

# A source cut from both replicas for longer than alpha*X = 0.7 s (tentative results at the
# client, then corrections); n1b killed and restarted with --recover, which must fetch
# n1a's state from n1a's host; the two replicas of n1 split from each other.
SCENARIO = """
[scenario]
name = "hosts"
cluster = "{cluster}"
settle = 1.5
quiet = 3.0
source_rate = 300.0

[scenario.settings]
x = 1.0
alpha = 0.7
reconciliation = "checkpoint"

[[faults]]
at = 0.0
for = 2.0
fault = "partition"
shape = "source"
source = "s3"
cut = "{cut}"

[[faults]]
at = 3.5
for = 1.5
fault = "kill"
process = "n1b"

[[faults]]
at = 7.0
for = 1.5
fault = "partition"
shape = "split"
sides = [["n1a"], ["n1b"]]
"""


def _scenario(tmp_path: Path, cut: str = "blackhole") -> Path:
    path = tmp_path / "hosts.toml"
    path.write_text(SCENARIO.format(cluster=EXAMPLES / "basic.toml", cut=cut))
    return path


def _wait(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _nothing_left(run: Path) -> None:
    assert netns.leftovers(run_tag(run)) == [], "the run's namespaces were not removed"


def test_kernel_cuts_masked_and_corrected_and_recovery_across_hosts(tmp_path: Path) -> None:
    out = io.StringIO()
    run = tmp_path / "run"
    outcome = play_scenario(load_scenario(_scenario(tmp_path)), run, out, hosts=HostsMode.NETNS)
    log = out.getvalue()
    assert outcome.code == 0 and outcome.verdict == "valid" and not outcome.problems, log
    _nothing_left(run)
    rd = RunDir(run)
    placement = read_placement(run)
    assert placement is not None and placement.mode is HostsMode.NETNS
    config = load_config(rd.config)
    addresses = {r.name: r.host for n in config.nodes.values() for r in n.replicas}
    assert len({*addresses.values(), *(s.host for s in config.sources.values())}) == 5
    assert all(r.control_address == r.host for n in config.nodes.values() for r in n.replicas)
    events = read_history(rd.history)
    partitions = [e for e in events if e["event"] == "fault" and e["fault"]["fault"] == "partition"]
    assert [e["net"] for e in partitions] == ["kernel", "kernel"]
    # The kernel's silence reached the replicas: tentative results at the client, undone.
    received = [t for _, t in read_log(rd.client_log("c1"))]
    assert any(t.kind is Kind.TENTATIVE for t in received)
    assert any(t.kind is Kind.UNDO for t in received)
    # n1b rebuilt from n1a, whose control plane is on n1a's host, not n1b's.
    n1b = rd.process_log("n1b").read_text()
    assert "recovering: restored n1a's state" in n1b and "unreachable" not in n1b, n1b[-2000:]
    assert addresses["n1a"] != addresses["n1b"]


def test_the_same_scenario_with_process_rules_and_with_the_kernel(tmp_path: Path) -> None:
    """A scenario runs unchanged under either mechanism; the history says which made the
    partitions. (The kernel run: the test above; here a reset cut, both ways.)"""
    for mode in (HostsMode.LOCAL, HostsMode.NETNS):
        out = io.StringIO()
        run = tmp_path / mode.value
        outcome = play_scenario(load_scenario(_scenario(tmp_path, cut="reset")), run, out,
                                hosts=mode)
        assert outcome.code == 0 and outcome.verdict == "valid", out.getvalue()
        nets = {e.get("net") for e in read_history(RunDir(run).history)
                if e["event"] == "fault" and e["fault"]["fault"] == "partition"}
        assert nets == {"kernel" if mode is HostsMode.NETNS else "process"}


def test_launch_status_inject_and_cleanup_across_hosts(tmp_path: Path) -> None:
    cfg = small("basic.toml", tmp_path, limit=10**7)
    run = tmp_path / "run"
    rd = RunDir(run)
    out = open(tmp_path / "launch.out", "wb")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen([*DPC, "launch", str(cfg), "--hosts", "netns", "--duration", "60",
                             "--run-dir", str(run)], stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait(lambda: rd.history.exists() and any(
            e["event"] == "ready" for e in read_history(rd.history)), 60, "the ready event")
        # dpc status reaches each replica's control plane on its own host.
        status = subprocess.run([*DPC, "status", str(run)], capture_output=True, text=True)
        assert status.returncode == 0 and "unreachable" not in status.stdout, status.stdout
        for r in ("n1a", "n1b"):
            assert r in status.stdout
        # dpc inject cuts s3 from n1a in the kernel: n1a's namespace holds the rule.
        cut = subprocess.run([*DPC, "inject", str(run), "partition", "--shape", "link", "s3",
                              "n1a"], capture_output=True, text=True)
        assert cut.returncode == 0, cut.stderr
        placement = read_placement(run)
        assert placement is not None
        ns, s3 = placement.netns_of("n1a"), placement.host_of("s3")
        assert ns is not None and s3 is not None

        def rules() -> str:
            assert ns is not None
            return subprocess.run(["ip", "netns", "exec", ns, "nft", "list", "ruleset"],
                                  capture_output=True, text=True).stdout

        assert s3.address in rules()
        heal = subprocess.run([*DPC, "inject", str(run), "heal", "s3"], capture_output=True,
                              text=True)
        assert heal.returncode == 0, heal.stderr
        assert s3.address not in rules()  # the heal removed exactly what the cut added
        # A launcher that dies leaves its hosts: --cleanup removes them, and its processes.
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        assert netns.leftovers(run_tag(run))
        clean = subprocess.run([*DPC, "launch", "--cleanup", str(run)], capture_output=True,
                               text=True)
        assert clean.returncode == 0, clean.stdout + clean.stderr
        assert "namespace" not in clean.stdout or "removed" in clean.stdout
        _nothing_left(run)
        for name in ("s1", "n1a", "c1"):
            pid = rd.read_pid(name)
            assert pid is not None
            _wait(lambda pid=pid: not Path(f"/proc/{pid}").exists()
                  or "Z" in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1][:3],
                  10, f"{name} to be gone")
        history = [e for e in read_history(rd.history) if e["event"] == "fault"]
        assert history and history[0].get("net") == "kernel"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(60)
        out.close()
        subprocess.run([*DPC, "launch", "--cleanup", str(run)], capture_output=True)


def test_torture_on_hosts(tmp_path: Path) -> None:
    out = io.StringIO()
    code = run_torture(TortureOptions(seed=47, runs=1, run_dir=tmp_path / "t", faults=3,
                                      hosts=HostsMode.NETNS), out)
    assert code == 0, out.getvalue()
    (seed_dir,) = (tmp_path / "t").glob("seed-*")
    assert json.loads((seed_dir / "hosts.json").read_text())["mode"] == "netns"
    _nothing_left(seed_dir)


def test_tls_with_an_address_per_host(tmp_path: Path) -> None:
    """[cluster.tls] across hosts: the certificate names every host's address (and nothing
    on loopback), each process listens on its own, and a replica restarted with --recover
    takes its partner's state over HTTPS from the partner's host."""
    from tests.integration.test_tls import SCENARIO as TLS_SCENARIO
    from tests.integration.test_tls import TLS
    from tests.node.net.test_tls import write_tls

    net = "198.19.200"  # the config's own addresses, one /24 of the test range
    text = (EXAMPLES / "basic.toml").read_text().replace("[defaults]", TLS + "[defaults]", 1)
    raw = tomllib.loads(text)
    hosts = {}
    for i, (name, table, key) in enumerate(processes_of(raw)):
        table[key] = hosts[name] = f"{net}.{20 + i}"
    write_tls(tmp_path / "pki", *hosts.values())
    (tmp_path / "cluster.toml").write_text(tomli_w.dumps(raw))
    (tmp_path / "tls.toml").write_text(TLS_SCENARIO)
    out = io.StringIO()
    run = tmp_path / "run"
    outcome = play_scenario(load_scenario(tmp_path / "tls.toml"), run, out, hosts=HostsMode.NETNS)
    assert outcome.code == 0 and outcome.verdict == "valid", out.getvalue()
    placement = read_placement(run)
    assert placement is not None
    assert {p: placement.host_of(p).address for p in hosts} == hosts  # type: ignore[union-attr]
    rd = RunDir(run)
    assert "recovering: restored n1b's state" in rd.process_log("n1a").read_text()
    _nothing_left(run)
