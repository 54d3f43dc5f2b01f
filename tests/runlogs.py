"""Tuple logs made by hand for the tests (the format: node/procs/runlog.py): rows written
back as records, a record garbled in place."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from node.procs.runlog import RunLogWriter, scan
from protocol.tuples import Tuple


def write_rows(path: Path, rows: Sequence[tuple[int, Tuple]]) -> None:
    """Replace the log at ``path`` by ``rows`` (``(arrival, tuple)``), a record per run of
    consecutive rows that arrived together: what a test edits comes back as it was logged."""
    path.unlink(missing_ok=True)
    with RunLogWriter(path) as w:
        start = 0
        for k in range(1, len(rows) + 1):
            if k == len(rows) or rows[k][0] != rows[start][0]:
                w.write([t for _, t in rows[start:k]], rows[start][0])
                start = k


def garble_record(path: Path, number: int) -> None:
    """Overwrite the start of the log's record ``number`` (1-based) with bytes that are no
    Arrow message: a corrupt record in the middle of the file."""
    rec = next(r for r in scan(path) if r.number == number)
    data = bytearray(path.read_bytes())
    data[rec.offset : rec.offset + 8] = b"garbage!"
    path.write_bytes(bytes(data))
