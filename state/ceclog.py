"""A replica's persistent record log for continuous eventual checkpointing (CEC, Sebeou &
Magoutis): records are appended as they are made; recovery scans back from the end.

A :class:`CecLog` is a directory of *segments* ``NNNNNNNN.ceclog`` (8-digit sequence), each
``MAGIC`` + a ``FORMAT_VERSION`` byte, then *frames*: one record (a dict, orjson) with the
caller's integer time ``t``, laid out little endian as ``u32 payload length | u32
zlib.crc32(payload) | i64 t | payload | u32 payload length`` (the trailer lets a reader walk
backwards; the crc finds a torn frame).

Invariants: ``t`` never decreases along the log (frames may share one; a decreasing append is
refused). Frames never span segments: a frame goes into the last segment unless that one
holds a frame already and would grow past ``segment_bytes``. Every live segment holds at
least one whole frame. Only the last segment is written; earlier ones are immutable until
:meth:`CecLog.drop_before` deletes them, oldest first, never the last.

Recovery (a SIGKILL at any moment): opening reads the last segment forward checking every
frame (lengths, trailer, crc, ``t`` order) and cuts it (``os.truncate``; ``torn_bytes``) at
the first bad frame: nothing after a bad frame can be trusted; a segment cut to nothing is
deleted and the one before it checked the same way. Earlier segments were complete when the
next began: only their header and their chain of frame headers and trailers are checked, and
a break raises. A bad frame met later by a read is corruption, not a torn write: a
:class:`StateError` naming the file and offset.

Index: per segment, the ``(t, offset)`` of the first and of every ``index_every``-th frame,
in memory, rebuilt at open from the frame headers (payloads are skipped). No sidecar file:
the header scan is cheap, and an index made from the data can never disagree with it (a
sidecar can be stale or torn by a crash, and would need a recovery of its own).
``forward(from_t)`` bisects it, then skips at most ``index_every`` frames.

Durability: an append is one ``write`` of whole frames per segment it touches, on an
unbuffered descriptor, so it is with the OS when the call returns: a killed process loses
nothing appended. A machine crash may lose the tail unless ``fsync=True`` (each append is
fsynced, and the directory when a segment is created; costly).

Limits: orjson's (str keys, 64-bit ints; tuples come back as lists, NaN/Infinity as None).
The crc covers the payload only: a damaged ``t`` is caught only when it breaks the order.
One writer per directory (nothing locks it); not thread-safe. A read sees the frames present
when it was called; a :meth:`~CecLog.drop_before` meanwhile may end it with an error.
"""

from __future__ import annotations

import os
import re
import zlib
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from struct import Struct
from types import TracebackType
from typing import Any, BinaryIO

import orjson

from .errors import StateError

__all__ = ["BLOCK", "FORMAT_VERSION", "MAGIC", "OVERHEAD", "CecLog", "Frame", "FramePos",
           "LogStats"]

MAGIC = b"DPCCEC"
FORMAT_VERSION = 1
_HEADER = MAGIC + bytes([FORMAT_VERSION])  # the start of every segment file
_HEAD = Struct("<IIq")  # payload length, crc32 of the payload, t
_TRAIL = Struct("<I")  # payload length again
OVERHEAD = _HEAD.size + _TRAIL.size  # bytes of a frame besides its payload
_MIN_PAYLOAD = 2  # b"{}": no encoded dict is shorter, so a zero-filled tail is no frame
_MAX_PAYLOAD = (1 << 32) - 1
BLOCK = 256 << 10  # the read size of backward() and forward()
_SCAN_BUFFER = 16 << 10  # the open's scan of frame headers, which seeks past payloads
_NAME = re.compile(r"(\d{8})\.ceclog")


@dataclass(frozen=True, slots=True)
class FramePos:
    """Where a frame starts: segment sequence number and byte offset in that file."""

    segment: int
    offset: int


@dataclass(frozen=True, slots=True)
class Frame:
    pos: FramePos
    t: int
    doc: dict[str, Any]
    size: int  # bytes on disk, header and trailer included


@dataclass(frozen=True, slots=True)
class LogStats:
    frames: int  # live frames: found valid at open + appended - dropped
    bytes: int  # bytes of all live segments
    segments: int
    torn_bytes: int  # bytes cut off the tail at open (0 normally)
    last_t: int | None


class _Segment:
    """A live segment's summary: size, frames, last frame, index (``idx_t``/``idx_off``)."""

    __slots__ = ("frames", "idx_off", "idx_t", "last_off", "last_t", "path", "seq", "size")

    def __init__(self, seq: int, path: Path) -> None:
        self.seq, self.path, self.size, self.frames = seq, path, len(_HEADER), 0
        self.last_off, self.last_t = -1, 0
        self.idx_t: list[int] = []
        self.idx_off: list[int] = []

    def note(self, off: int, t: int, size: int, every: int) -> None:
        """Account for the next frame, at ``off`` (the segment's end)."""
        if self.frames % every == 0:
            self.idx_t.append(t)
            self.idx_off.append(off)
        self.frames += 1
        self.last_off, self.last_t, self.size = off, t, off + size


class CecLog:
    """The frame log in ``directory`` (created if missing; recovered if it holds segments)."""

    def __init__(self, directory: str | os.PathLike[str], *, segment_bytes: int = 8 << 20,
                 fsync: bool = False, index_every: int = 64) -> None:
        self.directory = Path(directory)
        if segment_bytes < 1 or index_every < 1:
            raise StateError(f"ceclog {self.directory}: segment_bytes and index_every must be "
                             f">= 1, got {segment_bytes} and {index_every}")
        self._segment_bytes, self._fsync, self._every = segment_bytes, fsync, index_every
        self._fd: int | None = None  # on the last segment, opened at the first append
        self._closed, self._torn = False, 0
        self.directory.mkdir(parents=True, exist_ok=True)
        self._segs = [_Segment(int(m[1]), p) for p in sorted(self.directory.iterdir())
                      if (m := _NAME.fullmatch(p.name))]
        while self._segs and not self._recover(self._segs[-1]):
            self._segs.pop()  # torn to nothing: the one before is the tail now
        for seg in self._segs[:-1]:
            with open(seg.path, "rb", buffering=_SCAN_BUFFER) as f:
                _check_header(seg.path, f.read(len(_HEADER)))
                bad = self._walk(seg, f, seg.path.stat().st_size, crc=False)
            if bad is not None:
                raise bad

    def _recover(self, seg: _Segment) -> bool:
        """Check the tail segment frame by frame and cut it at the first bad frame; False
        when nothing is left of it (the file is deleted)."""
        end = seg.path.stat().st_size
        bad: StateError | None = None
        with open(seg.path, "rb", buffering=BLOCK) as f:
            head = f.read(len(_HEADER))
            if len(head) == len(_HEADER) or not _HEADER.startswith(head):  # (else: torn)
                _check_header(seg.path, head)
                bad = self._walk(seg, f, end, crc=True)
        if bad is None and seg.frames:
            return True
        cut = seg.size if seg.frames else 0  # no frame: no segment
        self._torn += end - cut
        if cut:
            os.truncate(seg.path, cut)
        else:
            seg.path.unlink()
        return cut > 0

    def _walk(self, seg: _Segment, f: BinaryIO, end: int, *, crc: bool) -> StateError | None:
        """Index ``seg``'s frames from ``f`` (past the segment header); the first bad one's
        error, if any (``seg.size`` is then its offset)."""
        off, prev = len(_HEADER), None
        while off < end:
            try:
                t, size, _ = _read_frame(f, seg.path, off, end, prev, crc=crc)
            except StateError as e:
                return e
            seg.note(off, t, size, self._every)
            off, prev = off + size, t
        return None

    def append(self, t: int, doc: dict[str, Any]) -> FramePos:
        """Append one frame (one write); its position."""
        return self.append_many(((t, doc),))[0]

    def append_many(self, items: Sequence[tuple[int, dict[str, Any]]]) -> list[FramePos]:
        """Append frames in order, one write per segment they go into; their positions.
        All are checked before any is written: a refused item leaves the log unchanged."""
        self._require_open()
        last = self._segs[-1].last_t if self._segs else None
        frames: list[tuple[int, bytes]] = []
        for t, doc in items:
            frames.append((t, self._encode(t, doc, last)))
            last = t
        out: list[FramePos] = []
        i, limit = 0, self._segment_bytes
        while i < len(frames):
            size = self._segs[-1].size if self._segs else limit  # (limit: a new segment)
            new = size + len(frames[i][1]) > limit
            j, size = i, len(_HEADER) if new else size
            while j < len(frames) and (j == i or size + len(frames[j][1]) <= limit):
                size += len(frames[j][1])
                j += 1
            seg = self._write(frames[i:j], new)
            for t, data in frames[i:j]:
                out.append(FramePos(seg.seq, seg.size))
                seg.note(seg.size, t, len(data), self._every)
            i = j
        return out

    def _encode(self, t: int, doc: dict[str, Any], last: int | None) -> bytes:
        where = f"ceclog {self.directory}"
        if type(t) is not int or not -(1 << 63) <= t < 1 << 63:
            raise StateError(f"{where}: t must be a 64-bit int, got {t!r}")
        if last is not None and t < last:
            raise StateError(f"{where}: t {t} appended after t {last}; t must not decrease")
        if not isinstance(doc, dict):
            raise StateError(f"{where}: a frame holds a dict, got {type(doc).__name__} at t {t}")
        try:
            payload = orjson.dumps(doc)
        except orjson.JSONEncodeError as e:
            raise StateError(f"{where}: cannot encode the document at t {t}: {e}") from None
        if len(payload) > _MAX_PAYLOAD:
            raise StateError(f"{where}: the document at t {t} encodes to {len(payload)} "
                             f"bytes, more than a frame holds ({_MAX_PAYLOAD})")
        n = len(payload)
        return _HEAD.pack(n, zlib.crc32(payload), t) + payload + _TRAIL.pack(n)

    def _write(self, frames: list[tuple[int, bytes]], new: bool) -> _Segment:
        """Write ``frames`` at once: at the end of the last segment, or as a new one."""
        data = b"".join(d for _, d in frames)
        if new:
            seq = self._segs[-1].seq + 1 if self._segs else 0
            if seq > 99_999_999:
                raise StateError(f"ceclog {self.directory}: segment numbers end at 99999999")
            seg = _Segment(seq, self.directory / f"{seq:08d}.ceclog")
            fd = os.open(seg.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
            data = _HEADER + data
        else:
            seg = self._segs[-1]
            if self._fd is None:
                self._fd = os.open(seg.path, os.O_WRONLY | os.O_APPEND)
            fd = self._fd
        try:
            view = memoryview(data)
            while view:  # one write, unless the OS takes a part (a full disk)
                view = view[os.write(fd, view):]
            if self._fsync:
                os.fsync(fd)
        except OSError:
            if new:
                os.close(fd)
                seg.path.unlink(missing_ok=True)
            else:
                os.ftruncate(fd, seg.size)  # no half frame left behind
            raise
        if new:
            if self._fsync:
                _fsync_dir(self.directory)
            if self._fd is not None:
                os.close(self._fd)
            self._fd = fd
            self._segs.append(seg)
        return seg

    def backward(self) -> Iterator[Frame]:
        """The frames from the newest to the oldest, across segments, each segment read
        from its end in blocks of ``BLOCK`` bytes."""
        self._require_open()
        return _backward([(s.seq, s.path, s.size) for s in reversed(self._segs)])

    def forward(self, from_t: int | None = None) -> Iterator[Frame]:
        """The frames from the oldest; with ``from_t``, from the first with ``t >= from_t``
        (found by bisecting the index)."""
        self._require_open()
        k, start = 0, len(_HEADER)
        if from_t is not None:
            k = bisect_left(self._segs, from_t, key=lambda s: s.last_t)
            if k < len(self._segs):
                seg = self._segs[k]
                start = seg.idx_off[max(bisect_left(seg.idx_t, from_t) - 1, 0)]
        plan = [(s.seq, s.path, s.size, start if j == k else len(_HEADER))
                for j, s in enumerate(self._segs[k:], k)]
        return _forward(plan, from_t)

    def first_pos(self) -> FramePos | None:
        return FramePos(self._segs[0].seq, len(_HEADER)) if self._segs else None

    def last_pos(self) -> FramePos | None:
        return FramePos(self._segs[-1].seq, self._segs[-1].last_off) if self._segs else None

    @property
    def stats(self) -> LogStats:
        segs = self._segs
        return LogStats(sum(s.frames for s in segs), sum(s.size for s in segs), len(segs),
                        self._torn, segs[-1].last_t if segs else None)

    def drop_before(self, pos: FramePos) -> int:
        """Delete the segments before ``pos``'s segment (never the last one); bytes freed."""
        self._require_open()
        freed = 0
        while len(self._segs) > 1 and self._segs[0].seq < pos.segment:
            self._segs[0].path.unlink()
            freed += self._segs.pop(0).size
        return freed

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._closed = True

    def __enter__(self) -> CecLog:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _require_open(self) -> None:
        if self._closed:
            raise StateError(f"ceclog {self.directory}: used after close()")


def _backward(segs: list[tuple[int, Path, int]]) -> Iterator[Frame]:
    newer: int | None = None
    for seq, path, size in segs:
        with open(path, "rb", buffering=0) as f:
            buf, start, pos = b"", size, size  # buf holds the file's bytes from start
            while pos > len(_HEADER):
                if pos - _TRAIL.size < start:
                    buf, start = _refill(f, path, buf, start, pos, pos - _TRAIL.size)
                (n,) = _TRAIL.unpack_from(buf, pos - _TRAIL.size - start)
                off = pos - OVERHEAD - n
                if off < len(_HEADER) or n < _MIN_PAYLOAD:
                    raise _corrupt(path, pos, f"a trailer says payload length {n}: no frame fits")
                if off < start:
                    buf, start = _refill(f, path, buf, start, pos, off)
                length, crc, t = _HEAD.unpack_from(buf, off - start)
                payload = memoryview(buf)[off - start + _HEAD.size:pos - start - _TRAIL.size]
                if length != n or zlib.crc32(payload) != crc:
                    raise _corrupt(path, off, "its header or crc does not match its payload")
                if newer is not None and t > newer:
                    raise _corrupt(path, off, f"t {t} is after the next frame's t {newer}")
                yield Frame(FramePos(seq, off), t, _decode(path, off, payload), n + OVERHEAD)
                newer, pos = t, off


def _refill(f: BinaryIO, path: Path, buf: bytes, start: int, pos: int,
            lo: int) -> tuple[bytes, int]:
    """``buf`` (the file from ``start``; used up to ``pos``) extended down to ``lo``, or a
    block below ``pos`` if that is lower, with one read; and its new start."""
    new = max(0, min(lo, pos - BLOCK))
    head = os.pread(f.fileno(), start - new, new)
    if len(head) != start - new:
        raise _corrupt(path, new, "the file is shorter than the log wrote it")
    return head + buf[:pos - start], new


def _forward(plan: list[tuple[int, Path, int, int]], from_t: int | None) -> Iterator[Frame]:
    prev: int | None = None
    for seq, path, size, off in plan:
        with open(path, "rb", buffering=BLOCK) as f:
            f.seek(off)
            while off < size:
                t, n, payload = _read_frame(f, path, off, size, prev, crc=True)
                if from_t is None or t >= from_t:
                    yield Frame(FramePos(seq, off), t, _decode(path, off, payload), n)
                off, prev = off + n, t


def _read_frame(f: BinaryIO, path: Path, off: int, end: int, prev_t: int | None, *,
                crc: bool) -> tuple[int, int, memoryview]:
    """The frame at ``off`` (where ``f`` is) as ``(t, size, payload)``, ``f`` left after it;
    with ``crc=False`` the payload is skipped (returned empty), not read nor checked."""
    head = f.read(_HEAD.size) if end - off >= OVERHEAD + _MIN_PAYLOAD else b""
    if len(head) < _HEAD.size:
        raise _corrupt(path, off, f"{end - off} bytes left, less than the smallest frame")
    n, crc32, t = _HEAD.unpack(head)
    if n < _MIN_PAYLOAD or off + OVERHEAD + n > end:
        raise _corrupt(path, off, f"payload length {n} does not fit in {end - off} bytes")
    if prev_t is not None and t < prev_t:
        raise _corrupt(path, off, f"t {t} is before the previous frame's t {prev_t}")
    if not crc:
        f.seek(n, os.SEEK_CUR)
    rest = memoryview(f.read(n + _TRAIL.size if crc else _TRAIL.size))
    if len(rest) < (n if crc else 0) + _TRAIL.size:
        raise _corrupt(path, off, "the file ends inside the frame")
    payload, (trailer,) = rest[:-_TRAIL.size], _TRAIL.unpack(rest[-_TRAIL.size:])
    if trailer != n:
        raise _corrupt(path, off, f"its trailer says payload length {trailer}, header {n}")
    if crc and zlib.crc32(payload) != crc32:
        raise _corrupt(path, off, "its payload does not match its crc32")
    return t, n + OVERHEAD, payload


def _decode(path: Path, off: int, payload: memoryview) -> dict[str, Any]:
    try:
        doc = orjson.loads(payload)
    except orjson.JSONDecodeError as e:
        raise _corrupt(path, off, f"its payload is not JSON ({e})") from None
    if not isinstance(doc, dict):
        raise _corrupt(path, off, f"its payload is a {type(doc).__name__}, not a dict")
    return doc


def _check_header(path: Path, head: bytes) -> None:
    if head[:len(MAGIC)] != MAGIC or len(head) < len(_HEADER):
        raise StateError(f"ceclog segment {path}: expected magic {MAGIC!r} and a version "
                         f"byte, found {head!r}")
    if head[len(MAGIC)] != FORMAT_VERSION:
        raise StateError(f"ceclog segment {path}: format version {head[len(MAGIC)]}, this "
                         f"code reads version {FORMAT_VERSION}")


def _corrupt(path: Path, off: int, reason: str) -> StateError:
    return StateError(f"ceclog segment {path}: bad frame at offset {off}: {reason}")


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
