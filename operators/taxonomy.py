"""The operator taxonomy of Hwang et al. (ICDE 2005, section 3.2): what a crash and a
restart can do to an operator's output, hence which recovery a high-availability mode can
promise for a query network.

Four classes, each contained in the next (:class:`RecoveryClass`, ordered):

* **repeatable**: restarted from an empty state on the same input from any earlier point,
  it reproduces the output it produced from there on, tuple for tuple (filter, map, and
  operators that emit one output per input or per pair of inputs: union, join);
* **convergent-capable**: restarted so, its first outputs may differ, then it converges to
  the failure-free output (windowed operators whose windows are aligned to absolute tuple
  time, so that a restart cannot shift them: our aggregate, SUnion's buckets);
* **deterministic**: the same initial state and the same input streams give the same
  output (a window aligned to the first tuple seen would be deterministic, not convergent);
* **arbitrary**: anything else (output that depends on arrival times, on the interleaving
  of streams by arrival, or on randomness).

Each operator class declares its own (``Operator.recovery_class``; an operator that does
not is arbitrary), and a query network's class is its most general operator's
(:func:`operators.network.network_class`, the paper's rule). Union and join interleave their
ports in the order the network feeds them, and the network only builds them where one SUnion
orders all their inputs, running its readers in one fixed order per released bucket
(operators/network.py): so their interleave is deterministic and they are repeatable here.
The paper's union, which merges streams by arrival, is arbitrary; a network that fed a union
from two SUnions would be too, which is why it is refused at build time.

SUnion's own timeout (it releases a bucket tentatively after alpha*X) makes its *tentative*
output time-dependent: DPC corrects exactly that output; a process-pair mode runs SUnion
without a timeout, and its stable output is what the class describes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

__all__ = ["NetworkClass", "RecoveryClass"]


class RecoveryClass(IntEnum):
    """The taxonomy's classes, from the most to the least constrained (module docstring)."""

    REPEATABLE = 0
    CONVERGENT_CAPABLE = 1
    DETERMINISTIC = 2
    ARBITRARY = 3

    @property
    def label(self) -> str:
        """The paper's name: "repeatable", "convergent-capable", ..."""
        return self.name.lower().replace("_", "-")


@dataclass(frozen=True)
class NetworkClass:
    """A query network's class and why: the operator that sets it (None: every operator is
    repeatable, or the network is empty) and a sentence saying how."""

    cls: RecoveryClass
    operator: str | None
    reason: str

    def __str__(self) -> str:
        return f"{self.cls.label} ({self.reason})"
