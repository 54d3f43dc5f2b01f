"""Partitioned nodes (node/config/partitions.py, operators/keyed.py): the expansion into
partition nodes, each read of the node's output rewritten to its partitions' streams, the
producers' splits; a partitioned run's results equal the same network's with one
partition (aggregates and joins keyed on the partition key, by the checker's reference
run); and every network or layout that cannot be split refused at load, naming the key."""

from __future__ import annotations

import tomllib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from node.config.load import load_config, parse_config
from node.errors import ConfigError
from ops_scripts.check import reference_outputs
from protocol.exchange import Split
from tests.ops_scripts.check.world import synth_sources
from tests.paths import ROOT

AGGREGATE = """
  [[nodes.n1.operators]]
  name = "per_key"
  type = "aggregate"
  inputs = ["u"]
  window = 200000
  group_by = ["key"]
  aggregates = [{ fn = "count", as = "n" }, { fn = "sum", attr = "value", as = "total" }]
  [[nodes.n1.operators]]
  name = "out"
  type = "soutput"
  inputs = ["per_key"]
"""
JOIN = """
  [[nodes.n1.operators]]
  name = "left"
  type = "filter"
  inputs = ["u"]
  where = "value < 50"
  [[nodes.n1.operators]]
  name = "right"
  type = "filter"
  inputs = ["u"]
  where = "value >= 80"
  [[nodes.n1.operators]]
  name = "j"
  type = "join"
  inputs = ["left", "right"]
  on = [["key", "key"]]
  band = 60000
  [[nodes.n1.operators]]
  name = "out"
  type = "soutput"
  inputs = ["j"]
"""


def cluster(partitions: int, ops: str = AGGREGATE, *, n1: str = "", tail: str = "",
            replicas: str | None = None) -> str:
    """s1, s2 -> n1 (``partitions``, by key) -> n2 (SUnion merging n1.out) -> c1."""
    if replicas is None:
        replicas = "".join(f"""
  [[nodes.n1.replicas]]
  name = "r{i}"
  partition = {i}
  data_port = {24100 + i}
  control_port = {24200 + i}
""" for i in range(partitions))
    sources = "".join(f"""
[sources.s{i}]
schema = ["key", "value"]
port = {24000 + i}
rate = 50.0
""" for i in (1, 2))
    return f"""
[cluster]
name = "p"
token = "t"
{sources}
[nodes.n1]
inputs = ["s1", "s2"]
partitions = {partitions}
partition_by = ["key"]
{n1}
  [[nodes.n1.operators]]
  name = "u"
  type = "sunion"
  inputs = ["s1", "s2"]
{ops}{replicas}
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
  data_port = 24300
  control_port = 24301

[clients.c1]
stream = "n2.out"
{tail}"""


def parse(text: str) -> Any:
    return parse_config(tomllib.loads(text), Path("p.toml"))


def test_the_example_expands_into_partition_nodes_that_read_their_share() -> None:
    config = load_config(ROOT / "examples" / "partitioned.toml")
    assert list(config.nodes) == ["n1_p0", "n1_p1", "n2"]
    p0, p1, n2 = config.nodes.values()
    assert [r.name for r in p0.replicas] == ["n1p0a", "n1p0b"]
    assert [r.name for r in p1.replicas] == ["n1p1a", "n1p1b"]
    assert {r.node for r in p1.replicas} == {"n1_p1"}
    assert p0.partition is not None and (p0.partition.node, p0.partition.index) == ("n1", 0)
    assert n2.partition is None
    assert n2.inputs == ("n1_p0.out", "n1_p1.out")
    assert n2.network.operators[0].inputs == ("n1_p0.out", "n1_p1.out")
    assert config.splits("s1") == {"n1p0a": Split(0, 2, (0,)), "n1p0b": Split(0, 2, (0,)),
                                   "n1p1a": Split(1, 2, (0,)), "n1p1b": Split(1, 2, (0,))}
    assert config.splits("n1_p0.out") == {}  # n2 reads the partitions whole
    assert config.consumers_of("s1") == ("n1p0a", "n1p0b", "n1p1a", "n1p1b")


@pytest.mark.parametrize("ops", [AGGREGATE, JOIN], ids=["aggregate", "join"])
@pytest.mark.parametrize("partitions", [2, 3])
def test_a_partitioned_node_computes_what_one_partition_computes(ops: str, partitions: int,
                                                                 ) -> None:
    one, split = parse(cluster(1, ops)), parse(cluster(partitions, ops))
    sources = synth_sources(one, n=400)
    whole = reference_outputs(one, sources)
    parts = reference_outputs(split, sources)
    n1 = Counter((t.time, t.values) for t in whole["n1.out"])
    assert len(n1) > 30 and sum(n1.values()) == len(whole["n1.out"])
    shares = [Counter((t.time, t.values) for t in parts[f"n1_p{i}.out"])
              for i in range(partitions)]
    assert all(shares) and sum(shares, Counter()) == n1  # disjoint, and all of it
    merged = Counter((t.time, t.values) for t in parts["n2.out"])
    assert merged == Counter((t.time, t.values) for t in whole["n2.out"]) == n1
    assert [t.time for t in parts["n2.out"]] == sorted(t.time for t in parts["n2.out"])


@pytest.mark.parametrize("text, key, message", [
    (cluster(2).replace('partition_by = ["key"]', ""), "nodes.n1.partition_by",
     "the key is missing"),
    (cluster(2).replace("partition = 1", ""), "nodes.n1.replicas[1].partition",
     "expected an integer in 0..1"),
    (cluster(2).replace("partition = 1", "partition = 2"), "nodes.n1.replicas[1].partition",
     "found 2"),
    (cluster(2).replace("partition = 1", "partition = 0"), "nodes.n1.replicas",
     "at least one replica of each partition 0..1, found none with partition = 1"),
    (cluster(2, tail='[clients.c2]\nstream = "n1.out"\n'), "clients.c2.stream",
     "n1_p0.out, n1_p1.out; merge them in a node whose SUnion reads 'n1.out'"),
    (cluster(2, AGGREGATE.replace('group_by = ["key"]', 'group_by = ["value"]')),
     "nodes.n1.partition_by", "group_by (value) must hold the partition key 'key'"),
    (cluster(2, JOIN.replace('on = [["key", "key"]]', 'on = [["value", "value"]]')),
     "nodes.n1.partition_by", "'on' must pair the partition key 'key' of the left side"),
    (cluster(2, AGGREGATE.replace('inputs = ["u"]', 'inputs = ["m"]', 1)
             + '  [[nodes.n1.operators]]\n  name = "m"\n  type = "map"\n  inputs = ["u"]\n'
               '  fields = { key = "key + 1", value = "value" }\n'),
     "nodes.n1.partition_by", "'key (lost upstream)'"),
    (cluster(2).replace('partition_by = ["key"]', 'partition_by = ["city"]'),
     "nodes.n1.partition_by", "input stream 's1' has no attribute city"),
    (cluster(2, n1='ha = "active_standby"'), "nodes.n1",
     "exactly two replicas of partition 0"),
    (cluster(2).replace("n2", "n1_p1"), "nodes.n1_p1",
     "the name of partition 1 of node n1"),
])
def test_what_cannot_be_split_is_refused_at_load_naming_the_key(text: str, key: str,
                                                                 message: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse(text)
    assert f"p.toml: {key}:" in str(e.value) and message in str(e.value), str(e.value)


def test_a_map_that_copies_the_key_under_another_name_keeps_the_split() -> None:
    ops = AGGREGATE.replace('inputs = ["u"]', 'inputs = ["m"]', 1).replace(
        'group_by = ["key"]', 'group_by = ["k"]') + """
  [[nodes.n1.operators]]
  name = "m"
  type = "map"
  inputs = ["u"]
  fields = { k = "key", value = "value" }
"""
    config = parse(cluster(2, ops))
    assert list(config.nodes) == ["n1_p0", "n1_p1", "n2"]


# ------------------------------------------------------------------ Flux's controller
def test_the_flux_example_has_its_controller_and_pairs_per_partition() -> None:
    config = load_config(ROOT / "examples" / "flux.toml")
    assert config.controller is not None and config.controller.control_port == 18790
    assert {n.name: n.settings.ha for n in config.nodes.values()} == {
        "n1_p0": "flux", "n1_p1": "flux", "n2": "flux"}


@pytest.mark.parametrize("text, key, message", [
    (cluster(2, n1='ha = "flux"', replicas="".join(f"""
  [[nodes.n1.replicas]]
  name = "r{i}"
  partition = {i // 2}
  data_port = {24100 + i}
  control_port = {24200 + i}
""" for i in range(4))), "controller", "expected a [controller] table"),
    (cluster(2) + "[controller]\ncontrol_port = 24400\n", "controller",
     "expected no [controller]"),
    (cluster(2, n1='ha = "flux"') + "[controller]\ncontrol_port = 24400\n", "nodes.n1",
     "exactly two replicas of partition 0"),
])
def test_a_flux_node_needs_the_controller_and_pairs(text: str, key: str, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse(text)
    assert f"p.toml: {key}:" in str(e.value) and message in str(e.value), str(e.value)


def test_the_controller_s_port_and_name_are_the_cluster_s() -> None:
    text = cluster(2, n1='ha = "flux"', replicas="".join(f"""
  [[nodes.n1.replicas]]
  name = "r{i}"
  partition = {i // 2}
  data_port = {24100 + i}
  control_port = {24200 + i}
""" for i in range(4)))
    with pytest.raises(ConfigError, match=r"data_port: .*already used by controller.control_port"):
        parse(text + "[controller]\ncontrol_port = 24100\n")
    with pytest.raises(ConfigError, match="already used by controller"):
        parse(text.replace('name = "r3"', 'name = "controller"')
              + "[controller]\ncontrol_port = 24400\n")
    config = parse(text + "[controller]\ncontrol_port = 24400\n")
    assert config.controller is not None and config.controller.name == "controller"
