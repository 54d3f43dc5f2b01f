"""The operator interface, and the one dispatch that handles control tuples for every operator.

Contract (every operator, STYLE.md 5):

* Never called concurrently. No I/O, no clock: ``now`` is passed in.
* Deterministic: the output is a function of the sequence of calls and their arguments.
* ``restore(snapshot())`` on a fresh instance preserves all future behaviour, including undo.
  Snapshots are plain data (dicts, lists, str, int, float, bool, None) that orjson encodes.
* Taint is sticky (paper section 4, property 4): once a TENTATIVE input has been processed,
  every later output is TENTATIVE until an UNDO or a restore removes that input. So a stable
  output is never produced after a tentative one, and an UNDO can never retract a stable one.
* ``tmax`` of an output is the max ``tmax`` of the inputs that produced it.
* A BOUNDARY is emitted whenever :meth:`Operator.oldest_time` advances: the oldest tuple
  time the operator can still produce. While tainted it is a *tentative* boundary
  (``protocol.tuples.tentative_boundary``), and a tentative boundary on an input taints the
  operator like a tentative tuple: a window it closes may still gain corrected tuples.

Subclasses write only the data path:

* :meth:`on_data` -- a run of STABLE/TENTATIVE tuples of one port; append outputs with
  :meth:`emit` (which numbers them and marks them tentative while tainted).
* :meth:`on_boundary` -- a port's watermark advanced (close windows, evict state).
* :meth:`oldest_time`, :meth:`oldest_seq`, :meth:`clear`, :meth:`snapshot_state`,
  :meth:`restore_state`.

Undo/redo (paper section 3.4.1), done generically here so that no operator writes an
``undo`` method. Every input tuple and boundary goes into an *input log* with an absolute
sequence number ``seq``. Before every run of input, a *marker* records the base bookkeeping
(last output id, taint, watermarks, last boundary out) and the operator's ``oldest_seq()``:
the oldest logged input still contributing to its state (the paper's stream markers).
``UNDO(u)`` on port p means "drop p's tuples after id u": the operator finds the log entry j
of p's tuple u, clears its state, replays ``log[marker.oldest : j+1]`` with outputs
discarded (state is now exactly the state right after j, and the id counter too), emits
``UNDO(last output id)``, drops p's undone entries and re-feeds the other ports' entries
that followed j (their outputs are the corrections) -- except their tentative ones: inside
a node every UNDO is the SUnion's retraction of its whole tentative suffix, which reaches
every port in the same wave, so those are undone too (and j moves back before the first of
them); see ``_undo_by_rebuild``. The log is trimmed while untainted to
what rebuilding the current state needs (about the state size); once tainted it keeps
everything back to the last stable point, which is what a correction can target.

Operators with ``preserves_ids = True`` (single-input, stateless, output id = input id:
filter, map) skip the log entirely: an UNDO passes through unchanged.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from bisect import bisect_right
from collections.abc import Sequence
from math import isfinite
from typing import Any, ClassVar

import orjson

from protocol.tuples import (
    TENTATIVE_BOUNDARY_ID,
    Kind,
    Schema,
    Tuple,
    Value,
    boundary,
    make_tuple,
    tentative_boundary,
    undo,
)
from state.spill import SpillStore
from state.spill_list import SpillList

from .errors import OperatorError
from .spec import Params
from .taxonomy import RecoveryClass

__all__ = ["NO_TIME", "Operator", "Plain", "tuple_from_plain", "tuple_to_plain"]

#: Watermark of a port that has not sent a boundary yet.
NO_TIME = -(2**62)

#: Plain data, as snapshots are made of.
Plain = Any

STABLE = Kind.STABLE
TENTATIVE = Kind.TENTATIVE
BOUNDARY = Kind.BOUNDARY
UNDO = Kind.UNDO
REC_DONE = Kind.REC_DONE
_new = tuple.__new__


def tuple_to_plain(t: Tuple) -> list[Any]:
    """A tuple as plain data (orjson cannot encode NamedTuples)."""
    return [int(t[0]), t[1], t[2], t[3], list(t[4])]


def tuple_from_plain(p: Sequence[Any]) -> Tuple:
    return make_tuple(Kind(p[0]), p[1], p[2], p[3], tuple(p[4]))


def _port_undo_cut(log: Sequence[Tuple], ports: list[int], port: int, u: int) -> int | None:
    """Index in ``log`` of the first of ``port``'s entries that ``UNDO(u)`` removes (the rule
    of protocol/undo_rule.py on that port's entries), None if none.

    Read forwards, stopping at the first data tuple with id > u: a port's entries are in
    force, so their data ids increase, and the cut is then the first data tuple or
    tentative boundary after the last data tuple with id <= u. The cut of an episode's UNDO
    lies near the start of the log (trimmed while untainted), so a long failure's log,
    spilled to disk, is barely read."""
    candidate: int | None = None  # the first port tentative boundary since after_kept
    for k, e in enumerate(log):
        if ports[k] != port:
            continue
        kind = e[0]
        if kind is STABLE or kind is TENTATIVE:
            if e[1] > u:
                return k if candidate is None else candidate
            candidate = None
        elif candidate is None and kind is BOUNDARY and e[1] == TENTATIVE_BOUNDARY_ID:
            candidate = k
    return candidate


def _non_finite(x: Any, path: str) -> str | None:
    """``"<value> at <path>"`` of the first NaN or infinity in plain data ``x``, or None."""
    if type(x) is float:
        return None if isfinite(x) else f"{x!r} at {path}"
    if isinstance(x, dict):
        items: Any = x.items()
    elif isinstance(x, list | tuple):
        items = enumerate(x)
    else:
        return None
    for k, v in items:
        found = _non_finite(v, f"{path}[{k!r}]")
        if found is not None:
            return found
    return None


def _is_tentative(t: Tuple) -> bool:
    """A TENTATIVE tuple or a tentative boundary: input an UNDO of the episode removes."""
    return t[0] is TENTATIVE or (t[0] is BOUNDARY and t[1] == TENTATIVE_BOUNDARY_ID)


class _Marker:
    """Base bookkeeping right before log entry ``seq``, and where a rebuild replays from."""

    __slots__ = ("boundary_out", "last_id", "oldest", "seq", "tainted", "watermarks")

    def __init__(
        self, seq: int, oldest: int, last_id: int, tainted: bool, watermarks: list[int], boundary_out: int
    ) -> None:
        self.seq = seq
        self.oldest = oldest
        self.last_id = last_id
        self.tainted = tainted
        self.watermarks = watermarks
        self.boundary_out = boundary_out

    def to_plain(self) -> list[Any]:
        return [self.seq, self.oldest, self.last_id, self.tainted, self.watermarks, self.boundary_out]

    @classmethod
    def from_plain(cls, p: Sequence[Any]) -> _Marker:
        return cls(p[0], p[1], p[2], p[3], list(p[4]), p[5])


class _Rebuild:
    """Where a recovered operator's replay still rebuilds (see Operator.start_rebuild)."""

    __slots__ = ("cut", "done", "feet")

    def __init__(self, cut: list[int], feet: dict[Any, list[int]] | None, done: list[bool]) -> None:
        self.cut = cut
        self.feet = feet
        self.done = done

    def take(self, op: Operator, port: int, run: Sequence[Tuple]) -> Sequence[Tuple]:
        """Rebuild from (or drop) the head of ``run`` up to the cut; return the rest."""
        cut = self.cut[port]
        k = 0
        n = len(run)
        while k < n and run[k][1] <= cut:
            k += 1
        if k:
            feet = self.feet
            if feet is not None:
                def accept(key: Any, tid: int) -> bool:
                    f = feet.get(key)
                    if f is None or f[port] >= tid:
                        return False
                    f[port] = tid  # the footprint follows what the part holds now
                    return True
                op.rebuild(port, run[:k], accept)  # type: ignore[attr-defined]
        if k < n:
            self.done[port] = True
            if all(self.done):
                op._rebuild = None
        return run if k == 0 else run[k:]

    def to_plain(self, op: Operator) -> Plain:
        feet = None if self.feet is None else [
            [op.key_to_plain(k), list(f)] for k, f in self.feet.items()]  # type: ignore[attr-defined]
        return {"cut": list(self.cut), "feet": feet, "done": list(self.done)}

    @classmethod
    def from_plain(cls, op: Operator, p: Plain) -> _Rebuild:
        feet = None if p["feet"] is None else {
            op.key_from_plain(k): list(f) for k, f in p["feet"]}  # type: ignore[attr-defined]
        return cls(list(p["cut"]), feet, list(p["done"]))


class Operator(ABC):
    """Base class of every operator. See the module docstring for the contract."""

    #: Registry name, e.g. ``"filter"`` (the ``type`` of an operator spec).
    type_name: ClassVar[str] = ""
    #: What a restart does to its output (operators/taxonomy.py); undeclared: arbitrary.
    recovery_class: ClassVar[RecoveryClass] = RecoveryClass.ARBITRARY
    #: Number of input ports; ``None`` means "one or more".
    n_inputs: ClassVar[int | None] = 1
    #: Single-input stateless operators whose output ids are their input ids.
    preserves_ids: ClassVar[bool] = False
    #: SUnion and SOutput handle UNDO themselves and keep no undo log.
    uses_undo_log: ClassVar[bool] = True
    #: What a tentative BOUNDARY on an input does: ``"taint"`` (ordinary operators: it may
    #: close windows, so what follows is tentative) or ``"ignore"`` (SUnion: it is no
    #: promise; SOutput: it must not leave the node).
    tentative_boundaries: ClassVar[str] = "taint"

    # Base bookkeeping (set in _reset_base, restored by restore).
    now: int
    last_id: int
    seq_base: int
    watermarks: list[int]
    watermark: int
    _tainted: bool
    _first_tentative_id: int
    _out_kind: Kind
    _boundary_out: int
    _seq: int
    _log_start: int
    _log: list[Tuple] | SpillList
    _log_ports: list[int]
    _markers: list[_Marker]
    _boundary_log: list[tuple[int, int, int]]
    _log_start_wm: list[int]
    _replaying: bool
    _last_in_id: int
    in_ids: list[int]
    _rebuild: _Rebuild | None
    _boundary_floor: int
    _boundary_history: list[tuple[int, int]]

    def __init__(self, name: str, input_schemas: Sequence[Schema], params: Params) -> None:
        self.name = name
        self.input_schemas: tuple[Schema, ...] = tuple(input_schemas)
        n = len(self.input_schemas)
        if self.n_inputs is not None and n != self.n_inputs:
            raise OperatorError(f"{self.describe()}: takes {self.n_inputs} input(s), got {n}")
        if n == 0:
            raise OperatorError(f"{self.describe()}: needs at least one input")
        #: Schema of the output stream. Subclasses set it in :meth:`configure`.
        self.output_schema: Schema = self.input_schemas[0]
        #: Control-stream tuples (UP_FAILURE, REC_REQUEST) for the consistency manager;
        #: the query network drains this after every call.
        self.signals: list[Tuple] = []
        #: Whether this instance logs its input for undo/redo (``uses_undo_log``, unless the
        #: query network turned it off: fault tolerance off, ``QueryNetwork(undo_logs=False)``).
        self.keeps_undo_log = self.uses_undo_log
        #: Where the undo log spills past its memory bound (None: it stays in memory).
        self.log_spill: tuple[SpillStore, int] | None = None
        self.configure(params)
        params.finish()
        self._n_ports = n
        self._reset_base()

    # ------------------------------------------------------------------ subclass API
    def configure(self, params: Params) -> None:
        """Read parameters, resolve attribute names against ``input_schemas``, set
        ``output_schema``. Raise SpecError (via Params) on anything wrong."""

    @abstractmethod
    def on_data(self, port: int, tuples: Sequence[Tuple], out: list[Tuple]) -> None:
        """Process a run of STABLE/TENTATIVE tuples from one port. ``self.seq_base`` is the
        log sequence number of ``tuples[0]`` (``tuples[i]`` has ``seq_base + i``)."""

    def on_boundary(self, port: int, out: list[Tuple]) -> None:
        """``self.watermarks[port]`` advanced; ``self.watermark`` is the min over ports."""

    def oldest_time(self) -> int:
        """The oldest tuple time this operator can still produce (drives output BOUNDARYs)."""
        return self.watermark

    def oldest_seq(self) -> int | None:
        """Log seq of the oldest input still contributing to the state; None if no state."""
        return None

    def clear(self) -> None:
        """Forget all operator state (the base bookkeeping is reset separately)."""

    def snapshot_state(self) -> Plain:
        """The operator's own state as plain data (may alias live state: the base copies)."""
        return None

    def restore_state(self, state: Plain) -> None:
        """Inverse of :meth:`snapshot_state`."""

    def next_deadline(self) -> int | None:
        """The earliest ``now`` at which :meth:`on_timer` has work, if any."""
        return None

    def on_timer(self, now: int) -> list[Tuple]:
        """Called when ``now`` reached :meth:`next_deadline`."""
        return []

    def on_control(self, port: int, t: Tuple, out: list[Tuple]) -> None:
        """Control tuples other than BOUNDARY and UNDO. REC_DONE passes through."""
        if t[0] is REC_DONE:
            out.append(t)
            return
        raise OperatorError(
            f"{self.describe()}: cannot process a {t[0].name} tuple on input {port}"
        )

    def on_undo(self, port: int, last_kept_id: int, out: list[Tuple]) -> None:
        """Roll back port's tuples after ``last_kept_id``. The default is the generic rebuild."""
        if self.preserves_ids:
            if self._tainted and self._first_tentative_id > last_kept_id:
                self._set_taint(False, 0)
            # Boundaries emitted while tainted were derived from the undone suffix: undone too.
            kept = [e for e in self._boundary_history if e[0] <= last_kept_id] if self._tainted else []
            self._boundary_history = kept
            self._boundary_out = kept[-1][1] if kept else self._boundary_floor
            self.watermarks = [self._boundary_out]
            self.watermark = self._boundary_out
            self._last_in_id = min(self._last_in_id, last_kept_id)
            out.append(undo(last_kept_id))
            return
        if not self.keeps_undo_log:
            raise OperatorError(f"{self.describe()}: got UNDO({last_kept_id}) on input {port} but "
                                "keeps no undo log (the query network's undo logs are off)")
        self._undo_by_rebuild(port, last_kept_id, out)

    def set_log_spill(self, store: SpillStore | None, limit_bytes: int = 0) -> None:
        """Keep at most ``limit_bytes`` of the undo log in memory, the rest in ``store``
        (a long failure under undo/redo; state/spill_list.py); None: all in memory. A
        runtime setting: output and snapshots are the same either way."""
        entries = list(self._log)
        if isinstance(self._log, SpillList):
            self._log.clear()
        self.log_spill = None if store is None else (store, limit_bytes)
        self._log = self._new_log(entries)

    def start_rebuild(self, cut: Sequence[int],
                      feet: dict[Any, list[int]] | None = None) -> None:
        """After a recovery from the CEC log (operators/cec.py): this operator was restored
        as it was when its input on each port had reached id ``cut[port]``, and the replay
        brings that input again. Data tuples up to the cut go, without any output, into the
        parts named in ``feet`` (a :class:`~operators.parts.Partitioned` operator: part key ->
        footprint per port), each only past its footprint, or are dropped (``feet`` None:
        what they caused was emitted already). Part of the state: snapshots carry it."""
        if len(cut) != self._n_ports:
            raise OperatorError(f"{self.describe()}: a rebuild cut needs {self._n_ports} "
                                f"port ids, got {list(cut)}")
        self._rebuild = _Rebuild(list(cut), feet, [False] * self._n_ports)

    @property
    def tainted(self) -> bool:
        """Sticky taint: every output is tentative until an UNDO or a restore (module
        docstring)."""
        return self._tainted

    @property
    def rebuilding(self) -> bool:
        """Some port's replay has not passed the cut of :meth:`start_rebuild` yet."""
        return self._rebuild is not None

    def log_memory(self) -> tuple[int, int] | None:
        """(undo log entries in memory, the bound in entries: 0 until the first one) under
        :meth:`set_log_spill`; None without."""
        log = self._log
        return (log.in_memory, log.limit or 0) if isinstance(log, SpillList) else None

    def _new_log(self, entries: list[Tuple]) -> list[Tuple] | SpillList:
        if self.log_spill is None:
            return entries
        log = SpillList(*self.log_spill)
        log.extend(entries)
        return log

    # ------------------------------------------------------------------ helpers
    def describe(self) -> str:
        return f"operator '{self.name}' ({self.type_name})"

    def emit(self, out: list[Tuple], time: int, tmax: int, values: tuple[Value, ...]) -> None:
        """Append a new output tuple with the next id (TENTATIVE while tainted)."""
        self.last_id += 1
        out.append(_new(Tuple, (self._out_kind, self.last_id, time, tmax, values)))

    # ------------------------------------------------------------------ public API
    def process(self, port: int, batch: Sequence[Tuple], now: int = 0) -> list[Tuple]:
        """Feed a batch of tuples arriving on input ``port``; return the output tuples."""
        if not 0 <= port < self._n_ports:
            raise OperatorError(f"{self.describe()}: no input port {port}")
        self.now = now
        out: list[Tuple] = []
        self._feed(port, batch, out)
        return out

    def digest_state(self) -> Plain:
        """The state replicas must agree on, as plain data: ``snapshot_state`` without the
        undo log's bookkeeping (sequence numbers count every input logged, tentative ones
        that were undone included, so they differ between replicas that saw different
        failures). Operators whose state holds sequence numbers override it."""
        return self.snapshot_state()

    def snapshot(self) -> Plain:
        """Everything, as plain data: ``restore(snapshot())`` preserves future behaviour.

        The result shares nothing with the live operator (a checkpoint must not change
        when processing goes on): it is passed through one orjson round trip, which also
        proves it encodable. ``snapshot_state`` may therefore return live structures.

        orjson writes a NaN or an infinity as null, so a float that overflowed (a sum past
        1.8e308) would come back None: such a state is refused with an OperatorError
        naming where the value is (the wire would refuse the result too)."""
        live = self._snapshot_live()
        body = orjson.dumps(live)
        if b"null" in body:  # only then the exact (slower) scan for NaN and infinities
            where = _non_finite(live, "snapshot")
            if where is not None:
                raise OperatorError(
                    f"{self.describe()}: its state holds {where}: a checkpoint cannot hold it "
                    "(JSON has no NaN or infinity); a float overflowed or an expression made it"
                )
        return orjson.loads(body)

    def _snapshot_live(self) -> Plain:
        live = self._snapshot_live_without_state()
        live["state"] = self.snapshot_state()
        return live

    def _snapshot_live_without_state(self) -> dict[str, Any]:
        return {
            "v": 1,
            "type": self.type_name,
            "base": {
                "last_id": self.last_id,
                "tainted": self._tainted,
                "first_tentative_id": self._first_tentative_id,
                "watermarks": list(self.watermarks),
                "boundary_out": self._boundary_out,
                "seq": self._seq,
                "log_start": self._log_start,
                "log_ports": list(self._log_ports),
                "log": [tuple_to_plain(t) for t in self._log],
                "markers": [m.to_plain() for m in self._markers],
                "boundary_log": [list(e) for e in self._boundary_log],
                "log_start_wm": list(self._log_start_wm),
                "last_in_id": self._last_in_id,
                "in_ids": list(self.in_ids),
                "rebuild": None if self._rebuild is None else self._rebuild.to_plain(self),
                "boundary_floor": self._boundary_floor,
                "boundary_history": [list(e) for e in self._boundary_history],
            },
        }

    def restore(self, snap: Plain) -> None:
        """Replace all state by a snapshot's (taken from an operator of the same spec)."""
        self.restore_base(snap)
        self.restore_state(snap["state"])

    def restore_base(self, snap: Plain) -> None:
        """Restore the base bookkeeping of a snapshot and clear the operator's own state
        (what :meth:`restore` does before ``restore_state``; CEC then loads parts)."""
        if not isinstance(snap, dict) or snap.get("type") != self.type_name:
            got = snap.get("type") if isinstance(snap, dict) else type(snap).__name__
            raise OperatorError(f"{self.describe()}: cannot restore a snapshot of {got!r}")
        b = snap["base"]
        self.last_id = b["last_id"]
        self._set_taint(b["tainted"], b["first_tentative_id"])
        self.watermarks = list(b["watermarks"])
        self.watermark = min(self.watermarks)
        self._boundary_out = b["boundary_out"]
        self._seq = b["seq"]
        self._log_start = b["log_start"]
        self._log_ports = list(b["log_ports"])
        if isinstance(self._log, SpillList):
            self._log.clear()
        self._log = self._new_log([tuple_from_plain(p) for p in b["log"]])
        self._markers = [_Marker.from_plain(m) for m in b["markers"]]
        self._boundary_log = [(e[0], e[1], e[2]) for e in b["boundary_log"]]
        self._log_start_wm = list(b["log_start_wm"])
        self._last_in_id = b["last_in_id"]
        self.in_ids = list(b["in_ids"])
        rb = b["rebuild"]
        self._rebuild = None if rb is None else _Rebuild.from_plain(self, rb)
        self._boundary_floor = b["boundary_floor"]
        self._boundary_history = [(e[0], e[1]) for e in b["boundary_history"]]
        self.clear()

    # ------------------------------------------------------------------ internals
    def _reset_base(self) -> None:
        self.now = 0
        self.last_id = 0
        self.seq_base = 0
        self._set_taint(False, 0)
        self.watermarks = [NO_TIME] * self._n_ports
        self.watermark = NO_TIME
        self._boundary_out = NO_TIME
        # Undo log: entry k has absolute seq ``_log_start + k``.
        self._seq = 0
        self._log_start = 0
        self._log = []  # (set_log_spill may make it a SpillList)
        self._log_ports = []
        self._markers = []
        # Logged boundaries as (seq, port, time), and the watermarks at the log's start:
        # together they give the watermarks at any logged seq (see _watermarks_at).
        self._boundary_log = []
        self._log_start_wm = [NO_TIME] * self._n_ports
        # Replaying (rebuild): outputs are discarded and nothing is logged.
        self._replaying = False
        # Id-preserving operators: the last input id, and the boundaries emitted while
        # tainted with the input id they followed (see on_undo).
        self._last_in_id = 0
        #: Per port, the id of the last data tuple that came in (the input position a CEC
        #: footprint names: operators/cec.py).
        self.in_ids = [0] * self._n_ports
        # Replaying after a recovery from the CEC log (start_rebuild): the input up to a
        # cut, which only rebuilds parts (operators/cec.py).
        self._rebuild = None
        self._boundary_floor = NO_TIME
        self._boundary_history = []

    def _set_taint(self, tainted: bool, first_tentative_id: int) -> None:
        self._tainted = tainted
        self._first_tentative_id = first_tentative_id
        self._out_kind = TENTATIVE if tainted else STABLE

    def _feed(self, port: int, batch: Sequence[Tuple], out: list[Tuple]) -> None:
        """The one dispatch: split the batch into data runs and control tuples."""
        start = 0
        n = len(batch)
        i = 0
        while i < n:
            kind = batch[i][0]
            if kind is STABLE:
                i += 1
                continue
            if kind is TENTATIVE:
                if not self._tainted and i > start:
                    # The taint starts with this tuple: the stable prefix is its own run.
                    self._data_run(port, batch[start:i], out)
                    start = i
                i += 1
                continue
            if i > start:
                self._data_run(port, batch[start:i], out)
            self._control(port, batch[i], out)
            i += 1
            start = i
        if start < n:
            self._data_run(port, batch if start == 0 else batch[start:], out)

    def _data_run(self, port: int, run: Sequence[Tuple], out: list[Tuple]) -> None:
        # A run is all-stable, or starts with the tuple that begins the taint, or comes while
        # tainted: the taint flips after the run is logged, so its marker holds the state
        # *before* the first tentative tuple (what an UNDO rebuilds).
        if self._rebuild is not None:
            run = self._rebuild.take(self, port, run)
            if not run:
                return
        self.in_ids[port] = run[-1][1]
        if self.preserves_ids:
            if not self._tainted and run[0][0] is TENTATIVE:
                self._set_taint(True, run[0][1])
            self._last_in_id = run[-1][1]
            mark = len(out)
            self.on_data(port, run, out)
            if self._tainted:
                for k in range(mark, len(out)):
                    t = out[k]
                    if t[0] is STABLE:
                        out[k] = t._replace(kind=TENTATIVE)
            return
        if self.uses_undo_log:
            self._log_entries(port, run)
        if not self._tainted and run[0][0] is TENTATIVE:
            self._set_taint(True, run[0][1])
        self.on_data(port, run, out)

    def _control(self, port: int, t: Tuple, out: list[Tuple]) -> None:
        kind = t[0]
        if kind is BOUNDARY:
            tentative = t[1] == TENTATIVE_BOUNDARY_ID
            if tentative and self.tentative_boundaries == "ignore":
                return
            if self._rebuild is not None and t[2] <= self.watermarks[port]:
                # Replayed, and taken before the crash: a port's stable boundaries only
                # rise. (Counted again, it would shift the sequence numbers parts hold.)
                return
            if self.uses_undo_log and not self.preserves_ids:
                self._log_entries(port, (t,))
                if not self._replaying and self.keeps_undo_log:
                    self._boundary_log.append((self._seq - 1, port, t[2]))
            if tentative and not self._tainted:
                self._set_taint(True, self._last_in_id + 1)
            self._boundary(port, t[2], out)
        elif kind is UNDO:
            self.on_undo(port, t[1], out)
        else:
            self.on_control(port, t, out)

    def _boundary(self, port: int, time: int, out: list[Tuple]) -> None:
        if time <= self.watermarks[port]:
            return
        self.watermarks[port] = time
        self.watermark = min(self.watermarks)
        self.on_boundary(port, out)
        b = self.oldest_time()
        if b > self._boundary_out and b > NO_TIME:
            self._boundary_out = b
            out.append(tentative_boundary(b) if self._tainted else boundary(b))
            if self.preserves_ids:
                # (last input id before it, boundary): what an UNDO rolls back to. Only the
                # entries since the taint began can be undone; one more is the floor.
                if not self._tainted:
                    self._boundary_floor = b
                    self._boundary_history.clear()
                else:
                    self._boundary_history.append((self._last_in_id, b))

    # -- undo log ---------------------------------------------------------------
    def _log_entries(self, port: int, entries: Sequence[Tuple]) -> None:
        # Without an undo log (``keeps_undo_log`` off) the entries are still numbered: the
        # operators' state orders by these sequence numbers, so the output must not change.
        if self._replaying or not self.keeps_undo_log:
            self.seq_base = self._seq
            self._seq += len(entries)
            return
        seq = self._seq
        oldest = self.oldest_seq()
        self._markers.append(
            _Marker(
                seq,
                seq if oldest is None else min(oldest, seq),
                self.last_id,
                self._tainted,
                list(self.watermarks),
                self._boundary_out,
            )
        )
        if not self._tainted:
            self._trim()
        self.seq_base = seq
        self._log.extend(entries)
        self._log_ports.extend([port] * len(entries))
        self._seq = seq + len(entries)

    def _trim(self) -> None:
        """While untainted every logged tuple is stable, and stable tuples are never undone:
        the first entry an UNDO can remove is a future one. So only the newest marker (the
        state right now) and the entries it replays from are needed."""
        markers = self._markers
        if len(markers) > 1:
            del markers[:-1]
        cut = markers[-1].oldest - self._log_start
        if cut > 0:
            del self._log[:cut]
            del self._log_ports[:cut]
            self._log_start += cut
            blog, wm, k = self._boundary_log, self._log_start_wm, 0
            while k < len(blog) and blog[k][0] < self._log_start:
                _, p, time = blog[k]
                wm[p] = max(wm[p], time)
                k += 1
            del blog[:k]

    def _undo_by_rebuild(self, port: int, last_kept_id: int, out: list[Tuple]) -> None:
        """UNDO(u) on ``port``: remove the suffix from port's first data tuple with id > u,
        or first tentative boundary after u. Stable boundaries between u and it (the one
        closing the last stable bucket) stay: they were promises about stable data.

        The other ports' tentative entries (TENTATIVE tuples, tentative boundaries) are
        removed too, and the rebuild goes back to before the first of them if it is older:
        inside a node an UNDO only ever comes from the SUnion's UNDO_START, which retracts
        its whole tentative suffix, and a multi-input operator draws all its inputs from
        that one SUnion (the wave rule), so the same UNDO reaches every other port in the
        same wave and would undo those entries right after. Re-feeding them instead (as
        this did) re-emitted outputs derived from retracted input: TENTATIVE tuples right
        after our UNDO, which made SOutput force a REC_DONE in the middle of the
        reconciliation, then a second UNDO when the other port's UNDO came."""
        log, ports, start = self._log, self._log_ports, self._log_start
        first_undone = _port_undo_cut(log, ports, port, last_kept_id)
        first_other = None  # the other ports' first tentative entry
        if self._n_ports > 1:
            for k, e in enumerate(log):  # (a spilled log is read chunk by chunk, from disk)
                if ports[k] != port and _is_tentative(e):
                    first_other = k
                    break
        if first_undone is None:
            if first_other is None:
                return  # nothing of port after last_kept_id was processed: nothing to undo
            first_undone = len(log)
        cut = first_undone if first_other is None else min(first_undone, first_other)
        target = start + cut  # rebuild the state right before seq ``target``
        seqs = [m.seq for m in self._markers]
        mi = bisect_right(seqs, target) - 1
        if mi < 0 or self._markers[mi].oldest < start:
            raise OperatorError(
                f"{self.describe()}: cannot undo input {port} back to id {last_kept_id}: "
                "the undo log no longer reaches that far (was a stable tuple undone?)"
            )
        m = self._markers[mi]
        undone_last_id = self.last_id
        # What follows the cut leaves the log (a spilled one's chunks move, unread).
        tail: list[Tuple] | SpillList
        if isinstance(log, SpillList):
            tail = log.split_off(cut)
        else:
            tail = log[cut:]
            del log[cut:]
        tail_ports = ports[cut:]
        # Rebuild: warm up from the marker's oldest entry, then re-apply its bookkeeping.
        self.clear()
        self.signals.clear()
        self._replaying = True
        try:
            self._reset_transient(self._watermarks_at(m.oldest))
            self._replay(m.oldest - start, m.seq - start)
            self.last_id = m.last_id
            self._set_taint(m.tainted, self._first_tentative_id if m.tainted else 0)
            self.watermarks = list(m.watermarks)
            self.watermark = min(self.watermarks)
            self._boundary_out = m.boundary_out
            self._replay(m.seq - start, cut)
        finally:
            self._replaying = False
        if self.last_id < undone_last_id:
            out.append(undo(self.last_id))
        # Drop the undone suffix and the markers after the rebuild point, then re-feed what
        # followed and was not undone: port's entries before its first undone one, and the
        # other ports' stable entries (their tentative ones are undone, see above).
        del ports[cut:]
        del self._markers[mi + 1 :]
        self._boundary_log = [e for e in self._boundary_log if e[0] < target]
        self._seq = target
        for k, (t, p) in enumerate(zip(tail, tail_ports, strict=True), cut):
            if (k < first_undone if p == port else not _is_tentative(t)):
                self._feed(p, (t,), out)
        if isinstance(tail, SpillList):
            tail.clear()

    def _watermarks_at(self, seq: int) -> list[int]:
        """The input watermarks right before logged entry ``seq``: a rebuild warms up with
        them, so that windows which had closed before ``seq`` close again (discarded)
        instead of staying open and being emitted twice."""
        wm = list(self._log_start_wm)
        for s, p, time in self._boundary_log:
            if s >= seq:
                break
            wm[p] = max(wm[p], time)
        return wm

    def _reset_transient(self, watermarks: list[int]) -> None:
        self.watermarks = watermarks
        self.watermark = min(watermarks)
        self._boundary_out = NO_TIME
        self._set_taint(False, 0)

    def _replay(self, lo: int, hi: int) -> None:
        """Re-process log[lo:hi] with outputs discarded (``self._replaying`` is set)."""
        sink: list[Tuple] = []
        log, ports = self._log, self._log_ports
        k = lo
        while k < hi:
            p = ports[k]
            e = k
            while e < hi and ports[e] == p:
                e += 1
            self.seq_base = self._log_start + k
            self._seq = self.seq_base
            self._feed(p, log[k:e], sink)
            sink.clear()
            k = e
        self._seq = self._log_start + hi
