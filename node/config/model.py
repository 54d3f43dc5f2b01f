"""The cluster config: a TOML file describing sources, replicated nodes and clients.

This module is the data model; :func:`load_config` (in ``node/config/load.py``) parses and
validates a file into it, once, naming file and key in every error. All times are integer
microseconds here (the file says seconds).

Streams have global names: a source's stream is the source's name (``"s1"``); a node's
output stream is ``"<node>.<soutput operator>"`` (``"n1.out"``). A node's query network
uses those global names for its input streams.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from operators.spec import NetworkSpec
from protocol.exchange import Split
from protocol.tuples import Schema

__all__ = [
    "DEFAULT_CONSUMER_GRACE",
    "AttributeGen",
    "ClientConfig",
    "ClusterConfig",
    "ControllerConfig",
    "NodeConfig",
    "NodeSettings",
    "PartitionOf",
    "ReplicaConfig",
    "SourceConfig",
    "TlsFiles",
]


#: ``[cluster] consumer_grace`` when the file says nothing: 30 s (microseconds). A consumer
#: never heard from holds an output buffer's trimming this long after the first tuple
#: (state/buffer.py's grace rule): long enough for a cluster's clients to start.
DEFAULT_CONSUMER_GRACE = 30_000_000


@dataclass(frozen=True, slots=True)
class ReplicaConfig:
    """One replica (one OS process) of a node."""

    name: str  # unique in the cluster, e.g. "n1a"
    node: str
    host: str
    data_port: int
    control_port: int
    #: This replica's ``replay_engine``, overriding its node's (None: the node's).
    replay_engine: str | None = None
    #: Where its control plane binds and is reached: its own ``control_host`` key, else the
    #: ``[cluster]`` one, else its ``host`` (None only in hand-built configs: its host).
    control_host: str | None = None

    @property
    def control_address(self) -> str:
        """The host its control plane listens on (and every tool addresses)."""
        return self.control_host or self.host


#: ``buffer_memory``'s default: 256 MiB, about a million tuples of the basic example's
#: kind (a few hundred bytes each in memory): ~17 s of a failure at 60,000 tuples/s before
#: anything is spilled, and far below what a 24 GiB machine's replicas can hold together.
DEFAULT_BUFFER_MEMORY = 256 * 2**20


@dataclass(frozen=True, slots=True)
class NodeSettings:
    """Per-node fault-tolerance settings (section [defaults] overridden per node)."""

    x: int  # the delay bound X
    alpha: float
    bucket: int  # SUnion bucket width = expected boundary interval
    heartbeat_interval: int
    heartbeat_misses: int
    checkpoint_interval: int
    reconciliation: str  # "checkpoint" | "undo"
    up_failure: str  # "delay" | "process"
    stabilization: str  # "suspend" | "delay" | "process"
    replay_step: int = 10  # SUnion buckets re-released per event-loop turn when reconciling
    checkpointing: str = "on_failure"  # "on_failure" | "periodic" | "cec" (node/replica/vocabulary.py)
    #: ``checkpointing = "cec"``: the policy of continuous eventual checkpoints
    #: (operators/cec.py CecPolicy: Q records, U input tuples, CI of every CP µs) and
    #: whether every frame of the log is fsynced (a machine crash; a killed process loses
    #: nothing either way).
    cec_q: int = 20_000
    cec_u: int = 200_000
    cec_ci: int = 10_000
    cec_cp: int = 100_000
    cec_fsync: bool = False
    #: False: no checkpoints, no undo logs, output buffers keep nothing (``dpc bench
    #: overhead`` measures fault tolerance against this; a failure cannot be corrected).
    fault_tolerance: bool = True
    #: Bytes of input a replica's SUnions keep in memory for a replay; the rest goes to
    #: Arrow IPC segments in its run directory (operators/buckets.py, state/spill.py).
    buffer_memory: int = DEFAULT_BUFFER_MEMORY
    #: How a reconciliation's replay runs (operators/network.py ENGINES, or "auto": the
    #: vectorized engine once the replay re-releases ``vectorized_from`` input tuples,
    #: Spark from ``spark_from``).
    replay_engine: str = "auto"
    #: How input reaches the query network (issue 48): "columns", each batch as the Arrow
    #: columns it travelled in (node/streams/link.py, operators/sunion.py); "tuples", the
    #: per-tuple path, kept until the issue ends for ``dpc bench throughput``'s baseline.
    data_path: str = "columns"
    #: Where ``auto`` switches engines; None: the crossovers ``dpc bench replay`` measured
    #: on this machine, else the defaults (node/config/crossovers.py).
    vectorized_from: int | None = None
    spark_from: int | None = None
    #: How the node survives a crash (docs/ha-modes.md): "dpc", its replicas processing
    #: alike under DPC (the default); "active_standby", a process pair of Hwang et al.
    #: (node/replica/pair.py): both replicas process, the primary serves, the secondary
    #: takes over when the primary fails; "amnesia" and "passive_standby", pairs too.
    ha: str = "dpc"
    #: A process pair's communication interval M (µs): passive standby's checkpoints.
    ha_interval: int = 100_000

    @property
    def wait(self) -> int:
        """alpha * X: how long an SUnion holds a bucket before releasing it tentative."""
        return int(self.alpha * self.x)


@dataclass(frozen=True, slots=True)
class PartitionOf:
    """What a partition node is a partition of (node/config/partitions.py): node ``node``
    of the file, declared with ``partitions = count`` and ``partition_by = by``, runs as
    ``count`` nodes ``<node>_p<index>``, each fed its share of every input
    (protocol/exchange.py)."""

    node: str
    index: int
    count: int
    by: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class NodeConfig:
    name: str
    inputs: tuple[str, ...]  # global stream names consumed
    network: NetworkSpec  # inputs = {global stream: schema}; sunion params filled in
    outputs: Mapping[str, str]  # global output stream -> soutput operator name
    replicas: tuple[ReplicaConfig, ...]
    settings: NodeSettings
    #: A partition of a partitioned node (its share of every input), or None: the node
    #: reads its inputs whole.
    partition: PartitionOf | None = None


@dataclass(frozen=True, slots=True)
class AttributeGen:
    """How a synthetic source draws one attribute.

    kind "key": an int in [0, n), ``dist`` "uniform" or "zipf" (exponent ``s``);
    kind "int": uniform in [min, max]; kind "float": uniform in [min, max);
    kind "seq": the tuple's sequence number (1, 2, ...)."""

    kind: str
    n: int = 0
    dist: str = "uniform"
    s: float = 1.1
    min: float = 0
    max: float = 100


@dataclass(frozen=True, slots=True)
class SourceConfig:
    """One source. Without ``time_column`` its tuples are paced by ``rate`` on the wall
    clock; with one (a file source), each tuple's time is its event time rebased onto the
    run's clock, ``t = t_start + (event - event_first) / speedup`` (node/procs/pacing.py),
    and ``rate`` is then the average it comes to (given, or derived from the file's rows
    and span; ``speedup`` likewise)."""

    name: str  # also the name of its stream
    schema: Schema
    host: str
    port: int
    rate: float  # tuples per second (on average, for an event-time source)
    boundary_interval: int
    generator: str  # "synthetic" | "file"
    seed: int = 0
    attributes: Mapping[str, AttributeGen] = field(default_factory=dict)  # synthetic
    file: Path | None = None  # CSV or Parquet with the schema's columns (generator "file")
    limit: int | None = None  # stop after this many tuples (None: run until stopped)
    time_column: str | None = None  # the file column that holds each row's event time
    speedup: float | None = None  # data seconds per wall second (event-time sources)
    align: int | None = None  # µs of data time whose multiples map to multiples on the run's clock
    constants: Mapping[str, Any] = field(default_factory=dict)  # attribute -> its fixed value
    #: Bytes of its output buffer (what consumers have not acknowledged) kept in memory;
    #: the rest waits on disk during a long failure downstream (state/spill_list.py).
    buffer_memory: int = DEFAULT_BUFFER_MEMORY


@dataclass(frozen=True, slots=True)
class ClientConfig:
    name: str
    stream: str  # a node output stream, e.g. "n1.out"
    #: The host it runs on: it serves nothing, but ``dpc launch --hosts netns|ssh`` places
    #: it there (ops_scripts/cluster/hosts.py).
    host: str = "127.0.0.1"


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """``[cluster.tls]``: PEM files (absolute paths) that turn on TLS on every data and
    control connection (node/net/tls.py). ``cert`` (with its ``key``) is what each process
    presents, as a server and as a client; it must name every host of the cluster; ``ca``
    is what each process trusts, for servers and clients alike."""

    cert: Path
    key: Path
    ca: Path


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """``[controller]``: the Flux controller process (node/flux/controller.py), named
    ``controller``, on its control port; a cluster with a node of ``ha = "flux"`` has one."""

    host: str
    control_port: int
    name: str = "controller"
    control_host: str | None = None  # as a replica's: its own, the cluster's, else its host

    @property
    def control_address(self) -> str:
        """The host its control plane listens on (and every tool addresses)."""
        return self.control_host or self.host


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    path: Path
    name: str
    token: str
    #: ``[cluster] control_host``: where control planes bind unless a process names its own
    #: (None: each process's control plane binds on that process's ``host``).
    control_host: str | None
    sources: Mapping[str, SourceConfig]
    nodes: Mapping[str, NodeConfig]  # in topological order (upstream first)
    clients: Mapping[str, ClientConfig]
    streams: Mapping[str, Schema]  # every global stream and its schema
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)
    # How long a consumer never heard from holds output buffers' trimming (state/buffer.py).
    consumer_grace: int = DEFAULT_CONSUMER_GRACE
    # Whether data-plane connections open with the token handshake and speak only for the
    # process they authenticated as (node/net/auth.py, node/config/roles.py).
    authenticate: bool = True
    # TLS on data and control planes ([cluster.tls]); None: plain TCP and HTTP.
    tls: TlsFiles | None = None
    # [spark]: Spark settings for the bulk work (dpc reconcile), as Spark reads them.
    spark: Mapping[str, str] = field(default_factory=dict)
    # [controller]: the Flux controller (nodes with ha = "flux"), or None.
    controller: ControllerConfig | None = None
    # [hosts."ADDRESS"] ssh = "...": a host's SSH destination (dpc launch --hosts ssh).
    ssh: Mapping[str, str] = field(default_factory=dict)

    def replica(self, name: str) -> ReplicaConfig:
        for node in self.nodes.values():
            for r in node.replicas:
                if r.name == name:
                    return r
        raise KeyError(name)

    def producer_of(self, stream: str) -> SourceConfig | NodeConfig:
        """The source or node whose output ``stream`` is."""
        if stream in self.sources:
            return self.sources[stream]
        node, _, _ = stream.partition(".")
        return self.nodes[node]

    def addresses(self) -> dict[tuple[str, int], str]:
        """Every data port in the cluster -> the name of the process serving it."""
        out = {(s.host, s.port): s.name for s in self.sources.values()}
        for node in self.nodes.values():
            out.update({(r.host, r.data_port): r.name for r in node.replicas})
        return out

    def splits(self, stream: str) -> dict[str, Split]:
        """Each replica of a partition node that reads ``stream`` -> its share of it (what
        the stream's producer sends that subscriber, protocol/exchange.py); a consumer not
        named here reads the stream whole."""
        out: dict[str, Split] = {}
        for node in self.nodes.values():
            split = self.split(node, stream)
            if split is not None:
                out.update((r.name, split) for r in node.replicas)
        return out

    def split(self, node: NodeConfig, stream: str) -> Split | None:
        """``node``'s share of its input ``stream`` (None: all of it, or not an input)."""
        part = node.partition
        if part is None or stream not in node.inputs:
            return None
        schema = self.streams[stream]
        return Split(part.index, part.count, tuple(schema.index(a) for a in part.by))

    def consumers_of(self, stream: str) -> tuple[str, ...]:
        """Everyone who subscribes to ``stream``: every replica of every consuming node,
        then every consuming client (their names: what buffers wait acks from)."""
        names: list[str] = []
        for node in self.nodes.values():
            if stream in node.inputs:
                names.extend(r.name for r in node.replicas)
        names.extend(c.name for c in self.clients.values() if c.stream == stream)
        return tuple(names)
