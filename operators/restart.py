"""Restart points of a query network: upstream backup's precise recovery (Hwang et al., ICDE
2005, sections 5.2 and 6).

Upstream backup restarts a crashed node's query from an *empty* state on the input its
upstream neighbours kept. That is precise only from a point where the state really was
empty and the operators' numbering is known, so that the replay emits the very tuples, ids
included, that the crashed primary emitted after it, which downstream drops by id.

A *restart point* is such a point: taken after a network call that left every partitioned
operator without a part (:func:`at_rest`: a tumbling window just closed and the next one has
no input yet; a stateless operator is always at rest), it holds every operator's header
(operators/cec.py ``header_of``: counters, watermarks, SUnion's release point; no part, none
open) and each input stream's resume id. :func:`restart` restores a network to it (the
eventual checkpoint of CEC with no part: every operator at those headers) and says where
each input resumes. The paper maps acknowledged output back onto input by "input-tuple
indicators" per tuple; a restart point is that mapping taken where it is exact.

Which networks have restart points (:func:`restart_problems`): those CEC can recover
(operators/cec.py ``cec_problems``) whose partitioned operators all come to rest: tumbling
aggregates (``slide == window``). A sliding window or a join's time band is never empty
under a continuous stream.
"""

from __future__ import annotations

from typing import Any

from state.cec import EventualCheckpoint

from .aggregate import Aggregate
from .base import Plain
from .cec import Recovered, cec_problems, header_of, recover
from .network import QueryNetwork
from .parts import Partitioned
from .soutput import SOutput
from .sunion import SUnion

__all__ = ["at_rest", "restart", "restart_point", "restart_problems"]


def restart_problems(net: QueryNetwork) -> list[str]:
    """Why ``net`` has no restart points (empty: it has)."""
    problems = cec_problems(net)
    for op in net.operators:
        if not isinstance(op, Partitioned):
            continue
        if not isinstance(op, Aggregate):
            problems.append(f"operator '{op.name}' ({op.type_name}) keeps state that is never "
                            "empty under a continuous stream (a join's time band)")
        elif op.slide != op.window:
            problems.append(f"operator '{op.name}' (aggregate) has sliding windows (slide "
                            f"{op.slide} < window {op.window}): some window is always open")
    return problems


def at_rest(net: QueryNetwork) -> bool:
    """Whether no partitioned operator holds a part now (a restart point may be taken)."""
    return not any(op.part_keys() for op in net.operators if isinstance(op, Partitioned))


def restart_point(net: QueryNetwork) -> dict[str, Any]:
    """The network's restart point now (call only :func:`at_rest`): ``h``, every operator's
    header; ``resume``, each input stream's id after which a restart replays it; ``out``,
    each SOutput's last stable id (what the node had emitted then)."""
    headers: dict[str, Plain] = {op.name: header_of(op) for op in net.operators}
    resume: dict[str, int] = {}
    out: dict[str, int] = {}
    for op in net.operators:
        if isinstance(op, SUnion):
            for stream, i in zip(net._inputs[net._index[op.name]], op.resume_ids(), strict=True):
                resume[stream] = min(resume.get(stream, i), i)
        elif isinstance(op, SOutput):
            out[op.name] = op.last_stable_id
    return {"h": headers, "resume": resume, "out": out}


def restart(net: QueryNetwork, headers: dict[str, Plain], now: int = 0) -> Recovered:
    """Restore ``net`` (as built, or as an earlier restore left it) to the restart point whose
    headers are ``headers``; the caller replays each input after ``Recovered.resume``."""
    ec = EventualCheckpoint(end_t=0, end_headers=headers, parts={}, start_t=0,
                            start_headers=headers)
    return recover(net, ec, now)
