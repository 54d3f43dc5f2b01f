"""``join``: a symmetric, band (windowed) equi-join of two streams.

Spec::

    {"type": "join", "inputs": [left, right], "on": [["sym", "sym"]], "band": 5,
     "right_prefix": "right_"}

``on`` lists ``[left attribute, right attribute]`` pairs (at least one); ``band`` (>= 0,
tuple-time units). A left tuple l and a right tuple r match when every pair is equal and
``|l.time - r.time| <= band``. A match emits ``l.values + r.values`` with ``time =
max(l.time, r.time)`` and ``tmax = max(l.tmax, r.tmax)``. Output schema: the left names,
then the right names, a right name that collides getting ``right_prefix``.

Theory of operation (symmetric hash join): a tuple arriving on one port probes the other
side's stored tuples with the same key, in their arrival order, emits the matches, then is
stored under its key. A stored left tuple is evicted once ``watermarks[1] > l.time +
band`` (no future right tuple can match it), and symmetrically; a tuple that is already
past that point on arrival is not stored at all. Eviction only trims state: the band is
always checked on probe, so a stored tuple that could have been evicted never matches.

Eviction costs what it evicts. Each side also keeps its stored tuples' keys in arrival
order (``_order``, a key once per stored tuple). While a side's arrivals are in time
order (always, behind the SUnion that a join's inputs come from), the tuples to evict are
a prefix of that order and of each key's list: popped from the front, no scan. A side
whose arrivals went back in time (a join fed otherwise) is evicted by a full scan until
it is in order again; both ways leave exactly the same state.

Invariants: output order is arrival order (like union, the join is order-dependent
across ports; SUnion upstream makes it deterministic); every future output involves a
future input, so :meth:`oldest_time` is the min watermark; :meth:`oldest_seq` is the
smallest log seq among stored tuples.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection, Sequence
from itertools import pairwise
from operator import itemgetter
from typing import Any

from protocol.tuples import Tuple, Value

from .base import Operator, Plain
from .errors import SpecError
from .parts import Accept, Partitioned, PartKey
from .registry import register
from .spec import Params, attribute_index
from .taxonomy import RecoveryClass

__all__ = ["Join"]

# A stored tuple: (time, tmax, values, seq). A side: {key: [stored, ...]} in arrival order.
Stored = tuple[int, int, tuple[Value, ...], int]
Side = dict[Any, list[Stored]]

_new = tuple.__new__
_NONE = 2**63  # "no stored tuple" for the min time / min seq trackers
_FIRST = -(2**63)  # the last stored time before any


@register
class Join(Operator, Partitioned):
    """Symmetric band equi-join of input 0 (left) and input 1 (right). Its parts
    (operators/parts.py) are time slices of ``max(band, 1)`` of each side's stored tuples."""

    type_name = "join"
    #: Each output is one pair within the band of their own times (operators/taxonomy.py).
    recovery_class = RecoveryClass.REPEATABLE
    n_inputs = 2

    def configure(self, params: Params) -> None:
        owner = self.describe()
        left, right = self.input_schemas
        pairs = params.get_raw("on")
        if (
            not isinstance(pairs, list | tuple)
            or not pairs
            or not all(
                isinstance(p, list | tuple) and len(p) == 2 and all(isinstance(a, str) for a in p)
                for p in pairs
            )
        ):
            raise SpecError(
                f"{owner}: parameter 'on' must be a non-empty list of [left attribute, "
                f"right attribute] pairs, got {pairs!r}"
            )
        self.on = [(str(a), str(b)) for a, b in pairs]
        lpos = [attribute_index(owner, left, a, "left join attribute") for a, _ in self.on]
        rpos = [attribute_index(owner, right, b, "right join attribute") for _, b in self.on]
        self.band = params.get_int("band", minimum=0)
        self._slice = max(self.band, 1)
        prefix = params.get_str("right_prefix", "right_")
        names = list(left) + [prefix + n if n in left else n for n in right]
        if len(set(names)) != len(names):
            raise SpecError(
                f"{owner}: output attribute names collide even with right_prefix "
                f"{prefix!r}: ({', '.join(names)})"
            )
        self.output_schema = tuple(names)
        self._keys: tuple[Callable[[Sequence[Value]], Any], ...] = (
            itemgetter(*lpos),
            itemgetter(*rpos),
        )
        self.clear()

    # ------------------------------------------------------------------ data path
    def on_data(self, port: int, tuples: Sequence[Tuple], out: list[Tuple]) -> None:
        mine, other = self._sides[port], self._sides[1 - port]
        key = self._keys[port]
        band = self.band
        floor = self.watermarks[1 - port] - band  # store only tuples with time >= floor
        kind, last_id = self._out_kind, self.last_id
        append = out.append
        left = port == 0
        seq = self.seq_base
        min_time = self._min_time[port]
        min_seq = self._min_seq[port]
        order = self._order[port]
        last = self._last_time[port]
        for i, t in enumerate(tuples):
            v = t[4]
            k = key(v)
            tm = t[2]
            matches = other.get(k)
            if matches:
                for e in matches:
                    et = e[0]
                    if -band <= tm - et <= band:  # Operator.emit, inlined (per result)
                        last_id += 1
                        append(_new(Tuple, (
                            kind,
                            last_id,
                            tm if tm > et else et,
                            t[3] if t[3] > e[1] else e[1],
                            v + e[2] if left else e[2] + v,
                        )))
            if tm >= floor:
                stored = mine.get(k)
                if stored is None:
                    mine[k] = [(tm, t[3], v, seq + i)]
                else:
                    stored.append((tm, t[3], v, seq + i))
                order.append(k)
                if tm < last:
                    self._in_order[port] = False
                last = tm
                if tm < min_time:
                    min_time = tm
                if min_seq == _NONE:
                    min_seq = seq + i
        self._min_time[port] = min_time
        self._min_seq[port] = min_seq
        self._last_time[port] = last
        self.last_id = last_id

    def on_boundary(self, port: int, out: list[Tuple]) -> None:
        for side in (0, 1):
            floor = self.watermarks[1 - side] - self.band
            if self._min_time[side] < floor:
                self._evict(side, floor)

    def _evict(self, side: int, floor: int) -> None:
        """Drop side's stored tuples with time < floor; recompute its trackers."""
        if not self._in_order[side]:
            self._evict_by_scan(side, floor)
            return
        store, order = self._sides[side], self._order[side]
        popleft = order.popleft
        while order:
            lst = store[order[0]]
            if lst[0][0] >= floor:  # the oldest stored tuple is the first of its key's list
                self._min_time[side] = lst[0][0]  # in time order: the first is the oldest
                self._min_seq[side] = lst[0][3]  # and the first to arrive
                return
            if len(lst) == 1:
                del store[popleft()]
            else:
                popleft()
                del lst[0]
        self._min_time[side] = self._min_seq[side] = _NONE

    def _evict_by_scan(self, side: int, floor: int) -> None:
        """The same for a side whose arrivals went back in time: every key is scanned."""
        store = self._sides[side]
        for k in list(store):
            kept = [e for e in store[k] if e[0] >= floor]
            if kept:
                store[k] = kept
            else:
                del store[k]
        self._reindex(side)

    def _reindex(self, side: int) -> None:
        """Rebuild side's arrival order, its trackers and whether it is in time order."""
        entries = sorted(
            ((e[3], e[0], k) for k, lst in self._sides[side].items() for e in lst),
            key=itemgetter(0),
        )
        times = [tm for _, tm, _ in entries]
        self._order[side] = deque(k for _, _, k in entries)
        self._in_order[side] = all(a <= b for a, b in pairwise(times))
        self._last_time[side] = times[-1] if times else _FIRST
        self._min_time[side] = min(times, default=_NONE)
        self._min_seq[side] = entries[0][0] if entries else _NONE

    def oldest_seq(self) -> int | None:
        m = min(self._min_seq)
        return None if m == _NONE else m

    def clear(self) -> None:
        self._sides: tuple[Side, Side] = ({}, {})
        self._min_time = [_NONE, _NONE]
        self._min_seq = [_NONE, _NONE]
        #: Per side: the stored tuples' keys in arrival order, whether their times never
        #: went back, and the last stored time.
        self._order: list[deque[Any]] = [deque(), deque()]
        self._in_order = [True, True]
        self._last_time = [_FIRST, _FIRST]

    # ------------------------------------------------------------------ snapshots
    def snapshot_state(self) -> Plain:
        """Per side, the stored tuples in arrival (seq) order; keys are recomputed."""
        return [
            sorted(
                ([e[0], e[1], list(e[2]), e[3]] for lst in side.values() for e in lst),
                key=itemgetter(3),
            )
            for side in self._sides
        ]

    def digest_state(self) -> Plain:
        """The stored tuples in arrival order, without their log sequence numbers."""
        return [[e[:3] for e in side] for side in self.snapshot_state()]

    def restore_state(self, state: Plain) -> None:
        self.clear()
        for port, entries in enumerate(state):
            store, key = self._sides[port], self._keys[port]
            for time, tmax, values, seq in entries:
                v = tuple(values)
                store.setdefault(key(v), []).append((time, tmax, v, seq))
            self._reindex(port)

    # ------------------------------------------------------------------ parts (CEC)
    # A part is one side's stored tuples in one time slice [s * w, (s + 1) * w), w = max(band,
    # 1), keyed (side, s): a tuple is stored into exactly one, and a slice closes when
    # eviction emptied it. Arrivals are in time order (behind the SUnion), so a side's
    # arrival order is slice order, then arrival within the slice: a replayed tuple
    # appended to its slice gets the seq after the last of its slice and the ones before,
    # below the next slice's (the tuples it came after in the original took those seqs).
    def part_keys(self) -> Collection[PartKey]:
        w = self._slice
        return {(side, e[0] // w) for side, store in enumerate(self._sides)
                for lst in store.values() for e in lst}

    def part_state(self, key: PartKey) -> Plain:
        side, s = key
        w = self._slice
        return sorted(([e[0], e[1], list(e[2]), e[3]] for lst in self._sides[side].values()
                       for e in lst if e[0] // w == s), key=itemgetter(3))

    def key_to_plain(self, key: PartKey) -> Plain:
        return list(key)

    def key_from_plain(self, plain: Plain) -> PartKey:
        return (plain[0], plain[1])

    def global_state(self) -> Plain:
        return None

    def load_parts(self, global_state: Plain, parts: Sequence[tuple[PartKey, Plain]]) -> None:
        sides: list[list[Plain]] = [[], []]
        for (side, _), entries in parts:
            sides[side].extend(entries)
        self.restore_state([sorted(entries, key=itemgetter(3)) for entries in sides])
        self.on_boundary(0, [])  # what the restored watermarks evicted since a footprint

    def rebuild(self, port: int, tuples: Sequence[Tuple], accept: Accept) -> None:
        w = self._slice
        floor = self.watermarks[1 - port] - self.band
        state = self.snapshot_state()
        mine = state[port]
        last_seq: dict[int, int] = {}
        for e in mine:
            s = e[0] // w
            last_seq[s] = max(last_seq.get(s, e[3]), e[3])
        changed = False
        for t in tuples:
            s = t[2] // w
            if t[2] >= floor and accept((port, s), t[1]):
                # After every stored tuple of its slice and the slices before it (eviction
                # since the footprint may have emptied its own slice).
                seq = last_seq[s] = max((q for k, q in last_seq.items() if k <= s), default=0) + 1
                mine.append([t[2], t[3], list(t[4]), seq])
                changed = True
        if changed:
            mine.sort(key=itemgetter(3))
            self.restore_state(state)
