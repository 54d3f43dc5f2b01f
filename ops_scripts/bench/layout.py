"""What the replica benches run: the bench node, whole or split by key, and its config file.

``bench_node`` is the node a bench drives: the first one fed by sources only (of a node the
file declares partitioned, its partition 0: the bench runs the node as declared, whole or
in its own count of partitions). :meth:`Layout.of` names the replica processes: P = 1, the
node's first replica (``n1a`` of ``examples/basic.toml``), its output read by the client
``bench``; P > 1, one replica per partition, ``<replica>_p<i>`` (``n1a_p0``, ``n1a_p1``),
partition i's output ``<node>_p<i>.<out>`` read by the client ``bench_p<i>``.

:func:`bench_config` writes and loads the config they run: a copy of the user's with the
given loopback ports (:meth:`Ports.pick`), its sources as the bench plays them (schema,
rate, boundary interval), the bench node alone, and the bench's clients; ``settings``
override [defaults]. P = 1: the node's table with one replica and no partitioning. P > 1:
the node's table with ``partitions = P``, ``partition_by`` and P replicas with ``partition
= i``, which the loader expands into the partition nodes (node/config/partitions.py) and
checks: a network that cannot run split on the key is a ``ConfigError`` naming
``nodes.<node>.partition_by`` (node/config/check.py). Nothing of the expansion is done here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from node.config.load import load_config
from node.config.model import ClusterConfig, NodeConfig, SourceConfig
from node.config.partitions import partition_name
from node.net.ports import free_port
from ops_scripts.errors import BenchFailed

__all__ = ["CLIENT", "DEFAULT_KEY", "Layout", "Ports", "bench_config", "bench_node", "bench_toml"]

CLIENT = "bench"
DEFAULT_KEY = ("key",)  # partition_by of a node the file does not declare partitioned


def bench_node(config: ClusterConfig) -> NodeConfig:
    """The first node fed by sources only (raises ``BenchFailed`` if there is none)."""
    for node in config.nodes.values():
        if all(s in config.sources for s in node.inputs):
            return node
    raise BenchFailed(f"{config.path}: no node reads from sources only: nothing to drive")


@dataclass(frozen=True, slots=True)
class Layout:
    """The bench node as the file declares it and the processes the bench runs of it: per
    partition (one, P = 1) its replica, its output stream and the bench's client of it."""

    node: str
    base: str  # the file's replica of the node whose settings the bench's replicas take
    partitions: int
    by: tuple[str, ...]  # partition_by (P > 1), empty for P = 1
    replicas: tuple[str, ...]
    streams: tuple[str, ...]
    clients: tuple[str, ...]

    @classmethod
    def of(cls, config: ClusterConfig, partitions: int = 1,
           by: Sequence[str] | None = None) -> Layout:
        """The layout of ``config``'s bench node in ``partitions`` partitions on ``by``
        (default: the node's declared ``partition_by``, else ``key``)."""
        if partitions < 1:
            raise BenchFailed(f"expected at least 1 partition, got {partitions}")
        node = bench_node(config)
        part = node.partition
        name, replica = part.node if part else node.name, node.replicas[0].name
        out = next(iter(node.outputs.values()))
        if partitions == 1:
            return cls(name, replica, 1, (), (replica,), (f"{name}.{out}",), (CLIENT,))
        idx = range(partitions)
        return cls(name, replica, partitions, tuple(by or (part.by if part else DEFAULT_KEY)),
                   tuple(f"{replica}_p{i}" for i in idx),
                   tuple(f"{partition_name(name, i)}.{out}" for i in idx),
                   tuple(f"{CLIENT}_p{i}" for i in idx))


@dataclass(frozen=True, slots=True)
class Ports:
    """Loopback ports: each source's data port, and each replica's data and control port
    (in the layout's order)."""

    sources: Mapping[str, int]
    data: tuple[int, ...]
    control: tuple[int, ...]

    @classmethod
    def pick(cls, layout: Layout, sources: Sequence[SourceConfig]) -> Ports:
        """Free ports outside the ephemeral range (node/net/ports.py)."""
        n = len(layout.replicas)
        return cls({s.name: free_port() for s in sources}, tuple(free_port() for _ in range(n)),
                   tuple(free_port() for _ in range(n)))


def _toml(v: Any) -> str:
    """A TOML value (inline tables): JSON strings, numbers and booleans are TOML ones."""
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml(x)}" for k, x in v.items()) + "}"
    return "[" + ", ".join(map(_toml, v)) + "]" if isinstance(v, list | tuple) else json.dumps(v)


def _tls_table(config: ClusterConfig) -> dict[str, Any]:
    """``[cluster.tls]`` with absolute paths (the bench's config lives elsewhere), or none."""
    tls = config.tls
    if tls is None:
        return {}
    return {"tls": {"cert": str(tls.cert), "key": str(tls.key), "ca": str(tls.ca)}}


def bench_toml(config: ClusterConfig, layout: Layout, ports: Ports,
               settings: Mapping[str, Any] | None = None, boundary_us: int | None = None) -> str:
    """The text of the config the bench runs (module docstring); ``boundary_us``: every
    source's boundary interval (default: the smallest of the bench node's sources)."""
    raw = config.raw
    sources = [config.sources[s] for s in bench_node(config).inputs]
    boundary_s = (boundary_us or min(s.boundary_interval for s in sources)) / 1e6
    table = {k: v for k, v in raw["nodes"][layout.node].items()
             if k not in ("partitions", "partition_by", "replicas")}
    base = next(r for r in raw["nodes"][layout.node]["replicas"] if r["name"] == layout.base)
    first = {k: v for k, v in base.items() if k != "partition"}
    replicas = [dict(first, name=r, host="127.0.0.1", data_port=d, control_port=c)
                for r, d, c in zip(layout.replicas, ports.data, ports.control, strict=True)]
    if layout.partitions > 1:
        table.update(partitions=layout.partitions, partition_by=list(layout.by))
        for i, r in enumerate(replicas):
            r["partition"] = i
    doc: dict[str, dict[str, Any]] = {
        "cluster": dict(raw["cluster"], control_host="127.0.0.1", **_tls_table(config)),
        "defaults": dict(raw.get("defaults", {}), **(settings or {})),
        "sources": {s.name: {"schema": list(s.schema), "host": "127.0.0.1",
                             "port": ports.sources[s.name], "rate": s.rate,
                             "boundary_interval": boundary_s}
                    for s in sources},
        "nodes": {layout.node: dict(table, replicas=replicas)},
        "clients": {c: {"stream": s} for c, s in zip(layout.clients, layout.streams, strict=True)},
    }
    return "".join(f"[{sec}]\n" + "".join(f"{json.dumps(k)} = {_toml(v)}\n" for k, v in t.items())
                   for sec, t in doc.items())


def bench_config(config: ClusterConfig, layout: Layout, ports: Ports, path: Path,
                 settings: Mapping[str, Any] | None = None,
                 boundary_us: int | None = None) -> ClusterConfig:
    """Write :func:`bench_toml` to ``path`` and load it (a ``ConfigError`` as the loader
    raises it: a node that cannot run split, for one)."""
    path.write_text(bench_toml(config, layout, ports, settings, boundary_us), encoding="utf-8")
    return load_config(path)
