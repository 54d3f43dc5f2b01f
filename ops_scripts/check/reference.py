"""The reference run: what every node output stream holds in a failure-free run (pure).

Role: the "expected" side of ``dpc check``'s eventual-consistency and replica-convergence
verdicts (``ops_scripts/check/compose.py``). Every node's query network, fresh, is fed each input
stream whole from the source logs (sources log every tuple before sending it) and then
``BOUNDARY(END_OF_STREAM)``. SUnion orders its inputs on ``(time, input index, id)``, so the
result does not depend on arrival interleaving. Every SUnion's ``wait`` is set to never
expire: nothing is released tentatively.

Invariants: pure (no I/O, no clock); the result holds STABLE tuples only, or
:class:`~ops_scripts.check.properties.CheckError` says why it cannot be computed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from node.config.model import ClusterConfig
from operators.network import QueryNetwork
from operators.spec import NetworkSpec
from ops_scripts.check.properties import fmt_tuple
from ops_scripts.errors import CheckError
from protocol.tuples import END_OF_STREAM, Kind, Tuple, boundary

__all__ = ["END_OF_STREAM", "failure_free", "reference_outputs"]



def failure_free(spec: NetworkSpec) -> NetworkSpec:
    """``spec`` with every SUnion waiting for ever: what a run without failures computes
    (also the generator's, ops_scripts/reconcile/generate.py)."""
    ops = tuple(
        dataclasses.replace(o, params={**o.params, "wait": END_OF_STREAM})
        if o.type == "sunion"
        else o
        for o in spec.operators
    )
    return NetworkSpec(spec.inputs, ops, spec.outputs)  # every SUnion wait: never expires


def reference_outputs(
    config: ClusterConfig, source_tuples: Mapping[str, Sequence[Tuple]]
) -> dict[str, list[Tuple]]:
    """The data tuples of every node output stream in a failure-free run (pure).

    Nodes run in config order (topological): each input stream is pushed whole, in the
    network's input order, as its STABLE tuples (control tuples in a log are skipped) then
    ``BOUNDARY(END_OF_STREAM)``. Raises :class:`CheckError` if an input has no tuples (no
    log, no upstream node) or a source log holds a tentative tuple.
    """
    streams: dict[str, list[Tuple]] = {}
    for name, tuples in source_tuples.items():
        bad = next((t for t in tuples if t.kind is Kind.TENTATIVE), None)
        if bad is not None:
            raise CheckError(f"source log {name!r} holds a tentative tuple: {fmt_tuple(bad)}")
        streams[name] = [t for t in tuples if t.kind is Kind.STABLE]
    outputs: dict[str, list[Tuple]] = {}
    for node in config.nodes.values():
        net = QueryNetwork(failure_free(node.network))
        produced: dict[str, list[Tuple]] = {op: [] for op in node.outputs.values()}
        for stream in node.network.inputs:
            if stream not in streams:
                raise CheckError(
                    f"node {node.name!r}: no tuples for input stream {stream!r} (neither a "
                    "logged source nor the output of an earlier node)"
                )
            data = streams[stream]
            split = config.split(node, stream)  # a partition's share, as its producer sends it
            if split is not None:
                data = split.select(data)
            result = net.push(stream, [*data, boundary(END_OF_STREAM)], 0)
            for op, tuples in result.outputs.items():
                if op in produced:
                    produced[op].extend(tuples)
        for global_name, op in node.outputs.items():
            bad = next((t for t in produced[op] if t.kind in (Kind.TENTATIVE, Kind.UNDO)), None)
            if bad is not None:
                where = f"node {node.name!r}, stream {global_name!r}"
                raise CheckError(f"{where}: the failure-free run emitted {fmt_tuple(bad)}")
            data = [t for t in produced[op] if t.kind is Kind.STABLE]
            outputs[global_name] = streams[global_name] = data
    return outputs
