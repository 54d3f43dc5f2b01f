"""A run's hosts, without making any: placement (pure), the kernel's rulesets (pure), the
apply rule of the kernel model, and a process's own addresses (ops_scripts/cluster/hosts/,
ops_scripts/harness/kernel.py, node/procs/entry.py). The real namespaces and nftables are
tests/integration/test_netns.py's."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from node.config.load import parse_config
from node.errors import NodeError
from node.net.ports import is_local_address
from node.procs.entry import _check_hosts
from ops_scripts.cluster.hosts.placement import (
    HostsMode,
    Placement,
    place,
    read_placement,
    run_tag,
)
from ops_scripts.errors import HostsError
from ops_scripts.harness import kernel
from ops_scripts.harness.schedule import parse_faults

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def _basic() -> dict:
    return tomllib.loads((EXAMPLES / "basic.toml").read_text())


def test_a_loopback_config_gets_one_host_per_process_in_the_test_range() -> None:
    raw = _basic()
    placement, placed = place(raw, HostsMode.NETNS, "abcd1234", free_subnet=3)
    procs = ["s1", "s2", "s3", "n1a", "n1b", "c1"]
    assert sorted(placement.where) == sorted(procs)
    addresses = [placement.host_of(p).address for p in procs]  # type: ignore[union-attr]
    assert len(set(addresses)) == len(procs)
    assert all(a.startswith("198.18.3.") for a in addresses)
    assert placement.control_address == "198.18.3.1" and placement.control_address not in addresses
    assert {placement.netns_of(p) for p in procs} == {f"dpc-abcd1234-{p}" for p in procs}
    config = parse_config(placed, Path("placed.toml"))  # the rewritten config is valid
    n1a = config.replica("n1a")
    assert n1a.host == placement.host_of("n1a").address == n1a.control_address  # type: ignore[union-attr]
    assert config.clients["c1"].host == placement.host_of("c1").address  # type: ignore[union-attr]
    assert raw == _basic()  # the input is left alone


def test_given_addresses_are_kept_and_shared_hosts_are_one_host() -> None:
    raw = _basic()
    raw["sources"]["s1"]["host"] = raw["sources"]["s2"]["host"] = "198.19.7.20"
    raw["nodes"]["n1"]["replicas"][0]["host"] = "198.19.7.21"
    placement, _ = place(raw, HostsMode.NETNS, "t")
    assert placement.host_of("s1") == placement.host_of("s2")
    assert placement.host_of("s1").name == "198.19.7.20"  # type: ignore[union-attr]
    assert placement.host_of("n1a").address == "198.19.7.21"  # type: ignore[union-attr]
    others = {placement.host_of(p).address for p in ("s3", "n1b", "c1")}  # type: ignore[union-attr]
    assert len(others) == 3 and all(a.startswith("198.19.7.") for a in others)
    raw["nodes"]["n1"]["replicas"][1]["host"] = "10.1.2.3"
    with pytest.raises(HostsError, match="one /24"):
        place(raw, HostsMode.NETNS, "t")
    raw["nodes"]["n1"]["replicas"][1]["host"] = "db-1.example"
    with pytest.raises(HostsError, match="not an IPv4 address"):
        place(raw, HostsMode.NETNS, "t")


def test_a_placement_round_trips_through_the_run_directory(tmp_path: Path) -> None:
    placement, _ = place(_basic(), HostsMode.NETNS, run_tag(tmp_path))
    placement.write(tmp_path)
    assert read_placement(tmp_path) == placement
    assert read_placement(tmp_path / "nowhere") is None
    (tmp_path / "hosts.json").write_text("{}")
    with pytest.raises(HostsError, match="not a placement"):
        read_placement(tmp_path)
    assert len(placement.control_link) <= 15  # an interface name's limit


def _faults(config, *tables):  # type: ignore[no-untyped-def]
    return parse_faults([{"at": 0.0, "for": 1.0, **t} for t in tables], config)


def test_kernel_rules_drop_each_direction_where_it_leaves_and_arrives() -> None:
    placement, placed = place(_basic(), HostsMode.NETNS, "t")
    config = parse_config(placed, Path("p.toml"))
    addr = {p: placement.host_of(p).address for p in placement.where}  # type: ignore[union-attr]
    ns = {p: placement.netns_of(p) for p in placement.where}
    (one_way,) = _faults(config, {"fault": "partition", "shape": "link", "between": ["s3", "n1a"],
                                  "one_way": True})
    rules = kernel.rulesets([one_way], config, placement)
    assert rules[ns["s3"]].drop_out == {addr["n1a"]} and not rules[ns["s3"]].drop_in
    assert rules[ns["n1a"]].drop_in == {addr["s3"]} and not rules[ns["n1a"]].drop_out
    assert all(not (r.drop_in or r.drop_out or r.reset) for n, r in rules.items()
               if n not in (ns["s3"], ns["n1a"]))
    (reset,) = _faults(config, {"fault": "partition", "shape": "isolate", "process": "n1b",
                                "cut": "reset"})
    rules = kernel.rulesets([reset], config, placement)
    assert rules[ns["n1b"]].reset == {addr[p] for p in addr if p != "n1b"}
    assert rules[ns["c1"]].reset == {addr["n1b"]}
    script = rules[ns["c1"]].script()
    assert "reject with tcp reset" in script and f"ip daddr {{ {addr['n1b']} }} drop" in script
    # Nothing in force: the table is deleted (a heal leaves nothing behind).
    empty = kernel.rulesets([], config, placement)[ns["c1"]].script()
    assert empty.strip().endswith("delete table inet dpc") and "chain" not in empty


def test_a_kernel_cut_between_processes_of_one_host_is_refused() -> None:
    raw = _basic()
    raw["sources"]["s3"]["host"] = raw["nodes"]["n1"]["replicas"][0]["host"] = "198.19.9.20"
    placement, placed = place(raw, HostsMode.NETNS, "t")
    config = parse_config(placed, Path("p.toml"))
    (cut,) = _faults(config, {"fault": "partition", "shape": "source", "source": "s3"})
    with pytest.raises(HostsError, match=r"both run on host 198\.19\.9\.20"):
        kernel.rulesets([cut], config, placement)


def test_a_fresh_kernel_model_applies_every_host_then_only_changes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """dpc inject builds a new model per call: one that took 'nothing applied yet' for 'no
    rules there' skipped the heal of a cut an earlier call made (the rule stayed)."""
    monkeypatch.setattr(kernel, "unusable", lambda: None)
    applied: list[tuple[str, str]] = []
    monkeypatch.setattr(kernel, "_nft", lambda ns, script: applied.append((ns, script)))
    placement, placed = place(_basic(), HostsMode.NETNS, "t")
    config = parse_config(placed, Path("p.toml"))
    cuts = kernel.KernelCuts(config, placement)
    cuts.apply()
    assert len(applied) == len(placement.hosts)  # every host, though none has a rule
    applied.clear()
    (cut,) = _faults(config, {"fault": "partition", "shape": "link", "between": ["s3", "n1a"]})
    cuts.add(7, cut)
    cuts.apply()
    assert sorted(ns for ns, _ in applied) == sorted([placement.netns_of("s3"),
                                                      placement.netns_of("n1a")])
    applied.clear()
    cuts.remove(7)
    cuts.apply()
    assert len(applied) == 2 and all("chain" not in s for _, s in applied)


def test_a_local_placement_places_nothing() -> None:
    placement, placed = place(_basic(), HostsMode.LOCAL, "t")
    assert placement == Placement(HostsMode.LOCAL, "t") and placed == _basic()
    assert placement.netns_of("n1a") is None


def test_a_process_refuses_a_host_that_is_not_this_machines() -> None:
    assert is_local_address("127.0.0.1") and is_local_address("0.0.0.0")
    assert not is_local_address("198.18.255.254")  # (no namespace of a test has it)
    assert not is_local_address("no-such-host.invalid")
    raw = _basic()
    raw["nodes"]["n1"]["replicas"][0]["host"] = "198.18.255.254"
    config = parse_config(raw, Path("far.toml"))
    with pytest.raises(NodeError, match=r"^n1a: host 198\.18\.255\.254 is not an address of "
                                        r"this machine"):
        _check_hosts(config, "n1a")
    _check_hosts(config, "n1b")  # on loopback: fine
    _check_hosts(config, "c1")  # a client listens on nothing
