"""Fault injection at one process: the vocabulary, the rules in force, the faulty links.

Every fault is made at a replica's end of its connections (DESIGN.md section 6), asked for
through its control plane (``POST /fault``) or, in the simulation, through the very same
call:

* ``ops.py``: the vocabulary: ``Cut`` / ``Shape`` / ``Heal`` / ``Stall`` / ``Unstall`` as
  data, ``to_body()`` and :func:`from_body` (the wire form), ``Direction``, ``CutKind``;
* ``rules.py``: :class:`Faults`, the cut rules and shapes a process holds per peer, and the
  :class:`FaultyTransport` that wraps its transport;
* ``connection.py``: one connection under those rules (drops, resets, delay pumps);
* ``shaping.py``: link shapes (delay, bandwidth, slow reader) and their bounded mailbox.
"""

from node.faults.connection import FaultyConnection
from node.faults.ops import (
    Cut,
    CutKind,
    Direction,
    FaultOp,
    Heal,
    Shape,
    Stall,
    Unstall,
    checked_cut,
    from_body,
)
from node.faults.rules import CutRule, Faults, FaultyTransport
from node.faults.shaping import LinkShape

__all__ = [
    "Cut", "CutKind", "CutRule", "Direction", "FaultOp", "Faults", "FaultyConnection",
    "FaultyTransport", "Heal", "LinkShape", "Shape", "Stall", "Unstall", "checked_cut",
    "from_body",
]
