"""Cross-table checks of a cluster config, and the build of each node's query network.

Role: :mod:`node.config.load` reads every table of the file on its own (types, ranges,
unknown keys) into drafts; this module checks what spans tables and turns the drafts into
the data model of :mod:`node.config.model`:

* names: sources, nodes, replicas and clients share one namespace (they name processes
  and the peers that output buffers wait acks from), so every name is unique;
* ports: no two listening sockets (source ports, replica data and control ports) share a
  ``(host, port)`` (``localhost`` counts as ``127.0.0.1``);
* the stream graph: every node input is produced by a source or by an ``soutput`` of
  another node, every node input is read by some operator of the node, and the nodes form
  a DAG; :func:`order_nodes` returns them upstream first (file order breaks ties), or names
  the cycle (``n1 -> n2 -> n1``, in the direction the data flows);
* each node's network, built in that order: SUnion parameters the spec omits are filled
  from the node's settings (an explicit value wins), input schemas come from the sources
  and from the upstream nodes' built networks, and the :class:`QueryNetwork` is built once
  so that its own validation runs at load;
* clients read node output streams.

Invariant: every failure is a :class:`ConfigError` ``"<file>: <key path>: <message>"``;
nothing here does I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from node.config.model import (
    ClientConfig,
    ControllerConfig,
    NodeConfig,
    NodeSettings,
    PartitionOf,
    ReplicaConfig,
    SourceConfig,
)
from node.config.read import config_error
from operators.cec import cec_problems
from operators.errors import OperatorError, SpecError
from operators.keyed import partition_problems
from operators.network import QueryNetwork
from operators.restart import restart_problems
from operators.spec import NetworkSpec, OperatorSpec
from protocol.tuples import END_OF_STREAM, Schema

__all__ = [
    "NodeDraft",
    "build_node",
    "check_clients",
    "check_controller",
    "check_names",
    "check_ports",
    "order_nodes",
]

_LOOPBACK = {"localhost": "127.0.0.1"}
_OPERATOR_IN_MESSAGE = re.compile(r"operator '([^']+)'")


@dataclass(frozen=True, slots=True)
class NodeDraft:
    """A node as read from its table, before its network is checked against the cluster."""

    name: str
    inputs: tuple[str, ...]
    operators: tuple[OperatorSpec, ...]
    replicas: tuple[ReplicaConfig, ...]
    settings: NodeSettings
    #: ``partitions`` and ``partition_by`` as the file declares them, and each replica's
    #: ``partition`` (node/config/partitions.py expands such a node into its partitions).
    partitions: int = 1
    partition_by: tuple[str, ...] = ()
    replica_partitions: tuple[int, ...] = ()
    #: Set on each partition node of the expansion.
    partition: PartitionOf | None = None

    @property
    def key(self) -> str:
        """The node's key path in the file (a partition node's: its declared node's)."""
        return f"nodes.{self.partition.node if self.partition else self.name}"

    @property
    def output_ops(self) -> tuple[str, ...]:
        """The names of the node's ``soutput`` operators, in file order."""
        return tuple(o.name for o in self.operators if o.type == "soutput")


def check_names(
    file: Path,
    sources: Mapping[str, SourceConfig],
    nodes: Mapping[str, NodeDraft],
    clients: Mapping[str, ClientConfig],
    controller: ControllerConfig | None = None,
) -> None:
    """Every source, node, replica and client name is unique in the cluster (and none is
    the controller's)."""
    seen: dict[str, str] = {}

    def claim(name: str, key: str) -> None:
        if name in seen:
            raise config_error(
                file,
                key,
                "expected a name unique in the cluster (sources, nodes, replicas and clients "
                f"share one namespace), found {name!r}, already used by {seen[name]}",
            )
        seen[name] = key

    if controller is not None:
        claim(controller.name, "controller")
    for s in sources:
        claim(s, f"sources.{s}")
    for n in nodes:
        claim(n, f"nodes.{n}")
    for n, d in nodes.items():
        for i, r in enumerate(d.replicas):
            claim(r.name, f"nodes.{n}.replicas[{i}].name")
    for c in clients:
        claim(c, f"clients.{c}")


def check_ports(
    file: Path, sources: Mapping[str, SourceConfig], nodes: Mapping[str, NodeDraft],
    controller: ControllerConfig | None = None,
) -> None:
    """No two listening sockets of the cluster share a (host, port)."""
    seen: dict[tuple[str, int], str] = {}

    def claim(host: str, port: int, key: str) -> None:
        where = (_LOOPBACK.get(host, host), port)
        if where in seen:
            raise config_error(
                file,
                key,
                f"expected a port no other process of the cluster listens on at {host}, "
                f"found {port}, already used by {seen[where]}",
            )
        seen[where] = key

    if controller is not None:
        claim(controller.control_address, controller.control_port, "controller.control_port")
    for name, s in sources.items():
        claim(s.host, s.port, f"sources.{name}.port")
    for name, d in nodes.items():
        for i, r in enumerate(d.replicas):
            claim(r.host, r.data_port, f"nodes.{name}.replicas[{i}].data_port")
            claim(r.control_address, r.control_port, f"nodes.{name}.replicas[{i}].control_port")


def check_controller(file: Path, controller: ControllerConfig | None,
                     nodes: Mapping[str, NodeDraft]) -> None:
    """A node with ``ha = "flux"`` needs the controller, and the controller such a node."""
    flux = [n for n, d in nodes.items() if d.settings.ha == "flux"]
    if flux and controller is None:
        raise config_error(file, "controller",
                           f"expected a [controller] table (control_port = ...): node "
                           f"{flux[0]} has ha = \"flux\", whose failures the controller "
                           "detects and orders (docs/flux.md), found none")
    if controller is not None and not flux:
        raise config_error(file, "controller",
                           "expected no [controller]: it serves nodes with ha = \"flux\", "
                           "found no such node")


def order_nodes(
    file: Path, sources: Mapping[str, SourceConfig], nodes: Mapping[str, NodeDraft]
) -> list[str]:
    """Check the stream graph; return the node names upstream first (file order breaks ties)."""
    producers = {f"{n}.{op}": n for n, d in nodes.items() for op in d.output_ops}
    known = ", ".join([*sources, *producers])
    upstream: dict[str, list[str]] = {}
    for n, d in nodes.items():
        read = {i for o in d.operators for i in o.inputs}
        ups: list[str] = []
        for i, stream in enumerate(d.inputs):
            key = f"{d.key}.inputs[{i}]"
            if stream not in sources:
                p = producers.get(stream)
                if p is None:
                    raise config_error(
                        file,
                        key,
                        "expected a stream that a source or a node's soutput produces "
                        f"(one of: {known}), found {stream!r}{_hint(stream, nodes)}",
                    )
                if p == n:
                    raise config_error(
                        file,
                        key,
                        f"expected a stream of a source or of another node, found {stream!r}, "
                        "the node's own output",
                    )
                ups.append(p)
            if stream not in read:
                raise config_error(
                    file,
                    key,
                    f"expected a stream that some operator of the node reads, found {stream!r}, "
                    f"which no operator of {d.key}.operators lists in its inputs",
                )
        upstream[n] = ups

    order: list[str] = []
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(n: str, path: list[str]) -> None:
        if state.get(n) == 2:
            return
        if state.get(n) == 1:
            cycle = [*path[path.index(n) :], n]
            cycle.reverse()  # path follows "reads from"; report the direction data flows
            raise config_error(
                file,
                f"{nodes[n].key}.inputs",
                "expected the nodes to form a DAG (no node may depend on its own output), "
                f"found the cycle {' -> '.join(cycle)}",
            )
        state[n] = 1
        for u in upstream[n]:
            visit(u, [*path, n])
        state[n] = 2
        order.append(n)

    for n in nodes:
        visit(n, [])
    return order


def _hint(stream: str, nodes: Mapping[str, NodeDraft]) -> str:
    node, dot, op = stream.partition(".")
    if dot and node in nodes:
        outs = ", ".join(f"{node}.{o}" for o in nodes[node].output_ops) or "none"
        return f" (node {node} has no soutput operator {op!r}; its outputs: {outs})"
    return ""


def build_node(
    file: Path, draft: NodeDraft, streams: Mapping[str, Schema]
) -> tuple[NodeConfig, dict[str, Schema]]:
    """Fill SUnion defaults, build the node's network once; return the node and the schemas
    of its output streams. ``streams`` must already hold the schema of every node input."""
    s = draft.settings
    filled = {
        "bucket": s.bucket,
        # A process pair never goes tentative: it waits for its input (docs/ha-modes.md).
        "wait": s.wait if s.ha == "dpc" else END_OF_STREAM,
        "mode": s.up_failure,
        "recovery": s.reconciliation,
    }
    ops = tuple(
        replace(o, params={**filled, **o.params}) if o.type == "sunion" else o
        for o in draft.operators
    )
    outs = draft.output_ops
    spec = NetworkSpec({i: streams[i] for i in draft.inputs}, ops, outs)
    try:
        net = QueryNetwork(spec)
    except (SpecError, OperatorError) as e:
        raise config_error(file, _operator_key(draft, str(e)), str(e)) from None
    if s.checkpointing == "cec":
        _check_cec(file, draft, net)
    if s.ha != "dpc":
        _check_pair(file, draft, net)
    if draft.partition_by:
        _check_partitions(file, draft, net)
    node = NodeConfig(
        name=draft.name,
        inputs=draft.inputs,
        network=spec,
        outputs={f"{draft.name}.{o}": o for o in outs},
        replicas=draft.replicas,
        settings=s,
        partition=draft.partition,
    )
    return node, {f"{draft.name}.{o}": net.schemas[o] for o in outs}


def _check_pair(file: Path, draft: NodeDraft, net: QueryNetwork) -> None:
    """A process-pair mode needs exactly two replicas, and nothing of DPC's own recovery
    (its continuous eventual checkpoints rebuild a replica a pair's partner rebuilds);
    upstream backup, a network with restart points (operators/restart.py)."""
    s, key = draft.settings, draft.key
    why = []
    if s.ha == "upstream_backup":
        if s.reconciliation == "undo":
            why.append('it restarts on checkpoint/redo networks (reconciliation = "checkpoint")')
        else:
            why += [f"its query network has no restart point: {p}"
                    for p in restart_problems(QueryNetwork(net.spec, undo_logs=False))]
    if len(draft.replicas) != 2:
        of = f" of partition {draft.partition.index}" if draft.partition else ""
        why.append(f"it needs exactly two replicas{of} (a primary and a secondary), not "
                   f"{len(draft.replicas)}")
    if s.checkpointing == "cec":
        why.append('checkpointing = "cec" is for "dpc" nodes')
    if why:
        raise config_error(file, key, f"ha = {s.ha!r}: " + "; ".join(why))


def _check_partitions(file: Path, draft: NodeDraft, net: QueryNetwork) -> None:
    """``partition_by``: attributes of every input, on which the network can run split
    (operators/keyed.py): each partition's results are then the whole node's for its keys."""
    why = partition_problems(net, draft.partition_by)
    if why:
        raise config_error(
            file, f"{draft.key}.partition_by",
            f"expected a key the node's query network can be split on, found "
            f"{list(draft.partition_by)}: " + "; ".join(why))


def _check_cec(file: Path, draft: NodeDraft, net: QueryNetwork) -> None:
    """``checkpointing = "cec"`` needs checkpoint/redo (an undo log cannot reach back past
    a recovered part), fault tolerance, and a network CEC can checkpoint."""
    s, key = draft.settings, draft.key
    why = []
    if s.reconciliation != "checkpoint":
        why.append(f'it needs reconciliation = "checkpoint", not {s.reconciliation!r} (a '
                   "recovered operator's undo log does not reach back to its parts' footprints)")
    if not s.fault_tolerance:
        why.append("it needs fault_tolerance = true")
    why += cec_problems(QueryNetwork(net.spec, undo_logs=False))  # (as the replica builds it)
    if why:
        raise config_error(file, key, 'checkpointing = "cec": ' + "; ".join(why))


def _operator_key(draft: NodeDraft, message: str) -> str:
    """``nodes.<n>.operators[i]`` when the error names one operator of the node."""
    key = f"{draft.key}.operators"
    m = _OPERATOR_IN_MESSAGE.search(message)
    if m:
        for i, o in enumerate(draft.operators):
            if o.name == m.group(1):
                return f"{key}[{i}]"
    return key


def check_clients(
    file: Path,
    clients: Mapping[str, ClientConfig],
    outputs: Mapping[str, Schema],
    sources: Mapping[str, SourceConfig],
) -> None:
    """Every client reads a node output stream."""
    for name, c in clients.items():
        if c.stream not in outputs:
            what = " (a source's stream: clients read node outputs)" if c.stream in sources else ""
            raise config_error(
                file,
                f"clients.{name}.stream",
                f"expected a node output stream (one of: {', '.join(outputs)}), "
                f"found {c.stream!r}{what}",
            )
