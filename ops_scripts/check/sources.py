"""Source logs are evidence, not truth: the inputs of eventual consistency, judged (pure).

Role: the reference run (``ops_scripts/check/reference.py``) is built from the sources' logs,
so a log that lost tuples, repeated them or was cut short would make a wrong reference that
every client and replica then "equals". :func:`check_source_log` judges each source's log and
its end record before anyone trusts them; ``ops_scripts/check/compose.py`` reports it as the
``eventual-consistency`` verdict of subject ``source NAME``.

What a source promises (``node/procs/source.py``; contract points 1-3 of issue 13):

* its log (``node.procs.rundir.read_source_log``: every incarnation, in id order) holds
  STABLE tuples with ids 1, 2, ... without a gap or a repeat, and times that never decrease;
  with a ``limit``, no more than ``limit`` of them;
* a wall-clock source (no ``time_column``) keeps its pace in its times: each tuple is
  stamped with the instant it was due (``node/procs/pacing.py``), so two tuples are at
  least ``1 / rate`` apart (less 1 µs of rounding), whatever stalls it went through. A
  source that stamped a backlog with the instant it went out would squeeze seconds of data
  into one instant: a windowed join matches all of it with itself, and the results no
  longer describe the stream the config asked for (found by ``dpc torture`` seed 3);
* when it ended its stream it wrote an end record first (``RUN_DIR/sources/NAME.end.json``:
  ``{"t", "reason", "last_id"}``) whose ``last_id`` is the log's last id and whose reason is
  ``limit`` (then ``last_id`` is the config's ``limit``), ``file`` (a file source; its
  file's row count is ``last_id`` when the file can be read) or ``request`` (SIGUSR1,
  ``Source.end_stream()``, or SIGTERM before its end). No record: the source never ended
  its stream, which is fine (it never published END_OF_STREAM): what is there is judged.

A violation is invalid with the row of the log (row n is element n-1 of the log as read)
or the record's field; anything else is valid, saying what was checked.

Invariants: pure (no I/O, no clock): the record and the file's row count are read by
``ops_scripts/check/recorded.py``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from node.config.model import SourceConfig
from ops_scripts.check.properties import Status, Verdict, fmt_tuple
from protocol.tuples import Kind, Tuple

__all__ = ["END_REASONS", "check_source_log", "source_subject"]

#: Why a source may end its stream (the end record's ``reason``).
END_REASONS = ("limit", "file", "request")
NAME = "eventual-consistency"
US = 1_000_000


def source_subject(name: str) -> str:
    """A source's subject (also the key of its log's problems in ``History.problems``)."""
    return f"source {name}"


def _log_violation(log: Sequence[Tuple]) -> str | None:
    """The first row of the log that breaks the gapless, non-decreasing sequence."""
    prev: Tuple | None = None
    for row, t in enumerate(log, start=1):
        if t.kind is not Kind.STABLE:
            return f"row {row}: {fmt_tuple(t)}: a source logs STABLE data tuples only"
        expected = 1 if prev is None else prev.id + 1
        if t.id != expected:
            if prev is not None and t.id == prev.id:
                what = f"repeats id {t.id} of row {row - 1}"
            elif t.id > expected:
                gap = f"{expected}" if t.id == expected + 1 else f"{expected}..{t.id - 1}"
                what = f"after id {expected - 1}: id(s) {gap} missing (a gap)"
            else:
                what = f"out of order after id {expected - 1}"
            return f"row {row}: {fmt_tuple(t)} {what}; ids must run 1, 2, ... without a gap"
        if prev is not None and t.time < prev.time:
            return (f"row {row}: {fmt_tuple(t)}: its time is below that of row {row - 1} "
                    f"({prev.time}); tuple times never decrease")
        prev = t
    return None


def _pace_violation(src: SourceConfig, log: Sequence[Tuple]) -> str | None:
    """The first row of a wall-clock source's log closer than ``1 / rate`` to the one
    before it (module docstring); None for an event-time source (its data sets its pace)."""
    if src.time_column is not None or src.rate <= 0:
        return None
    gap = max(0, math.floor(US / src.rate) - 1)
    for row in range(2, len(log) + 1):
        t, prev = log[row - 1], log[row - 2]
        if t.time - prev.time < gap:
            return (f"row {row}: {fmt_tuple(t)}: {t.time - prev.time} µs after row "
                    f"{row - 1}, less than 1/rate = {US / src.rate:g} µs: tuples squeezed "
                    f"together (a stall's backlog stamped with one instant?)")
    return None


def _end_violation(src: SourceConfig, last_id: int, end: Mapping[str, Any],
                   file_rows: int | None) -> str | None:
    """What is wrong with the end record, given the log's last id."""
    t, reason, rec_last = end.get("t"), end.get("reason"), end.get("last_id")
    if type(t) is not int or type(rec_last) is not int or reason not in END_REASONS:
        return (f"malformed end record {dict(end)!r}: expected int t, int last_id and a "
                f"reason in {', '.join(END_REASONS)}")
    if rec_last != last_id:
        return (f"the end record says last_id {rec_last} ({reason}), the log's last id is "
                f"{last_id}")
    if reason == "limit" and src.limit != last_id:
        limit = "no limit" if src.limit is None else f"limit {src.limit}"
        return f"ended by its limit at id {last_id}, but the config says {limit}: ended early"
    if reason == "file" and src.generator != "file":
        return (f"ended because its file ran out at id {last_id}, but it is a "
                f"{src.generator} source: ended early")
    if reason == "file" and file_rows is not None and file_rows != last_id:
        return (f"ended because its file ran out at id {last_id}, but {src.file} has "
                f"{file_rows} rows: ended early")
    return None


def check_source_log(src: SourceConfig, log: Sequence[Tuple], end: Mapping[str, Any] | None,
                     *, end_problem: str | None = None, file_rows: int | None = None,
                     file_problem: str | None = None) -> Verdict:
    """One source's log and end record (module docstring). ``end``: the parsed end record
    (None: there is none); ``end_problem``: why it could not be read; ``file_rows``: its
    file's row count (a file source whose file was read), ``file_problem``: why not."""
    subject = source_subject(src.name)
    violation = _log_violation(log) or _pace_violation(src, log)
    if violation is not None:
        return Verdict(NAME, Status.INVALID, f"source log: {violation}", subject)
    last_id = log[-1].id if log else 0
    if src.limit is not None and last_id > src.limit:
        why = f"source log: {last_id} tuples, beyond its limit {src.limit}"
        return Verdict(NAME, Status.INVALID, why, subject)
    paced = "" if src.time_column is not None else f", at most {src.rate:g} per second"
    seen = (f"{last_id} tuples, ids 1..{last_id} without a gap or a repeat, times never "
            f"decreasing{paced}")
    if end_problem is not None:
        return Verdict(NAME, Status.INVALID, f"{seen}; unreadable end record: {end_problem}",
                       subject)
    if end is None:
        return Verdict(NAME, Status.VALID, f"{seen}; no end record: the stream never ended",
                       subject)
    if not isinstance(end, Mapping):
        return Verdict(NAME, Status.INVALID, f"{seen}; end record {end!r} is not an object",
                       subject)
    bad = _end_violation(src, last_id, end, file_rows)
    if bad is not None:
        return Verdict(NAME, Status.INVALID, f"{seen}; {bad}", subject)
    how = f"ended by {end['reason']} at t={end['t']}, last_id {last_id}"
    if end["reason"] == "file":
        how += (f" = the rows of {src.file}" if file_rows is not None
                else f" (rows of {src.file} not counted: {file_problem or 'not read'})")
    return Verdict(NAME, Status.VALID, f"{seen}; {how}", subject)
