"""The Flux controller's failure detector and event log (pure, STYLE.md 3).

Flux (Shah, Hellerstein, Brewer, section 3.3.1) relies on a *controller* that detects
failures by heartbeats and tells every process of the dataflow ``fail(x)`` and ``avail(x)``
in one total order: two processes never see two events in different orders, so a
take-over or a catch-up is decided once, not by each process's own timing.

:class:`Detector` turns probes of the replicas of flux nodes (answered or not, and whether
the replica is ready: a restarted one is not until its catch-up is over) into events:

* a replica is *up* from its first ready answer (the cluster's start: no event);
* ``fail(x)``: an up replica that answered nothing ready for more than ``misses``
  intervals (the paper's 3 x 100 ms), or that answered not ready, or as a new incarnation
  (it restarted faster than the detection: it lost its state all the same);
* ``avail(x)``: a failed replica answers ready again: its catch-up is over (it holds its
  partner's state and its inputs resumed where the partner's were);
* a failed replica whose new incarnation answers, not ready, is *joining* (catching up):
  its silence or a newer incarnation is ``fail`` of that incarnation, so that its partner
  stops waiting for a catch-up that will not end (the paper's idempotent catch-up).

:class:`EventLog` numbers them from 1, in the order decided; a follower asks for the events
after the last it applied (node/flux/follow.py), so it applies each once, in order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum

__all__ = ["Decision", "Detector", "Event", "EventLog", "Kind", "apply"]


class Kind(Enum):
    FAIL = "fail"
    AVAIL = "avail"


@dataclass(frozen=True, slots=True)
class Event:
    """Event ``seq``: ``replica``'s incarnation ``incarnation`` (its process's start time)
    failed, or is available."""

    seq: int
    kind: Kind
    replica: str
    incarnation: int = 0

    def to_json(self) -> list[object]:
        return [self.seq, self.kind.value, self.replica, self.incarnation]

    @classmethod
    def from_json(cls, raw: object) -> Event:
        """An event as the controller's /events sends it; ValueError if it is not one."""
        if (not isinstance(raw, list) or len(raw) != 4 or type(raw[0]) is not int
                or raw[1] not in ("fail", "avail") or not isinstance(raw[2], str)
                or type(raw[3]) is not int):
            raise ValueError(f"not a Flux event [seq, 'fail' | 'avail', replica, "
                             f"incarnation]: {raw!r}")
        return cls(raw[0], Kind(raw[1]), raw[2], raw[3])


class EventLog:
    """Every event decided, numbered from 1."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    @property
    def last(self) -> int:
        return len(self.events)

    def append(self, kind: Kind, replica: str, incarnation: int = 0) -> Event:
        e = Event(len(self.events) + 1, kind, replica, incarnation)
        self.events.append(e)
        return e

    def after(self, seq: int) -> list[Event]:
        return self.events[max(0, seq):]


#: A decision: (kind, replica, its incarnation concerned).
Decision = tuple[Kind, str, int]


class Detector:
    """Up / failed state of each replica from its probes (module docstring). Times in µs."""

    def __init__(self, replicas: Iterable[str], interval: int, misses: int) -> None:
        self.interval, self.misses = interval, misses
        self.up: dict[str, bool] = dict.fromkeys(replicas, False)
        self.seen: set[str] = set()  # answered ready at least once
        #: Failed, but its current incarnation answers, not ready yet: catching up. Its
        #: silence or a newer incarnation is a failure too (the paper's standby failing
        #: during the move: its partner must stop waiting for it).
        self.joining: set[str] = set()
        self._last: dict[str, int] = {}  # last answer
        self._incarnation: dict[str, int] = {}

    def observe(self, replica: str, now: int, *, ready: bool, incarnation: int = 0,
                ) -> list[Decision]:
        """A probe of ``replica`` answered (``ready``: serving, not recovering;
        ``incarnation``: when its process started, so that a restart the probes did not
        catch down still counts as the failure it was)."""
        out: list[Decision] = []
        if self._incarnation.setdefault(replica, incarnation) != incarnation:
            out += self._fail(replica)  # (the incarnation it knew)
            self._incarnation[replica] = incarnation
        self._last[replica] = now
        if not ready:
            if self.up[replica]:
                return out + self._fail(replica)
            self.joining.add(replica)
            return out
        first = replica not in self.seen
        self.seen.add(replica)
        self.joining.discard(replica)
        if self.up[replica]:
            return out
        self.up[replica] = True
        return out if first else [*out, (Kind.AVAIL, replica, incarnation)]

    def tick(self, now: int) -> list[Decision]:
        """The replicas silent too long, failed now (in name order: deterministic)."""
        limit = self.misses * self.interval
        out: list[Decision] = []
        for r in sorted(self.up):
            if (self.up[r] or r in self.joining) and now - self._last.get(r, now) > limit:
                out += self._fail(r)
        return out

    def _fail(self, replica: str) -> list[Decision]:
        if not self.up[replica] and replica not in self.joining:
            return []
        self.up[replica] = False
        self.joining.discard(replica)
        return [(Kind.FAIL, replica, self._incarnation.get(replica, 0))]


def apply(log: EventLog, decided: Sequence[Decision]) -> list[Event]:
    """Number ``decided`` into ``log``; the new events."""
    return [log.append(k, r, i) for k, r, i in decided]
