"""Checkpoints of a whole query network, as plain data (checkpoint/redo, paper section 3.4.1).

A :class:`Checkpoint` maps each *part* name (an operator, or a queue when the caller keeps
any) to that part's snapshot: plain data (dicts, lists, str, int, float, bool, None) that
orjson encodes. It is taken with :func:`take_checkpoint` and restored with
:func:`restore_checkpoint`, the one restore of a set of parts (``QueryNetwork.restore`` and
``QueryNetwork.rewind`` call it), which can *rewind* chosen parts instead of restoring them:
SUnion keeps the input it buffered since the checkpoint (that input is what redo replays)
and SOutput keeps its memory of what it already emitted (so it can drop duplicates and emit
the UNDO); both get the snapshot and decide themselves what to take from it.

Invariants:

* A checkpoint is complete: restoring checks that it holds exactly the parts it is
  restored into, before touching any of them (no half-restored network).
* Restoring never lets a part alias the checkpoint: every part gets a fresh copy made by an
  orjson round trip, so one checkpoint can be restored any number of times (a new failure
  during stabilization restores the same checkpoint again), and an in-memory checkpoint
  restores exactly like one that went through :func:`encode_checkpoint`.
* ``snapshot()`` must not share mutable containers with the live part (the
  :class:`Checkpointable` contract); :class:`CheckpointStore` and :func:`encode_checkpoint`
  freeze a checkpoint as bytes, so a checkpoint kept there is immune even to a part that
  breaks this rule.
* orjson's limits are the format's: dict keys must be str, ints fit in 64 bits, and
  NaN/Infinity floats are encoded as null (snapshots must not rely on them).

Incremental checkpoints (CEC, Sebeou & Magoutis): operator state is split into independent
parts and each part is written only when it changed. :class:`CheckpointStore` keeps, per
part, the encoded snapshot last written and the checkpoint ``seq`` that wrote it; a
:meth:`CheckpointStore.put` of a full checkpoint writes only the parts whose encoding
differs from the stored one, and :meth:`CheckpointStore.latest` reassembles the full
checkpoint. Comparing encoded bytes is exact: equal bytes always decode to equal snapshots,
so a skipped part is never stale (a dict built in another key order merely costs a write).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from .errors import CheckpointError

__all__ = [
    "CHECKPOINT_VERSION",
    "Checkpoint",
    "CheckpointStore",
    "Checkpointable",
    "StoreStats",
    "decode_checkpoint",
    "encode_checkpoint",
    "restore_checkpoint",
    "take_checkpoint",
]

#: Version of the encoded checkpoint format; :func:`decode_checkpoint` refuses any other.
CHECKPOINT_VERSION = 1


class Checkpointable(Protocol):
    """Anything whose state a checkpoint holds: operators, queues.

    ``snapshot()`` returns plain data sharing no mutable container with the live object;
    ``restore(s)`` replaces the whole state by ``s``, and ``restore(snapshot())`` preserves
    all future behaviour. (Positional-only, so any parameter name implements it.)
    """

    def snapshot(self, /) -> Any: ...

    def restore(self, snapshot: Any, /) -> None: ...


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The state of a query network: ``seq`` (increasing per node), the time it was taken
    (``taken_at``, the caller's clock), and each part's plain snapshot by name."""

    seq: int
    taken_at: int
    parts: Mapping[str, Any]


def take_checkpoint(parts: Mapping[str, Checkpointable], seq: int, now: int) -> Checkpoint:
    """Snapshot every part. The result shares whatever the parts' snapshots share with them;
    put it in a :class:`CheckpointStore` or encode it to freeze it."""
    return Checkpoint(seq, now, {name: part.snapshot() for name, part in parts.items()})


def restore_checkpoint(
    parts: Mapping[str, Checkpointable],
    checkpoint: Checkpoint | Mapping[str, Any],
    *,
    rewind: Mapping[str, Callable[[Any], None]] | None = None,
) -> None:
    """Restore every part, in the order of ``parts``, from ``checkpoint`` (a
    :class:`Checkpoint`, or just its parts' snapshots by name, as ``QueryNetwork.snapshot``
    makes them); for a part named in ``rewind`` call the given function with the part's
    snapshot instead of ``restore``.

    Raises :class:`CheckpointError`, before restoring anything, if the checkpoint lacks a
    part, holds a part that is not in ``parts``, or ``rewind`` names an unknown part.
    """
    rewind = rewind or {}
    if isinstance(checkpoint, Checkpoint):
        what, snaps = f"checkpoint {checkpoint.seq}", checkpoint.parts
    else:
        what, snaps = "the snapshot", checkpoint
    have, want = set(snaps), set(parts)
    if have != want:
        problems = []
        if want - have:
            problems.append(f"it has no snapshot of {_names(want - have)}")
        if have - want:
            problems.append(f"it holds snapshots of unknown part(s) {_names(have - want)}")
        raise CheckpointError(
            f"{what} does not match the network: {'; '.join(problems)}"
            f" (network parts: {_names(want)})"
        )
    unknown = set(rewind) - want
    if unknown:
        raise CheckpointError(
            f"{what}: rewind names unknown part(s) {_names(unknown)}"
            f" (network parts: {_names(want)})"
        )
    # Copy every snapshot first, so that an unencodable one fails before any part changed.
    copies = {name: _copy(what, name, snap) for name, snap in snaps.items()}
    for name, part in parts.items():
        fn = rewind.get(name)
        if fn is None:
            part.restore(copies[name])
        else:
            fn(copies[name])


def encode_checkpoint(cp: Checkpoint) -> bytes:
    """The checkpoint as one orjson document with a version field."""
    try:
        return orjson.dumps(
            {
                "v": CHECKPOINT_VERSION,
                "seq": cp.seq,
                "taken_at": cp.taken_at,
                "parts": dict(cp.parts),
            }
        )
    except TypeError:
        # Find the culprit so that the message names it (cheap: this is the error path).
        for name, snap in cp.parts.items():
            _encode_part(f"checkpoint {cp.seq}", name, snap)
        raise CheckpointError(
            f"checkpoint {cp.seq}: cannot encode its header (seq={cp.seq!r}, "
            f"taken_at={cp.taken_at!r}); both must be ints"
        ) from None


def decode_checkpoint(blob: bytes) -> Checkpoint:
    """Inverse of :func:`encode_checkpoint`. A corrupt blob or another version raises
    :class:`CheckpointError` saying what was expected and what was found."""
    try:
        doc = orjson.loads(blob)
    except orjson.JSONDecodeError as e:
        raise CheckpointError(
            f"corrupt checkpoint ({len(blob)} bytes): not valid JSON: {e}"
        ) from None
    if not isinstance(doc, dict):
        raise CheckpointError(
            f"corrupt checkpoint: expected a JSON object, found {type(doc).__name__}"
        )
    version = doc.get("v")
    if version != CHECKPOINT_VERSION:
        raise CheckpointError(
            f"checkpoint of format version {version!r}; this build reads version "
            f"{CHECKPOINT_VERSION} only"
        )
    seq, taken_at, parts = doc.get("seq"), doc.get("taken_at"), doc.get("parts")
    if type(seq) is not int or type(taken_at) is not int or not isinstance(parts, dict):
        raise CheckpointError(
            "corrupt checkpoint: expected int 'seq', int 'taken_at' and an object 'parts', "
            f"found {type(seq).__name__}, {type(taken_at).__name__}, {type(parts).__name__}"
        )
    return Checkpoint(seq, taken_at, parts)


@dataclass(frozen=True, slots=True)
class StoreStats:
    """What a :class:`CheckpointStore` wrote and skipped, over all its puts."""

    puts: int = 0
    parts_written: int = 0
    parts_skipped: int = 0
    bytes_written: int = 0


class CheckpointStore:
    """The latest checkpoint, kept as per-part encoded snapshots written only on change.

    ``latest()`` always equals the last checkpoint put (after the orjson round trip that
    turns tuples into lists); parts the last put did not hold are dropped.
    """

    __slots__ = ("_blobs", "_part_seq", "_seq", "_stats", "_taken_at")

    def __init__(self) -> None:
        self._blobs: dict[str, bytes] = {}
        self._part_seq: dict[str, int] = {}
        self._seq: int | None = None
        self._taken_at = 0
        self._stats = StoreStats()

    def put(self, cp: Checkpoint) -> tuple[str, ...]:
        """Record ``cp``; return the names of the parts actually written (changed or new)."""
        if self._seq is not None and cp.seq <= self._seq:
            raise CheckpointError(
                f"checkpoint {cp.seq} is not newer than the stored checkpoint {self._seq}"
            )
        # Encode everything before changing anything: a bad part leaves the store as it was.
        blobs = {name: _encode_part(f"checkpoint {cp.seq}", name, snap)
                 for name, snap in cp.parts.items()}
        written: list[str] = []
        for name, blob in blobs.items():
            old = self._blobs.get(name)
            if old is not None and old == blob:
                blobs[name] = old  # keep one copy of an unchanged part in memory, not two
            else:
                written.append(name)
                self._part_seq[name] = cp.seq
        for name in self._blobs.keys() - blobs.keys():
            del self._part_seq[name]
        s = self._stats
        self._stats = StoreStats(
            s.puts + 1,
            s.parts_written + len(written),
            s.parts_skipped + len(blobs) - len(written),
            s.bytes_written + sum(len(blobs[name]) for name in written),
        )
        self._blobs = blobs
        self._seq, self._taken_at = cp.seq, cp.taken_at
        return tuple(written)

    def latest(self) -> Checkpoint:
        """The full latest checkpoint, decoded afresh (callers may keep or mutate it)."""
        if self._seq is None:
            raise CheckpointError("the checkpoint store is empty: no checkpoint was put yet")
        return Checkpoint(
            self._seq, self._taken_at, {name: orjson.loads(b) for name, b in self._blobs.items()}
        )

    @property
    def last_seq(self) -> int | None:
        """``seq`` of the latest checkpoint put, None while empty."""
        return self._seq

    @property
    def stats(self) -> StoreStats:
        return self._stats

    def part_seq(self, name: str) -> int:
        """``seq`` of the checkpoint whose snapshot of part ``name`` is stored (the last put
        in which that part changed)."""
        try:
            return self._part_seq[name]
        except KeyError:
            raise CheckpointError(
                f"the checkpoint store has no part {name!r} (parts: {_names(self._blobs)})"
            ) from None


def _encode_part(what: str, name: str, snap: Any) -> bytes:
    """``snap`` encoded; ``what`` (e.g. "checkpoint 3") names it in the error."""
    try:
        return orjson.dumps(snap)
    except TypeError as e:
        raise CheckpointError(f"{what}: the snapshot of part {name!r} is not plain data: {e}") from None


def _copy(what: str, name: str, snap: Any) -> Any:
    return orjson.loads(_encode_part(what, name, snap))


def _names(names: Iterable[str]) -> str:
    return ", ".join(repr(n) for n in sorted(names)) or "none"
