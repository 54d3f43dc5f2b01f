"""The pure parts of the fault harness: scenario files, the active-rules model, torture
schedules, ``dpc inject``'s argument checks and pid-file lookups (no cluster runs here)."""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import random
import re
from pathlib import Path

import pytest

from node.config.load import load_config
from node.faults.ops import Cut, CutKind, Direction, FaultOp, Heal, Shape, Stall, Unstall
from node.procs.rundir import RunDir
from ops_scripts.cli import _parser
from ops_scripts.cluster.processes import PidProcess, find_pid
from ops_scripts.errors import ProcessError, ScenarioError
from ops_scripts.harness.extras import SOURCE_BATCH
from ops_scripts.harness.inject import _table
from ops_scripts.harness.rules import ActiveRules, LinkRule
from ops_scripts.harness.runner import figures_of
from ops_scripts.harness.scenario import Scenario, dump_scenario, load_scenario
from ops_scripts.harness.schedule import Fault, parse_faults
from ops_scripts.harness.torture import DEFAULT_CLUSTERS, FAST_RATE, torture_schedule
from tests.paths import ROOT

EXAMPLES = ROOT / "examples"
SCENARIOS = sorted((EXAMPLES / "scenarios").glob("*.toml"))
HEAD = f"""[scenario]
name = "t"
cluster = "{EXAMPLES / 'basic.toml'}"
settle = 1.0
quiet = 1.0
"""


def write(tmp_path: Path, text: str, name: str = "s.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def error_of(path: Path) -> str:
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    return str(info.value)


# ------------------------------------------------------------------ scenario files
@pytest.mark.parametrize("path", sorted((EXAMPLES / "long-runs").glob("*.toml")),
                         ids=lambda p: p.stem)
def test_the_long_runs_load(path: Path) -> None:
    """Too long for make test to play (examples/README.md), they must stay playable."""
    scenario = load_scenario(path)
    config = scenario.config()
    assert scenario.faults and scenario.schedule_length >= 600
    assert {n.settings.buffer_memory for n in config.nodes.values()} == {64 * 2**20}


# ------------------------------------------------------------------ scenario files
def test_unknown_keys_are_named_with_the_file_and_a_suggestion(tmp_path: Path) -> None:
    p = write(tmp_path, HEAD + "settel = 2.0\n")
    msg = error_of(p)
    assert str(p) in msg and "scenario.settel" in msg and "did you mean 'settle'" in msg, msg
    p = write(tmp_path, HEAD + "[scenario.settings]\nalpah = 0.5\n")
    msg = error_of(p)
    assert "scenario.settings.alpah" in msg and "'alpha'" in msg, msg
    p = write(tmp_path, HEAD + "[extra]\nx = 1\n")
    assert "extra: unknown key" in error_of(p)


def test_a_missing_or_double_cluster_is_refused(tmp_path: Path) -> None:
    p = write(tmp_path, HEAD.replace(str(EXAMPLES / "basic.toml"), "nowhere.toml"))
    msg = error_of(p)
    assert "scenario.cluster" in msg and str(tmp_path / "nowhere.toml") in msg, msg
    p = write(tmp_path, "[scenario]\nname = 'x'\n")
    assert "scenario.cluster: missing" in error_of(p)
    inline = (EXAMPLES / "basic.toml").read_text()
    p = write(tmp_path, HEAD + inline)
    assert "also given inline" in error_of(p)


def test_bad_values_name_their_key(tmp_path: Path) -> None:
    assert "scenario.settle: expected a number of seconds >= 0" in error_of(
        write(tmp_path, HEAD.replace("settle = 1.0", "settle = -1")))
    msg = error_of(write(tmp_path, HEAD + "[scenario.settings]\nalpha = 1.5\n"))
    assert "scenario.settings" in msg and "defaults.alpha" in msg, msg
    bad_cluster = write(tmp_path, "[cluster]\nname = 'x'\n", "cluster.toml")
    msg = error_of(write(tmp_path, HEAD.replace(str(EXAMPLES / "basic.toml"), bad_cluster.name)))
    assert "scenario.cluster" in msg and "cluster.token" in msg, msg


@pytest.mark.parametrize(("fault", "expected"), [
    ('fault = "kill"\nprocess = "c1"', "faults[0]: process = 'c1' is not a replica or a source"),
    ('fault = "partition"\nshape = "isolate"\nprocess = "n9"', "faults[0]: process = 'n9'"),
    ('fault = "pause"\nprocess = "n1a"\ncolour = "red"', "faults[0]: unknown key(s) ['colour']"),
    ('fault = "delay"\nbetween = ["s1", "c1"]\nseconds = 0.1',
     "faults[0]: between = ['s1', 'c1']: one end must be a replica"),
    ('fault = "partition"\nshape = "link"\nbetween = ["s1", "c1"]', "cuts no connection"),
])
def test_a_bad_fault_is_named(tmp_path: Path, fault: str, expected: str) -> None:
    p = write(tmp_path, HEAD + f"[[faults]]\nat = 0.0\nfor = 1.0\n{fault}\n")
    msg = error_of(p)
    assert msg.startswith(f"{p}: ") and expected in msg, msg


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
@pytest.mark.parametrize("inline", [False, True])
def test_dump_then_load_gives_the_same_scenario(tmp_path: Path, path: Path, inline: bool) -> None:
    s = load_scenario(path)
    moved = dataclasses.replace(s, path=tmp_path / "again.toml")  # the cluster: relative to it
    again = load_scenario(write(tmp_path, moved.dump(inline=inline), "again.toml"))
    for key in ("name", "faults", "settle", "quiet", "source_rate", "settings", "seed", "cluster"):
        assert getattr(again, key) == getattr(s, key), key
    assert (again.cluster_file is None) == inline


def test_example_scenarios_cover_every_shape_kind_cut_and_method() -> None:
    loaded = [load_scenario(p) for p in SCENARIOS]
    faults = [f for s in loaded for f in s.faults]
    shapes = {f.params["shape"] for f in faults if f.kind == "partition"}
    assert shapes == {"link", "isolate", "split", "bridge", "source"}
    assert any(f.params.get("one_way") for f in faults)
    assert {f.params.get("cut") for f in faults if f.kind == "partition"} == {"blackhole", "reset"}
    assert {"kill", "pause", "delay", "bandwidth", "slow", "stall"} <= {f.kind for f in faults}
    # (a process pair's scenario sets none: its node never reconciles)
    assert {s.settings.get("reconciliation") for s in loaded} - {None} == {"checkpoint", "undo"}


def test_the_effective_config_applies_settings_everywhere_and_frees_ports(tmp_path: Path) -> None:
    s = Scenario.of_cluster(EXAMPLES / "chain4.toml", name="c", source_rate=200.0,
                            settings={"x": 1.0, "alpha": 0.7})
    path = write(tmp_path, s.effective_config_text("free"), "config.toml")
    config = load_config(path)
    assert {n.settings.x for n in config.nodes.values()} == {1_000_000}  # n4's own x too
    assert {src.rate for src in config.sources.values()} == {200.0}
    original = load_config(EXAMPLES / "chain4.toml")
    ports = [*(src.port for src in config.sources.values()),
             *(p for n in config.nodes.values() for r in n.replicas
               for p in (r.data_port, r.control_port))]
    assert len(set(ports)) == len(ports)
    assert not set(ports) & {r.data_port for n in original.nodes.values() for r in n.replicas}
    kept = load_config(write(tmp_path, s.effective_config_text("keep"), "kept.toml"))
    assert kept.sources["s1"].port == original.sources["s1"].port


def test_dump_scenario_from_parts_names_the_cluster_relative_to_base(tmp_path: Path) -> None:
    config = load_config(EXAMPLES / "basic.toml")
    faults = parse_faults([{"at": 0.5, "for": 1.0, "fault": "kill", "process": "n1a"}], config)
    text = dump_scenario(name="k", cluster=EXAMPLES / "basic.toml", faults=faults, seed=9,
                         base=EXAMPLES / "scenarios")
    assert 'cluster = "../basic.toml"' in text
    s = load_scenario(write(tmp_path,
                            dump_scenario(name="k", cluster=config, faults=faults, seed=9,
                                          inline=True)))
    assert s.seed == 9 and s.faults == tuple(faults) and s.cluster_file is None
    by_path = load_scenario(write(tmp_path, dump_scenario(
        name="k", cluster=EXAMPLES / "basic.toml", faults=faults, inline=True), "p.toml"))
    assert by_path.cluster_file is None and by_path.cluster == s.cluster  # the file, read


# ------------------------------------------------------------------ the active rules
@pytest.fixture
def basic() -> ActiveRules:
    return ActiveRules(load_config(EXAMPLES / "basic.toml"))


def fault(kind: str, **params: object) -> Fault:
    config = load_config(EXAMPLES / "basic.toml")
    (f,) = parse_faults([{"at": 0.0, "for": 1.0, "fault": kind, **params}], config)
    return f


def settle(rules: ActiveRules, reachable: tuple[str, ...] = ("n1a", "n1b")) -> dict[str, list[object]]:
    plan = rules.plan(reachable)
    for r in plan:
        rules.commit(r)
    assert rules.plan(reachable) == {}, "after a commit nothing is left to do"
    return plan  # type: ignore[return-value]


def test_a_partition_is_cut_at_every_replica_end(basic: ActiveRules) -> None:
    basic.add(0, fault("partition", shape="source", source="s3", cut="reset"))
    assert settle(basic) == {"n1a": [Cut(("s3",), Direction.BOTH, CutKind.RESET)],
                             "n1b": [Cut(("s3",), Direction.BOTH, CutKind.RESET)]}
    basic.add(1, fault("partition", shape="link", between=["n1a", "n1b"], one_way=True))
    assert settle(basic) == {"n1a": [Cut(("n1b",), Direction.OUT, CutKind.BLACKHOLE)],
                             "n1b": [Cut(("n1a",), Direction.IN, CutKind.BLACKHOLE)]}
    basic.remove(0)
    assert settle(basic) == {"n1a": [Heal(("s3",))], "n1b": [Heal(("s3",))]}


def test_healing_one_of_two_overlapping_partitions_keeps_the_other(basic: ActiveRules) -> None:
    basic.add(0, fault("partition", shape="source", source="s3"))
    basic.add(1, fault("partition", shape="isolate", process="n1a"))
    settle(basic)
    basic.remove(1)  # s3 stays cut from n1a: only what the isolation alone added is healed
    assert settle(basic) == {"n1a": [Heal(("c1", "n1b", "s1", "s2"))],
                             "n1b": [Heal(("n1a",))]}
    basic.add(2, fault("partition", shape="isolate", process="n1a", cut="reset"))
    settle(basic)  # n1a -- s3 is now a reset (any fault saying reset wins)
    basic.remove(2)  # back to the blackhole of fault 0: heal the pair, cut it again
    plan = settle(basic)
    assert plan["n1a"] == [Heal(("c1", "n1b", "s1", "s2", "s3")),
                           Cut(("s3",), Direction.BOTH, CutKind.BLACKHOLE)]


def test_a_one_way_cut_grows_to_both_ways_without_a_heal(basic: ActiveRules) -> None:
    basic.add(0, fault("partition", shape="link", between=["s3", "n1a"], one_way=True))
    assert settle(basic) == {"n1a": [Cut(("s3",), Direction.IN, CutKind.BLACKHOLE)]}
    basic.add(1, fault("partition", shape="link", between=["n1a", "s3"], one_way=True))
    assert settle(basic) == {"n1a": [Cut(("s3",), Direction.BOTH, CutKind.BLACKHOLE)]}
    basic.remove(0)
    assert settle(basic) == {"n1a": [Heal(("s3",)), Cut(("s3",), Direction.OUT, CutKind.BLACKHOLE)]}


def test_shapes_combine_and_a_delay_is_split_between_replica_ends(basic: ActiveRules) -> None:
    basic.add(0, fault("delay", between=["n1a", "n1b"], seconds=0.2))
    assert settle(basic) == {"n1a": [Shape(("n1b",), 0.1, None, 0.0)],
                             "n1b": [Shape(("n1a",), 0.1, None, 0.0)]}
    basic.add(1, fault("bandwidth", between=["s1", "n1a"], bytes_per_second=5000.0))
    basic.add(2, fault("bandwidth", between=["s1", "n1a"], bytes_per_second=2000.0))
    basic.add(3, fault("slow", reader="n1a", writer="s1", seconds=0.01))
    assert settle(basic) == {"n1a": [Shape(("s1",), 0.0, 2000.0, 0.01)]}
    basic.add(4, fault("partition", shape="source", source="s1", replicas=["n1a"]))
    assert settle(basic) == {"n1a": [Cut(("s1",), Direction.BOTH, CutKind.BLACKHOLE)]}
    basic.remove(3)  # the slow reader ends: heal s1 at n1a, then the cut and the limit again
    assert settle(basic) == {"n1a": [Heal(("s1",)), Cut(("s1",), Direction.BOTH, CutKind.BLACKHOLE),
                                     Shape(("s1",), 0.0, 2000.0, 0.0)]}


def test_a_restarted_replica_gets_the_rules_in_force_and_unreachable_ones_wait(
        basic: ActiveRules) -> None:
    basic.add(0, fault("partition", shape="source", source="s2"))
    basic.add(1, fault("stall", process="n1a"))
    assert settle(basic, ("n1b",)) == {"n1b": [Cut(("s2",), Direction.BOTH, CutKind.BLACKHOLE)]}
    assert basic.plan(["n1a"]) == {"n1a": [Cut(("s2",), Direction.BOTH, CutKind.BLACKHOLE), Stall()]}
    settle(basic)
    basic.forget("n1a")  # killed and started again: holds nothing
    assert settle(basic) == {"n1a": [Cut(("s2",), Direction.BOTH, CutKind.BLACKHOLE), Stall()]}


def test_a_replica_stays_stalled_while_any_stall_is_in_force(basic: ActiveRules) -> None:
    basic.add(0, fault("stall", process="n1b"))
    basic.add(1, fault("stall", process="n1b"))
    assert settle(basic) == {"n1b": [Stall()]}
    basic.remove(0)
    assert settle(basic) == {}
    basic.remove(1)
    assert settle(basic) == {"n1b": [Unstall()]}


def test_link_rules_extend_only_when_nothing_held_goes_away() -> None:
    cut_in = LinkRule(cut_in=True)
    assert LinkRule(cut_in=True, cut_out=True).extends(cut_in)
    assert not LinkRule(cut_out=True).extends(cut_in)
    assert not LinkRule(cut_in=True, reset=True).extends(cut_in)
    assert LinkRule(delay=0.1, slow=0.2).extends(LinkRule(delay=0.3))
    assert not LinkRule(delay=0.1).extends(LinkRule(bandwidth=10.0))
    assert (LinkRule(cut_in=True, reset=True) + LinkRule(delay=0.5)).kind is CutKind.RESET


# ------------------------------------------------------------------ torture schedules
def test_torture_schedules_depend_on_the_seed_only_and_reach_stabilization() -> None:
    base = Scenario.of_cluster(DEFAULT_CLUSTERS[0], name="t", source_rate=300.0,
                               settings={"x": 1.0, "alpha": 0.7})
    config = base.config()
    draws = {seed: torture_schedule(config, random.Random(seed), duration=8.0, count=4)
             for seed in range(40)}
    assert draws[3] == torture_schedule(config, random.Random(3), duration=8.0, count=4)
    assert sum(d.stalls for d in draws.values()) >= 10
    for d in draws.values():
        faults = d.faults
        assert len(faults) >= 4
        parse_faults([f.table() for f in faults], config)  # still a valid schedule
        if d.stalls:  # a long source cut, a stall across its heal, a new fault in the stall
            # (some stall: random ones may straddle a heal too)
            assert any(
                f.kind == "stall"
                and any(g.kind == "partition" and f.at < g.heal_at < f.heal_at for g in faults)
                and any(g.kind == "partition" and f.at < g.at < f.heal_at for g in faults)
                for f in faults)
    kills = {f.params["process"] for d in draws.values() for f in d.faults if f.kind == "kill"}
    assert {"n1a", "n1b"} <= kills and kills & set(config.sources)  # sources die too


def test_torture_draws_long_source_pauses_at_the_fast_rate() -> None:
    config = Scenario.of_cluster(DEFAULT_CLUSTERS[0], name="t").config()
    draws = [torture_schedule(config, random.Random(seed), duration=8.0, count=4)
             for seed in range(40)]
    fast = [d for d in draws if d.fast_source]
    assert len(fast) >= 4
    for d in fast:  # paused for longer than a whole batch of its tuples at FAST_RATE
        assert any(f.kind == "pause" and f.params["process"] == d.fast_source
                   and f.duration > SOURCE_BATCH / FAST_RATE for f in d.faults)


def test_torture_kills_one_of_three_replicas_across_the_others_input_failure() -> None:
    config = Scenario.of_cluster(DEFAULT_CLUSTERS[1], name="t").config()
    assert any(len(n.replicas) == 3 for n in config.nodes.values())
    found = 0
    for seed in range(40):
        faults = torture_schedule(config, random.Random(seed), duration=8.0, count=4).faults
        for k in (f for f in faults if f.kind == "kill"):
            cuts = [g for g in faults if g.kind == "partition" and g.params["shape"] == "source"
                    and k.params["process"] not in g.params["replicas"]
                    and len(g.params["replicas"]) == 2 and k.at < g.at
                    and g.heal_at < k.heal_at]
            found += bool(cuts)
    assert found >= 5


# ------------------------------------------------------------------ dpc inject arguments
def inject_args(*argv: str) -> argparse.Namespace:
    return _parser().parse_args(["inject", "RUN", *argv])


def test_inject_arguments_become_fault_tables() -> None:
    assert _table(inject_args("partition", "--shape", "link", "s3", "n1a", "--one-way")) == {
        "fault": "partition", "shape": "link", "cut": "blackhole", "between": ["s3", "n1a"],
        "one_way": True}
    assert _table(inject_args("partition", "--shape", "bridge", "s1,n1a", "s3,n1b", "--bridge",
                              "c1", "--cut", "reset"))["sides"] == [["s1", "n1a"], ["s3", "n1b"]]
    assert _table(inject_args("slow", "n1a", "s1", "0.01")) == {
        "fault": "slow", "reader": "n1a", "writer": "s1", "seconds": 0.01}
    from ops_scripts.errors import InjectError

    with pytest.raises(InjectError, match="expected 2 name argument"):
        _table(inject_args("partition", "--shape", "link", "s3"))
    with pytest.raises(InjectError, match="--bridge P goes with --shape bridge"):
        _table(inject_args("partition", "--shape", "split", "s3", "--bridge", "c1"))


def test_inject_refuses_to_find_a_process_without_a_run_dir() -> None:
    from ops_scripts.errors import InjectError
    from ops_scripts.harness.inject import _Injector

    inj = _Injector(load_config(EXAMPLES / "basic.toml"), None, io.StringIO())
    for act in (inj.adopt, inj.restart):
        with pytest.raises(InjectError, match="needs a RUN_DIR: it finds the process by the pid"):
            act("n1a")
    assert inj.procs == []


def test_pid_lookups_refuse_missing_dead_and_foreign_pids(tmp_path: Path) -> None:
    rd = RunDir(tmp_path / "run").ensure()
    with pytest.raises(ProcessError, match=re.escape(str(rd.pid_file("n1a"))) + ": missing"):
        find_pid(rd, "n1a")
    rd.write_pid("n1a", os.getpid())  # alive, but not `dpc node ... n1a`
    with pytest.raises(ProcessError, match="refusing to signal it"):
        find_pid(rd, "n1a")
    rd.write_pid("n1a", 2**22 + 12345)  # above pid_max: never a live pid
    with pytest.raises(ProcessError, match="is not running"):
        find_pid(rd, "n1a")
    rd.pid_file("n1a").write_text("garbage")
    with pytest.raises(Exception, match="expected a pid"):
        rd.read_pid("n1a")
    assert PidProcess(2**22 + 12345).poll() == 0


def test_figures_fall_back_on_the_availability_report(tmp_path: Path) -> None:
    rd = RunDir(tmp_path)
    assert figures_of(rd) == {}
    rd.check_json.write_text(json.dumps({"availability": [
        {"received": 10, "delay_new_us": 500_000, "bound_us": 1_000_000},
        {"received": 5, "delay_new_us": 700_000, "bound_us": 1_000_000}]}))
    assert figures_of(rd) == {"tuples_received": 15, "worst_delay_us": 700_000,
                              "bound_us": 1_000_000}
    rd.check_json.write_text(json.dumps({"figures": {"tuples_checked": 3}, "availability": []}))
    assert figures_of(rd) == {"tuples_checked": 3}


# ------------------------------------------------------------------ the POST /fault bodies
def test_requests_send_the_fault_api_bodies(tmp_path: Path) -> None:
    """What each request of the rules puts on the wire, caught by a stub control plane."""
    import http.server
    import threading

    from ops_scripts.harness.fault import send_fault

    s = Scenario.of_cluster(EXAMPLES / "basic.toml", name="b")
    config = load_config(write(tmp_path, s.effective_config_text("free"), "config.toml"))
    bodies: list[tuple[str, str, object]] = []

    class Stub(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers["Content-Length"]))
            bodies.append((self.path, self.headers["Authorization"], json.loads(raw)))
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", config.replica("n1a").control_port), Stub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        ops: list[FaultOp] = [
            Cut(("s3",), Direction.BOTH, CutKind.BLACKHOLE), Cut(("s1", "s2"), Direction.IN, CutKind.RESET),
            Shape(("s1",), 0.1, 2000.0, 0.0), Shape(("c1",), 0.0, None, 0.01),
            Heal(("s3",)), Heal(), Stall(), Unstall()]
        for op in ops:
            send_fault(config, "n1a", op)
    finally:
        server.shutdown()
        server.server_close()
    assert {(path, auth) for path, auth, _ in bodies} == {("/fault", f"Bearer {config.token}")}
    assert [b for _, _, b in bodies] == [
        {"cut": ["s3"]},  # the defaults (both ways, blackhole) go unsaid
        {"cut": ["s1", "s2"], "direction": "in", "kind": "reset"},
        {"shape": ["s1"], "delay": 0.1, "bandwidth": 2000.0},
        {"shape": ["c1"], "slow": 0.01},
        {"heal": ["s3"]},
        {"heal": "all"},
        {"stall": "replay"},
        {"unstall": "replay"},
    ]


def test_a_kill_or_pause_waits_for_a_partner_with_a_state_and_for_its_own_return() -> None:
    from ops_scripts.harness.nemesis import Nemesis

    nemesis = Nemesis(load_config(EXAMPLES / "basic.toml"), None, [])
    nemesis.down.update({"n1b": "killed", "s3": "paused"})
    assert nemesis.blocked(fault("kill", process="n1a")) == (
        "n1b is killed: n1a is the last replica of its node with a state")
    assert nemesis.blocked(fault("pause", process="s3")) == "s3 is still paused"
    assert nemesis.blocked(fault("pause", process="s1")) is None
    assert nemesis.blocked(fault("stall", process="n1a")) is None
    assert nemesis.reachable() == ["n1a"]
