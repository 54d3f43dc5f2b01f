"""A replica's continuous eventual checkpoints: its persistent log, and recovery from it.

``checkpointing = "cec"`` (docs/cec.md). The query network's frames (operators/cec.py) go
into the replica's own log (state/ceclog.py, ``<run dir>/replicas/<name>/cec``), each
appended *before* the step's output is published, so that nothing leaves the replica that
its log does not hold. From them:

* **Acks.** An input link acknowledges upstream only up to where a recovery would replay
  from (the oldest live footprint's SUnion position, :meth:`CecKeeper.acks`): upstream
  buffers and sources keep the rest for it.
* **Retention.** Segments older than both the eventual checkpoint's extent and the oldest
  output tuple a consumer has not acknowledged are deleted.
* **Recovery** (``dpc node ... --recover``, :meth:`CecKeeper.recover`): the eventual
  checkpoint is read back from the log's end, the network restored from it
  (operators/cec.py ``recover``), and every output stream's tail read forward from the
  oldest retained frame, so that the recovered replica serves its consumers from where they
  are. No partner is asked: a replica recovers whatever its partners' state, and all the
  replicas of a node can be killed at once.

A fresh start (no ``--recover``) deletes a log left in the directory and begins a new one
with a *genesis* frame (the network as it starts).
"""

from __future__ import annotations

import logging
import shutil
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from node.config.model import NodeSettings
from operators.cec import CecPolicy, CecWriter, Recovered, out_tuples, recover
from operators.network import NetworkOutput, QueryNetwork
from protocol.tuples import Kind, Tuple
from state.cec import EventualCheckpoint, build_ec
from state.ceclog import CecLog, FramePos
from state.errors import StateError

__all__ = ["CecKeeper", "LogRecovery", "policy_of_settings"]

#: Apply the retention rule every this many frames (it deletes whole segments only).
_RETAIN_EVERY = 64


def policy_of_settings(st: NodeSettings) -> CecPolicy:
    return CecPolicy(q=st.cec_q, u=st.cec_u, ci=st.cec_ci, cp=st.cec_cp)


@dataclass(slots=True)
class LogRecovery:
    """What :meth:`CecKeeper.recover` did: the network's part (operators/cec.py) and, per
    output operator, the stream's last id and the tail the log holds (after ``trimmed``)."""

    network: Recovered
    last_ids: dict[str, int]
    held: dict[str, list[Tuple]] = field(default_factory=dict)
    trimmed: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    frames_read: int = 0


class CecKeeper:
    """The CEC log of one replica (see the module docstring)."""

    def __init__(self, network: QueryNetwork, directory: Path, settings: NodeSettings,
                 *, log: logging.Logger, name: str) -> None:
        self.network = network
        self.directory = directory
        self.settings = settings
        self._log = log
        self._name = name
        self.writer = CecWriter(network, policy_of_settings(settings))
        self.cec: CecLog | None = None
        #: Per frame still on disk: (writer number, position, per output op its last id).
        self._frames: deque[tuple[int, FramePos, dict[str, int]]] = deque()
        self._since_retain = 0
        self.recovery: dict[str, Any] | None = None  # progress and outcome, for status

    # ---------------------------------------------------------------- start
    def start_fresh(self, now: int) -> None:
        """A new log (a log left by an earlier start is deleted) with its genesis frame."""
        if self.directory.exists():
            shutil.rmtree(self.directory)
        self.cec = self._open()
        t, doc = self.writer.genesis(now)
        self._append(self.writer.frame_number() - 1, t, doc)

    def read(self) -> tuple[EventualCheckpoint, list[tuple[FramePos, dict[str, list[Tuple]]]]]:
        """Read the log for a recovery: the eventual checkpoint, and every frame on disk
        (oldest first) with its output. Touches no operator, so that it may run in a
        thread while the event loop answers the control plane (progress in :meth:`status`).
        Raises :class:`~state.errors.StateError` if the log is missing, empty or incomplete."""
        self.cec = cec = self._open()
        st = cec.stats
        if st.torn_bytes:
            self._log.warning("%s: the CEC log's last frame was torn by the crash: %d bytes "
                              "cut off", self._name, st.torn_bytes)
        self.recovery = {"phase": "reading the eventual checkpoint", "frames": 0, "parts": 0}

        def progress(frames: int, parts: int) -> None:
            self.recovery = {"phase": "reading the eventual checkpoint", "frames": frames,
                             "parts": parts}

        ec = build_ec(cec.backward(), progress)
        if ec is None:
            raise StateError(f"{self._name}: cannot recover from its CEC log in "
                             f"{self.directory}: the log is empty")
        self.recovery = {"phase": "reading the output streams' tails", "frames": ec.extent_frames,
                         "parts": sum(ec.part_counts.values())}
        frames = [(f.pos, {name: out_tuples(columns) for name, columns in f.doc.get("out", {}).items()})
                  for f in cec.forward()]
        return ec, frames

    def restore(self, ec: EventualCheckpoint, frames: list[tuple[FramePos, dict[str, list[Tuple]]]],
                now: int, seconds: float = 0.0) -> LogRecovery:
        """Restore the network from what :meth:`read` gave (on the event loop's thread)."""
        started = time.monotonic()
        rec = recover(self.network, ec, now)
        self.writer.resume_from(ec)
        # Number every frame on disk from the end (the newest is -1, as the writer does),
        # and gather each output stream's tail.
        held: dict[str, list[Tuple]] = {}
        for k, (pos, outs) in enumerate(frames):
            last: dict[str, int] = {}
            for name, ts in outs.items():
                held.setdefault(name, []).extend(ts)
                data = [t[1] for t in ts if t[0] is Kind.STABLE]
                if data:
                    last[name] = data[-1]
            self._frames.append((k - len(frames), pos, last))
        last_ids = {}
        trimmed = {}
        for name in self.network.outputs:
            h = ec.end_headers[name]["state"]
            last_ids[name] = h["last_stable_id"]
            tail = held.get(name, [])
            first = next((t[1] for t in tail if t[0] is Kind.STABLE), None)
            trimmed[name] = last_ids[name] if first is None else first - 1
            held[name] = tail if first is not None else []
        seconds += time.monotonic() - started
        self.recovery = {"phase": "replaying", "frames": ec.extent_frames,
                         "parts": rec.parts, "extent_bytes": ec.extent_bytes,
                         "ec_load_s": round(seconds, 3), "start_t": ec.start_t,
                         "end_t": ec.end_t, "resume": rec.resume}
        return LogRecovery(rec, last_ids, held, trimmed, seconds, ec.extent_frames)

    def recover(self, now: int) -> LogRecovery:
        """:meth:`read` then :meth:`restore`, in one go."""
        started = time.monotonic()
        ec, frames = self.read()
        return self.restore(ec, frames, now, time.monotonic() - started)

    # ---------------------------------------------------------------- running
    def after(self, result: NetworkOutput, now: int) -> bool:
        """After a network call, before its output is published: append its frame, if
        any (True then)."""
        before = self.writer.frame_number()
        frame = self.writer.step(now, result)
        if frame is None:
            return False
        self._append(before, *frame)
        return True

    def _append(self, number: int, t: int, doc: dict[str, Any]) -> None:
        if self.cec is None:
            raise RuntimeError(f"{self._name}: the CEC log is not open")
        pos = self.cec.append(t, doc)
        last: dict[str, int] = {}
        for name, (kinds, ids, *_) in doc.get("out", {}).items():
            data = [i for k, i in zip(kinds, ids, strict=True) if k is Kind.STABLE]
            if data:
                last[name] = data[-1]
        self._frames.append((number, pos, last))

    def acks(self) -> dict[str, int]:
        """Per input stream, how far upstream may forget it (see the module docstring)."""
        return self.writer.acks()

    def retain(self, acked: Mapping[str, int]) -> None:
        """Delete the segments no recovery and no consumer needs: ``acked`` maps each output
        operator to the id up to which every consumer acknowledged its stream."""
        self._since_retain += 1
        if self._since_retain < _RETAIN_EVERY or self.cec is None or len(self._frames) < 2:
            return
        self._since_retain = 0
        keep = self.writer.oldest_frame()
        frames = self._frames
        # The first frame with output a consumer still needs.
        for number, _, last in frames:
            if number >= keep:
                break
            if any(i > acked.get(name, 0) for name, i in last.items()):
                keep = number
                break
        while len(frames) > 1 and frames[1][0] <= keep:
            frames.popleft()
        freed = self.cec.drop_before(frames[0][1])
        if freed:
            self._log.debug("%s: CEC log: %d bytes of old segments deleted", self._name, freed)

    def status(self) -> dict[str, Any]:
        w = self.writer.stats
        disk = self.cec.stats if self.cec is not None else None
        return {
            "frames": w.frames, "g_open": w.g_open, "g_check": w.g_check, "closes": w.closes,
            "out_tuples": w.out_tuples, "open_parts": w.open_parts,
            "extent_frames": w.extent_frames, "last_t": w.last_t,
            "log_bytes": disk.bytes if disk else 0, "segments": disk.segments if disk else 0,
            "recovery": self.recovery,
        }

    def gauges(self) -> dict[str, int]:
        """The metrics: frames and records written, the log's size, the extent."""
        w = self.writer.stats
        disk = self.cec.stats if self.cec is not None else None
        return {"cec_frames": w.frames, "cec_g_open": w.g_open, "cec_g_check": w.g_check,
                "cec_open_parts": w.open_parts, "cec_extent_frames": w.extent_frames,
                "cec_log_bytes": disk.bytes if disk else 0}

    def close(self) -> None:
        if self.cec is not None:
            self.cec.close()
            self.cec = None

    def _open(self) -> CecLog:
        return CecLog(self.directory, fsync=self.settings.cec_fsync)
