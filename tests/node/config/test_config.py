"""The cluster config loader: the examples load, broken files fail with file + key + expectation,
SUnion defaults come from the node settings, schemas flow across nodes, seconds become µs."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from node.config.load import DEFAULT_SETTINGS, load_config, parse_config
from node.config.model import DEFAULT_BUFFER_MEMORY, DEFAULT_CONSUMER_GRACE
from node.errors import ConfigError
from operators import QueryNetwork
from tests.paths import ROOT

EXAMPLES = ROOT / "examples"

HEAD = """\
[cluster]
name = "t"
token = "secret"

[sources.s1]
schema = ["k", "v"]
port = 19001
rate = 100.0
"""
N1 = """\
[nodes.n1]
inputs = ["s1"]
  [[nodes.n1.operators]]
  name = "u"
  type = "sunion"
  inputs = ["s1"]
  [[nodes.n1.operators]]
  name = "f"
  type = "filter"
  inputs = ["u"]
  where = "v > 1"
  [[nodes.n1.operators]]
  name = "out"
  type = "soutput"
  inputs = ["f"]
  [[nodes.n1.replicas]]
  name = "n1a"
  data_port = 19101
  control_port = 19201
  [[nodes.n1.replicas]]
  name = "n1b"
  data_port = 19102
  control_port = 19202
"""
N2 = """\
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
  data_port = 19111
  control_port = 19211
"""
CLIENT = """\
[clients.c1]
stream = "n2.out"
"""
BASE = "\n".join([HEAD, N1, N2, CLIENT])


def write(tmp_path: Path, text: str, name: str = "cluster.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def mutate(text: str, *pairs: tuple[str, str]) -> str:
    for old, new in pairs:
        assert old in text, f"test bug: {old!r} is not in the base config"
        text = text.replace(old, new)
    return text


# ------------------------------------------------------------------------------ examples
def test_basic_example_loads() -> None:
    cfg = load_config(EXAMPLES / "basic.toml")
    assert cfg.name == "basic"
    assert list(cfg.sources) == ["s1", "s2", "s3"]
    assert all(s.rate == 1000.0 and s.boundary_interval == 100_000 for s in cfg.sources.values())
    (node,) = cfg.nodes.values()
    assert [r.name for r in node.replicas] == ["n1a", "n1b"]
    assert node.inputs == ("s1", "s2", "s3")
    assert [o.type for o in node.network.operators] == [
        "sunion", "filter", "filter", "join", "soutput"
    ]
    assert node.outputs == {"n1.out": "out"}
    assert node.settings == DEFAULT_SETTINGS  # the paper's numbers are the defaults
    assert cfg.clients["c1"].stream == "n1.out"
    assert cfg.consumers_of("n1.out") == ("c1",)
    assert cfg.consumers_of("s2") == ("n1a", "n1b")


def test_chain4_example_loads() -> None:
    cfg = load_config(EXAMPLES / "chain4.toml")
    assert list(cfg.nodes) == ["n1", "n2", "n3", "n4"]
    assert all(len(n.replicas) == 2 for n in cfg.nodes.values())
    assert sum(s.rate for s in cfg.sources.values()) == 1000.0
    for k in (2, 3, 4):
        assert cfg.nodes[f"n{k}"].inputs == (f"n{k - 1}.out",)
    assert cfg.clients["c1"].stream == "n4.out"
    assert cfg.nodes["n4"].settings.x == 4_000_000  # a per-node override
    assert cfg.nodes["n3"].settings.x == 3_000_000


def test_three_example_loads() -> None:
    cfg = load_config(EXAMPLES / "three.toml")
    basic = load_config(EXAMPLES / "basic.toml")
    (node,) = cfg.nodes.values()
    assert [r.name for r in node.replicas] == ["n1a", "n1b", "n1c"]
    assert node.network == basic.nodes["n1"].network and node.settings == DEFAULT_SETTINGS
    assert cfg.consumers_of("s3") == ("n1a", "n1b", "n1c")


def test_examples_use_disjoint_ports_in_range() -> None:
    """Every example cluster loads, and they can run side by side (examples/README.md)."""
    ports: list[set[int]] = []
    examples = sorted(EXAMPLES.glob("*.toml"))
    assert {"basic.toml", "chain4.toml", "sim.toml", "three.toml", "weather.toml"} <= {p.name for p in examples}
    for path in examples:
        cfg = load_config(path)
        mine = {s.port for s in cfg.sources.values()}
        for n in cfg.nodes.values():
            mine |= {p for r in n.replicas for p in (r.data_port, r.control_port)}
        assert all(17000 <= p <= 21999 for p in mine), path.name
        assert not any(mine & other for other in ports), path.name
        ports.append(mine)


def test_weather_example_loads_real_data_on_event_time() -> None:
    cfg = load_config(EXAMPLES / "weather.toml")
    assert list(cfg.sources) == ["seattle", "sf"]
    for s in cfg.sources.values():
        assert s.file is not None and s.file.name.endswith("-temps.csv") and s.file.is_file()
        assert (s.time_column, s.speedup, s.align) == ("date", 540000.0, 86_400_000_000)
        assert 149 < s.rate < 151  # 8,759 hourly rows over a year at 540,000 data s per s
    assert cfg.sources["sf"].constants == {"city": "San Francisco"}
    # one data day on the run's clock is one window of the aggregate
    (agg,) = [o for o in cfg.nodes["n1"].network.operators if o.type == "aggregate"]
    assert agg.params["window"] == 86_400_000_000 / 540000.0


def test_readme_error_example_is_what_the_loader_says(tmp_path: Path) -> None:
    readme = (EXAMPLES / "README.md").read_text()
    shown = re.search(r"^examples/basic\.toml: .*$", readme, re.M)
    assert shown, "examples/README.md lost its error example"
    basic = (EXAMPLES / "basic.toml").read_text()
    text = mutate(basic, ("data_port = 17102", 'data_port = "17102"'))
    path = write(tmp_path, text, "basic.toml")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value) == shown.group(0).replace("examples/basic.toml", str(path))


# ------------------------------------------------------------------------------ broken configs
CYCLE = (('inputs = ["s1"]', 'inputs = ["s1", "n2.out"]'),)
BROKEN: dict[str, tuple[tuple[tuple[str, str], ...], str, list[str]]] = {
    # id: (replacements in BASE, key path, expected fragments of the message)
    "unknown operator type": (
        (('type = "filter"', 'type = "filtre"'),),
        "nodes.n1.operators[1].type",
        ["expected an operator type (known types: aggregate, filter,", "found 'filtre'",
         "unknown operator type"],
    ),
    "unknown operator type of the soutput": (
        (('type = "soutput"\n  inputs = ["f"]', 'type = "soutpt"\n  inputs = ["f"]'),),
        "nodes.n1.operators[2].type",
        ["found 'soutpt' (unknown operator type)"],
    ),
    "unknown operator parameter": (
        (('where = "v > 1"', 'where = "v > 1"\n  wehre = "v > 2"'),),
        "nodes.n1.operators[1]",
        ["operator 'f'", "unknown parameter(s) wehre"],
    ),
    "dangling stream": (
        (('"n1.out"', '"n1.outt"'),),
        "nodes.n2.inputs[0]",
        ["expected a stream that a source or a node's soutput produces", "'n1.outt'",
         "node n1 has no soutput operator 'outt'"],
    ),
    "duplicate data port": (
        (("data_port = 19102", "data_port = 19101"),),
        "nodes.n1.replicas[1].data_port",
        ["expected a port no other process", "found 19101",
         "already used by nodes.n1.replicas[0].data_port"],
    ),
    "control port equals a source port": (
        (("control_port = 19211", "control_port = 19001"),),
        "nodes.n2.replicas[0].control_port",
        ["found 19001", "already used by sources.s1.port"],
    ),
    "localhost is 127.0.0.1": (
        (("port = 19001\n", 'port = 19001\nhost = "localhost"\n'),
         ("data_port = 19111", "data_port = 19001")),
        "nodes.n2.replicas[0].data_port",
        ["already used by sources.s1.port"],
    ),
    "cycle across nodes": (
        CYCLE,
        "nodes.n1.inputs",
        ["expected the nodes to form a DAG", "n1 -> n2 -> n1"],
    ),
    "own output as input": (
        (('inputs = ["n1.out"]', 'inputs = ["n1.out", "n2.out"]'),),
        "nodes.n2.inputs[1]",
        ["the node's own output", "'n2.out'"],
    ),
    "input read by no operator": (
        (('[nodes.n2]\ninputs = ["n1.out"]', '[nodes.n2]\ninputs = ["n1.out", "s1"]'),),
        "nodes.n2.inputs[1]",
        ["expected a stream that some operator of the node reads", "'s1'"],
    ),
    "missing field": (
        (("port = 19001\n", ""),),
        "sources.s1.port",
        ["expected an integer in 1..65535", "found nothing (the key is missing)"],
    ),
    "missing token": (
        (('token = "secret"\n', ""),),
        "cluster.token",
        ["expected a string (non-empty)", "found nothing"],
    ),
    "typo of a required key": (
        (("control_port = 19211", "contol_port = 19211"),),
        "nodes.n2.replicas[0].control_port",
        ["found nothing", "is 'contol_port' a typo?"],
    ),
    "wrong type": (
        (("data_port = 19111", 'data_port = "19111"'),),
        "nodes.n2.replicas[0].data_port",
        ["expected an integer in 1..65535", "found '19111' (a string)"],
    ),
    "bool is not a number": (
        (("rate = 100.0", "rate = true"),),
        "sources.s1.rate",
        ["expected a number of tuples per second > 0", "found true (a boolean)"],
    ),
    "port out of range": (
        (("port = 19001", "port = 70000"),),
        "sources.s1.port",
        ["expected an integer in 1..65535", "found 70000"],
    ),
    "unknown key": (
        (('name = "n2a"', 'name = "n2a"\n  hots = "127.0.0.1"'),),
        "nodes.n2.replicas[0].hots",
        ["unknown key", "expected one of control_port, data_port, host, name",
         "did you mean 'host'?"],
    ),
    "unknown top-level key": (
        (("[clients.c1]", "[client.c1]"),),
        "client",
        ["unknown key", "did you mean 'clients'?"],
    ),
    "bad alpha": (
        (("[sources.s1]", "[defaults]\nalpha = 1.0\n\n[sources.s1]"),),
        "defaults.alpha",
        ["expected a number with 0 < alpha < 1", "found 1.0 (a float)"],
    ),
    "bad alpha override": (
        (("[nodes.n2]\n", "[nodes.n2]\nalpha = 0\n"),),
        "nodes.n2.alpha",
        ["0 < alpha < 1", "found 0 (an integer)"],
    ),
    "heartbeat over 100 ms": (
        (("[sources.s1]", "[defaults]\nheartbeat_interval = 0.2\n\n[sources.s1]"),),
        "defaults.heartbeat_interval",
        ["expected a duration in seconds > 0 and <= 0.1", "found 0.2"],
    ),
    "consumer grace of zero": (
        (('token = "secret"', 'token = "secret"\nconsumer_grace = 0'),),
        "cluster.consumer_grace",
        ["expected a duration in seconds > 0", "found 0"],
    ),
    "bad strategy": (
        (("[sources.s1]", '[defaults]\nstabilization = "wait"\n\n[sources.s1]'),),
        "defaults.stabilization",
        ['one of "suspend", "delay", "process"', "found 'wait'"],
    ),
    "bad checkpointing": (
        (("[sources.s1]", '[defaults]\ncheckpointing = "never"\n\n[sources.s1]'),),
        "defaults.checkpointing",
        ['one of "on_failure", "periodic"', "found 'never'"],
    ),
    "fault tolerance not a boolean": (
        (("[sources.s1]", '[defaults]\nfault_tolerance = "off"\n\n[sources.s1]'),),
        "defaults.fault_tolerance",
        ["found 'off'"],
    ),
    "duplicate replica name": (
        (('name = "n2a"', 'name = "n1b"'),),
        "nodes.n2.replicas[0].name",
        ["expected a name unique in the cluster", "'n1b'",
         "already used by nodes.n1.replicas[1].name"],
    ),
    "replica named like a node": (
        (('name = "n2a"', 'name = "n1"'),),
        "nodes.n2.replicas[0].name",
        ["already used by nodes.n1"],
    ),
    "client named like a source": (
        (("[clients.c1]", "[clients.s1]"),),
        "clients.s1",
        ["expected a name unique in the cluster", "already used by sources.s1"],
    ),
    "dotted name": (
        (("[clients.c1]", '[clients."c.1"]'),),
        'clients."c.1"',
        ["expected a name of letters, digits, '_' or '-'", "'c.1'"],
    ),
    "client of an unknown stream": (
        (('stream = "n2.out"', 'stream = "n3.out"'),),
        "clients.c1.stream",
        ["expected a node output stream (one of: n1.out, n2.out)", "found 'n3.out'"],
    ),
    "client of a source": (
        (('stream = "n2.out"', 'stream = "s1"'),),
        "clients.c1.stream",
        ["expected a node output stream", "a source's stream"],
    ),
    "node without replica": (
        ((N2[N2.index("  [[nodes.n2.replicas]]"):], ""),),
        "nodes.n2.replicas",
        ["expected at least one [[nodes.n2.replicas]] table", "found none"],
    ),
    "node without soutput": (
        (('type = "soutput"\n  inputs = ["u"]\n',
          'type = "filter"\n  inputs = ["u"]\n  where = "v > 0"\n'),),
        "nodes.n2.operators",
        ["expected at least one soutput", "found only sunion, filter"],
    ),
    "attribute not in the schema": (
        (("rate = 100.0\n", 'rate = 100.0\n[sources.s1.attributes]\nz = { kind = "seq" }\n'),),
        "sources.s1.attributes.z",
        ["expected an attribute of the schema (k, v)", "found 'z'"],
    ),
    "key attribute without n": (
        (("rate = 100.0\n", 'rate = 100.0\n[sources.s1.attributes]\nk = { kind = "key" }\n'),),
        "sources.s1.attributes.k.n",
        ["expected an integer >= 1", "found nothing"],
    ),
    "file with a synthetic generator": (
        (("rate = 100.0\n", 'rate = 100.0\nfile = "x.csv"\n'),),
        "sources.s1.file",
        ['expected no file for generator = "synthetic"', "found 'x.csv'"],
    ),
}


@pytest.mark.parametrize(("pairs", "key", "fragments"), BROKEN.values(), ids=BROKEN.keys())
def test_broken_config_names_file_key_and_expectation(
    tmp_path: Path, pairs: tuple[tuple[str, str], ...], key: str, fragments: list[str]
) -> None:
    path = write(tmp_path, mutate(BASE, *pairs), "broken-cluster.toml")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}: {key}: "), msg
    for fragment in fragments:
        assert fragment in msg, msg


def test_base_config_is_valid(tmp_path: Path) -> None:
    """The broken configs above fail only because of their mutation."""
    cfg = load_config(write(tmp_path, BASE))
    assert list(cfg.nodes) == ["n1", "n2"]


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('[cluster]\nname = "t"\ntoken = "x"\n', "sources"),
        (HEAD, "nodes"),
        (BASE.replace("[cluster]", "[clusterr]"), "cluster"),
    ],
    ids=["no source", "no node", "no cluster table"],
)
def test_empty_cluster_is_refused(tmp_path: Path, text: str, key: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: {key}: expected "):
        load_config(path)


def test_unreadable_and_invalid_toml_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"missing\.toml: cannot read"):
        load_config(tmp_path / "missing.toml")
    with pytest.raises(ConfigError, match=r"bad\.toml: not valid TOML"):
        load_config(write(tmp_path, "[cluster\nname = 1", "bad.toml"))


def test_cycle_of_three_is_reported_in_data_flow_order(tmp_path: Path) -> None:
    n3 = N2.replace("n2", "n3").replace("n1.out", "n2.out").replace("19111", "19121")
    n3 = n3.replace("19211", "19221")
    text = mutate("\n".join([HEAD, N1, N2, n3, CLIENT]), *CYCLE)
    text = text.replace('inputs = ["s1", "n2.out"]', 'inputs = ["s1", "n3.out"]')
    with pytest.raises(ConfigError, match=r"nodes\.n1\.inputs: .*n1 -> n2 -> n3 -> n1"):
        load_config(write(tmp_path, text))


# ------------------------------------------------------------------------------ semantics
def test_nodes_are_in_topological_order_whatever_the_file_order(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, "\n".join([HEAD, N2, CLIENT, N1])))
    assert list(cfg.nodes) == ["n1", "n2"]
    assert list(cfg.streams) == ["s1", "n1.out", "n2.out"]


def test_same_port_on_different_hosts_is_fine(tmp_path: Path) -> None:
    text = mutate(BASE, ("data_port = 19111", 'host = "10.0.0.2"\n  data_port = 19101'))
    cfg = load_config(write(tmp_path, text))
    assert cfg.replica("n2a").host == "10.0.0.2"
    assert cfg.replica("n2a").data_port == cfg.replica("n1a").data_port


def test_sunion_parameters_default_to_the_node_settings(tmp_path: Path) -> None:
    defaults = (
        '[defaults]\nx = 2.0\nalpha = 0.5\nbucket = 0.05\nup_failure = "delay"\n'
        'reconciliation = "undo"\n\n[sources.s1]'
    )
    text = mutate(BASE, ("[sources.s1]", defaults), ("[nodes.n2]\n", "[nodes.n2]\nx = 4.0\n"))
    cfg = load_config(write(tmp_path, text))
    u1 = cfg.nodes["n1"].network.operators[0]
    assert dict(u1.params) == {
        "bucket": 50_000, "wait": 1_000_000, "mode": "delay", "recovery": "undo"
    }
    u2 = cfg.nodes["n2"].network.operators[0]
    assert u2.params["wait"] == 2_000_000  # alpha * the node's own X
    # the filled spec is what a node builds
    built = QueryNetwork(cfg.nodes["n1"].network).operator("u")
    got = (built.width, built.wait, built.mode, built.recovery)
    assert got == (50_000, 1_000_000, "delay", "undo")


def test_explicit_sunion_parameter_wins(tmp_path: Path) -> None:
    sunion_inputs = '  inputs = ["s1"]\n'
    text = mutate(BASE, (sunion_inputs, sunion_inputs + '  bucket = 20000\n  mode = "delay"\n'))
    cfg = load_config(write(tmp_path, text))
    params = cfg.nodes["n1"].network.operators[0].params
    assert params["bucket"] == 20_000 and params["mode"] == "delay"
    assert params["wait"] == 2_700_000 and params["recovery"] == "checkpoint"  # filled
    assert "bucket" not in cfg.nodes["n1"].network.operators[1].params  # only sunions


def test_schemas_flow_across_nodes() -> None:
    cfg = load_config(EXAMPLES / "chain4.toml")
    level = ("sensor", "reading", "level")
    assert cfg.nodes["n2"].network.inputs == {"n1.out": ("sensor", "reading")}
    assert cfg.nodes["n3"].network.inputs == {"n2.out": level}  # n2's map output
    assert cfg.nodes["n4"].network.inputs == {"n3.out": level}
    assert cfg.streams["n4.out"] == ("sensor", "n", "mean", "top_level")
    assert cfg.nodes["n4"].network.outputs == ("out",)


MAPPED_N2 = """\
[nodes.n2]
inputs = ["n1.out"]
  [[nodes.n2.operators]]
  name = "u"
  type = "sunion"
  inputs = ["n1.out"]
  [[nodes.n2.operators]]
  name = "m"
  type = "map"
  inputs = ["u"]
  fields = { w = "v" }
  [[nodes.n2.operators]]
  name = "out"
  type = "soutput"
  inputs = ["m"]
  [[nodes.n2.replicas]]
  name = "n2a"
  data_port = 19111
  control_port = 19211
"""
N3_READING_V = """\
[nodes.n3]
inputs = ["n2.out"]
  [[nodes.n3.operators]]
  name = "u"
  type = "sunion"
  inputs = ["n2.out"]
  [[nodes.n3.operators]]
  name = "f"
  type = "filter"
  inputs = ["u"]
  where = "v > 0"
  [[nodes.n3.operators]]
  name = "out"
  type = "soutput"
  inputs = ["f"]
  [[nodes.n3.replicas]]
  name = "n3a"
  data_port = 19121
  control_port = 19221
"""


def test_downstream_network_is_checked_against_the_upstream_output_schema(
    tmp_path: Path,
) -> None:
    # n2's map renames v to w, so n3's filter on v must fail, naming n3's operator.
    text = "\n".join([HEAD, N1, MAPPED_N2, N3_READING_V, CLIENT])
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, text))
    msg = str(e.value)
    assert "nodes.n3.operators[1]: operator 'f'" in msg and "'v'" in msg, msg
    # ... and passes once n3 filters on what n2 really outputs.
    cfg = load_config(write(tmp_path, text.replace('where = "v > 0"', 'where = "w > 0"')))
    assert cfg.nodes["n3"].network.inputs == {"n2.out": ("w",)}


def test_outputs_are_every_soutput(tmp_path: Path) -> None:
    first_replica = '  [[nodes.n1.replicas]]\n  name = "n1a"'
    extra = '  [[nodes.n1.operators]]\n  name = "all"\n  type = "soutput"\n  inputs = ["u"]\n'
    text = mutate(BASE, (first_replica, extra + first_replica))
    cfg = load_config(write(tmp_path, text))
    n1 = cfg.nodes["n1"]
    assert n1.outputs == {"n1.out": "out", "n1.all": "all"}
    assert n1.network.outputs == ("out", "all")
    assert cfg.streams["n1.all"] == ("k", "v")


def test_seconds_become_integer_microseconds(tmp_path: Path) -> None:
    defaults = (
        "[defaults]\nx = 2.5\nbucket = 0.05\nheartbeat_interval = 0.025\n"
        "checkpoint_interval = 1\n\n[sources.s1]"
    )
    source = "rate = 100\nboundary_interval = 0.0125"
    text = mutate(BASE, ("[sources.s1]", defaults), ("rate = 100.0", source))
    cfg = load_config(write(tmp_path, text))
    s = cfg.nodes["n1"].settings
    got = (s.x, s.bucket, s.heartbeat_interval, s.checkpoint_interval, s.wait)
    assert got == (2_500_000, 50_000, 25_000, 1_000_000, 2_250_000)
    assert all(type(v) is int for v in got)
    src = cfg.sources["s1"]
    assert src.boundary_interval == 12_500 and type(src.boundary_interval) is int
    assert src.rate == 100.0 and isinstance(src.rate, float)


def test_boundary_interval_defaults_to_the_default_bucket(tmp_path: Path) -> None:
    text = mutate(BASE, ("[sources.s1]", "[defaults]\nbucket = 0.25\n\n[sources.s1]"))
    assert load_config(write(tmp_path, text)).sources["s1"].boundary_interval == 250_000


def test_sub_microsecond_duration_is_refused(tmp_path: Path) -> None:
    text = mutate(BASE, ("[sources.s1]", "[defaults]\nbucket = 1e-7\n\n[sources.s1]"))
    with pytest.raises(ConfigError, match=r"defaults\.bucket: expected .*at least one microsecond"):
        load_config(write(tmp_path, text))


def test_synthetic_attributes_are_complete(tmp_path: Path) -> None:
    attrs = '[sources.s1.attributes]\nk = { kind = "key", n = 10, dist = "zipf", s = 1.2 }\n'
    cfg = load_config(write(tmp_path, mutate(BASE, ("rate = 100.0\n", "rate = 100.0\n" + attrs))))
    gens = cfg.sources["s1"].attributes
    assert list(gens) == ["k", "v"]
    assert (gens["k"].kind, gens["k"].n, gens["k"].dist, gens["k"].s) == ("key", 10, "zipf", 1.2)
    assert (gens["v"].kind, gens["v"].min, gens["v"].max) == ("int", 0, 100)


def test_file_source_resolves_and_checks_columns(tmp_path: Path) -> None:
    (tmp_path / "data.csv").write_text("k,v,extra\n1,2,3\n")
    text = mutate(BASE, ("rate = 100.0\n", 'rate = 100.0\ngenerator = "file"\nfile = "data.csv"\n'))
    cfg = load_config(write(tmp_path, text))
    assert cfg.sources["s1"].file == (tmp_path / "data.csv").resolve()
    assert cfg.sources["s1"].attributes == {}
    (tmp_path / "data.csv").write_text("k,w\n1,2\n")
    missing = r"sources\.s1\.file: expected .*without the column\(s\) v"
    with pytest.raises(ConfigError, match=missing):
        load_config(tmp_path / "cluster.toml")


def test_parquet_file_source(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.table({"k": [1], "v": [2]}), tmp_path / "d.parquet")
    parquet = 'rate = 100.0\ngenerator = "file"\nfile = "d.parquet"\n'
    text = mutate(BASE, ("rate = 100.0\n", parquet))
    cfg = load_config(write(tmp_path, text))
    assert cfg.sources["s1"].file == (tmp_path / "d.parquet").resolve()


def test_checkpointing_and_fault_tolerance_default_and_override_per_node(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, BASE))
    assert {(n.settings.checkpointing, n.settings.fault_tolerance) for n in cfg.nodes.values()} \
        == {("on_failure", True)}
    text = mutate(BASE, ("[sources.s1]", '[defaults]\ncheckpointing = "periodic"\n'
                                         "fault_tolerance = false\n\n[sources.s1]"))
    cfg = load_config(write(tmp_path, text))
    assert {(n.settings.checkpointing, n.settings.fault_tolerance) for n in cfg.nodes.values()} \
        == {("periodic", False)}


def test_buffer_memory_is_in_mib_defaults_and_refuses_nonsense(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, BASE))
    assert {n.settings.buffer_memory for n in cfg.nodes.values()} == {DEFAULT_BUFFER_MEMORY}
    text = mutate(BASE, ("[sources.s1]", "[defaults]\nbuffer_memory = 0.5\n\n[sources.s1]"))
    assert {n.settings.buffer_memory for n in load_config(write(tmp_path, text)).nodes.values()} \
        == {512 * 1024}
    assert load_config(write(tmp_path, BASE)).sources["s1"].buffer_memory == DEFAULT_BUFFER_MEMORY
    text = mutate(BASE, ("[sources.s1]\n", "[sources.s1]\nbuffer_memory = 2\n"))
    assert load_config(write(tmp_path, text)).sources["s1"].buffer_memory == 2 * 2**20
    for bad in ("0", "-1.0", '"lots"'):
        text = mutate(BASE, ("[sources.s1]", f"[defaults]\nbuffer_memory = {bad}\n\n[sources.s1]"))
        with pytest.raises(ConfigError, match=r"defaults\.buffer_memory: expected MiB"):
            load_config(write(tmp_path, text))


def test_the_replay_engine_defaults_to_auto_and_a_replica_may_choose_its_own(
        tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, BASE))
    # Thresholds unset: the machine's measured crossovers decide (node/config/crossovers.py).
    assert {(n.settings.replay_engine, n.settings.vectorized_from, n.settings.spark_from)
            for n in cfg.nodes.values()} == {("auto", None, None)}
    assert {r.replay_engine for n in cfg.nodes.values() for r in n.replicas} == {None}
    text = mutate(BASE, ("[sources.s1]", "[defaults]\nreplay_engine = \"inproc\"\n"
                                         "vectorized_from = 5\nspark_from = 9\n\n"
                                         "[sources.s1]"),
                  ('name = "n1b"\n', 'name = "n1b"\n  replay_engine = "vectorized"\n'))
    cfg = load_config(write(tmp_path, text))
    n1 = cfg.nodes["n1"]
    assert (n1.settings.replay_engine, n1.settings.vectorized_from,
            n1.settings.spark_from) == ("inproc", 5, 9)
    assert [r.replay_engine for r in n1.replicas] == [None, "vectorized"]
    for bad, where in (("[defaults]\nreplay_engine = \"spark2\"", "defaults.replay_engine"),
                       ("[defaults]\nvectorized_from = -1", "defaults.vectorized_from"),
                       ("[defaults]\nspark_from = 1.5", "defaults.spark_from")):
        text = mutate(BASE, ("[sources.s1]", f"{bad}\n\n[sources.s1]"))
        with pytest.raises(ConfigError, match=where):
            load_config(write(tmp_path, text))
    text = mutate(BASE, ('name = "n1b"\n', 'name = "n1b"\n  replay_engine = "fast"\n'))
    with pytest.raises(ConfigError, match=r'replay_engine: expected one of "inproc", '
                                          r'"vectorized", "spark", "auto"'):
        load_config(write(tmp_path, text))


def test_cec_checkpointing_loads_its_policy_and_refuses_what_it_cannot_do(tmp_path: Path) -> None:
    text = mutate(BASE, ("[sources.s1]", '[defaults]\ncheckpointing = "cec"\ncec_q = 7\n'
                                         "cec_u = 0\ncec_ci = 0.005\ncec_cp = 0.05\n"
                                         "cec_fsync = true\n\n[sources.s1]"))
    st = load_config(write(tmp_path, text)).nodes["n1"].settings
    assert (st.checkpointing, st.cec_q, st.cec_u, st.cec_ci, st.cec_cp, st.cec_fsync) == (
        "cec", 7, 0, 5_000, 50_000, True)
    text = mutate(BASE, ("[sources.s1]", '[defaults]\ncheckpointing = "cec"\n'
                                         'reconciliation = "undo"\n\n[sources.s1]'))
    with pytest.raises(ConfigError, match=r'nodes\.n1: checkpointing = "cec": it needs '
                                          r'reconciliation = "checkpoint", not \'undo\''):
        load_config(write(tmp_path, text))
    text = mutate(BASE, ("[sources.s1]", '[defaults]\ncheckpointing = "cec"\ncec_q = -1\n\n'
                                         "[sources.s1]"))
    with pytest.raises(ConfigError, match=r"defaults\.cec_q"):
        load_config(write(tmp_path, text))


def test_a_process_pair_needs_two_replicas_and_never_waits_out_its_input(tmp_path: Path) -> None:
    text = mutate(BASE, ('[nodes.n1]\ninputs = ["s1"]\n',
                         '[nodes.n1]\ninputs = ["s1"]\nha = "active_standby"\n'))
    n1 = load_config(write(tmp_path, text)).nodes["n1"]
    assert n1.settings.ha == "active_standby"
    # No tentative release: its SUnion waits for its input (END_OF_STREAM: never expires).
    assert [o.params["wait"] for o in n1.network.operators if o.type == "sunion"] == [2**62]
    assert load_config(write(tmp_path, BASE)).nodes["n1"].settings.ha == "dpc"
    one = mutate(BASE, ('[nodes.n2]\ninputs = ["n1.out"]\n',
                        '[nodes.n2]\ninputs = ["n1.out"]\nha = "active_standby"\n'))
    with pytest.raises(ConfigError, match=r"nodes\.n2: ha = 'active_standby': it needs exactly "
                                          r"two replicas \(a primary and a secondary\), not 1"):
        load_config(write(tmp_path, one))
    cec = mutate(text, ("[sources.s1]", '[defaults]\ncheckpointing = "cec"\n\n[sources.s1]'))
    with pytest.raises(ConfigError, match=r'checkpointing = "cec" is for "dpc" nodes'):
        load_config(write(tmp_path, cec))
    bad = mutate(BASE, ("[sources.s1]", '[defaults]\nha = "hot"\n\n[sources.s1]'))
    with pytest.raises(ConfigError, match=r'defaults\.ha: expected one of "dpc", '
                                          r'"active_standby"'):
        load_config(write(tmp_path, bad))


def test_cec_refuses_a_network_it_cannot_checkpoint_naming_the_operators() -> None:
    import tomllib

    raw = tomllib.loads((EXAMPLES / "cec.toml").read_text())
    ops = raw["nodes"]["n1"]["operators"]
    ops.insert(3, {"name": "again", "type": "union", "inputs": ["per_key"]})
    ops[4]["inputs"] = ["again"]
    with pytest.raises(ConfigError, match=r"nodes\.n1: checkpointing = \"cec\": operator "
                                          r"'again' \(union\) reads the output of stateful "
                                          r"operator 'per_key' \(aggregate\)"):
        parse_config(raw, Path("cec.toml"))


def test_consumer_grace_is_a_cluster_setting_in_seconds(tmp_path: Path) -> None:
    assert load_config(write(tmp_path, BASE)).consumer_grace == DEFAULT_CONSUMER_GRACE
    text = mutate(BASE, ('token = "secret"', 'token = "secret"\nconsumer_grace = 2.5'))
    assert load_config(write(tmp_path, text)).consumer_grace == 2_500_000


def test_parse_config_keeps_raw_and_names_the_given_path() -> None:
    import tomllib

    raw = tomllib.loads(BASE)
    cfg = parse_config(raw, Path("virtual.toml"))
    assert cfg.raw is raw and cfg.token == "secret" and cfg.control_host is None
    raw["clients"]["c1"]["stream"] = "nope"
    with pytest.raises(ConfigError, match=r"^virtual\.toml: clients\.c1\.stream: "):
        parse_config(raw, Path("virtual.toml"))


def test_each_control_plane_is_on_its_own_host_the_cluster_one_only_a_default() -> None:
    """Issue 47: a replica's control plane binds (and is addressed) at its own host, not a
    cluster-wide one; [cluster] control_host is the default, a replica's own key wins."""
    import tomllib

    from node.net.tls import control_url

    raw = tomllib.loads(BASE)
    a, b = raw["nodes"]["n1"]["replicas"]
    a["host"], b["host"] = "198.18.0.21", "198.18.0.22"
    cfg = parse_config(raw, Path("hosts.toml"))
    ra, rb = cfg.nodes["n1"].replicas
    assert (ra.control_address, rb.control_address) == ("198.18.0.21", "198.18.0.22")
    assert control_url(cfg, rb, "/status") == f"http://198.18.0.22:{rb.control_port}/status"
    raw["cluster"]["control_host"] = "0.0.0.0"
    b["control_host"] = "198.18.0.99"
    ra, rb = parse_config(raw, Path("hosts.toml")).nodes["n1"].replicas
    assert (ra.control_address, rb.control_address) == ("0.0.0.0", "198.18.0.99")
    raw["clients"]["c1"]["host"] = "198.18.0.30"
    assert parse_config(raw, Path("hosts.toml")).clients["c1"].host == "198.18.0.30"
    b["control_host"] = 7
    with pytest.raises(ConfigError, match=r"replicas\[1\]\.control_host: expected a string"):
        parse_config(raw, Path("hosts.toml"))


# ------------------------------------------------------------------------------ event time
EVENT_SOURCE = 'generator = "file"\nfile = "data.csv"\ntime_column = "t"\n'


def event_config(tmp_path: Path, keys: str, rows: str | None = None) -> Path:
    hours = [f"2010/01/01 {h:02d}:00,{h},{2 * h}" for h in range(10)]
    (tmp_path / "data.csv").write_text(rows or "t,k,v\n" + "\n".join(hours) + "\n")
    return write(tmp_path, mutate(BASE, ("rate = 100.0\n", keys)))


def test_an_event_time_source_derives_rate_or_speedup_from_its_file(tmp_path: Path) -> None:
    cfg = load_config(event_config(tmp_path, EVENT_SOURCE + "speedup = 3600.0\nalign = 7200\n"))
    s1 = cfg.sources["s1"]
    assert (s1.time_column, s1.speedup, s1.align) == ("t", 3600.0, 7_200_000_000)
    assert s1.rate == 10 / 9  # 10 rows over 9 data hours, an hour per second
    cfg = load_config(event_config(tmp_path, EVENT_SOURCE + "rate = 5.0\n"))
    assert (cfg.sources["s1"].rate, cfg.sources["s1"].speedup) == (5.0, 5.0 * 9 * 3600 / 10)
    # the time column need not be an attribute; constants need no column
    keys = EVENT_SOURCE + 'speedup = 1.0\nconstants = { v = "fixed" }\n'
    cfg = load_config(event_config(tmp_path, keys, "t,k\n2010/01/01,1\n2010/01/02,2\n"))
    assert cfg.sources["s1"].constants == {"v": "fixed"}


EVENT_BROKEN = {
    "both rate and speedup": (EVENT_SOURCE + "rate = 1.0\nspeedup = 2.0\n", "sources.s1.rate",
                              ["exactly one of rate", "and speedup", "found both"]),
    "neither": (EVENT_SOURCE, "sources.s1.rate", ["exactly one of rate", "found neither"]),
    "speedup without a time column": ('rate = 1.0\nspeedup = 2.0\n', "sources.s1.speedup",
                                      ["no speedup without a time_column"]),
    "align without a time column": ('rate = 1.0\nalign = 2.0\n', "sources.s1.align",
                                    ["no align without a time_column"]),
    "time column of a synthetic source": ('rate = 1.0\ntime_column = "t"\n',
                                          "sources.s1.time_column",
                                          ['no time_column for generator = "synthetic"']),
    "time column not in the file": (EVENT_SOURCE.replace('"t"', '"when"') + "speedup = 1.0\n",
                                    "sources.s1.file", ["without the column(s) when"]),
    "constant not in the schema": ('rate = 1.0\nconstants = { z = 1 }\n', "sources.s1.constants.z",
                                   ["expected an attribute of the schema (k, v)"]),
    "constant not a scalar": ('rate = 1.0\nconstants = { k = [1] }\n', "sources.s1.constants.k",
                              ["expected a string, a number or a boolean"]),
    "constant also drawn": ('rate = 1.0\nconstants = { k = 1 }\n[sources.s1.attributes]\n'
                            'k = { kind = "seq" }\n', "sources.s1.attributes.k",
                            ["that is not a constant"]),
    "package not installed": ('rate = 1.0\ngenerator = "file"\nfile = "package:no_such_pkg/d.csv"\n',
                              "sources.s1.file", ["no installed Python package 'no_such_pkg'"]),
}


@pytest.mark.parametrize(("keys", "key", "fragments"), EVENT_BROKEN.values(), ids=EVENT_BROKEN.keys())
def test_bad_event_time_keys_name_file_and_key(tmp_path: Path, keys: str, key: str,
                                               fragments: list[str]) -> None:
    path = event_config(tmp_path, keys)
    with pytest.raises(ConfigError) as e:
        load_config(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}: {key}: "), msg
    for fragment in fragments:
        assert fragment in msg, msg


def test_rows_out_of_event_time_order_are_refused_at_load_naming_the_row(tmp_path: Path) -> None:
    rows = "t,k,v\n2010/01/01 05:00,1,1\n2010/01/01 04:00,2,2\n"
    with pytest.raises(ConfigError, match=r"sources\.s1\.time_column: .*data\.csv: column 't', "
                                          r"row 2 \(line 3\): rows out of event time order"):
        load_config(event_config(tmp_path, EVENT_SOURCE + "speedup = 1.0\n", rows))
    same = "t,k,v\n2010/01/01,1,1\n2010/01/01,2,2\n"
    with pytest.raises(ConfigError, match=r"sources\.s1\.rate: expected speedup instead.*span no time"):
        load_config(event_config(tmp_path, EVENT_SOURCE + "rate = 1.0\n", same))


# ------------------------------------------------------------------------------ [spark]


def test_spark_section_is_spark_settings_as_text(tmp_path: Path) -> None:
    """Quoted keys and TOML's dotted keys (which nest) both give Spark's names; values are
    passed as the text Spark reads; no section: no setting."""
    text = BASE + ('\n[spark]\n"spark.master" = "spark://127.0.0.1:7077"\n'
                   'spark.executor.memory = "2g"\nspark.sql.shuffle.partitions = 8\n'
                   'spark.eventLog.enabled = false\n')
    assert load_config(write(tmp_path, text)).spark == {
        "spark.master": "spark://127.0.0.1:7077", "spark.executor.memory": "2g",
        "spark.sql.shuffle.partitions": "8", "spark.eventLog.enabled": "false"}
    assert load_config(write(tmp_path, BASE, "plain.toml")).spark == {}


@pytest.mark.parametrize(("section", "fragment"), [
    ('master = "local[2]"', "spark.master: expected a Spark setting, whose name starts with 'spark.'"),
    ('"spark.jars" = ["a.jar"]', 'spark."spark.jars": expected a string, number or boolean'),
])
def test_spark_section_refuses_what_spark_would_not_read(tmp_path: Path, section: str,
                                                         fragment: str) -> None:
    path = write(tmp_path, BASE + f"\n[spark]\n{section}\n")
    with pytest.raises(ConfigError, match=re.escape(fragment)):
        load_config(path)


def test_upstream_backup_needs_a_network_with_restart_points() -> None:
    """operators/restart.py: a point where every window is closed; a sliding window (or a
    join's band) never gets there, and the loader says so, naming the operator."""
    import tomllib

    raw = tomllib.loads((EXAMPLES / "upstream-backup.toml").read_text())
    assert parse_config(raw, Path("upstream-backup.toml")).nodes["n1"].settings.ha == (
        "upstream_backup")
    agg = next(o for o in raw["nodes"]["n1"]["operators"] if o["type"] == "aggregate")
    agg["slide"] = agg["window"] // 5
    with pytest.raises(ConfigError, match=r"nodes\.n1: ha = 'upstream_backup': its query "
                                          r"network has no restart point: operator 'per_key' "
                                          r"\(aggregate\) has sliding windows"):
        parse_config(raw, Path("upstream-backup.toml"))


def test_cluster_tables_are_every_table_the_loader_reads() -> None:
    """CLUSTER_TABLES is what a copy of a cluster's tables keeps (a scenario's dump, a
    sweep): a table the loader reads and the copies drop was [controller] (a flux run's
    scenario.toml could not be loaded back)."""
    from node.config.load import CLUSTER_TABLES

    raw = tomllib.loads(HEAD + N1 + '[clients.c1]\nstream = "n1.out"\n')
    with pytest.raises(ConfigError) as e:
        parse_config({**raw, "bogus": {}}, Path("t.toml"))
    listed = str(e.value).split("expected one of ")[1].split(" (")[0]
    assert sorted(listed.split(", ")) == sorted(CLUSTER_TABLES)


def test_a_hosts_table_names_ssh_destinations() -> None:
    import tomllib

    raw = tomllib.loads(BASE)
    raw["hosts"] = {"10.0.0.5": {"ssh": "dpc@node-a"}}
    assert parse_config(raw, Path("ssh.toml")).ssh == {"10.0.0.5": "dpc@node-a"}
    raw["hosts"] = {"10.0.0.5": {"ssh": "dpc@node-a", "port": 22}}
    with pytest.raises(ConfigError, match=r"hosts\.\"10\.0\.0\.5\"\.port: unknown key"):
        parse_config(raw, Path("ssh.toml"))
    raw["hosts"] = {"10.0.0.5": {"ssh": ""}}
    with pytest.raises(ConfigError, match="non-empty"):
        parse_config(raw, Path("ssh.toml"))
