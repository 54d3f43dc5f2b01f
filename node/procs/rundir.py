"""The run directory: where the processes of one run record what happened, for ``dpc check``.

Role: one place that fixes the layout of a run directory and the formats of its logs. Source,
client and replica processes write them; the checker (``ops_scripts/check/compose.py``) reads them.
Layout of ``RUN_DIR``::

    config.toml                     copy of the cluster config the run used
    run.json                        what ``dpc launch`` started, and when
    logs/<process>.log              each process's text log
    status/<process>.ready          marker: the process is up (:meth:`RunDir.mark_ready`)
    status/<process>.done           marker: a client saw its stream's end (:meth:`RunDir.mark_done`)
    status/<process>.pid            the pid of the process's current incarnation (:meth:`RunDir.write_pid`)
    status/<process>.skew           the process's clock skew in seconds (:meth:`RunDir.write_skew`)
    history.jsonl                   faults, heals, state changes (ops_scripts/check/history.py)
    scenario.toml                   the scenario ``dpc run`` played (ops_scripts/harness/scenario.py)
    sources/<source>.arrow          every tuple a source produced (Arrow IPC stream file);
    sources/<source>.<k>.arrow        ... and after its k-th restart (k = 1, 2, ...)
    sources/<source>.end.json       the source's end record: it ended its stream, when and why
    sources/<source>.pace.json      an event-time source's clock (node/procs/pacing.py EventClock)
    sources/<source>.trim.json      how far the source's output buffer is trimmed (its restart)
    clients/<client>.arrow          every tuple a client received, with its arrival time
    replicas/<replica>/<stream>.arrow   every tuple a replica emitted on an output stream, and when;
    replicas/<replica>/<stream>.incarnation-<k>.arrow   ... by its k-th incarnation (restarted since)
    check.json                      the verdicts of ``dpc check``

Formats and invariants:

* ``sources/<source>.arrow`` is written with :class:`state.tuplelog.TupleLogWriter` (columns
  ``kind, id, time, tmax`` then the stream's attributes). It holds the source's data tuples,
  and a source flushes a batch to it *before* it sends that batch: every tuple any consumer
  can ever see is in the log (a crash loses at most tuples nobody received). A restarted
  source (node/procs/source.py) never rewrites a log: its k-th restart writes
  ``sources/<source>.<k>.arrow`` (:meth:`RunDir.source_log_of`), its ids going on after the
  last logged one. Read the whole log, every incarnation in order, with
  :func:`read_source_log` (or batch by batch, streaming, with :func:`iter_source_log`),
  which keeps every complete batch of a log whose writer was killed (and which a source
  name cannot confuse: names have no dots).
* ``sources/<source>.end.json`` (:func:`write_source_end`, :func:`read_source_end`),
  written atomically just before the source publishes its end of stream:
  ``{"t": <µs>, "reason": "limit" | "file" | "request", "last_id": <int>}`` ("request":
  SIGUSR1, ``Source.end_stream()``, or the process stopped before its end by SIGTERM).
  No file: the source never ended. A restarted source that finds it produces nothing more.
* ``sources/<source>.pace.json``: an event-time source's mapping of data time onto the
  run's clock, ``{"t_start": <µs>, "event_first": <µs>, "speedup": <float>}``, written
  (atomically) before its first tuple, so that a restarted source resumes the same mapping.
* ``sources/<source>.trim.json`` (:func:`write_source_trim`, :func:`read_source_trim`):
  ``{"trimmed_up_to": <id>, "acks": {<consumer>: <id>, ...}}``, the source's output buffer's
  trim point and the acks of the consumers heard from, as they were at one instant, written
  atomically about once a second while they change (and at a clean stop). It may lag the
  buffer (a restart then holds a little more), never run ahead of it. A restarted source
  holds for replay only the logged tuples after ``trimmed_up_to``; no file (an older run
  directory, or a kill before the first write): it holds the whole log.
* ``clients/<client>.arrow``, ``replicas/<replica>/<stream>.arrow`` (and a replica's
  ``<stream>.incarnation-<k>.arrow``, :meth:`RunDir.replica_output_before`): the tuple logs
  of ``node/procs/runlog.py``, every tuple in the order received (or emitted), one record
  per write: an Arrow IPC stream of one batch in the layout of
  :class:`protocol.columns.Columns` (columns ``kind`` int8, ``id``, ``time``, ``tmax`` int64,
  then ``v0 ..``; control tuples' cells null), its arrival (or emission) time in integer
  microseconds as the schema metadata ``dpc.arrival``. pyarrow opens each record
  (``pa.ipc.open_stream`` at its offset); ``dpc log RUN_DIR NAME`` prints them a tuple per
  line. :class:`~node.procs.runlog.RunLogWriter` hands each write to the OS before it
  returns, so a killed process loses at most the write in progress, a torn last record
  that the readers drop (and that a writer reopening the file cuts off before appending);
  any other unreadable record raises :class:`RunLogError` naming the file, the record and
  its first row. Rows are numbered over the whole file from 1: row ``n`` is always element
  ``n-1`` of what :func:`~node.procs.runlog.read_log` returns, and the checker cites rows
  as evidence.

Process, source, client, replica and stream names become file names: they must be
non-empty and contain no path separator and no leading dot (``n1.out`` is fine).
"""

from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from node.errors import RunLogError
from protocol.tuples import Tuple

if TYPE_CHECKING:
    import pyarrow as pa

# pyarrow (and state.tuplelog, which needs it) is imported by the functions that read the
# sources' logs: this module fixes only where things are, and what every process shares.
# The clients' and replicas' tuple logs are node/procs/runlog.py's.

__all__ = [
    "END_REASONS",
    "RunDir",
    "SourceTrim",
    "iter_source_batches",
    "iter_source_log",
    "read_source_end",
    "read_source_log",
    "read_source_trim",
    "write_source_end",
    "write_source_trim",
]

#: The reasons a source ends its stream (``node/procs/pacing.py``'s EndReason values).
END_REASONS = ("limit", "file", "request")


def _safe_name(what: str, name: str) -> str:
    if not name or "/" in name or "\\" in name or name.startswith(".") or "\0" in name:
        raise RunLogError(f"run directory: {what} name {name!r} cannot be a file name")
    return name


class RunDir:
    """Paths of one run directory (see the module docstring). Creates nothing but in
    :meth:`ensure`; every helper validates the name it turns into a file name."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.config = self.path / "config.toml"
        self.check_json = self.path / "check.json"
        self.logs = self.path / "logs"
        self.status = self.path / "status"
        self.sources = self.path / "sources"
        self.clients = self.path / "clients"
        self.replicas = self.path / "replicas"

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    def record_config(self, text: str) -> bool:
        """Write ``config.toml`` (``text``: node/config/text.py) unless the run directory
        has one; False if it has one whose tables differ (processes of one run directory
        ran different configs: the caller says so). Atomic: processes starting together
        each write a whole file or none."""
        if self.config.exists():
            return self._same_tables(text)
        tmp = self.path / f".config.{os.getpid()}.tmp"
        tmp.write_text(text, encoding="utf-8")
        try:
            os.link(tmp, self.config)  # fails if another process's copy got there first
        except FileExistsError:
            return self._same_tables(text)
        finally:
            tmp.unlink()
        return True

    def _same_tables(self, text: str) -> bool:
        try:
            return tomllib.loads(self.config.read_text(encoding="utf-8")) == tomllib.loads(text)
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            return False

    def process_log(self, process: str) -> Path:
        return self.logs / f"{_safe_name('process', process)}.log"

    def source_log(self, source: str) -> Path:
        """The log of the source's first incarnation (:meth:`source_logs`: all of them)."""
        return self.source_log_of(source, 0)

    def source_log_of(self, source: str, incarnation: int) -> Path:
        """The log of one incarnation of a source: 0 the first, k after its k-th restart."""
        name = _safe_name("source", source)
        return self.sources / (f"{name}.arrow" if incarnation == 0 else f"{name}.{incarnation}.arrow")

    def source_logs(self, source: str) -> list[Path]:
        """The logs of every incarnation of a source so far, in order (none: it never ran)."""
        out: list[Path] = []
        while (p := self.source_log_of(source, len(out))).exists():
            out.append(p)
        return out

    def source_pace(self, source: str) -> Path:
        """An event-time source's clock (the module docstring)."""
        return self.sources / f"{_safe_name('source', source)}.pace.json"

    def source_trim(self, source: str) -> Path:
        """How far the source's output buffer is trimmed (the module docstring)."""
        return self.sources / f"{_safe_name('source', source)}.trim.json"

    def source_end(self, source: str) -> Path:
        """The source's end record (the module docstring); no file: it never ended."""
        return self.sources / f"{_safe_name('source', source)}.end.json"

    def source_spill(self, source: str) -> Path:
        """Where the source's output buffer spills past ``buffer_memory``
        (state/spill_list.py); emptied when the source starts and when it stops."""
        return self.sources / f"{_safe_name('source', source)}.spill"

    def client_log(self, client: str) -> Path:
        """Every tuple ``client`` received, with its arrival (node/procs/runlog.py)."""
        return self.clients / f"{_safe_name('client', client)}.arrow"

    def replica_output(self, replica: str, stream: str) -> Path:
        """Every tuple ``replica`` emitted on ``stream``, with when (node/procs/runlog.py)."""
        return (
            self.replicas / _safe_name("replica", replica) / f"{_safe_name('stream', stream)}.arrow"
        )

    def replica_output_before(self, replica: str, stream: str, incarnation: int) -> Path:
        """The output log of an earlier incarnation (``1``: the first) of a replica that was
        restarted with ``--recover``; the current one is :meth:`replica_output`."""
        return self.replica_output(replica, stream).with_suffix(f".incarnation-{incarnation}.arrow")

    def replica_spill(self, replica: str) -> Path:
        """Where the replica's SUnions spill what a replay needs beyond ``buffer_memory``
        (state/spill.py); emptied when the replica starts."""
        return self.replicas / _safe_name("replica", replica) / "spill"

    def replica_cec(self, replica: str) -> Path:
        """The replica's persistent CEC log (``checkpointing = "cec"``, node/replica/cec.py):
        kept across its restarts, read by ``--recover``."""
        return self.replicas / _safe_name("replica", replica) / "cec"

    def replica_recoveries(self, replica: str) -> Path:
        """JSONL: one line per recovery of ``replica`` (node/replica/recovery.py)."""
        return self.replicas / _safe_name("replica", replica) / "recoveries.jsonl"

    def replica_states(self, replica: str) -> Path:
        """JSONL: one line per consistency-state change of ``replica``, ``{"t", "state"}``
        (``t`` in microseconds of the cluster's clock); the run's history merges them."""
        return self.replicas / _safe_name("replica", replica) / "states.jsonl"

    @property
    def history(self) -> Path:
        """JSONL: the run's history (``ops_scripts/check/history.py``): faults, heals, state
        changes, final digests."""
        return self.path / "history.jsonl"

    def ensure(self) -> RunDir:
        """Create the directory and its ``logs``, ``status``, ``sources``, ``clients`` and
        ``replicas`` subdirectories (existing ones are kept). Returns ``self``."""
        for d in (self.path, self.logs, self.status, self.sources, self.clients, self.replicas):
            d.mkdir(parents=True, exist_ok=True)
        return self

    # Markers: empty files whose existence is the signal (cheap to poll from a launcher).
    def _marker(self, process: str, what: str) -> Path:
        return self.status / f"{_safe_name('process', process)}.{what}"

    def mark_ready(self, process: str) -> None:
        self.status.mkdir(parents=True, exist_ok=True)
        self._marker(process, "ready").touch()

    def clear_ready(self, process: str) -> None:
        """Forget ``process`` was ready (before restarting it)."""
        self._marker(process, "ready").unlink(missing_ok=True)

    def is_ready(self, process: str) -> bool:
        return self._marker(process, "ready").exists()

    def mark_done(self, process: str) -> None:
        self.status.mkdir(parents=True, exist_ok=True)
        self._marker(process, "done").touch()

    def is_done(self, process: str) -> bool:
        return self._marker(process, "done").exists()

    def pid_file(self, process: str) -> Path:
        """``status/<process>.pid``: the pid of the process's current incarnation, written by
        whoever started it (``ops_scripts/cluster/launch.py``), read by ``dpc inject RUN_DIR``."""
        return self._marker(process, "pid")

    def write_pid(self, process: str, pid: int) -> None:
        """Record ``pid`` as ``process``'s (replacing an earlier incarnation's)."""
        self.status.mkdir(parents=True, exist_ok=True)
        path = self.pid_file(process)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(f"{pid}\n")
        tmp.replace(path)  # a reader never sees a half-written pid

    def read_pid(self, process: str) -> int | None:
        """``process``'s recorded pid, or None if none was recorded; :class:`RunLogError`
        naming the file if it holds anything but a pid."""
        path = self.pid_file(process)
        try:
            text = path.read_text().strip()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise RunLogError(f"pid file {path}: cannot read: {e}") from None
        if not text.isdigit() or int(text) <= 0:
            raise RunLogError(f"pid file {path}: expected a pid, found {text[:40]!r}")
        return int(text)

    def skew_file(self, process: str) -> Path:
        """``status/<process>.skew``: the offset of ``process``'s clock (the clock fault, issue
        47), in seconds, written by the launcher (``ops_scripts/harness/nemesis.py``) before it
        sends the process SIGUSR2; read by the process at start and on SIGUSR2
        (``node/procs/entry.py``). No file: no skew."""
        return self._marker(process, "skew")

    def write_skew(self, process: str, seconds: float) -> None:
        """Record ``seconds`` (finite; 0: none) as ``process``'s clock offset, atomically."""
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds):
            raise RunLogError(f"skew of {process!r}: expected a finite number of seconds, "
                              f"got {seconds!r}")
        self.status.mkdir(parents=True, exist_ok=True)
        path = self.skew_file(process)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(f"{float(seconds)!r}\n")
        tmp.replace(path)  # a process woken by SIGUSR2 never reads half a number

    def read_skew(self, process: str) -> float:
        """``process``'s clock offset in seconds (0.0 without a file); :class:`RunLogError`
        naming the file if it holds anything but a finite number."""
        path = self.skew_file(process)
        try:
            text = path.read_text().strip()
        except FileNotFoundError:
            return 0.0
        except OSError as e:
            raise RunLogError(f"skew file {path}: cannot read: {e}") from None
        try:
            seconds = float(text)
        except ValueError:
            seconds = math.nan
        if not math.isfinite(seconds):
            raise RunLogError(f"skew file {path}: expected seconds, found {text[:40]!r}")
        return seconds


def iter_source_log(run_dir: RunDir | str | os.PathLike[str], source: str) -> Iterator[list[Tuple]]:
    """Every tuple source ``source`` logged, batch by batch as it was flushed, oldest first,
    every incarnation in order, streaming (tolerates a killed writer: a truncated last batch
    of an incarnation is dropped). Raises :class:`RunLogError` at once if the log is missing."""
    from state.tuplelog import tuples_of

    return (tuples_of(batch) for batch in iter_source_batches(run_dir, source))


def iter_source_batches(run_dir: RunDir | str | os.PathLike[str], source: str) -> Iterator[pa.RecordBatch]:
    """:func:`iter_source_log` as Arrow record batches, undecoded (a restarted source reads
    only the columns it needs of a long log)."""
    from state.tuplelog import iter_log_batches

    rd = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    paths = rd.source_logs(source)
    if not paths:
        raise RunLogError(f"source log {rd.source_log(source)}: missing (source {source!r} "
                          "logged nothing)")
    return (batch for path in paths for batch in iter_log_batches(path))


def read_source_log(run_dir: RunDir | str | os.PathLike[str], source: str) -> list[Tuple]:
    """The whole of :func:`iter_source_log` in one list (the checker's and the tests' read)."""
    return [t for batch in iter_source_log(run_dir, source) for t in batch]


@dataclass(frozen=True, slots=True)
class SourceTrim:
    """A source's persisted trim point (``sources/<source>.trim.json``): its buffer was
    trimmed up to data tuple ``trimmed_up_to``, and each consumer heard from had acked the
    id in ``acks``."""

    trimmed_up_to: int
    acks: dict[str, int]


def write_source_trim(run_dir: RunDir, source: str, trim: SourceTrim) -> None:
    """Record ``source``'s trim point (atomically: written aside, then renamed)."""
    path = run_dir.source_trim(source)
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_bytes(orjson.dumps({"trimmed_up_to": trim.trimmed_up_to, "acks": trim.acks}))
        os.replace(tmp, path)
    except OSError as e:
        raise RunLogError(f"source trim record {path}: cannot write: {e}") from None


def read_source_trim(run_dir: RunDir | str | os.PathLike[str], source: str) -> SourceTrim | None:
    """``source``'s trim point, or None if it never recorded one; :class:`RunLogError`
    naming the file if it is not one."""
    rd = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    path = rd.source_trim(source)
    try:
        record = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, orjson.JSONDecodeError) as e:
        raise RunLogError(f"source trim record {path}: unreadable: {e}") from None

    def count(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= 0

    if (not isinstance(record, dict) or set(record) != {"trimmed_up_to", "acks"}
            or not count(record["trimmed_up_to"]) or not isinstance(record["acks"], dict)
            or not all(count(a) for a in record["acks"].values())):
        raise RunLogError(f"source trim record {path}: expected {{\"trimmed_up_to\": <id >= 0>, "
                          f"\"acks\": {{<consumer>: <id >= 0>, ...}}}}, found {record!r}")
    return SourceTrim(record["trimmed_up_to"], dict(record["acks"]))


def write_source_end(run_dir: RunDir, source: str, *, t: int, reason: str, last_id: int) -> None:
    """Record that ``source`` ended its stream (atomically: written aside, then renamed)."""
    if reason not in END_REASONS:
        raise RunLogError(f"source {source!r}: end reason {reason!r} is not one of {END_REASONS}")
    path = run_dir.source_end(source)
    tmp = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(orjson.dumps({"t": t, "reason": reason, "last_id": last_id}))
        os.replace(tmp, path)
    except OSError as e:
        raise RunLogError(f"source end record {path}: cannot write: {e}") from None


def read_source_end(run_dir: RunDir | str | os.PathLike[str], source: str) -> dict[str, Any] | None:
    """``source``'s end record (``{"t", "reason", "last_id"}``), or None if it never ended;
    :class:`RunLogError` naming the file if it is not one."""
    rd = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    path = rd.source_end(source)
    try:
        record = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, orjson.JSONDecodeError) as e:
        raise RunLogError(f"source end record {path}: unreadable: {e}") from None
    ints = ("t", "last_id")
    if (not isinstance(record, dict) or set(record) != {"t", "reason", "last_id"}
            or record["reason"] not in END_REASONS
            or not all(isinstance(record[k], int) and not isinstance(record[k], bool) for k in ints)):
        raise RunLogError(f"source end record {path}: expected {{\"t\": <int>, \"reason\": "
                          f"one of {', '.join(END_REASONS)}, \"last_id\": <int>}}, found {record!r}")
    return record
