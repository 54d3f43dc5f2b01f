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

What a mode promises (:func:`promised_recovery`): the paper's Table 2, which recovery each
high-availability mode gives a network of each class, beside ours. The paper's types are
its section 3.1 (:class:`RecoveryType`); ours are *precise* wherever the paper's are
*repeating* or *convergent* because downstream drops the duplicates by id (the paper's
section 6 and Table 4: a tuple whose id it already holds is dropped), and DPC is precise
once its tentative results are corrected::

    class               amnesia  passive standby  upstream backup  active standby  dpc
    paper (Table 2)
    repeatable          gap      repeating        repeating        repeating       -
    convergent-capable  gap      repeating        convergent       repeating       -
    deterministic       gap      repeating        divergent        repeating       -
    arbitrary           gap      divergent        divergent        divergent       -
    ours
    repeatable          gap      precise          precise          precise         precise
    convergent-capable  gap      precise          precise          precise         precise
    deterministic       gap      precise          divergent        precise         precise
    arbitrary           gap      divergent        divergent        divergent       precise

Amnesia restarts the network empty at the live end of its inputs: what was in flight or in
the state is lost, a *gap*, for every class. Upstream backup restarts the network empty on
the input upstream still buffers: a deterministic network, which reproduces its output
only from the same initial state, may then emit other tuples, which no id can catch
(divergent). An arbitrary network's replicas differ
from the start, so a mode that switches replicas is divergent for it. DPC's column is its
promise: eventual consistency, the failure-free output once every tentative result is
corrected (DPC assumes replicas that agree; no network built here is arbitrary).
"passive_standby" and "upstream_backup" are not built yet: their rows are ready
(docs/ha-modes.md).

Whether a mode's secondary holds the primary's state (:func:`replicas_share_state`) is the
other fact about a mode the checker needs: only then may it compare the two replicas'
state digests.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

__all__ = ["HA_PROMISES", "NetworkClass", "RecoveryClass", "RecoveryType", "promised_recovery",
           "replicas_share_state"]


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


class RecoveryType(IntEnum):
    """The recovery types of Hwang et al. (section 3.1), ordered from the strongest guarantee
    to the weakest: of two promises, the larger is the weaker (ops_scripts/check/recovery.py
    tells which one a stream shows)."""

    PRECISE = 0
    REPEATING = 1
    CONVERGENT = 2
    DIVERGENT = 3
    GAP = 4

    @property
    def label(self) -> str:
        return self.name.lower()


_P, _D, _G = RecoveryType.PRECISE, RecoveryType.DIVERGENT, RecoveryType.GAP

#: Our Table 2 (module docstring): ``ha`` -> the recovery promised to a network of each
#: class, in :class:`RecoveryClass` order (repeatable, convergent-capable, deterministic,
#: arbitrary).
HA_PROMISES: dict[str, tuple[RecoveryType, RecoveryType, RecoveryType, RecoveryType]] = {
    "dpc": (_P, _P, _P, _P),
    "active_standby": (_P, _P, _P, _D),
    "flux": (_P, _P, _P, _D),
    "passive_standby": (_P, _P, _P, _D),
    "upstream_backup": (_P, _P, _D, _D),
    "amnesia": (_G, _G, _G, _G),
}


def promised_recovery(ha: str, cls: RecoveryClass) -> RecoveryType:
    """The recovery mode ``ha`` promises a query network of class ``cls`` (our Table 2, in
    the module docstring). An unknown mode raises :class:`ValueError` naming it."""
    try:
        row = HA_PROMISES[ha]
    except KeyError:
        known = ", ".join(repr(m) for m in HA_PROMISES)
        raise ValueError(f"unknown high-availability mode ha = {ha!r} (known: {known})") from None
    return row[cls]


#: The modes whose every replica processes the whole input, so that a node's replicas hold
#: the same state once they caught up: DPC's, and active standby's and Flux's pairs. An amnesia
#: secondary holds an empty network, a passive standby the primary's last checkpoint, an
#: upstream backup nothing at all.
_SHARED_STATE = frozenset({"dpc", "active_standby", "flux"})


def replicas_share_state(ha: str) -> bool:
    """Whether the replicas of a node in mode ``ha`` hold the same state (the module
    docstring); an unknown mode raises :class:`ValueError` naming it."""
    promised_recovery(ha, RecoveryClass.REPEATABLE)  # the one check that ``ha`` is known
    return ha in _SHARED_STATE
