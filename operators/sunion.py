"""SUnion: the data-serializing union of DPC (paper section 3.2-3.5, DESIGN.md section 3).

Theory of operation
-------------------
*Buckets.* Input tuples are cut into buckets of fixed tuple-time width ``bucket``: bucket
``b`` holds times ``[b*bucket, (b+1)*bucket)``. Each bucket keeps one list per input port,
in arrival (= id) order, so that concatenating the lists in port order and stable-sorting
on ``time`` yields the total order ``(time, input index, id)`` that every replica agrees on.
A port's duplicate tuples (``id <=`` its last accepted id: replays after an upstream switch)
are dropped on arrival.

*Stable release.* Bucket ``b`` is stable-ready when every port's watermark (max BOUNDARY
received) is ``>= (b+1)*bucket`` and it holds no TENTATIVE tuple. Buckets are released
strictly in order from the release pointer ``next``: the bucket is emitted sorted,
renumbered with SUnion's own increasing ids, then ``BOUNDARY((b+1)*bucket)``. Runs of empty
ready buckets are jumped in O(1); the boundary they earn is flushed once, at the end of the
release loop.

*Tentative release.* A pending bucket's deadline is the time at which its first tuple
arrived at the node plus ``wait`` (alpha*X): ``now``, or the earlier ``arrived`` the node
passes with a batch it had to hold (new input waits while a reconciliation replays; the
wait is the node's delay of that input, and it counts toward alpha*X: a replica that
timed held input from the end of its replay said STABLE for another alpha*X with an input
long silent, and its consumers moved to it from a replica serving tentative results,
simulate seed 27968). When ``now`` passes the deadline of any pending bucket,
every bucket up to it is released TENTATIVE (in order, same sort, own ids) and a failure
*episode* begins: one UP_FAILURE goes to ``self.signals``. During an episode releases stay
TENTATIVE (sticky, property 4: no stable tuple may follow a tentative one); in ``process``
mode a bucket then waits only ``process_wait`` and a ready bucket goes out at once, in
``delay`` mode every non-empty bucket waits its full ``wait`` (so that the buckets still held
when the failure heals come out stable after reconciliation). Time is only ever the ``now``
passed in; ``process`` first releases what expired before the batch arrived, so calling
``on_timer`` exactly at each deadline or not at all gives the same output.

*The chain rule* (issue 46; paper section 5.2: process & process keeps Delay_new at about
alpha*X plus the chain's normal delay, flat in the chain's length). A tentative tuple on an
input is an upstream SUnion's tentative release: that node already waited its alpha*X for
the failure to heal, and no boundary will follow on that input until it is corrected (a
tentative boundary never leaves a node). Waiting alpha*X again here would add one alpha*X
per node along a chain. So in ``process`` mode, while an input carries tentative tuples not
yet undone (``_port_tent``), pending buckets wait ``process_wait`` only, as during an
episode of our own: the time the node's other inputs need to fill the bucket, Borealis'
350 ms after a first expiry (NUMBERS.md). ``delay`` mode keeps the full wait (the paper's
delay & delay adds alpha*X per node). Until the first tentative tuple arrives nothing
changes: a node downstream of a failure waits as long as the node that meets it, in
parallel with it, and no tentative result is released earlier than its upstream's.

An UNDO that empties a pending bucket does not reset its age: the tuples that replace
the undone ones (the corrections, or another replica's version after a switch) open it
again with the first ``first_now`` it had. The node has held data for that time range since
then; timing the replacements from their own arrival delayed a consumer that had switched
upstream replicas twice by more than alpha*X (simulate seed 27968: 0.7 s of waiting on
tentative results thrown away by a REC_DONE handover, then 0.7 s more on the replay of
the same results from the UP_FAILURE replica it moved back to).

*Keeping for replay.* Released buckets stay in ``_buckets`` while recovery may replay them:
in ``checkpoint`` recovery everything released since the last :meth:`SUnion.truncate`; in
``undo`` recovery only from the episode's first tentative bucket on. Late STABLE tuples
(a cut input's missed tuples, corrections) for released buckets of the episode go into those
kept buckets; late tuples for stable-released buckets would break a boundary promise and are
dropped (counted in ``late_dropped``).

*Input corrections.* ``UNDO(u)`` on port p removes p's tuples with id > u from every bucket
and lets the corrections reuse those ids. A boundary arriving on a port whose stream is
tentative (it holds tentative tuples not yet undone) is no promise about the corrected
stream, whose tuples may be older: it does not advance the watermark, and the upstream
re-sends it after its corrections. (A boundary that arrives *before* a stream's first
tentative tuple cannot be told apart from a stable one and is taken as a promise.)
REC_DONE on an input is dropped (this node's SOutput makes its own). When every bucket released during the
episode is stable-ready again, one REC_REQUEST goes to ``self.signals``.

*Reconciliation.* Undo/redo: an UNDO_START on any port emits ``UNDO(last id before the
first tentative bucket)`` and re-releases the kept buckets from there (STABLE when ready),
ids continuing from the UNDO's id. Checkpoint/redo: the node calls :meth:`SUnion.rewind`
with the checkpoint's snapshot instead of ``restore``; it rewinds the release pointer, the
id counter and the episode flags but keeps the buffered (corrected) input; the re-release
happens in :meth:`SUnion.replay` (or any later ``process``/``on_timer``), reproducing the
pre-failure ids so that SOutput can drop those duplicates. Both end the episode.

*Replay in steps.* A reconciliation re-releases every bucket from its start up to the
*horizon* (the release pointer before rewinding, or the first bucket before it that is not
stable-ready: one released tentatively after the REC_REQUEST). With ``replay_step`` set (the
runtime sets it; None = all at once), one call (``replay``, ``on_timer``, ``process``)
re-releases at most that many buckets while the horizon is not reached, and releases
nothing else: the node keeps answering its peers between steps, and ``replay_progress``
tells how far it is. Past the horizon the operator is back to normal in the same call (so a bucket that expired while
the replay ran goes out TENTATIVE right after the replayed ones: a new failure that began
during the reconciliation appears after it).

*Columns* (issue 48). A node input's batch may come as columns (a Batch off the wire,
protocol/columns.py). Its control rows go through the one dispatch as tuples; a STABLE run
between them that falls in pending buckets in time order is kept as columns, a run per
port per bucket (operators/buckets.py), and a bucket holding only such runs is released
as one :class:`~protocol.columns.Columns` item of the output: the stable sort on time of
its ports' runs concatenated, renumbered, the same tuples in the same order as the tuple
release. A run with a tentative tuple, a late or out-of-order run, or one behind a port's
tuples goes the tuple way, counted in ``columns_fallback``; anything that needs a
bucket's tuples one by one (an UNDO's cut, a spill, a snapshot, a replay) turns its runs
into tuples first. The bookkeeping (ids, watermarks, episodes) is the same either way.

This module is over 400 lines because the release loop, the episode bookkeeping and both
reconciliation paths share one set of invariants that only make sense read together.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Sequence
from operator import itemgetter
from typing import ClassVar

import numpy as np

from protocol.columns import Columns
from protocol.tuples import Kind, Schema, Tuple, boundary, make_tuple, tentative_boundary, undo

from .base import NO_TIME, Operator, Plain, tuple_from_plain, tuple_to_plain
from .buckets import Bucket, Released, Spiller, release_columns, release_order
from .errors import OperatorError, SpecError
from .reconciliation import RELEASE_MODES, Serializer
from .registry import register
from .spec import Params
from .taxonomy import RecoveryClass

__all__ = ["DEFAULT_PROCESS_WAIT", "DEFAULT_WAIT", "SUnion"]

#: Default ``wait``: the paper's alpha*X = 2.7 s, in microseconds (NUMBERS.md).
DEFAULT_WAIT = 2_700_000
#: Default ``process_wait``: Borealis' short wait once a failure episode began (350 ms).
DEFAULT_PROCESS_WAIT = 350_000

STABLE = Kind.STABLE
TENTATIVE = Kind.TENTATIVE
_TIME = itemgetter(2)
_LAST_DATA_KIND = int(Kind.TENTATIVE)
_STABLE_CODE = int(Kind.STABLE)


@register
class SUnion(Operator, Serializer):
    """Deterministic bucketed union with delay / tentative release / correction.
    See the module docstring for the theory of operation; the node drives its
    reconciliation through :class:`~operators.reconciliation.Serializer`."""

    type_name: ClassVar[str] = "sunion"
    #: Buckets of absolute tuple time, sorted (operators/taxonomy.py).
    recovery_class = RecoveryClass.REPEATABLE
    n_inputs: ClassVar[int | None] = None
    uses_undo_log: ClassVar[bool] = False
    #: A tentative boundary promises nothing about the corrected stream: not a watermark.
    tentative_boundaries: ClassVar[str] = "ignore"

    def __init__(self, name: str, input_schemas: Sequence[Schema], params: Params) -> None:
        super().__init__(name, input_schemas, params)
        self.clear()

    def configure(self, params: Params) -> None:
        first = self.input_schemas[0]
        for i, schema in enumerate(self.input_schemas[1:], 1):
            if schema != first:
                raise SpecError(
                    f"{self.describe()}: all inputs must have the same attributes; input 0 has "
                    f"({', '.join(first)}) but input {i} has ({', '.join(schema)})"
                )
        self.width = params.get_int("bucket", minimum=1)
        self.wait = params.get_int("wait", DEFAULT_WAIT, minimum=0)
        self.mode = params.get_str("mode", "process", choices=RELEASE_MODES)
        self.process_wait = params.get_int("process_wait", DEFAULT_PROCESS_WAIT, minimum=0)
        self.recovery = params.get_str("recovery", "checkpoint", choices=("checkpoint", "undo"))
        self.output_schema = first
        self.replay_step: int | None = None  # kept across ``clear``: see Serializer
        self.spiller: Spiller | None = None  # likewise (Serializer.set_spill)
        #: When the batch of the current ``process`` call reached the node, if earlier than
        #: ``now`` (set by the query network for that call; None: ``now``).
        self.arrived: int | None = None
        self._first = 0  # the first_now of a bucket the current call opens
        self._buckets: dict[int, Bucket] = {}
        self._collect: list[Released] | None = None  # see replay_released
        self._chain = False  # the chain rule in force for the current call (_wait)
        #: Input tuples that came as columns but went the tuple way (tentative, late, out
        #: of time order, behind a port's tuples): the columnar path's fallback, counted.
        self.columns_fallback = 0

    def clear(self) -> None:
        n = self._n_ports
        self._forget_buckets()
        #: Min-heap of pending bucket indexes; may hold stale entries (skipped lazily).
        self._heap: list[int] = []
        # Start far in the past: the first boundary or expiry jumps to the data in O(1).
        self._next = NO_TIME // self.width
        #: First bucket released in the current failure episode; None outside an episode.
        self._ftb: int | None = None
        self._undo_id = 0  # our last output id before the episode's first tentative tuple
        self._undo_boundary = NO_TIME  # our last boundary out before the episode
        self._rec_requested = False
        self._kept_from = self._next  # every released bucket from here on is still kept
        self._rel_tent = 0  # TENTATIVE tuples held in released buckets
        self._last_in = [0] * n
        self._wm = list(self.watermarks)  # watermarks as accepted (see on_boundary)
        self._port_tent = [False] * n
        self._late_dropped = 0
        self._mfn: int | None = None  # cached min first_now over pending buckets
        #: The first_now of pending buckets an UNDO emptied, for the ones that replace them.
        self._aged: dict[int, int] = {}
        self._mfn_ok = True
        self._replay_to: int | None = None  # the replay's horizon while one is under way
        self._budget = 0  # buckets this call may still re-release
        self._replay_total = 0  # tuples to re-release in the current replay
        self._replay_done = 0

    # ------------------------------------------------------------------ read-only views
    @property
    def in_failure(self) -> bool:
        """True from the first tentative release until reconciliation."""
        return self._ftb is not None

    @property
    def rec_requested(self) -> bool:
        """True once this episode's REC_REQUEST went out (every input corrected)."""
        return self._rec_requested

    @property
    def released_to(self) -> int:
        """The tuple time before which every bucket was released."""
        return self._next * self.width

    @property
    def late_dropped(self) -> int:
        """Tuples dropped for a bucket already released stable (a broken promise)."""
        return self._late_dropped

    @property
    def replaying(self) -> bool:
        """True while a reconciliation's replay has not reached its horizon."""
        return self._replay_to is not None and self._next < self._replay_to

    @property
    def replay_progress(self) -> tuple[int, int]:
        """(tuples re-released, tuples to re-release) of the current or last replay."""
        return self._replay_done, self._replay_total

    @property
    def buffered(self) -> int:
        """Tuples held in pending and kept buckets."""
        return sum(bk.size() for bk in self._buckets.values())

    # ------------------------------------------------------------------ public API
    def process(self, port: int, batch: Sequence[Tuple] | Columns,
                now: int = 0) -> list[Tuple]:
        """Feed a batch (tuples, or a node input's columns: see "Columns" in the module
        docstring); return the output, in which a bucket released from columns is one
        :class:`~protocol.columns.Columns` item (operators/network.py routes it)."""
        if not 0 <= port < self._n_ports:
            raise OperatorError(f"{self.describe()}: no input port {port}")
        self.now = now
        self._chain = True in self._port_tent  # (as the call begins: see _wait)
        # A bucket this batch opens waited since the batch reached the node (module
        # docstring); arrived is set by the network for one call only.
        self._first = now if self.arrived is None else min(self.arrived, now)
        self._budget = self.replay_step or 0
        out: list[Tuple] = []
        # What expired before this batch arrived goes first, as if on_timer had fired.
        if self._due():
            self._drain(out)
        if isinstance(batch, Columns):
            self._feed_columns(port, batch, out)
        else:
            self._feed(port, batch, out)
        if self._due():  # only with a zero wait: the batch's own buckets are due at once
            self._drain(out)
        if self.spiller is not None and self.spiller.over():
            self.spiller.spill(self._buckets, self._next)
        return out

    def next_deadline(self) -> int | None:
        mfn = self._min_first_now()
        return None if mfn is None else mfn + self._wait(True in self._port_tent)

    def on_timer(self, now: int) -> list[Tuple]:
        self.now = self._first = now
        self._chain = True in self._port_tent
        self._budget = self.replay_step or 0
        out: list[Tuple] = []
        self._drain(out)
        if self.spiller is not None and self.spiller.over():
            self.spiller.spill(self._buckets, self._next)
        return out

    def may_begin_episode(self, now: int, data: bool, arrived: int | None = None) -> bool:
        # An episode begins only in _expire, when a pending bucket's deadline has passed:
        # at the call's start (process drains what expired first, on_timer drains), or
        # right after a batch made its own bucket due: a zero wait, a batch held for longer
        # than the wait, or one that reopens a bucket an UNDO emptied that long ago.
        if self._ftb is not None:
            return False  # already in one
        if data:
            first = min(self._aged.values(), default=now)
            if arrived is not None:
                first = min(first, arrived)
            if first + self._wait(True in self._port_tent) <= now:
                return True
        deadline = self.next_deadline()
        return deadline is not None and deadline <= now

    def replay(self, now: int) -> list[Tuple]:
        """After :meth:`rewind`: re-release the kept buckets (same as ``on_timer``)."""
        return self.on_timer(now)

    def replay_released(self, now: int) -> tuple[list[Tuple], list[Released]]:
        """:meth:`replay`, but a bucket released stable is not made into tuples: it is a
        :class:`Released` (where its tuples are: in memory, or spilled chunks read as
        Arrow tables) at its place in the output, for the vectorized replay to build as
        columns. The bookkeeping is exactly :meth:`replay`'s."""
        self._collect = []
        try:
            out = self.on_timer(now)
            return out, self._collect
        finally:
            self._collect = None

    def set_mode(self, mode: str) -> None:
        """The release mode during a failure episode (the consistency manager's choice)."""
        if mode not in RELEASE_MODES:
            raise OperatorError(f"{self.describe()}: mode must be one of {RELEASE_MODES}, "
                                f"got {mode!r}")
        self.mode = mode

    def set_spill(self, spiller: Spiller | None) -> None:
        """Keep at most ``spiller``'s bound of kept tuples in memory, the rest on its disk
        (operators/buckets.py); None: everything in memory. A runtime setting, not state:
        output and snapshots are the same either way."""
        if self.spiller is not None:
            for bk in self._buckets.values():
                bk.ports = [bk.port_items(p, self.spiller.store) for p in range(self._n_ports)]
                bk.cols = None
                bk.release(self.spiller.store)
            self.spiller.store.close()
        self.spiller = spiller
        if spiller is not None:
            spiller.recount(self._buckets, self._next)

    def truncate(self) -> None:
        """Drop released buckets a replay can no longer need (called right after the node
        took a checkpoint). The current episode's buckets are always kept."""
        keep_from = self._next if self._ftb is None else self._ftb
        store = self.spiller.store if self.spiller is not None else None
        for b in [b for b in self._buckets if b < keep_from]:
            self._buckets.pop(b).release(store)
        self._kept_from = max(self._kept_from, keep_from)
        if self.spiller is not None:
            self.spiller.recount(self._buckets, self._next)

    def rewind(self, snap: Plain) -> list[Tuple]:
        """Checkpoint/redo: go back to ``snap``'s release point, keeping the buffered input.

        Restores the release pointer, output-id counter, output boundary and episode flags;
        the buffered input, watermarks and de-duplication state stay as they are. Emits
        nothing (an empty list): the corrected buckets from there on are re-released by
        :meth:`replay`."""
        if not isinstance(snap, dict) or snap.get("type") != self.type_name:
            got = snap.get("type") if isinstance(snap, dict) else type(snap).__name__
            raise OperatorError(f"{self.describe()}: cannot rewind to a snapshot of {got!r}")
        st, base = snap["state"], snap["base"]
        start = st["next"]
        if start < self._kept_from:
            raise OperatorError(
                f"{self.describe()}: cannot rewind to bucket {start}: buckets before "
                f"{self._kept_from} were truncated (recovery={self.recovery!r})"
            )
        if start > self._next:
            raise OperatorError(
                f"{self.describe()}: cannot rewind to bucket {start}: it was never released "
                f"(release pointer is at {self._next})"
            )
        self.last_id = base["last_id"]
        self._boundary_out = base["boundary_out"]
        self._ftb = st["ftb"]
        self._undo_id = st["undo_id"]
        self._undo_boundary = st["undo_boundary"]
        self._rec_requested = st["rec_requested"]
        self._rewind_to(start, replay=True)
        return []

    def rewind_point(self) -> Plain:
        # rewind reads only these: it keeps the buffered input (the corrected buckets).
        return {
            "type": self.type_name,
            "base": {"last_id": self.last_id, "boundary_out": self._boundary_out},
            "state": {
                "next": self._next,
                "ftb": self._ftb,
                "undo_id": self._undo_id,
                "undo_boundary": self._undo_boundary,
                "rec_requested": self._rec_requested,
            },
        }

    # ------------------------------------------------------------------ data path
    def on_data(self, port: int, tuples: Sequence[Tuple], out: list[Tuple]) -> None:
        # The base flips its taint on a tentative run; ours lives in the episode flags.
        # Keeping the base untainted also makes it start a new run at every first
        # TENTATIVE tuple, so a run starting STABLE is all STABLE.
        if self._tainted:
            self._set_taint(False, 0)
        has_tent = tuples[0][0] is TENTATIVE
        last = self._last_in[port]
        run = tuples
        if run[0][1] <= last:
            run = [t for t in run if t[1] > last]
            if not run:
                return
            has_tent = has_tent and any(t[0] is TENTATIVE for t in run)
        self._last_in[port] = run[-1][1]
        if has_tent:
            self._port_tent[port] = True
            self._insert(port, run)
            return
        width = self.width
        times = list(map(_TIME, run))
        lo = min(times) // width
        if lo >= self._next:
            hi = max(times) // width
            if hi == lo:
                # The common case: the whole run falls in one pending bucket.
                bk = self._buckets.get(lo)
                if bk is None:
                    bk = self._new_pending(lo)
                bk.ports[port].extend(run)
                return
            if times == sorted(times):
                # Time-ordered across a few pending buckets: one slice per bucket.
                buckets = self._buckets
                i, n = 0, len(times)
                while i < n:
                    b = times[i] // width
                    j = bisect_left(times, (b + 1) * width, i)
                    bk = buckets.get(b)
                    if bk is None:
                        bk = self._new_pending(b)
                    bk.ports[port] += run[i:j]
                    i = j
                return
        self._insert(port, run)

    def _feed_columns(self, port: int, batch: Columns, out: list[Tuple]) -> None:
        """:meth:`_feed` of columns: the control rows one by one (as tuples), the STABLE
        runs between them kept as columns where they fall in pending buckets in time
        order (the common case), everything else as tuples."""
        kinds = batch.kinds()
        control = np.flatnonzero(kinds > _LAST_DATA_KIND)
        start = 0
        for i in (*control.tolist(), len(batch)):
            if i > start:
                run = batch.slice(start, i)
                if (kinds[start:i] != _STABLE_CODE).any() or self._rebuild is not None:
                    self.columns_fallback += i - start
                    self._feed(port, run.to_tuples(), out)
                else:
                    self.in_ids[port] = int(run.ids()[-1])
                    self._stable_columns(port, run)
            if i < len(batch):
                self._control(port, batch.slice(i, i + 1).to_tuples()[0], out)
            start = i + 1

    def _stable_columns(self, port: int, run: Columns) -> None:
        """:meth:`on_data` of a STABLE run of columns."""
        if self._tainted:
            self._set_taint(False, 0)
        ids = run.ids()
        last = self._last_in[port]
        if ids[0] <= last:
            k = int(np.searchsorted(ids, last, side="right"))
            if k == len(ids):
                return
            run, ids = run.slice(k), ids[k:]
        self._last_in[port] = int(ids[-1])
        width = self.width
        times = run.times()
        lo = int(times.min()) // width
        if lo >= self._next:
            hi = int(times.max()) // width
            if hi == lo:
                self._keep_columns(lo, port, run)
                return
            if (times[1:] >= times[:-1]).all():
                cuts = (np.flatnonzero(np.diff(times // width)) + 1).tolist()
                for a, b in zip([0, *cuts], [*cuts, len(times)], strict=True):
                    self._keep_columns(int(times[a]) // width, port, run.slice(a, b))
                return
        self.columns_fallback += len(run)
        self._insert(port, run.to_tuples())  # late, or out of time order

    def _keep_columns(self, b: int, port: int, run: Columns) -> None:
        bk = self._buckets.get(b)
        if bk is None:
            bk = self._new_pending(b)
        if not bk.add_columns(port, run):  # the port's list holds tuples: after them
            self.columns_fallback += len(run)
            bk.ports[port] += run.to_tuples()

    def _insert(self, port: int, run: Sequence[Tuple]) -> None:
        """Tuple-by-tuple insert (runs across buckets, tentative or late tuples)."""
        width = self.width
        cur_b: int | None = None
        bk: Bucket | None = None
        for t in run:
            b = t[2] // width
            if b != cur_b:
                cur_b = b
                bk = self._bucket_for(b)
            if bk is None:
                self._late_dropped += 1
                continue
            bk.ports[port].append(t)
            if b < self._next and self.spiller is not None:
                self.spiller.kept(b, 1)  # a correction for a kept bucket
            if t[0] is TENTATIVE:
                bk.n_tent += 1
                if b < self._next:
                    self._rel_tent += 1

    def _bucket_for(self, b: int) -> Bucket | None:
        bk = self._buckets.get(b)
        if b >= self._next:
            return bk if bk is not None else self._new_pending(b)
        if self._ftb is not None and b >= self._ftb:
            # Late input for a bucket released during the episode: keep it for the replay.
            if bk is None:
                bk = self._buckets[b] = Bucket(self._n_ports, self._first)
            return bk
        return None  # released stable (or no longer kept): this tuple breaks a promise

    def _new_pending(self, b: int) -> Bucket:
        first = self._first
        if self._aged:
            first = min(first, self._aged.pop(b, first))
        bk = self._buckets[b] = Bucket(self._n_ports, first)
        heapq.heappush(self._heap, b)
        if self._mfn_ok and (self._mfn is None or first < self._mfn):
            self._mfn = first
        return bk

    def on_boundary(self, port: int, out: list[Tuple]) -> None:
        if self._port_tent[port]:
            # A tentative stream's boundary promises nothing about its corrections (they
            # may come earlier in time): forget it, so that the re-sent one is accepted.
            self.watermarks[port] = self._wm[port]
            self.watermark = min(self.watermarks)
            return
        self._wm[port] = self.watermarks[port]
        self._drain(out)

    def oldest_time(self) -> int:
        # Boundaries are emitted by the release loop itself; this keeps the base quiet.
        last_out: int = self._boundary_out
        return last_out

    def on_undo(self, port: int, last_kept_id: int, out: list[Tuple]) -> None:
        self._last_in[port] = min(self._last_in[port], last_kept_id)
        if self._aged:  # (buckets released since the last UNDO are no longer pending)
            self._aged = {b: t for b, t in self._aged.items() if b >= self._next}
        still_tentative = False  # an UNDO of part of the tentative suffix leaves the rest
        store = self.spiller.store if self.spiller is not None else None
        for b, bk in list(self._buckets.items()):
            n_tent = bk.cut(port, last_kept_id, store)
            if b < self._next:
                self._rel_tent -= n_tent
            if not bk.size():  # (a bucket is never empty but by a cut)
                del self._buckets[b]
                if b >= self._next:  # its replacements keep its age (module docstring)
                    self._aged[b] = min(bk.first_now, self._aged.get(b, bk.first_now))
            if bk.n_tent and not still_tentative:
                still_tentative = bk.port_tentative(port)
        self._port_tent[port] = still_tentative
        if self.spiller is not None:
            self.spiller.recount(self._buckets, self._next)
        self._mfn_ok = False
        self._drain(out)

    def on_control(self, port: int, t: Tuple, out: list[Tuple]) -> None:
        kind = t[0]
        if kind is Kind.UNDO_START:
            self._undo_start(out)
        elif kind is Kind.REC_DONE:
            pass  # dropped: this node's SOutput makes its own REC_DONE
        else:
            super().on_control(port, t, out)

    def _undo_start(self, out: list[Tuple]) -> None:
        if self._ftb is None:
            return  # nothing tentative was released: nothing to undo
        start = self._ftb
        out.append(undo(self._undo_id))
        self.last_id = self._undo_id
        self._boundary_out = self._undo_boundary
        self._ftb = None
        self._rec_requested = False
        self._rewind_to(start, replay=True)
        self._budget = self.replay_step or 0
        self._drain(out)

    def _rewind_to(self, start: int, *, replay: bool = False) -> None:
        """Make every held bucket from ``start`` on pending again; ``replay``: they are a
        reconciliation's replay, up to the current release pointer (the horizon)."""
        if replay:
            self._replay_to = to = self._replay_horizon(start)
            self._replay_done = 0
            self._replay_total = sum(
                bk.size() for b, bk in self._buckets.items() if start <= b < to
            )
        self._next = start
        self._aged.clear()  # (a rewind's buckets keep their own first_now)
        self._heap = sorted(b for b in self._buckets if b >= start)  # sorted = a heap
        self._rel_tent = sum(bk.n_tent for b, bk in self._buckets.items() if b < start)
        self._mfn_ok = False
        if self.spiller is not None:
            self.spiller.recount(self._buckets, start)

    def _replay_horizon(self, start: int) -> int:
        """Where a replay from ``start`` ends: the release pointer, or the first bucket
        before it that is not stable-ready (its input incomplete, or tentative again).

        Such a bucket went out TENTATIVE after the REC_REQUEST (the episode went on while
        permission was asked) and can only wait for its boundary or its deadline. Neither
        comes during the replay: the runtime holds new input meanwhile, and a replay step
        per loop turn would spin without ever letting the clock reach the deadline. From
        there on the buckets are pending as usual, after the replayed ones."""
        to = min(self._next, max(start, self.watermark // self.width))
        return min((b for b, bk in self._buckets.items() if start <= b < to and bk.n_tent),
                   default=to)

    # ------------------------------------------------------------------ release loop
    def _cur_wait(self) -> int:
        """The wait this call's releases use: the chain rule as the call began."""
        return self._wait(self._chain)

    def _wait(self, chain: bool) -> int:
        """A pending bucket's wait: alpha*X, or in ``process`` mode ``process_wait`` once an
        episode began here, or ``min(alpha*X, process_wait)`` while an input carries
        tentative tuples (``chain``: the chain rule, module docstring).

        The chain rule takes effect from the call *after* the one in which an input turned
        tentative (``_chain`` is read as each call begins; :meth:`next_deadline` already
        says the shorter wait): a stable bucket pending for longer than ``process_wait``
        would otherwise be released tentatively inside that very call, which
        :meth:`may_begin_episode` cannot foresee without seeing the batch, and the node's
        checkpoint before an episode (``on_failure``) would be missed (the partitioned
        scenario: n2a reconciled with no checkpoint to restore)."""
        if self.mode != "process":
            return self.wait
        if self._ftb is not None:
            return self.process_wait
        return min(self.wait, self.process_wait) if chain else self.wait

    def _min_first_now(self) -> int | None:
        if not self._mfn_ok:
            bs, nxt = self._buckets, self._next
            firsts = [bs[b].first_now for b in self._heap if b >= nxt and b in bs]
            self._mfn = min(firsts) if firsts else None
            self._mfn_ok = True
        return self._mfn

    def _due(self) -> bool:
        mfn = self._min_first_now()
        return mfn is not None and mfn + self._cur_wait() <= self.now

    def _head(self) -> int | None:
        """The lowest pending bucket index (pending buckets are never empty)."""
        h, bs, nxt = self._heap, self._buckets, self._next
        while h and (h[0] < nxt or h[0] not in bs):
            heapq.heappop(h)
        return h[0] if h else None

    def _drain(self, out: list[Tuple]) -> None:
        """Release everything releasable at ``self.now``, then check for REC_REQUEST."""
        while True:
            self._release_ready(out)
            if self._held() or not self._expire(out):
                break
        self._flush_boundary(out)
        # (No tentative tuple left is implied by the watermark while tentative inputs'
        # boundaries are not promises; counting them guards against a stray late one.)
        if (
            self._ftb is not None
            and not self._rec_requested
            and self._rel_tent == 0
            and self._next <= self.watermark // self.width
        ):
            self._rec_requested = True
            self.signals.append(make_tuple(Kind.REC_REQUEST, 0, self.now, self.now, ()))

    def _release_ready(self, out: list[Tuple]) -> None:
        complete = self.watermark // self.width  # buckets below this index are complete
        while self._next < complete and not self._held():
            nb = self._next
            head = self._head()
            if head is None or head > nb:  # a run of empty complete buckets: jump it
                self._next = complete if head is None else min(head, complete)
                continue
            bk = self._buckets[nb]
            if bk.n_tent:
                return
            if self._ftb is None:
                self._release(nb, bk, STABLE, out)
            elif self.mode == "process":
                self._release(nb, bk, TENTATIVE, out)
            else:
                return  # delay mode, in an episode: a ready bucket still waits its deadline

    def _expire(self, out: list[Tuple]) -> bool:
        """Release TENTATIVE every bucket up to the last one whose deadline passed."""
        if not self._due():
            return False
        limit = self.now - self._cur_wait()
        bs, nxt = self._buckets, self._next
        target = max(b for b in self._heap if b >= nxt and b in bs and bs[b].first_now <= limit)
        if self._ftb is None:
            self._flush_boundary(out)  # the stable part's boundary is a real promise
            self._ftb = self._next
            self._undo_id = self.last_id
            self._undo_boundary = self._boundary_out
            self._rec_requested = False
            self.signals.append(make_tuple(Kind.UP_FAILURE, 0, self.now, self.now, ()))
        while not self._held() and (head := self._head()) is not None and head <= target:
            self._release(head, bs[head], TENTATIVE, out)
        return True

    def _held(self) -> bool:
        """True while a stepped replay used up this call's budget (see the docstring)."""
        to = self._replay_to
        if to is None:
            return False
        if self._next >= to:
            self._replay_to = None  # the horizon is reached: back to normal
            return False
        return self.replay_step is not None and self._budget <= 0

    def _release(self, b: int, bk: Bucket, kind: Kind, out: list[Tuple]) -> None:
        store = self.spiller.store if self.spiller else None
        if self._collect is not None and kind is STABLE and self.recovery == "checkpoint":
            # (Under undo/redo a stable release drops the bucket's chunks at once.)
            self._collect.append(Released(len(out), self.last_id + 1,
                                          [bk.port_sources(p) for p in range(self._n_ports)],
                                          store))
            self._released(b, bk, kind, bk.size(), out)
            return
        if bk.columnar() and self._collect is None:
            columns = release_columns(bk, kind, self.last_id + 1)
            if columns is not None:
                # One item of the output: the network routes it (operators/network.py).
                out.append(columns)  # type: ignore[arg-type]
                self._released(b, bk, kind, len(columns), out)
                return
        bk.materialize()
        items: list[Tuple] = []
        if bk.spilled is None:
            for lst in bk.ports:
                items += lst
        else:  # read back from disk (a replay after a long failure)
            for p in range(self._n_ports):
                items += bk.port_items(p, store)
        out += release_order(items, kind, self.last_id + 1)
        self._released(b, bk, kind, len(items), out)

    def _released(self, b: int, bk: Bucket, kind: Kind, n: int, out: list[Tuple]) -> None:
        """The bookkeeping of releasing bucket ``b`` (``n`` tuples, already in ``out``)."""
        self.last_id += n
        if self._replay_to is not None and b < self._replay_to:
            self._replay_done += n
            self._budget -= 1
        self._next = b + 1
        end = (b + 1) * self.width
        if end > self._boundary_out:
            out.append(boundary(end) if kind is STABLE else tentative_boundary(end))
            self._boundary_out = end
        if kind is TENTATIVE:
            self._rel_tent += bk.n_tent
        if self.recovery == "undo" and self._ftb is None:
            del self._buckets[b]  # undo/redo never replays a stable release
            bk.release(self.spiller.store if self.spiller else None)
            self._kept_from = b + 1
        elif self.spiller is not None:
            self.spiller.kept(b, bk.in_memory())
        self._mfn_ok = False

    def _flush_boundary(self, out: list[Tuple]) -> None:
        end = self._next * self.width
        if end > self._boundary_out and end > NO_TIME:
            # During an episode even the boundary of a jump is no promise downstream.
            out.append(boundary(end) if self._ftb is None else tentative_boundary(end))
            self._boundary_out = end

    def _forget_buckets(self) -> None:
        #: Every bucket held: pending (index >= _next) and kept for replay (index < _next).
        if self.spiller is not None:  # what the buckets spilled is deleted with them
            for bk in self._buckets.values():
                bk.release(self.spiller.store)
            self.spiller.recount({}, 0)
        self._buckets = {}

    # ------------------------------------------------------------------ snapshots
    def snapshot_state(self) -> Plain:
        return self._state(buckets=True)

    def resume_point(self) -> Plain:
        """This SUnion at its release point, as a snapshot without its pending input (CEC:
        operators/cec.py): :meth:`restore` of it and a replay of every input from its
        ``state.last_in`` id on (:meth:`resume_ids`) re-release from here what this SUnion
        did. Not while in a failure episode (its kept buckets are not in it)."""
        live = self._snapshot_live_without_state()
        # The input replayed from the resume ids brings its boundaries again: a watermark
        # past the release point (a reconciliation's replay lags the live input) would
        # release a bucket before the other inputs' replayed tuples for it came.
        released = self._next * self.width
        live["base"]["watermarks"] = [min(w, released) for w in self.watermarks]
        live["state"] = self._state(buckets=False)
        live["state"]["last_in"] = self.resume_ids()
        live["state"]["kept_from"] = self._next
        # Whether a port's pending input was tentative: none is kept; the replay says anew
        # (a port still marked would ignore the replayed stable boundaries: seed 25367).
        live["state"]["port_tent"] = [False] * self._n_ports
        return live

    def resume_ids(self) -> list[int]:
        """Per input port, the id after which a replay of that input must begin so that
        every tuple this SUnion holds pending comes again: the last id received, or the id
        before the first pending one. (A port's tuples arrive in id order; one that came
        again for a bucket already released is dropped as late, as it was the first time.)"""
        ids = list(self._last_in)
        for b, bk in self._buckets.items():
            if b < self._next:
                continue
            for p in range(self._n_ports):
                chunks = bk.spilled[p] if bk.spilled else None
                runs = bk.cols[p] if bk.cols is not None else ()
                first = (chunks[0].first_id if chunks else int(runs[0].ids()[0]) if runs
                         else bk.ports[p][0][1] if bk.ports[p] else None)
                if first is not None and first - 1 < ids[p]:
                    ids[p] = first - 1
        return ids

    def _state(self, *, buckets: bool) -> Plain:
        store = self.spiller.store if self.spiller is not None else None
        return {
            "next": self._next,
            "ftb": self._ftb,
            "undo_id": self._undo_id,
            "undo_boundary": self._undo_boundary,
            "rec_requested": self._rec_requested,
            "kept_from": self._kept_from,
            "last_in": list(self._last_in),
            "port_tent": list(self._port_tent),
            "late_dropped": self._late_dropped,
            "buckets": [
                [b, bk.first_now, [[tuple_to_plain(t) for t in bk.port_items(p, store)]
                                   for p in range(self._n_ports)]]
                for b, bk in sorted(self._buckets.items())
            ] if buckets else [],
        }

    def restore_state(self, state: Plain) -> None:
        self._ftb = state["ftb"]
        self._undo_id = state["undo_id"]
        self._undo_boundary = state["undo_boundary"]
        self._rec_requested = state["rec_requested"]
        self._kept_from = state["kept_from"]
        self._last_in = list(state["last_in"])
        self._port_tent = list(state["port_tent"])
        self._late_dropped = state["late_dropped"]
        self._wm = list(self.watermarks)
        self._forget_buckets()
        for b, first_now, ports in state["buckets"]:
            bk = self._buckets[b] = Bucket(self._n_ports, first_now)
            bk.ports = [[tuple_from_plain(p) for p in lst] for lst in ports]
            bk.n_tent = sum(1 for lst in bk.ports for t in lst if t[0] is TENTATIVE)
        self._replay_to = None
        self._rewind_to(state["next"])
