"""The fault harness with real processes: every example scenario played by ``dpc run``,
``dpc inject`` against a running cluster, and one ``dpc torture`` run.

Each scenario run starts a local cluster (one OS process per source, replica and client),
plays its schedule on the wall clock (a fault's ``for`` is a duration in the schedule, not
a wait for an outcome), drains, and must pass ``dpc check``. Where the schedule leaves some
node without a replica that has all its inputs for longer than alpha*X, the client must
have received tentative results: the scenario really exercised DPC. Every wait for an
outcome polls a condition with a deadline.

The mutation check: with duplicate elimination on resubscription broken on purpose (the
test-only ``DPC_TEST_MUTATION``: every input link asks again for the last stable tuple it
holds, node/streams/link.py), a scenario in which the client switches replicas must fail, and the
checker must say a stable tuple came twice.
"""

from __future__ import annotations

import io
import itertools
import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from node.clock import now_us
from node.config.load import load_config
from node.config.model import ClusterConfig
from node.procs.rundir import RunDir
from node.procs.runlog import count_rows, read_log
from node.replica.runtime import MUTATION_DUPLICATES
from ops_scripts.check.history import read_history
from ops_scripts.cli import main as dpc
from ops_scripts.cluster.launch import Launched, stop_cluster
from ops_scripts.cluster.processes import PidProcess, alive
from ops_scripts.cluster.status import fetch_status
from ops_scripts.harness.history import HistoryWriter
from ops_scripts.harness.runner import play_scenario, start_recorded
from ops_scripts.harness.scenario import Scenario, load_scenario
from ops_scripts.harness.schedule import Fault, cut_pairs
from ops_scripts.harness.torture import TortureOptions, run_torture
from protocol.tuples import Kind
from tests.integration.test_cluster import wait_for
from tests.paths import EXAMPLES

SCENARIOS = sorted((EXAMPLES / "scenarios").glob("*.toml"))
#: What a scenario must make happen besides a valid run: lines in process logs. The throttled
#: client's run is valid only if c1 leaves the replica behind the slow link (torture seed
#: 301); this says it was the link rule's switch, not a start on the other replica.
EXPECTED_LOG = {"throttled-client": [("c1", "input n1.out: switching from n1a to n1b (ids)")],
                # CEC: recovered from their own logs, not from a partner's state
                "cec-recover-alone": [("n1a", "n1a: recovering from its CEC log")],
                "cec-double-kill": [("n1b", "n1b: recovering from its CEC log")],
                # a process pair: the secondary took over from the killed primary, which
                # rejoined as the secondary and took over in turn when its partner was killed
                "active-standby-kill": [
                    ("n1b", "n1b: now the primary (n1a failed: taking over)"),
                    ("n1a", "n1a: secondary of a process pair (ha = 'active_standby') with n1b"),
                    ("n1a", "n1a: now the primary (n1b failed: taking over)")],
                # amnesia: each takeover restarts the query empty at its inputs' live end
                "amnesia-kill": [
                    ("n1b", "n1b: amnesia: the query restarts empty, its inputs at their live end"),
                    ("n1a", "n1a: secondary of a process pair (ha = 'amnesia') with n1b"),
                    ("n1a", "n1a: amnesia: the query restarts empty, its inputs at their live end")],
                # passive standby: each takeover restores the partner's last checkpoint
                "passive-standby-kill": [
                    ("n1b", "n1b: passive standby: restored from checkpoint "),
                    ("n1a", "n1a: secondary of a process pair (ha = 'passive_standby') with n1b"),
                    ("n1a", "n1a: passive standby: restored from checkpoint ")],
                # masking (issue 46): each cut replica went into UP_FAILURE on detection
                "masked-source-cut": [
                    ("n1a", "n1a: STABLE -> UP_FAILURE: input unavailable: s3"),
                    ("n1b", "n1b: STABLE -> UP_FAILURE: input unavailable: s3")],
                # upstream backup: each takeover restarts from the last restart point
                "upstream-backup-kill": [
                    ("n1b", "n1b: upstream backup: restored from restart point "),
                    ("n1a", "n1a: secondary of a process pair (ha = 'upstream_backup') with n1b"),
                    ("n1a", "n1a: upstream backup: restored from restart point ")]}
#: Scenarios whose every failure leaves some replica of each node all its inputs (issue 46).
MASKED = {"masked-source-cut"}
#: Whether the replicas take {"cut", "direction", "kind"} and {"shape", ...} (node/faults/rules.py).


# ------------------------------------------------------------------ what a schedule starves
def _starved(config: ClusterConfig, active: list[Fault]) -> bool:
    """Whether some node has no replica with all its inputs while ``active`` are in force:
    each replica is down (killed, paused) or cut from every producer of one input, and one
    at least is up (a node whose replicas are all down produces nothing, not even
    tentative results: CEC's double kill)."""
    cut = set().union(*(cut_pairs(f, config) for f in active)) if active else set()
    down = {f.params["process"] for f in active if f.kind in ("kill", "pause")}

    def producers(stream: str) -> list[str]:
        if stream in config.sources:
            return [stream]
        return [r.name for r in config.nodes[stream.partition(".")[0]].replicas]

    def lacks(r: str, inputs: tuple[str, ...]) -> bool:
        return r in down or any(all(p in down or (p, r) in cut for p in producers(s))
                                for s in inputs)

    return any(all(lacks(r.name, n.inputs) for r in n.replicas)
               and not all(r.name in down for r in n.replicas) for n in config.nodes.values())


def longest_starvation(s: Scenario, config: ClusterConfig) -> float:
    """The longest stretch of schedule time during which some node is starved."""
    times = sorted({0.0, *(f.at for f in s.faults), *(f.heal_at for f in s.faults)})
    longest = run = 0.0
    for a, b in itertools.pairwise(times):
        if _starved(config, [f for f in s.faults if f.at <= a < f.heal_at]):
            run += b - a
            longest = max(longest, run)
        else:
            run = 0.0
    return longest


def test_the_starvation_rule_reads_schedules_as_intended() -> None:
    kill = load_scenario(EXAMPLES / "scenarios" / "kill-restart.toml")
    assert longest_starvation(kill, kill.config()) == pytest.approx(1.7)  # n1a down, n1b cut
    bridge = load_scenario(EXAMPLES / "scenarios" / "bridge.toml")
    assert longest_starvation(bridge, bridge.config()) == pytest.approx(2.5)


# ------------------------------------------------------------------ dpc run, every example
@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_example_scenario_runs_valid_and_exercises_dpc(path: Path, tmp_path: Path) -> None:
    scenario = load_scenario(path)
    out = io.StringIO()
    outcome = play_scenario(scenario, tmp_path / "run", out)
    log = out.getvalue()
    print(log)
    assert outcome.code == 0 and not outcome.problems, log
    assert outcome.injected == len(scenario.faults)
    rd = RunDir(tmp_path / "run")
    events = read_history(rd.history)
    kinds = [e["event"] for e in events]
    assert kinds[0] == "start" and kinds[-1] == "end" and kinds.count("heal_all") == 1
    for fid in range(len(scenario.faults)):  # each fault, then its heal, before the heal_all
        at = {e["event"]: i for i, e in enumerate(events) if e.get("id") == fid}
        assert at["fault"] < at["heal"] < kinds.index("heal_all"), (fid, at)
    config = load_config(rd.config)
    replicas = {r.name for n in config.nodes.values() for r in n.replicas}
    assert {e["process"] for e in events if e["event"] == "digest"} == replicas
    assert "state" in kinds  # the replicas' state changes were merged in
    alpha_x = min(n.settings.wait for n in config.nodes.values()) / 1e6
    if longest_starvation(scenario, scenario.config()) > alpha_x + 0.3:
        tentative = [t for _, t in read_log(rd.client_log("c1"))
                     if t.kind is Kind.TENTATIVE]
        assert tentative, "a failure longer than alpha*X left no tentative tuple at the client"
    if path.stem in MASKED:  # a STABLE partner all along: the client saw no tentative result
        assert not [t for _, t in read_log(rd.client_log("c1"))
                    if t.kind is Kind.TENTATIVE]
    # dpc run RUN_DIR/scenario.toml would replay the same schedule
    assert load_scenario(rd.path / "scenario.toml").faults == scenario.faults
    for process, line in EXPECTED_LOG.get(path.stem, []):
        assert line in rd.process_log(process).read_text(), (process, line)


def test_the_mutation_is_caught_on_real_processes(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Every process started with the mutation resubscribes one stable tuple early. The
    kill-restart scenario kills both replicas in turn, so the client switches at least
    once, and the duplicate reaches it."""
    monkeypatch.setenv("DPC_TEST_MUTATION", MUTATION_DUPLICATES)  # inherited by the children
    out = io.StringIO()
    outcome = play_scenario(load_scenario(EXAMPLES / "scenarios" / "kill-restart.toml"),
                            tmp_path / "run", out)
    log = out.getvalue()
    assert outcome.code != 0, log
    report = json.loads((tmp_path / "run" / "check.json").read_text())
    bad = {v["property"]: v["evidence"] for v in report["verdicts"] if v["status"] == "invalid"}
    assert "no-duplicates" in bad, report
    assert "repeats the stable tuple" in bad["no-duplicates"]


# ------------------------------------------------------------------ dpc inject
@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[RunDir, ClusterConfig, list[Launched]]]:
    yield from running_scenario(EXAMPLES / "scenarios" / "bridge.toml", tmp_path)  # X = 1 s


def running_scenario(path: Path, tmp_path: Path
                     ) -> Iterator[tuple[RunDir, ClusterConfig, list[Launched]]]:
    """A cluster of a scenario's effective config, started as dpc run starts it, for
    ``dpc inject``; stopped afterwards by the pids its run dir holds (restarts included)."""
    scenario = load_scenario(path)
    rd = RunDir(tmp_path / "run").ensure()
    rd.config.write_text(scenario.effective_config_text("free"))
    config = load_config(rd.config)
    procs: list[Launched] = []
    # Start-up in the history, as dpc run records it, so that dpc check excuses it (the
    # first results of a cold start are no availability verdict).
    with HistoryWriter(rd.history, now_us) as history:
        assert start_recorded(config, rd, history, io.StringIO(), procs, name="inject test")
    yield rd, config, procs
    for p in procs:  # whoever runs now, by the pid the run dir holds (restarts included)
        pid = rd.read_pid(p.name)
        if pid is not None and pid != p.proc.pid and alive(pid):
            p.proc = PidProcess(pid)
        if p.proc.poll() is None:
            p.proc.send_signal(signal.SIGCONT)
    stop_cluster(procs, rd, drain=False)


def drain_and_check_valid(rd: RunDir, procs: list[Launched], restarted: str) -> None:
    """Stop the cluster (the restarted replica by the pid its run dir holds) with a drain,
    and ``dpc check`` it: every verdict valid."""
    for p in procs:
        if p.name == restarted:
            p.proc = PidProcess(rd.read_pid(restarted) or 0)
    assert stop_cluster(procs, rd, drain=True)
    assert dpc(["check", str(rd.path)]) == 0
    report = json.loads(rd.check_json.read_text())
    assert {v["status"] for v in report["verdicts"]} == {"valid"}


def state(config: ClusterConfig, replica: str) -> str:
    return (fetch_status(config, replica) or {}).get("state", "unreachable")


def test_inject_kill_restart_partition_heal(running: Any, capsys: pytest.CaptureFixture[str]) -> None:
    rd, config, procs = running
    run = str(rd.path)
    first = rd.read_pid("n1a")
    assert dpc(["inject", run, "kill", "n1a"]) == 0
    assert first is not None and not alive(first)
    assert dpc(["inject", run, "kill", "n1b"]) == 2  # the node's last replica: refused
    assert "n1b is the last replica of its node with a state" in capsys.readouterr().err
    assert dpc(["inject", run, "kill", "c1"]) == 2  # a client's log is the run's evidence
    assert "process = 'c1' is not a replica or a source" in capsys.readouterr().err
    assert dpc(["inject", str(rd.config), "kill", "n1a"]) == 2
    assert "kill needs a RUN_DIR" in capsys.readouterr().err
    assert dpc(["inject", run, "pause", "n9"]) == 2
    assert "'n9'" in capsys.readouterr().err
    assert dpc(["inject", run, "restart", "n1a"]) == 0
    assert rd.read_pid("n1a") not in (None, first)
    assert dpc(["inject", run, "restart", "n1a"]) == 2
    assert "is running" in capsys.readouterr().err
    wait_for(lambda: state(config, "n1a") == "STABLE", 60, "n1a to recover and rejoin")
    n = count_rows(rd.client_log("c1"))
    assert dpc(["inject", run, "partition", "--shape", "source", "s3"]) == 0
    wait_for(lambda: any(t.kind is Kind.TENTATIVE for _, t in
                         read_log(rd.client_log("c1"))[n:]), 30,
             "tentative results at the client (s3 cut from both replicas)")
    assert dpc(["inject", run, "heal", "s3"]) == 0
    wait_for(lambda: state(config, "n1a") == state(config, "n1b") == "STABLE", 60,
             "both replicas to reconcile")
    assert dpc(["inject", run, "pause", "s2"]) == 0
    assert dpc(["inject", run, "heal", "--all"]) == 0  # continues s2 too
    events = read_history(rd.history)
    assert [(e["event"], e.get("id")) for e in events] == [
        ("start", None), ("ready", None),
        ("fault", 0), ("heal", 0), ("fault", 1), ("heal", 1), ("fault", 2), ("heal_all", None)]
    events = events[2:]
    assert events[0]["down"] == ["n1a"] and ["s3", "n1a"] in events[2]["cut"]
    drain_and_check_valid(rd, procs, restarted="n1a")


# ------------------------------------------------------------------ dpc torture
def test_one_torture_run_is_valid_and_replayable(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    code = run_torture(TortureOptions(seed=3, runs=1, run_dir=tmp_path, faults=3,
                                      duration=5.0))
    out = capsys.readouterr().out
    assert code == 0, out
    assert "1 run(s), 1 valid" in out
    assert load_scenario(tmp_path / "seed-3" / "scenario.toml").seed == 3
