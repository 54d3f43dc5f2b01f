"""The eventual checkpoint (EC): what a replica's CEC log says its state was (pure).

Sebeou & Magoutis, section II.B. The log (state/ceclog.py) is a sequence of *frames*, one per
stable step of the query network that changed something (operators/cec.py writes them), in
tuple-time order. A frame's document holds:

* ``h``: every operator's *header* after the step: its bookkeeping (output ids, watermarks,
  its input position ``base.in_ids``, the id of the last data tuple on each input port) and
  its state outside its parts (all of its state for an operator without parts);
* ``n``: per partitioned operator, N, the number of its parts open after the step;
* ``o`` / ``c``: per partitioned operator, ``[keys, states]`` (two lists): ``G_open`` records of
  the parts that opened in the step and ``G_check`` records of open parts checkpointed in
  it, each part's state after the step. Their *footprint* is the operator's input position
  in the same frame's header;
* ``x``: per partitioned operator, the keys of the parts that closed in the step (the
  paper's R: the part's result went out in that step);
* ``out``: per output stream, the stable tuples the node emitted in the step.

:func:`build_ec` reads the frames newest first and collects, per partitioned operator, the
newest footprint of each part until it has N distinct parts that were open at the end (a
key seen closed is skipped in older frames: that part ended before the end). The frames read
are the EC's *extent*. The oldest frame read is where the replay starts: the operators
without parts are restored to their headers in that frame, and every input is replayed from
the position its SUnion held then.

Invariants: a part open at the end has a ``G_open`` in a frame no older than the frame in
which it opened, so the scan always ends with N parts unless the log lost frames (then
:class:`~state.errors.StateError` says which operator lacked how many parts); the result
depends only on the frames, never on how they were cut into segments.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from .errors import StateError

__all__ = ["EventualCheckpoint", "FrameLike", "PartFootprint", "build_ec"]


class FrameLike(Protocol):
    """What :func:`build_ec` reads of a frame (state.ceclog.Frame)."""

    @property
    def t(self) -> int: ...

    @property
    def doc(self) -> dict[str, Any]: ...

    @property
    def size(self) -> int: ...


@dataclass(frozen=True, slots=True)
class PartFootprint:
    """The newest checkpoint of one part: its key and state as the log holds them (plain),
    how many frames back it was found (0: the newest), and its operator's input position
    then (the ids after which the part takes replayed tuples)."""

    key: Any
    state: Any
    frame: int
    in_ids: tuple[int, ...]


@dataclass(slots=True)
class EventualCheckpoint:
    """A whole network's state per the log: see the module docstring."""

    #: Time of the newest frame (t_c) and each operator's header there.
    end_t: int
    end_headers: dict[str, Any]
    #: Per partitioned operator, its open parts' newest footprints.
    parts: dict[str, list[PartFootprint]]
    #: Time of the oldest frame read (T) and each operator's header there.
    start_t: int
    start_headers: dict[str, Any]
    #: The extent: frames and bytes read.
    extent_frames: int = 0
    extent_bytes: int = 0
    part_counts: dict[str, int] = field(default_factory=dict)


def build_ec(frames: Iterable[FrameLike],
             progress: Callable[[int, int], None] | None = None) -> EventualCheckpoint | None:
    """The EC of a log given its frames newest first; None for an empty log.

    ``progress(frames read, parts found)`` is called every 1,000 frames (a long extent)."""
    it = iter(frames)
    first = next(it, None)
    if first is None:
        return None
    doc = first.doc
    end_headers = doc["h"]
    need: dict[str, int] = dict(doc.get("n", {}))
    found: dict[str, dict[bytes, PartFootprint]] = {op: {} for op in need}
    closed: dict[str, set[bytes]] = {op: set() for op in need}
    missing = sum(need.values())
    frame, t, start_headers, n_bytes = 0, first.t, end_headers, 0
    current: FrameLike | None = first
    while current is not None:
        doc, t = current.doc, current.t
        n_bytes += current.size
        if missing:
            missing -= _collect(doc, frame, found, closed, need)
        start_headers = doc["h"]
        if not missing:
            break
        frame += 1
        if progress is not None and frame % 1000 == 0:
            progress(frame, sum(map(len, found.values())))
        current = next(it, None)
    if missing:
        lacking = ", ".join(f"{op}: {len(found[op])} of {n}" for op, n in sorted(need.items())
                            if len(found[op]) < n)
        raise StateError(f"the CEC log ends before the eventual checkpoint is complete: after "
                         f"{frame} frames, parts found ({lacking}); frames were lost")
    return EventualCheckpoint(
        end_t=first.t, end_headers=end_headers,
        parts={op: list(parts.values()) for op, parts in found.items()},
        start_t=t, start_headers=start_headers,
        extent_frames=frame + 1, extent_bytes=n_bytes, part_counts=need)


def _collect(doc: dict[str, Any], frame: int, found: dict[str, dict[bytes, PartFootprint]],
             closed: dict[str, set[bytes]], need: dict[str, int]) -> int:
    """Take one frame's records; return how many new parts it gave."""
    new = 0
    for op, keys in doc.get("x", {}).items():
        if op in closed:
            closed[op].update(orjson.dumps(k) for k in keys)
    for kind in ("o", "c"):
        for op, records in doc.get(kind, {}).items():
            mine, gone = found.get(op), closed.get(op)
            if mine is None or gone is None or len(mine) >= need[op]:
                continue
            in_ids = tuple(doc["h"][op]["base"]["in_ids"])
            for key, state in zip(*records, strict=True):
                kb = orjson.dumps(key)
                if kb not in mine and kb not in gone:
                    mine[kb] = PartFootprint(key, state, frame, in_ids)
                    new += 1
    return new
