"""``dpc bench throughput --partitions P`` without processes: the config the bench writes
loads, through the real loader, into P partition nodes of one replica each, fed their
shares by the bench's sources; one partition is today's config; a network that cannot run
split is the loader's ConfigError; the bench counts each partition's share exactly."""

from __future__ import annotations

import logging
import random
from pathlib import Path

import pytest

from node.config.load import load_config
from node.config.model import ClusterConfig
from node.errors import ConfigError
from node.streams.publisher import Publisher
from ops_scripts.bench.layout import Layout, Ports, bench_config
from ops_scripts.bench.replica import STABLE, _Feed
from protocol.exchange import Split
from protocol.tuples import make_tuple
from state.buffer import OutputBuffer
from tests.paths import EXAMPLES


def _written(config: ClusterConfig, layout: Layout, tmp_path: Path) -> ClusterConfig:
    sources = [config.sources[s] for s in ("s1", "s2", "s3") if s in config.sources]
    return bench_config(config, layout, Ports.pick(layout, sources), tmp_path / "config.toml")


@pytest.mark.parametrize("p", [2, 3])
def test_the_bench_config_loads_into_p_partition_nodes_of_one_replica_each(
        p: int, tmp_path: Path) -> None:
    layout = Layout.of(load_config(EXAMPLES / "basic.toml"), p)
    assert (layout.node, layout.partitions, layout.by) == ("n1", p, ("key",))
    cfg = _written(load_config(EXAMPLES / "basic.toml"), layout, tmp_path)
    assert list(cfg.nodes) == [f"n1_p{i}" for i in range(p)]
    for i, node in enumerate(cfg.nodes.values()):
        assert [r.name for r in node.replicas] == [f"n1a_p{i}"]
        assert node.partition is not None
        assert (node.partition.node, node.partition.index, node.partition.count) == ("n1", i, p)
        assert cfg.clients[f"bench_p{i}"].stream == f"n1_p{i}.out" == layout.streams[i]
    # Each source sends each partition's one replica its share: what the bench's
    # Publishers are given.
    for s in ("s1", "s2", "s3"):
        assert cfg.splits(s) == {f"n1a_p{i}": Split(i, p, (0,)) for i in range(p)}
        assert cfg.consumers_of(s) == layout.replicas


def test_one_partition_is_the_whole_node_in_one_replica(tmp_path: Path) -> None:
    config = load_config(EXAMPLES / "basic.toml")
    cfg = _written(config, Layout.of(config), tmp_path)
    assert list(cfg.nodes) == ["n1"]
    assert [r.name for r in cfg.nodes["n1"].replicas] == ["n1a"]
    assert cfg.nodes["n1"].partition is None and cfg.splits("s1") == {}
    assert {c: x.stream for c, x in cfg.clients.items()} == {"bench": "n1.out"}


def test_a_node_declared_partitioned_is_benched_as_declared(tmp_path: Path) -> None:
    """examples/partitioned.toml's n1 (2 partitions on key): whole with P = 1, its own key
    by default with P > 1."""
    config = load_config(EXAMPLES / "partitioned.toml")
    whole = Layout.of(config)
    assert (whole.node, whole.replicas) == ("n1", ("n1p0a",))
    assert list(_written(config, whole, tmp_path).nodes) == ["n1"]
    three = Layout.of(config, 3)
    assert three.by == ("key",)
    assert list(_written(config, three, tmp_path).nodes) == ["n1_p0", "n1_p1", "n1_p2"]


def test_a_network_that_cannot_run_split_is_the_loaders_config_error(tmp_path: Path) -> None:
    """basic.toml's join pairs ``key`` with ``key``: split on ``value``, matching tuples
    would lie in different partitions."""
    config = load_config(EXAMPLES / "basic.toml")
    with pytest.raises(ConfigError, match=r"nodes\.n1\.partition_by: .*'j' \(join\)"):
        _written(config, Layout.of(config, 2, ("value",)), tmp_path)


def test_each_partitions_share_is_counted_exactly() -> None:
    """The bench's count of a partition's share of ids a .. b-1 (the pool used cyclically)
    is the number of those tuples its Split keeps."""
    rng = random.Random(7)
    splits = [Split(i, 3, (0,)) for i in range(3)]
    pub = Publisher("bench-s1", {"s1": OutputBuffer("s1")}, log=logging.getLogger("test"))
    config = load_config(EXAMPLES / "basic.toml")
    feed = _Feed(config.sources["s1"], 1.0, pub, splits)
    feed.set_pool([(rng.randrange(50), rng.randrange(100)) for _ in range(101)])
    for a, b in [(1, 1), (1, 50), (7, 101), (99, 350), (1000, 1234)]:
        kept = [[s.keeps(make_tuple(STABLE, i, 0, 0, feed.pool[i % 101])) for i in range(a, b)]
                for s in splits]
        assert [feed.share_of(p, a, b) for p in range(3)] == [sum(k) for k in kept]
        assert sum(feed.share_of(p, a, b) for p in range(3)) == b - a
