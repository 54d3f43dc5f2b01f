"""Continuous eventual checkpointing of a query network: the log's frames, and recovery.

Sebeou & Magoutis (CEC), applied to a whole node's network (pure: the replica appends the
frames to its persistent log, state/ceclog.py, and reads them back for :func:`recover`).

Writing (:class:`CecWriter`, after every network call, before its output goes out):

* A frame is written after a *stable* step that moved something: no SUnion in a failure
  episode, no operator tainted, and some SUnion released past what the log holds (after a
  checkpoint/redo rewind the replay first redoes steps the log has; they write nothing).
  Its document is state/cec.py's: every operator's header, then per partitioned operator
  (operators/parts.py) the ``G_open`` of each part that opened since the last frame, the
  keys of those that closed, N, and the ``G_check`` of the parts the policy picks; the
  stable output of the step (the node's persistent output queue).
* **Policy** (:class:`CecPolicy`, the paper's Q, U, CI, CP): within the first CI of every CP
  of the caller's clock (``now``), while the part with the oldest footprint is more than Q
  records back in the log or more than U input tuples back in the replay, it gets a
  ``G_check`` (and becomes the newest), at most ``max_checks`` per frame.
  Q and U bound the extent and the replay; CI / CP bound the time spent on it.
* While a failure is in progress nothing is written, except once a marker frame when an
  output stream first carries TENTATIVE tuples: the last stable frame's headers with that
  SOutput marked ``tentative_after``, so that a replica restored from the log retracts what
  its crashed incarnation sent tentatively.

Recovery (:func:`recover`): SUnions and stateless operators are restored to their headers in
the EC's oldest frame (where the replay starts), partitioned operators and SOutputs to their
newest headers, and :meth:`~operators.base.Operator.start_rebuild` makes the replayed input
up to each one's newest position rebuild parts (each past its own footprint) or be dropped;
inputs resume from the oldest frame's SUnion positions. The network is then exactly as the
crashed one was at the end of the log once the replay has passed that point.

What CEC supports (:func:`cec_problems`): the output of a partitioned operator may reach the
node's outputs only through filter and map (whose ids are their input's): an operator that
numbers its output anew (another partitioned operator, a union) below it would need that
output replayed from the log, which this version does not do.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import repeat
from operator import itemgetter
from typing import Any

import orjson

from protocol.tuples import Kind, Tuple, make_tuple
from state.cec import EventualCheckpoint

from .base import Operator, Plain
from .network import NetworkOutput, QueryNetwork
from .parts import Partitioned, PartKey
from .soutput import SOutput
from .sunion import SUnion

__all__ = ["CecPolicy", "CecStats", "CecWriter", "Recovered", "cec_problems", "header_of",
           "out_columns", "out_tuples", "recover"]

#: Operators without parts that CEC restores from a header: they keep no state that a
#: replay from the oldest frame does not rebuild (ids preserved, or renumbered in order).
_STATELESS = ("filter", "map", "union")
_FIELD = [itemgetter(k) for k in range(5)]
_ID_PRESERVING = ("filter", "map", "soutput")


@dataclass(frozen=True, slots=True)
class CecPolicy:
    """When to write ``G_check`` records (the paper's section III.A; defaults in docs/cec.md).

    ``q``: records (part records and output tuples) between the oldest footprint and the
    log's end; ``u``: input tuples released since it (what a recovery replays); ``ci`` /
    ``cp`` (µs): checkpoint only during the first ``ci`` of every ``cp``; ``max_checks``: per
    frame. ``q = u = 0`` never checkpoints (``G_open`` only: the paper's minimum)."""

    q: int = 20_000
    u: int = 200_000
    ci: int = 10_000
    cp: int = 100_000
    max_checks: int = 256


@dataclass(slots=True)
class CecStats:
    """What a writer wrote (``/status`` and metrics)."""

    frames: int = 0
    g_open: int = 0
    g_check: int = 0
    closes: int = 0
    out_tuples: int = 0
    open_parts: int = 0
    extent_frames: int = 0
    last_t: int | None = None


@dataclass(slots=True)
class _Foot:
    frame: int  # writer frame number of the footprint
    records: int  # records written before it
    released: int  # input tuples released before it


@dataclass(slots=True)
class Recovered:
    """What :func:`recover` did: where every input stream resumes (the id after which the
    replay starts), and the output the restore emits at once (an SOutput's UNDO of what the
    crashed incarnation sent tentatively, and its REC_DONE)."""

    resume: dict[str, int]
    output: NetworkOutput
    parts: int = 0
    start_t: int = 0
    end_t: int = 0
    stats: dict[str, Any] = field(default_factory=dict)


def cec_problems(net: QueryNetwork) -> list[str]:
    """Why this network cannot be checkpointed by CEC (empty: it can)."""
    problems: list[str] = []
    if net.undo_logs:
        problems.append("its operators keep undo logs (QueryNetwork(undo_logs=True)): CEC "
                        "checkpoints for checkpoint/redo, whose networks keep none")
    readers: dict[str, list[Operator]] = {}
    for op, inputs in zip(net.operators, net._inputs, strict=True):
        for i in inputs:
            readers.setdefault(i, []).append(op)
    for op in net.operators:
        if not isinstance(op, Partitioned | SUnion | SOutput) and op.type_name not in _STATELESS:
            problems.append(f"operator '{op.name}' ({op.type_name}) has no CEC parts")
        if not isinstance(op, Partitioned):
            continue
        todo, seen = [op.name], set()
        while todo:
            for r in readers.get(todo.pop(), []):
                if r.name in seen:
                    continue
                seen.add(r.name)
                if r.type_name not in _ID_PRESERVING:
                    problems.append(
                        f"operator '{r.name}' ({r.type_name}) reads the output of stateful "
                        f"operator '{op.name}' ({op.type_name}) inside the node: CEC needs "
                        "that output to reach the node's outputs through filter and map only")
                todo.append(r.name)
    return problems


def header_of(op: Operator) -> Plain:
    """``op``'s header in a frame: its bookkeeping and its state outside its parts. (Fresh
    containers, no orjson round trip: the frame is encoded before the network moves on.)"""
    if isinstance(op, SUnion):
        return op.resume_point()
    live = op._snapshot_live_without_state()
    live["state"] = op.global_state() if isinstance(op, Partitioned) else op.snapshot_state()
    return live


def out_columns(tuples: Sequence[Tuple]) -> list[Any]:
    """A run of output tuples as the log holds it: five columns (kinds, ids, times, tmax,
    values), which orjson encodes without a Python loop per tuple."""
    # (map over itemgetters: no object allocated per tuple, so no garbage collection of a
    # big heap set off by a batch of tuple iterators, as zip(*tuples) does)
    return [list(map(_FIELD[k], tuples)) for k in range(5)]


def out_tuples(columns: Sequence[Sequence[Any]]) -> list[Tuple]:
    """Inverse of :func:`out_columns`."""
    return [make_tuple(Kind(k), i, t, m, tuple(v)) for k, i, t, m, v in zip(*columns, strict=True)]


class CecWriter:
    """Builds a network's frames (see the module docstring). ``step`` after every call."""

    def __init__(self, net: QueryNetwork, policy: CecPolicy | None = None) -> None:
        problems = cec_problems(net)
        if problems:
            raise ValueError("; ".join(problems))
        self.net = net
        self.policy = policy or CecPolicy()
        self.stats = CecStats()
        self._sunions = [op for op in net.operators if isinstance(op, SUnion)]
        # (Operator and Partitioned both: typed Any, one of the two would hide the other)
        self._parted: list[Any] = [op for op in net.operators if isinstance(op, Partitioned)]
        self._outputs = {op.name: op for op in net.operators
                         if isinstance(op, SOutput) and op.name in net.outputs}
        self._known: dict[str, OrderedDict[PartKey, _Foot]] = {
            op.name: OrderedDict() for op in self._parted}
        #: Per partitioned operator, what its part_delta keeps between frames.
        self._memo: dict[str, dict[Any, Any]] = {op.name: {} for op in self._parted}
        self._frame = 0
        self._records = 0
        #: Each SUnion's release point (tuple time) in the log's last frame.
        self._logged = {s.name: -(2**62) for s in self._sunions}
        self._headers: dict[str, Plain] | None = None  # the last frame's
        self._counts: dict[str, int] = {}
        self._t = -(2**62)
        self._marked: set[str] = set()  # outputs marked tentative since the last frame
        self._pending: dict[str, list[Tuple]] = {}
        #: Per frame since the oldest live footprint: (frame, where each input resumes).
        self._resume: deque[tuple[int, dict[str, int]]] = deque()

    # ---------------------------------------------------------------- writing
    def step(self, now: int, out: NetworkOutput) -> tuple[int, dict[str, Any]] | None:
        """The frame to append after a network call that produced ``out`` (None: none).
        Its document may share containers with the live operators (no copy is made of a
        part's state): encode it before the network is called again."""
        net = self.net
        stable = not net.in_failure and not any(op._tainted for op in net.operators)
        if not stable:
            return self._marker(out)
        for name, tuples in out.outputs.items():
            if tuples:
                keep = [t for t in tuples if t[0] is Kind.STABLE
                        or (t[0] is Kind.BOUNDARY and t[1] == 0)]
                if keep:
                    self._pending.setdefault(name, []).extend(keep)
        logged = self._logged
        if self._headers is not None and (
                any(s.released_to < logged[s.name] for s in self._sunions)
                or not any(s.released_to > logged[s.name] for s in self._sunions)):
            return None  # nothing released, or a replay still redoing what the log holds
        return self._frame_now(now)

    def genesis(self, now: int) -> tuple[int, dict[str, Any]]:
        """The first frame of a new log: the network as it starts (so that even a replica
        that crashes before its first stable release recovers from its log)."""
        if self._headers is not None:
            raise ValueError("genesis: the log has frames already")
        return self._frame_now(now)

    def _frame_now(self, now: int) -> tuple[int, dict[str, Any]]:
        released = sum(s.last_id for s in self._sunions)
        doc: dict[str, Any] = {"h": {op.name: header_of(op) for op in self.net.operators}}
        opens: dict[str, list[Plain]] = {}
        checks: dict[str, list[Plain]] = {}
        closes: dict[str, list[Plain]] = {}
        counts: dict[str, int] = {}
        frame = self._frame
        for op in self._parted:
            name = op.name
            known = self._known[name]
            new, gone = op.part_delta(self._memo[name])
            for k in gone:
                del known[k]
            # One footprint for all the parts opened in this frame (a G_check gives a part
            # its own); dict.update over a zip runs in C.
            known.update(zip(new, repeat(_Foot(frame, self._records, released))))
            if new:
                opens[name] = [op.keys_to_plain(new), op.part_states(new)]
            if gone:
                closes[name] = op.keys_to_plain(gone)
            counts[name] = len(known)
            self._records += len(new) + len(gone)
        if self._due(now):
            for op in self._parted:
                name = op.name
                picked = self._checks(self._known[name], frame, released)
                if picked:
                    checks[name] = [op.keys_to_plain(picked), op.part_states(picked)]
        if opens:
            doc["o"] = opens
        if checks:
            doc["c"] = checks
        if closes:
            doc["x"] = closes
        doc["n"] = counts
        if self._pending:
            doc["out"] = {name: out_columns(ts) for name, ts in self._pending.items()}
            n_out = sum(map(len, self._pending.values()))
            self._records += n_out
            self.stats.out_tuples += n_out
            self._pending = {}
        t = max([self._t, *(s.released_to for s in self._sunions)])
        self._t = t
        self._logged = {s.name: s.released_to for s in self._sunions}
        self._headers, self._counts = doc["h"], counts
        self._marked.clear()
        self._note_resume(frame, doc["h"])
        self._frame += 1
        st = self.stats
        st.frames += 1
        st.g_open += sum(len(keys) for keys, _ in opens.values())
        st.g_check += sum(len(keys) for keys, _ in checks.values())
        st.closes += sum(map(len, closes.values()))
        st.open_parts = sum(counts.values())
        st.extent_frames = self._frame - self.oldest_frame()
        st.last_t = t
        return t, doc

    def _due(self, now: int) -> bool:
        p = self.policy
        return (p.q > 0 or p.u > 0) and now % p.cp < p.ci

    def _checks(self, known: OrderedDict[PartKey, _Foot], frame: int, released: int) -> list[PartKey]:
        p, picked = self.policy, list[PartKey]()
        while known and len(picked) < p.max_checks:
            k, foot = next(iter(known.items()))
            if foot.frame == frame:
                break  # every part's footprint is this frame already
            over_q = p.q > 0 and self._records - foot.records > p.q
            over_u = p.u > 0 and released - foot.released > p.u
            if not (over_q or over_u):
                break
            known.move_to_end(k)
            known[k] = _Foot(frame, self._records, released)
            self._records += 1
            picked.append(k)
        return picked

    def _marker(self, out: NetworkOutput) -> tuple[int, dict[str, Any]] | None:
        """The frame that says an output went tentative (see the module docstring)."""
        if self._headers is None:
            return None
        newly = [name for name, ts in out.outputs.items() if name not in self._marked
                 and any(t[0] is Kind.TENTATIVE for t in ts)]
        if not newly:
            return None
        headers = dict(self._headers)
        for name in newly:
            h = orjson.loads(orjson.dumps(headers[name]))
            h["state"]["tentative_after"] = True
            headers[name] = h
            self._marked.add(name)
        self._headers = headers
        self._frame += 1  # (numbered like any frame: the EC counts them too)
        self.stats.frames += 1
        return self._t, {"h": headers, "n": dict(self._counts)}

    def _note_resume(self, frame: int, headers: dict[str, Plain]) -> None:
        resume: dict[str, int] = {}
        for s in self._sunions:
            ids = headers[s.name]["state"]["last_in"]
            for stream, i in zip(self.net._inputs[self.net._index[s.name]], ids, strict=True):
                resume[stream] = min(resume.get(stream, i), i)
        self._resume.append((frame, resume))
        oldest = self.oldest_frame()
        while len(self._resume) > 1 and self._resume[1][0] <= oldest:
            self._resume.popleft()

    # ---------------------------------------------------------------- reading
    def oldest_frame(self) -> int:
        """The writer's number of the oldest frame a recovery would read now (the extent's
        end): the oldest live footprint's, or the last frame's if no part is open."""
        oldest = self._frame - 1
        for known in self._known.values():
            if known:
                oldest = min(oldest, next(iter(known.values())).frame)
        return oldest

    def acks(self) -> dict[str, int]:
        """Per input stream, the id up to which upstream may forget it: a recovery replays
        from there (the oldest live footprint's frame)."""
        return dict(self._resume[0][1]) if self._resume else {}

    def frame_number(self) -> int:
        """The number the next frame will get (frames are numbered from 0 per writer; a
        recovered writer numbers the EC's frames below 0)."""
        return self._frame

    # ---------------------------------------------------------------- recovery
    def resume_from(self, ec: EventualCheckpoint) -> None:
        """Continue the log that ``ec`` was read from: its parts are the live footprints
        (frame numbers below 0: the newest frame is -1), its last SUnion ids what the log
        holds."""
        for op in self._parted:
            known = self._known[op.name]
            for f in sorted(ec.parts.get(op.name, []), key=lambda f: -f.frame):
                known[op.key_from_plain(f.key)] = _Foot(-1 - f.frame, 0, 0)
            memo = self._memo[op.name] = {}
            op.part_delta(memo)  # (the network was recovered: its parts are the EC's)
        self._logged = {s.name: ec.end_headers[s.name]["state"]["next"] * s.width
                        for s in self._sunions}
        self._headers = ec.end_headers
        self._counts = dict(ec.part_counts)
        self._t = ec.end_t
        self._resume.clear()
        start = -ec.extent_frames
        resume: dict[str, int] = {}
        for s in self._sunions:
            ids = ec.start_headers[s.name]["state"]["last_in"]
            for stream, i in zip(self.net._inputs[self.net._index[s.name]], ids, strict=True):
                resume[stream] = min(resume.get(stream, i), i)
        self._resume.append((start, resume))


def recover(net: QueryNetwork, ec: EventualCheckpoint, now: int = 0) -> Recovered:
    """Restore ``net`` from an eventual checkpoint (see the module docstring). The caller
    replays every input stream after ``Recovered.resume[stream]``."""
    problems = cec_problems(net)
    if problems:
        raise ValueError("; ".join(problems))
    n_parts = 0
    for op in net.operators:
        if isinstance(op, Partitioned):
            h = ec.end_headers[op.name]
            op.restore_base(h)
            feet = {op.key_from_plain(f.key): list(f.in_ids) for f in ec.parts.get(op.name, [])}
            op.load_parts(h["state"], [(op.key_from_plain(f.key), f.state)
                                       for f in ec.parts.get(op.name, [])])
            op.start_rebuild(h["base"]["in_ids"], feet)
            n_parts += len(feet)
        elif isinstance(op, SOutput):
            h = ec.end_headers[op.name]
            op.restore(h)
            # Up to its last STABLE id (not its input position, which counts the tentative
            # tuples of a failure): those it must send again, corrected.
            op.start_rebuild([h["state"]["last_stable_id"]], None)
        else:
            op.restore(ec.start_headers[op.name])
    output = NetworkOutput({name: [] for name in net.outputs})
    for op in net.operators:
        if isinstance(op, SOutput):
            emitted = op.after_recovery(now)
            if emitted:
                for name, ts in net.inject(op.name, emitted, now).outputs.items():
                    output.outputs[name].extend(ts)
    resume: dict[str, int] = {}
    for s in net.operators:
        if isinstance(s, SUnion):
            for stream, i in zip(net._inputs[net._index[s.name]], s.resume_ids(), strict=True):
                resume[stream] = min(resume.get(stream, i), i)
    return Recovered(resume, output, n_parts, ec.start_t, ec.end_t,
                     {"extent_frames": ec.extent_frames, "extent_bytes": ec.extent_bytes})

