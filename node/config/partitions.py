"""Partitioned nodes: the expansion of ``partitions = P`` into P partition nodes (pure).

A node declared with ``partitions = P`` (P >= 2) and ``partition_by = [attributes]`` runs as
P nodes ``<node>_p0`` .. ``<node>_p<P-1>``, each with the replicas whose ``partition`` is
its index, the node's query network and settings, and its share of every input (every
producer of an input splits it by the key, protocol/exchange.py; the split is
``ClusterConfig.splits``). Its outputs are the P partitions' streams: a node that reads
``<node>.<out>`` reads ``<node>_p0.<out>`` .. ``<node>_p<P-1>.<out>`` instead (its node
inputs and the SUnion inputs listing it are rewritten), and its SUnion merges them
deterministically, as it merges any inputs. After the expansion the cluster is an ordinary
one: launch, run, check, simulate and status see the partition nodes, each named with its
partition.

Refused here, each with the key to fix: a partition with no replica; an expanded name that
another node already has; a client reading a partitioned node's output (a client reads one
stream: a node with an SUnion merges the partitions' streams, or the client reads one
partition's). ``node/config/check.py`` refuses at build what needs schemas: a key attribute
missing from an input, a network that cannot run split (operators/keyed.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from node.config.check import NodeDraft
from node.config.model import ClientConfig, PartitionOf
from node.config.read import config_error

__all__ = ["expand_partitions", "partition_name"]


def partition_name(node: str, index: int) -> str:
    """The name of partition ``index`` of node ``node``."""
    return f"{node}_p{index}"


def expand_partitions(
    file: Path, drafts: Mapping[str, NodeDraft], clients: Mapping[str, ClientConfig]
) -> dict[str, NodeDraft]:
    """The nodes with every partitioned one replaced by its partitions (in file order),
    and every read of a partitioned node's output rewritten to its partitions' outputs."""
    split = {n: d for n, d in drafts.items() if d.partitions > 1}
    if not split:
        return dict(drafts)
    streams: dict[str, tuple[str, ...]] = {
        f"{n}.{o}": tuple(f"{partition_name(n, i)}.{o}" for i in range(d.partitions))
        for n, d in split.items() for o in d.output_ops
    }
    for c, client in clients.items():
        if client.stream in streams:
            parts = ", ".join(streams[client.stream])
            raise config_error(
                file, f"clients.{c}.stream",
                f"expected one stream, found {client.stream!r}, the output of a node with "
                f"partitions = {split[client.stream.partition('.')[0]].partitions}: its "
                f"partitions' streams are {parts}; merge them in a node whose SUnion reads "
                f"{client.stream!r}, or read one of them")
    out: dict[str, NodeDraft] = {}
    for n, d in drafts.items():
        d = _rewrite_inputs(d, streams)
        if d.partitions == 1:
            out[n] = d
            continue
        for i in range(d.partitions):
            name = partition_name(n, i)
            if name in drafts:
                raise config_error(
                    file, f"nodes.{name}",
                    f"expected a node name that no partition takes, found {name!r}, the name "
                    f"of partition {i} of node {n} (partitions = {d.partitions})")
            replicas = tuple(replace(r, node=name) for r, p in
                             zip(d.replicas, d.replica_partitions, strict=True) if p == i)
            if not replicas:
                raise config_error(
                    file, f"nodes.{n}.replicas",
                    f"expected at least one replica of each partition 0..{d.partitions - 1}, "
                    f"found none with partition = {i}")
            out[name] = replace(d, name=name, replicas=replicas,
                                replica_partitions=(i,) * len(replicas),
                                partition=PartitionOf(n, i, d.partitions, d.partition_by))
    return out


def _rewrite_inputs(d: NodeDraft, streams: Mapping[str, tuple[str, ...]]) -> NodeDraft:
    """``d`` reading each partitioned output as its partitions' streams."""
    if not any(i in streams for i in d.inputs):
        return d

    def expand(names: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(s for i in names for s in streams.get(i, (i,)))

    ops = tuple(replace(o, inputs=expand(o.inputs)) if o.type == "sunion" else o
                for o in d.operators)
    return replace(d, inputs=expand(d.inputs), operators=ops)
