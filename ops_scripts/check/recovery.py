"""Which recovery a stream shows (Hwang et al., ICDE 2005, section 3.1): the final stable
stream a consumer holds, against the failure-free reference of its stream (pure).

The paper's types, from the strongest:

* **precise**: the stream is the reference (a consumer cannot tell there was a failure);
* **repeating**: nothing lost; some tuples came twice, identical (a secondary re-emitted
  what its primary had sent); without the repeats, the reference;
* **convergent**: nothing lost; some extra tuples differ from every tuple of the reference
  (a restarted window emitted a result from part of its input before the state converged);
  without them, the reference;
* **gap**: tuples of the reference are missing (lost in flight or with a state that was
  not rebuilt), whatever else happened.

(The paper's *divergent* type, where removing the duplicates does not give a failure-free
output, needs a non-deterministic network; against the reference of a deterministic one it
shows as a gap, and :func:`classify` reports it so.)

Tuples are compared by content, ``(time, tmax, values)``: ids are positions in a stream,
and a restarted producer may number differently (that ids never repeat is the
no-duplicates property's business, ops_scripts/check/properties.py). The alignment is :class:`difflib.SequenceMatcher`'s (no junk heuristic): each
reference tuple it cannot match is lost; each received tuple it cannot match is extra, a
*repeat* if its content is in the reference, else *different*.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Any

# The types live with the table of what each mode promises (one home, STYLE.md 8b);
# re-exported here, where the checker's imports always found them.
from operators.taxonomy import RecoveryType
from protocol.tuples import Tuple

__all__ = ["Recovery", "RecoveryType", "classify", "content"]


@dataclass(frozen=True)
class Recovery:
    """What :func:`classify` found: the type, the counts behind it, and the first tuple of
    each kind of difference (None: none) for evidence."""

    type: RecoveryType
    lost: int = 0
    repeated: int = 0
    different: int = 0
    first_lost: Tuple | None = None
    first_extra: Tuple | None = None

    def __str__(self) -> str:
        if self.type is RecoveryType.PRECISE:
            return "precise"
        parts = [f"{n} {what}" for n, what in ((self.lost, "lost"), (self.repeated, "repeated"),
                                              (self.different, "different")) if n]
        return f"{self.type.label} ({', '.join(parts)})"


def content(t: Tuple) -> tuple[Any, ...]:
    """What recoveries compare of a tuple: ``(time, tmax, values)``, not its id."""
    return (t[2], t[3], tuple(t[4]))


def classify(got: Sequence[Tuple], reference: Sequence[Tuple]) -> Recovery:
    """The recovery ``got`` (the data tuples a consumer holds, in order, UNDOs applied) shows
    against ``reference`` (the failure-free stream's data tuples)."""
    a, b = [content(t) for t in got], [content(t) for t in reference]
    if a == b:
        return Recovery(RecoveryType.PRECISE)
    known = set(b)
    lost = repeated = different = 0
    first_lost: Tuple | None = None
    first_extra: Tuple | None = None
    for op, i1, i2, j1, j2 in SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op == "equal":
            continue
        if j2 > j1:  # reference tuples with no match: lost
            lost += j2 - j1
            first_lost = first_lost or reference[j1]
        for i in range(i1, i2):  # received tuples with no match: extra
            if a[i] in known:
                repeated += 1
            else:
                different += 1
            first_extra = first_extra or got[i]
    if lost:
        kind = RecoveryType.GAP
    elif different:
        kind = RecoveryType.CONVERGENT
    else:  # nothing lost, nothing new: repeats
        kind = RecoveryType.REPEATING
    return Recovery(kind, lost, repeated, different, first_lost, first_extra)
