"""The order in which a multi-input operator processes its flows, and its undo log after them.

Role: a per-tuple operator with several inputs sees, in each wave, one port's batch after
another, in the order the query network queued them (operators/network.py: the order of
its producers); each batch is its data tuples and boundaries, in flow order. Every entry
(data tuple or boundary) gets the next log sequence number (operators/base.py). This module
numbers a step's entries the same way (:class:`Entries`), so that a vectorized operator can
order its outputs and its state by them, and rebuilds the base bookkeeping the per-tuple
operator would have after them (:func:`settle_log`): the one marker and the log a trim
leaves while untainted, which start at the oldest input still in the operator's state.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from operators.base import NO_TIME, Operator, _Marker
from protocol.tuples import Tuple

from .flow import Flow

__all__ = ["Entries", "Marks", "Point", "last_call", "settle_log", "walk_marks"]


@dataclass
class Entries:
    """A step's input entries in processing order. ``data_g[p]`` / ``mark_g[p]``: the
    global index of port p's data rows / marks (its log seq is ``seq0 + g``); ``port``,
    ``is_mark``, ``wave`` and ``mark_time`` by global index."""

    flows: Sequence[Flow]
    seq0: int
    data_g: list[np.ndarray]
    mark_g: list[np.ndarray]
    port: np.ndarray
    is_mark: np.ndarray
    wave: np.ndarray
    mark_time: np.ndarray

    @property
    def n(self) -> int:
        return len(self.port)

    @classmethod
    def order(cls, flows: Sequence[Flow], ports: Sequence[int], seq0: int) -> Entries:
        """Number the entries of ``flows`` (by port) as the network feeds them: wave by
        wave, in each wave the ports in ``ports`` order, each port's entries in order."""
        rank = {p: r for r, p in enumerate(ports)}
        waves, ranks, local, port, is_mark, mtime, offsets = [], [], [], [], [], [], []
        start = 0
        for p, f in enumerate(flows):
            at = np.array([m.at for m in f.marks], dtype=np.int64)
            # Local position: data row i comes after the marks with at <= i.
            row_local = np.arange(f.n, dtype=np.int64) + np.searchsorted(at, np.arange(f.n),
                                                                          side="right")
            mark_local = at + np.arange(len(at), dtype=np.int64)
            waves += [f.data.column("wave").to_numpy(), np.array([m.wave for m in f.marks],
                                                                 dtype=np.int64)]
            local += [row_local, mark_local]
            n = f.n + len(at)
            ranks.append(np.full(n, rank[p], dtype=np.int64))
            port.append(np.full(n, p, dtype=np.int64))
            is_mark += [np.zeros(f.n, dtype=bool), np.ones(len(at), dtype=bool)]
            mtime += [np.zeros(f.n, dtype=np.int64),
                      np.array([m.tuple[2] for m in f.marks], dtype=np.int64)]
            offsets.append((start, f.n, len(at)))
            start += n
        w, r, loc = (np.concatenate(x) if x else np.zeros(0, np.int64)
                     for x in (waves, ranks, local))
        order = np.lexsort((loc, r, w))  # by wave, then port rank, then position
        g = np.empty(len(order), dtype=np.int64)
        g[order] = np.arange(len(order), dtype=np.int64)
        data_g = [g[s:s + nd] for s, nd, _ in offsets]
        mark_g = [g[s + nd:s + nd + nm] for s, nd, nm in offsets]
        cat = np.concatenate
        return cls(flows, seq0, data_g, mark_g,
                   cat(port)[order] if port else np.zeros(0, np.int64),
                   cat(is_mark)[order] if is_mark else np.zeros(0, bool), w[order],
                   cat(mtime)[order] if mtime else np.zeros(0, np.int64))

    def tuples_from(self, g: int) -> list[tuple[int, Tuple]]:
        """(port, tuple) of every entry from global index ``g`` on, in order."""
        rows: list[tuple[int, int, Tuple]] = []
        for p, f in enumerate(self.flows):
            dg, mg = self.data_g[p], self.mark_g[p]
            first = int(np.searchsorted(dg, g))  # a port's entries are in processing order
            tail = [t for _, batch in Flow(f.schema, f.data.slice(first), ()).to_waves()
                    for t in batch]
            rows += [(int(g), p, t) for g, t in zip(dg[first:], tail, strict=True)]
            rows += [(int(mg[k]), p, m.tuple) for k, m in enumerate(f.marks) if mg[k] >= g]
        rows.sort(key=lambda r: r[0])
        return [(p, t) for _, p, t in rows]


def settle_log(op: Operator, entries: Entries, outputs_after: Callable[[int], int],
               watermarks_before: list[int], boundary_out_before: int,
               oldest_before: int | None) -> None:
    """Leave ``op``'s undo log as the per-tuple operator would after ``entries``: one
    marker, for its last call (the last entry: a boundary alone, or the data run it ends),
    and the log from that marker's oldest entry on. The caller passes what held right
    before that call: ``watermarks_before``, ``boundary_out_before``, ``oldest_before``
    (``op.oldest_seq()`` then), and ``outputs_after(g)``, the outputs emitted from entry
    ``g`` on; ``op``'s other bookkeeping (``last_id``, ``watermarks``, state) is already
    set."""
    seq0, n = entries.seq0, entries.n
    op._seq = seq0 + n
    if n == 0:
        return
    if not op.keeps_undo_log:
        op.seq_base = last_call(entries) + seq0
        return
    first = last_call(entries)
    seq = seq0 + first
    oldest = seq if oldest_before is None else min(oldest_before, seq)
    op._markers = [_Marker(seq, oldest, op.last_id - outputs_after(first), False,
                           list(watermarks_before), boundary_out_before)]
    op.seq_base = seq
    # The log from ``oldest``: what is left of the old log, then the step's entries.
    old_log = list(op._log[max(0, oldest - op._log_start):]) if oldest < seq0 else []
    old_ports = op._log_ports[max(0, oldest - op._log_start):] if oldest < seq0 else []
    new = entries.tuples_from(max(0, oldest - seq0))
    log: list[Tuple] = old_log + [t for _, t in new]
    ports = list(old_ports) + [p for p, _ in new]
    # Boundaries logged before the log's start fold into its start watermarks.
    blog = [e for e in op._boundary_log if e[0] >= oldest]
    wm = list(op._log_start_wm)
    for s, p, time in op._boundary_log:
        if s < oldest:
            wm[p] = max(wm[p], time)
    marks = np.flatnonzero(entries.is_mark)
    for g in marks:
        s, p, time = seq0 + int(g), int(entries.port[g]), int(entries.mark_time[g])
        if s < oldest:
            wm[p] = max(wm[p], time)
        else:
            blog.append((s, p, time))
    op._log_start = oldest
    op._log = op._new_log(log)
    op._log_ports = ports
    op._boundary_log = blog
    op._log_start_wm = wm


def last_call(entries: Entries) -> int:
    """Global index of the first entry of the last call: the last entry if a boundary,
    else the first of the data run it ends (one port's batch of one wave, up to a mark)."""
    k = entries.n - 1
    if entries.is_mark[k]:
        return k
    p, w = entries.port[k], entries.wave[k]
    while k > 0 and not entries.is_mark[k - 1] and entries.port[k - 1] == p \
            and entries.wave[k - 1] == w:
        k -= 1
    return k


class Point:
    """The boundary bookkeeping at one point of the step."""

    __slots__ = ("advanced", "sent", "watermarks")

    def __init__(self, watermarks: list[int], sent: int, advanced: bool) -> None:
        self.watermarks, self.sent, self.advanced = watermarks, sent, advanced


class Marks:
    """A step's boundaries in order: which ones the operator re-emits (its oldest time is
    its min watermark: a join's, a union's), and the bookkeeping after each one that moved
    a watermark (``g``: their global indices; ``watermarks``: one row each; ``sent``: the
    last boundary re-emitted by then), from ``start``, the bookkeeping before any entry."""

    def __init__(self, start: Point, g: np.ndarray, watermarks: np.ndarray, sent: np.ndarray,
                 emitted: list[tuple[int, int]]) -> None:
        self.start, self.g, self.watermarks, self.sent = start, g, watermarks, sent
        self.emitted = emitted  # (g, boundary time)

    def _point(self, k: int) -> Point:
        if k < 0:
            return self.start
        return Point(self.watermarks[k].tolist(), int(self.sent[k]), True)

    @property
    def final(self) -> Point:
        return self._point(len(self.g) - 1)

    def at(self, g: int) -> Point:
        """The bookkeeping right before entry ``g``."""
        return self._point(int(np.searchsorted(self.g, g, side="left")) - 1)


_LOWEST = np.iinfo(np.int64).min


def walk_marks(op: Operator, e: Entries) -> Marks:
    """The per-tuple operator's boundary bookkeeping over the step's marks, in arrays: a
    mark moves its port's watermark if above it; the min watermark, when a mark moved it
    above the last boundary sent, is re-emitted. (The last one sent before a mark is the
    highest min watermark after any earlier mark that moved one, or the one sent before
    the step: a min that did not go out was not above it then.)"""
    wm0, sent0 = list(op.watermarks), op._boundary_out
    start = Point(list(wm0), sent0, False)
    mg = np.flatnonzero(e.is_mark)
    ports, times = e.port[mg], e.mark_time[mg]
    wm = np.empty((len(mg), len(wm0)), dtype=np.int64)
    moved = np.zeros(len(mg), dtype=bool)
    for p, w in enumerate(wm0):
        run = np.maximum.accumulate(np.concatenate([[w], np.where(ports == p, times, _LOWEST)]))
        wm[:, p] = run[1:]
        moved |= (ports == p) & (times > run[:-1])
    low = wm.min(axis=1) if len(mg) else np.zeros(0, np.int64)
    earlier = np.maximum.accumulate(np.concatenate([[_LOWEST], np.where(moved, low, _LOWEST)]))
    emitted = moved & (low > np.maximum(earlier[:-1], sent0)) & (low > NO_TIME)
    sent = np.maximum(np.maximum.accumulate(np.where(emitted, low, _LOWEST)), sent0)
    return Marks(start, mg[moved], wm[moved], sent[moved],
                 list(zip(mg[emitted].tolist(), low[emitted].tolist(), strict=True)))
