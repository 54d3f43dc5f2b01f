"""The output buffer of one stream that leaves a node (paper section 4.5, DESIGN.md 3).

An SOutput appends everything it emits; the buffer keeps the stream *in force* (UNDOs
applied) so that a downstream replica that (re)subscribes with SUBSCRIBE(stream, last
stable id, last tentative id) gets exactly what it is missing, and it forgets the prefix
that every consumer acknowledged (upstream backup's level-0 acks, Hwang et al.).

Definitions and invariants (``s`` = last stable id, ``t`` = last tentative id):

* In force, data ids strictly increase and data kinds read STABLE* TENTATIVE*: a stable
  tuple never follows a tentative one without an UNDO in between. ``append`` checks both at
  every batch edge (the ids inside a batch are the producer's and are trusted: checking
  each would be per-tuple Python work on the hot path).
* ``UNDO(u)`` applies the UNDO rule of ``protocol/undo_rule.py`` (its one home): it deletes
  from the first data tuple with id > u, or the first tentative boundary after data tuple
  u, to the end, control tuples (BOUNDARY, REC_DONE, ...) included: a positional
  truncation. The control tuples between ``u`` and that tuple stay: they were promises
  about stable data (the boundary that closed the last stable bucket). If there is no such
  tuple, nothing is deleted. ``UNDO(0)`` deletes every data tuple (the control tuples
  before the first one stay). Here "after data tuple u" is found by binary search
  (``_cut``), the rest is ``protocol.undo_rule.undone_from``; the content equals
  ``apply_undos`` of the stream appended (tests/state/test_buffer_property.py). An SOutput
  never lets a tentative boundary out, so the live buffer meets none. An UNDO that would
  delete a stable tuple raises (stable tuples are never undone, DESIGN.md 6.4). UNDO
  tuples themselves are applied, never stored.
* A consumer acks its last *stable* id (the ``s`` it would SUBSCRIBE with), never a
  tentative one: an ack of tentative id 4 that is still in flight when 4 is corrected
  would otherwise let the stable 4 be trimmed before that consumer got it. So a known
  consumer's replay never hits the trim point.
* A consumer is *heard from* once it acked (an Ack, the acks a heartbeat carries, or the
  ``s`` of its Subscribe, which says as much: the publisher passes all three to ``ack``);
  its acks reach every replica of this node, not only the one it reads from, so every
  replica's buffer trims (node/streams/monitor.py). The consumers that *hold trimming*
  are those heard from, and those never heard from until their owner's grace period
  ended (:meth:`OutputBuffer.release_unheard`). On each ack (and change of consumers),
  trimming drops a prefix, up to and including the last STABLE data tuple whose id is <=
  the smallest ack of the consumers that hold trimming, or every stable tuple if none
  does; the control tuples right after that tuple stay (its consumers may not have
  received them). Tentative tuples are never trimmed. A consumer in its grace period that
  never acked, or no consumer at all, trims nothing. ``trimmed_up_to`` is the id of the
  last data tuple trimmed (0: none).
* The grace rule (a consumer never heard from must not pin a buffer forever, a dead one
  must). ``release_unheard`` (the owner calls it once its grace period ended) makes every
  consumer not heard from yet stop holding trimming: *released*. While no consumer holds
  trimming, every append trims too. A released consumer holds trimming again from its
  first ack; it stays *lapsed* until an ack of it reaches the trim point or it is served
  once: a lapsed consumer that subscribes from below the trim point is served from the
  trim point (:meth:`OutputBuffer.replay_lapsed`: ``UNDO(s)`` first if it holds
  tentatives, then everything after the last trimmed tuple); it missed the stable ids
  ``s+1 .. trimmed_up_to``, which the publisher logs, naming it. A consumer that was heard
  from and then went silent (dead, cut off) keeps its last ack and holds trimming there
  for ever: a recovering replica resumes from these buffers (paper section 3.4; DESIGN.md
  4). Any other replay from below the trim point raises :class:`ReplayError`.
* ``replay(s, t)`` returns what makes a subscriber holding the in-force stream through
  data tuple ``max(s, t)`` hold this buffer's in-force stream:
  1. no tentatives held (``t <= s``): everything after data tuple ``s``;
  2. tentatives held, this buffer's last stable id is ``s`` and it holds tentative tuples
     with every id ``s+1 .. t``: everything after ``t`` (the same tentative run goes on;
     the subscriber's ids are not known, so a run with gaps, as a filter leaves, cannot
     be matched and falls to case 3, which is always correct);
  3. otherwise: ``UNDO(s)``, then everything after data tuple ``s``.
  "Everything after" includes the control tuples that follow the named tuple, which the
  subscriber may already have (in case 3 its ``UNDO(s)`` keeps them too): boundaries are
  idempotent, and the subscriber cannot say which it has.
  A replay is history, and carries no REC_DONE: a REC_DONE tells a consumer that the
  producer's reconciliation ends *now* (the corrections reader of node/streams/link.py
  adopts the producer on it), while one in the buffer ended a reconciliation in the past,
  maybe one before the producer's current one. Served to a reader, a REC_DONE that sat
  right after data tuple ``s`` since an earlier reconciliation made it adopt a replica that
  was still stabilizing, stalled, and starve there while a partner served fresh results
  (simulate seed 70580). A replica whose reconciliation ended before the subscription is
  STABLE by the next heartbeat, which moves its consumers by ids (node/streams/upstream.py).
  ``after(s)`` is the in-force stream after data tuple ``s`` with its REC_DONEs, for a
  reader's own buffer of corrections (node/streams/corrections.py).
  ``s`` older than the trim point raises :class:`ReplayError`; ``s`` newer than this
  buffer's last stable id raises :class:`ReplayAheadError` (the subscriber holds stable
  tuples this replica has not produced yet).
* A subscriber **ahead** (its ``s`` above this buffer's last stable id: it took stable
  tuples from a partner this replica, in UP_FAILURE, has not produced yet) is served
  through an :class:`AheadView` instead of being refused, so that it can fail over to this
  replica and keep getting fresh (tentative) results. Replicas are deterministic, so this
  replica's stable tuples through ``s`` will be the ones the subscriber holds: the view
  drops data tuples with id <= ``s``, raises an UNDO below ``s`` to ``UNDO(s)`` (only if it
  passed tentative tuples after ``s``: the subscriber's stable prefix is never undone) and
  passes everything through once this stream's stable tuples reach ``s``.

Cost: a batch without UNDO costs one C-level pass over its kinds plus a list ``extend``;
ids are found by binary search over the in-force list (control tuples carry no id and are
skipped by looking right to the next data tuple); a trimmed prefix is dropped in bulk when
it is at least half the list, so appends and trims are O(1) amortized per tuple.

Memory: with a :class:`~state.spill_list.SpillList` (``spill=``: the owner's
``buffer_memory``) the held stream's oldest part waits on disk beyond the bound, and every
operation above reads it back where it reaches there (a replay after a long failure, an
UNDO of a long tentative run); a trimmed prefix is then dropped at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from operator import itemgetter

from protocol.tuples import Kind, Tuple, undo
from protocol.undo_rule import undone_from

from .errors import ReplayAheadError, ReplayError, StateError
from .spill import NO_SPILL, SpillStats
from .spill_list import SpillList, SpillReader

__all__ = ["AheadView", "Catchup", "OutputBuffer"]

STABLE = Kind.STABLE
TENTATIVE = Kind.TENTATIVE
UNDO = Kind.UNDO
REC_DONE = Kind.REC_DONE
_kind_of = itemgetter(0)
# Kinds above TENTATIVE are control tuples (protocol.tuples.Kind numbering).
_LAST_DATA_KIND = int(TENTATIVE)
# Drop the trimmed prefix physically once it is this long and at least half the list.
_COMPACT_MIN = 1024


class AheadView:
    """What a subscriber that holds stable tuples through ``s``, ahead of this buffer,
    receives of this stream (module docstring, "ahead"). ``view(batch)`` filters one batch;
    ``passing`` turns True once this stream caught up with ``s`` (then: no filter)."""

    __slots__ = ("_sent_tentative", "_undone", "passing", "s")

    def __init__(self, s: int) -> None:
        self.s = s
        self.passing = False
        self._sent_tentative = False  # tentative tuples after s went out: an UNDO is due
        self._undone = False  # an UNDO(s) went out: its REC_DONE goes too

    def view(self, batch: Iterable[Tuple]) -> list[Tuple]:
        if self.passing:
            return list(batch)
        out: list[Tuple] = []
        s = self.s
        for x in batch:
            kind = x[0]
            if self.passing:
                out.append(x)
            elif kind is STABLE:
                if x[1] >= s:
                    self.passing = True  # caught up: the next tuples follow s
                    if x[1] > s:
                        out.append(x)
            elif kind is TENTATIVE:
                if x[1] > s:
                    out.append(x)
                    self._sent_tentative = True
            elif kind is UNDO:
                if x[1] >= s:
                    out.append(x)
                elif self._sent_tentative:  # take back only what it sent after s
                    out.append(undo(s))
                    self._sent_tentative = False
                    self._undone = True
            elif kind is Kind.REC_DONE:
                if self._undone:
                    out.append(x)
                    self._undone = False
            else:
                out.append(x)  # boundaries and other control tuples
        return out


class OutputBuffer:
    """The in-force output stream ``stream`` since the trim point. See the module docstring."""

    __slots__ = (
        "_acks",
        "_ahead",
        "_free",
        "_head",
        "_items",
        "_last_id",
        "_last_stable_id",
        "_released",
        "_tent",
        "_trimmed_up_to",
        "retain",
        "stream",
    )

    def __init__(self, stream: str, *, retain: bool = True, spill: SpillList | None = None
                 ) -> None:
        """``retain=False``: every append trims every stable tuple at once, whatever the
        consumers acked (fault tolerance off, for ``dpc bench overhead``: no replay from
        here is possible). ``spill``: hold the stream in it, its oldest part on disk past
        its bound (a long failure downstream, state/spill_list.py), instead of a list."""
        self.stream = stream
        self.retain = retain
        # _items[_head:] is held; _items[:_head] was trimmed and awaits compaction.
        self._items: list[Tuple] | SpillList = [] if spill is None else spill
        self._head = 0
        # Index in _items of the first TENTATIVE tuple in force, None when there is none.
        self._tent: int | None = None
        self._last_id = 0
        self._last_stable_id = 0
        self._trimmed_up_to = 0
        # Consumer name -> highest id it acknowledged (None: not heard from yet).
        self._acks: dict[str, int | None] = {}
        # Consumers released by the grace rule and lapsed since (module docstring).
        self._released: set[str] = set()
        # No consumer holds trimming, but there are consumers: appends trim too.
        self._free = False
        #: The lowest ack of the consumers holding trimming when every one of them acked
        #: beyond the last stable id (each got tuples from this replica's partner, Flux's
        #: dangling sequence numbers); 0 otherwise. Appending up to it trims at once.
        self._ahead = 0

    # ------------------------------------------------------------------ producing
    def append(self, tuples: Iterable[Tuple]) -> None:
        """Append what the SOutput emitted, applying UNDOs. A batch that breaks an invariant
        raises :class:`StateError`; the segments before its last UNDO stay applied."""
        batch = tuples if isinstance(tuples, list) else list(tuples)
        if not batch:
            return
        kinds = list(map(_kind_of, batch))
        if UNDO not in kinds:
            self._extend(batch, kinds)
            return
        start = 0
        for i, k in enumerate(kinds):
            if k == UNDO:
                if i > start:
                    self._extend(batch[start:i], kinds[start:i])
                self._undo(batch[i][1])
                start = i + 1
        if start < len(batch):
            self._extend(batch[start:], kinds[start:])

    def _extend(self, batch: list[Tuple], kinds: list[Kind]) -> None:
        n = len(kinds)
        first = 0
        while first < n and kinds[first] > _LAST_DATA_KIND:
            first += 1
        if first == n:  # control tuples only
            self._items.extend(batch)
            return
        last = n - 1
        while kinds[last] > _LAST_DATA_KIND:
            last -= 1
        if batch[first][1] <= self._last_id:
            raise StateError(
                f"stream {self.stream!r}: tuple id {batch[first][1]} appended after id "
                f"{self._last_id}; ids must increase (reusing ids needs an UNDO first)"
            )
        if self._tent is None:
            if TENTATIVE in kinds:
                k = kinds.index(TENTATIVE)
                self._no_stable_after(batch, kinds, k, batch[k][1])
                j = k - 1
                while j >= 0 and kinds[j] > _LAST_DATA_KIND:
                    j -= 1
                if j >= 0:
                    self._last_stable_id = batch[j][1]
                self._tent = len(self._items) + k
            else:
                self._last_stable_id = batch[last][1]
        else:
            self._no_stable_after(batch, kinds, 0, self._items[self._tent][1])
        self._last_id = batch[last][1]
        self._items.extend(batch)
        if not self.retain:
            self._trim_to(self._last_stable_id)
        elif self._free or self._ahead > self._trimmed_up_to:
            self._trim()

    def _no_stable_after(self, batch: list[Tuple], kinds: list[Kind], k: int, tid: int) -> None:
        try:
            i = kinds.index(STABLE, k)
        except ValueError:
            return
        raise StateError(
            f"stream {self.stream!r}: STABLE tuple id {batch[i][1]} follows TENTATIVE tuple "
            f"id {tid} without an UNDO; a stable tuple never follows a tentative one"
        )

    def _undo(self, u: int) -> None:
        if u < self._last_stable_id:
            if u < self._trimmed_up_to:
                raise ReplayError(
                    f"stream {self.stream!r}: UNDO({u}) would undo stable tuples that the "
                    f"buffer already trimmed (trimmed up to id {self._trimmed_up_to})"
                )
            raise StateError(
                f"stream {self.stream!r}: UNDO({u}) would undo stable tuples (last stable "
                f"id {self._last_stable_id}); only tentative tuples can be undone"
            )
        kept = self._cut(u)  # right after the last data tuple kept
        items = self._items
        # The control tuples before the first undone one were about stable data: they stay.
        p = undone_from(items, kept)
        if p == len(items):
            return  # nothing after data tuple u is undone
        del items[p:]
        if self._tent is not None and self._tent >= p:
            self._tent = None
        # items[p - 1] may be a control tuple (no id): the last id is that of items[kept - 1].
        self._last_id = items[kept - 1][1] if kept > self._head else self._trimmed_up_to

    # ------------------------------------------------------------------ consuming
    def replay(self, last_stable_id: int, last_tentative_id: int) -> list[Tuple]:
        """What a subscriber holding ``(last_stable_id, last_tentative_id)`` needs next
        (cases 1-3 of the module docstring)."""
        return self.catchup(last_stable_id, last_tentative_id).all()

    def catchup(self, last_stable_id: int, last_tentative_id: int) -> Catchup:
        """:meth:`replay`, read as it is sent: from a spill list, the held stream is read
        back a batch at a time (a resubscriber after a long failure), never all at once."""
        s, t = last_stable_id, last_tentative_id
        if s < self._trimmed_up_to:
            raise ReplayError(
                f"stream {self.stream!r}: replay from id {s} requested but the buffer was "
                f"trimmed up to id {self._trimmed_up_to}"
            )
        if s > self._last_stable_id:
            raise ReplayAheadError(
                f"stream {self.stream!r}: replay from stable id {s} requested but the last "
                f"stable id here is {self._last_stable_id}; the subscriber is ahead"
            )
        items = self._items
        if t <= s:
            return Catchup([], _history_from(items, self._cut(s)))
        if s == self._last_stable_id and t <= self._last_id:
            # Every data tuple after s is tentative here. Ids strictly increase, so t - s of
            # them in (s, t] means exactly the ids s+1..t: the run the subscriber holds.
            ps, pt = self._cut(s), self._cut(t)
            if _data_between(items, ps, pt) == t - s:
                return Catchup([], _history_from(items, pt))
        return Catchup([undo(s)], _history_from(items, self._cut(s)))

    def after(self, s: int) -> list[Tuple]:
        """The in-force stream after data tuple ``s``, control tuples (REC_DONE too)
        included. ``s`` is not checked against the trim point: for a buffer never trimmed."""
        return self._items[self._cut(s) :]

    def replay_ahead(self, last_stable_id: int, last_tentative_id: int,
                     ) -> tuple[list[Tuple], AheadView]:
        """For a subscriber ahead of this buffer (``last_stable_id`` above its last stable
        id): what it needs now, and the view that filters what follows (module docstring)."""
        s, t = last_stable_id, last_tentative_id
        ahead = AheadView(s)
        first = [undo(s)] if t > s else []  # tentatives it holds from elsewhere: gone
        return first + ahead.view(self._items[self._cut(self._last_stable_id):]), ahead

    def start_after(
        self, last_id: int, held: Iterable[Tuple] = (), trimmed_up_to: int | None = None
    ) -> None:
        """An empty buffer whose stream goes on after data tuple ``last_id``, all stable (a
        replica that recovered from a partner's state there). ``held`` is what the
        partner's buffer held then: its in-force stream after data tuple ``trimmed_up_to``
        through ``last_id``, so that a consumer the partner had not served yet can be served
        here. Replays from before the start raise :class:`ReplayError`, as if that prefix
        were trimmed."""
        if self._items or self._last_id:
            raise StateError(f"stream {self.stream!r}: start_after on a buffer in use")
        start = last_id if trimmed_up_to is None else trimmed_up_to
        self._last_id = self._last_stable_id = self._trimmed_up_to = start
        self.append(list(held))
        if self._last_id != last_id or self._tent is not None:
            raise StateError(
                f"stream {self.stream!r}: the stream held after id {start} must be stable and "
                f"end at id {last_id}, but it ends at id {self._last_id}"
                + (" with tentative tuples" if self._tent is not None else "")
            )

    def set_consumers(self, names: Iterable[str]) -> None:
        """The consumers whose acks trim the buffer. Acks (and releases) of consumers that
        stay are kept; a new consumer holds trimming back until it acks (or until the next
        ``release_unheard``)."""
        self._acks = {name: self._acks.get(name) for name in names}
        self._released &= self._acks.keys()
        self._update_free()
        self._trim()

    def ack(self, consumer: str, tuple_id: int) -> None:
        """``consumer`` holds the stable stream through id ``tuple_id``: its last stable id,
        the one it would SUBSCRIBE with. Acks only move forward (a late, older ack is
        ignored). An ack beyond this buffer's last stable id trims up to that id, and the rest
        as it is appended (Flux's dangling sequence numbers: tests/state/
        test_flux_buffer_equivalence.py). A released consumer holds trimming again from here
        (module docstring, the grace rule)."""
        try:
            prev = self._acks[consumer]
        except KeyError:
            known = ", ".join(repr(c) for c in self._acks) or "none"
            raise StateError(
                f"stream {self.stream!r}: ack from unknown consumer {consumer!r} "
                f"(known consumers: {known})"
            ) from None
        acked = tuple_id if prev is None or tuple_id > prev else prev
        self._acks[consumer] = acked
        if consumer in self._released:
            if acked >= self._trimmed_up_to:
                self._released.discard(consumer)  # caught up: nothing of it was trimmed
            self._update_free()
        self._trim()

    def release_unheard(self) -> list[str]:
        """The owner's grace period ended: every consumer not heard from yet stops holding
        trimming (until its first ack) and is lapsed. Returns their names."""
        names = [c for c, a in self._acks.items() if a is None and c not in self._released]
        self._released.update(names)
        self._update_free()
        self._trim()
        return names

    def release(self, consumer: str) -> None:
        """``consumer`` holds nothing of this stream and will not ask for any of it (a
        process pair's secondary in amnesia: it restarts empty, node/replica/runtime.py):
        it stops holding trimming, as the grace rule releases a consumer never heard from,
        until its next ack (a live Subscribe acks the last stable tuple)."""
        if consumer not in self._acks:
            known = ", ".join(repr(c) for c in self._acks) or "none"
            raise StateError(f"stream {self.stream!r}: release of unknown consumer "
                             f"{consumer!r} (known consumers: {known})")
        self._acks[consumer] = None
        self._released.add(consumer)
        self._update_free()
        self._trim()

    def lapsed(self, consumer: str) -> bool:
        """Whether ``consumer`` was released by the grace rule and has not caught up since:
        a replay from below the trim point is served to it from there (``replay_lapsed``)."""
        return consumer in self._released

    def replay_lapsed(self, consumer: str, last_stable_id: int,
                      last_tentative_id: int) -> list[Tuple]:
        """What a lapsed ``consumer`` holding ``(s, t)``, ``s`` below the trim point, gets:
        ``UNDO(s)`` if it holds tentatives (``t > s``), then everything after the last
        trimmed data tuple. It missed the stable ids ``s+1 .. trimmed_up_to``; it counts as
        holding the stream through ``trimmed_up_to`` from here (an ack of it), so it is
        lapsed no more. Raises :class:`ReplayError` for any other consumer."""
        s, t = last_stable_id, last_tentative_id
        if consumer not in self._released or s >= self._trimmed_up_to:
            raise ReplayError(
                f"stream {self.stream!r}: {consumer!r} asked for a replay from id {s} as a "
                f"lapsed consumer, but it is not one below the trim point (trimmed up to id "
                f"{self._trimmed_up_to}; lapsed consumers: "
                f"{', '.join(map(repr, sorted(self._released))) or 'none'})"
            )
        out = [undo(s)] if t > s else []
        out.extend(_history(self._items, self._head))
        self.ack(consumer, self._trimmed_up_to)  # lapsed no more (ack reaches the trim point)
        return out

    # ------------------------------------------------------------------ inspection
    def spill_stats(self) -> SpillStats:
        """What the held stream keeps on disk (nothing without a spill list)."""
        return self._items.stats() if isinstance(self._items, SpillList) else NO_SPILL

    def close_spill(self) -> None:
        """Delete what the held stream keeps on disk (its owner stops)."""
        if isinstance(self._items, SpillList):
            self._items.close()  # deletes the segments, empties the list

    def __len__(self) -> int:
        """Number of tuples held (in force and not trimmed), control tuples included."""
        return len(self._items) - self._head

    def __iter__(self) -> Iterator[Tuple]:
        """The tuples held, oldest first (a copy: appending meanwhile is safe)."""
        return iter(self._items[self._head :])

    @property
    def first_id(self) -> int | None:
        """Id of the oldest data tuple held; None if none is held."""
        items = self._items
        for i in range(self._head, len(items)):
            if items[i][0] <= _LAST_DATA_KIND:
                return items[i][1]
        return None

    @property
    def last_id(self) -> int:
        """Id of the newest data tuple in force (trimmed ones count); 0 if none."""
        return self._last_id

    @property
    def last_stable_id(self) -> int:
        """Id of the newest STABLE tuple in force (trimmed ones count); 0 if none."""
        return self._last_stable_id

    @property
    def trimmed_up_to(self) -> int:
        """Id of the newest data tuple trimmed; 0 if nothing was trimmed."""
        return self._trimmed_up_to

    @property
    def consumers(self) -> tuple[str, ...]:
        return tuple(self._acks)

    def consumer_status(self) -> dict[str, dict[str, int | bool | None]]:
        """Per consumer: its highest ack (None: not heard from), whether it holds trimming,
        whether it is lapsed (plain data, for /status)."""
        return {
            c: {"acked": a, "holds": a is not None or c not in self._released,
                "lapsed": c in self._released}
            for c, a in self._acks.items()
        }

    # ------------------------------------------------------------------ internals
    def _cut(self, u: int) -> int:
        """Index right after the last held data tuple with id <= u (``_head`` if none).

        Binary search on key(i) = id of the first data tuple at or after i (infinite if
        none): non-decreasing in i, and the answer is the first i with key(i) > u.
        """
        items = self._items
        n = len(items)
        lo, hi = self._head, n
        while lo < hi:
            mid = (lo + hi) // 2
            j = mid
            while j < n and items[j][0] > _LAST_DATA_KIND:
                j += 1
            if j == n or items[j][1] > u:
                hi = mid
            else:
                lo = j + 1  # key is <= u from mid through j
        return lo

    def _update_free(self) -> None:
        released = self._released
        self._free = bool(self._acks) and all(
            a is None and c in released for c, a in self._acks.items()
        )

    def _trim(self) -> None:
        acks = self._acks
        if not acks:
            return
        last = self._last_stable_id  # tentative tuples are never trimmed
        low: int | None = None
        released = self._released
        for c, a in acks.items():
            if a is None:
                if c in released:
                    continue  # the grace rule: it no longer holds trimming
                self._ahead = 0
                return
            low = a if low is None or a < low else low
        self._ahead = low if low is not None and low > last else 0
        self._trim_to(last if low is None else min(low, last))

    def _trim_to(self, low: int) -> None:
        """Drop the prefix through the last stable data tuple with id <= ``low``."""
        if low <= self._trimmed_up_to:
            return
        p = self._cut(low)
        if p == self._head:
            return
        items = self._items
        self._trimmed_up_to = items[p - 1][1]
        self._head = p
        if isinstance(items, SpillList) or (p >= _COMPACT_MIN and 2 * p >= len(items)):
            # (A spill list drops its prefix at once: the disk it frees is worth it.)
            del items[:p]
            self._head = 0
            if self._tent is not None:
                self._tent -= p


class Catchup:
    """What a (re)subscriber is sent before the live feed (:meth:`OutputBuffer.catchup`):
    ``first`` (an UNDO, or nothing), then the held stream from a position, without its
    REC_DONEs (a replay is history: module docstring). ``take`` hands it out a batch at a
    time; from a spill list it is read back only then."""

    __slots__ = ("_at", "_first", "_rest")

    def __init__(self, first: list[Tuple], rest: list[Tuple] | SpillReader) -> None:
        self._first = first
        self._rest = rest
        self._at = 0  # in a list ``rest``: what was taken already

    def __len__(self) -> int:
        """Tuples left to send (a spilled part's REC_DONEs counted until read)."""
        return len(self._first) + len(self._rest) - self._at

    def take(self, n: int) -> list[Tuple]:
        out = self._first[:n]
        del self._first[:n]
        rest = self._rest
        if isinstance(rest, list):
            k = n - len(out)
            out += rest[self._at:self._at + k]
            self._at = min(len(rest), self._at + k)
            return out
        while len(out) < n and len(rest):
            out += [x for x in rest.take(n - len(out)) if x[0] is not REC_DONE]
        return out

    def all(self) -> list[Tuple]:
        if not self._first and isinstance(self._rest, list) and not self._at:
            out, self._rest = self._rest, []  # (the common case: no copy)
            return out
        return self.take(len(self))

    def close(self) -> None:
        """Not sent after all (the subscription ended): release what it reads from."""
        self._first = []
        if isinstance(self._rest, list):
            self._rest, self._at = [], 0
        else:
            self._rest.close()


def _history_from(items: list[Tuple] | SpillList, start: int) -> list[Tuple] | SpillReader:
    """``items[start:]`` as a catch-up's source: a spill list's is read lazily."""
    if isinstance(items, SpillList):
        return items.reader(start)
    return _history(items, start)


def _data_between(items: list[Tuple] | SpillList, a: int, b: int) -> int:
    """How many data tuples ``items[a:b]`` holds (a spill list's read a batch at a time)."""
    if isinstance(items, list):
        return sum(1 for x in items[a:b] if x[0] <= _LAST_DATA_KIND)
    n = 0
    for i in range(a, b, 10_000):
        n += sum(1 for x in items[i:min(b, i + 10_000)] if x[0] <= _LAST_DATA_KIND)
    return n


def _history(items: list[Tuple] | SpillList, start: int) -> list[Tuple]:
    """``items[start:]`` without its REC_DONEs (a replay is history: module docstring)."""
    tail = items[start:]
    if REC_DONE not in map(_kind_of, tail):  # C-level scan: REC_DONEs are rare
        return tail
    return [x for x in tail if x[0] is not REC_DONE]
