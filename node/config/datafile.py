"""A file source's data file: where it is, its columns, their types, its event times.

Role: the one home of reading a source's CSV or Parquet file, used at load
(``node/config/load.py``: the file exists, has the columns, its time column parses and is
in order, before any process starts) and by the source's generator
(``node/procs/generators.py``: the rows, typed the same way in every incarnation).

* :func:`resolve_data_file`: a path relative to the config file, or
  ``package:NAME/PATH``, a file shipped inside the installed Python package NAME (e.g.
  ``package:vega_datasets/_data/seattle-temps.csv``). The package is located with
  ``importlib.util.find_spec``, which does not import it: ``importlib.resources.files``
  would, and ``vega_datasets`` imports pandas when imported.
* :func:`column_types`: one Arrow type per column, the same for every row (CSV cells are
  typed per column: int64 if every non-empty cell is an integer, float64 if every one is a
  number, else string; an empty numeric cell is null), so that every incarnation of a
  source logs the same column types whatever its first batch holds.
* :func:`parse_event_time`: an event time as integer microseconds since the Unix epoch,
  from an integer (already µs), a string of digits, an ISO 8601 date or date-time, or
  ``YYYY/MM/DD[ HH:MM[:SS]]``. A date without a zone is UTC. Parquet timestamp and date
  columns are read as µs (UTC).
* :func:`read_rows`: the cells of the named columns, row by row, the time column (if
  any) as µs, the others typed by :func:`column_types`.
* :func:`scan_event_times`: every event time of a file checked (parses, never decreases),
  with the row count, first and last: what ``rate`` and ``speedup`` are derived from.

Invariants: every error is a :class:`ConfigError` naming the file (and, for a bad cell or
an out-of-order row, the column and the 1-based data row: row 1 is the first row after a
CSV header).
"""

from __future__ import annotations

import csv
import functools
import importlib.util
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from node.errors import ConfigError

if TYPE_CHECKING:
    import pyarrow as pa

# pyarrow is imported where a data file is read, not here: every process loads its config,
# and a replica of a cluster without data files never needs pyarrow (start-up time:
# tests/node/procs/test_startup.py).

__all__ = [
    "PACKAGE_PREFIX",
    "EventSpan",
    "column_types",
    "parse_event_time",
    "read_header",
    "read_rows",
    "resolve_data_file",
    "scan_event_times",
]

#: A data file inside an installed Python package: ``package:NAME/PATH``.
PACKAGE_PREFIX = "package:"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)
_INT = re.compile(r"[+-]?\d+\Z")
_SLASHED = re.compile(r"(\d{4})/(\d{1,2})/(\d{1,2})(?:[ T](\d{1,2}):(\d{2})(?::(\d{2})(?:\.(\d{1,6}))?)?)?\Z")
EVENT_FORMATS = ('integer microseconds', 'ISO 8601 ("2010-01-31", "2010-01-31T13:00:00Z")',
                 '"YYYY/MM/DD HH:MM:SS" (time optional, seconds optional)')


@dataclass(frozen=True, slots=True)
class EventSpan:
    """What a time column holds: ``rows`` rows from ``first`` to ``last`` (µs)."""

    rows: int
    first: int
    last: int


def resolve_data_file(given: str, base: Path) -> Path:
    """The absolute path of a source's ``file`` (see the module docstring); a
    :class:`ConfigError` saying what is missing for a ``package:`` file."""
    if not given.startswith(PACKAGE_PREFIX):
        return (base / given).resolve()
    package, _, inner = given[len(PACKAGE_PREFIX):].partition("/")
    if not package.isidentifier() or not inner:
        raise ConfigError(f"{given!r}: expected package:NAME/PATH (NAME a top-level package)")
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"{given!r}: no installed Python package {package!r} "
                          f"(pip install the distribution that ships it, e.g. "
                          f"{package.replace('_', '-')})")
    for where in spec.submodule_search_locations:
        path = Path(where) / inner
        if path.is_file():
            return path.resolve()
    raise ConfigError(f"{given!r}: package {package!r} ({', '.join(spec.submodule_search_locations)}) "
                      f"has no file {inner!r}")


def read_header(path: Path) -> list[str]:
    """The column names of a CSV or Parquet file."""
    import pyarrow as pa

    try:
        if path.suffix == ".csv":
            with path.open(newline="", encoding="utf-8") as f:
                return next(csv.reader(f), [])
        import pyarrow.parquet as pq  # heavy: only when a config uses Parquet

        return list(pq.read_schema(path).names)
    except (OSError, ValueError, pa.ArrowException) as e:
        raise ConfigError(f"{path}: cannot read: {e}") from None


def parse_event_time(cell: object) -> int:
    """An event time in µs since the epoch (module docstring); ValueError if it is none."""
    if isinstance(cell, int) and not isinstance(cell, bool):
        return cell
    if isinstance(cell, datetime):
        dt = cell
    elif isinstance(cell, str):
        text = cell.strip()
        if _INT.match(text):
            return int(text)
        m = _SLASHED.match(text)
        if m:
            y, mo, d, h, mi, s, frac = m.groups()
            dt = datetime(int(y), int(mo), int(d), int(h or 0), int(mi or 0), int(s or 0),
                          int((frac or "0").ljust(6, "0")))
        else:
            dt = datetime.fromisoformat(text)  # ValueError if not ISO 8601
    else:
        raise ValueError(f"{cell!r} is no event time")
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return (dt - _EPOCH) // _US


def _event_error(path: Path, column: str, row: int, cell: object, why: str) -> ConfigError:
    line = f" (line {row + 1})" if path.suffix == ".csv" else ""
    return ConfigError(f"{path}: column {column!r}, row {row}{line}: {why}, found {cell!r}")


def _csv_number(cell: str) -> int | float | None:
    if _INT.match(cell):
        return int(cell)
    try:
        return float(cell)
    except ValueError:
        return None


@functools.lru_cache(maxsize=32)
def _csv_types(path: Path, columns: tuple[str, ...], stamp: tuple[int, int]) -> tuple[pa.DataType, ...]:
    import pyarrow as pa

    ints = dict.fromkeys(columns, True)
    nums = dict.fromkeys(columns, True)
    with path.open(newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            for c in columns:
                cell = row[c]
                if not cell or not nums[c]:
                    continue
                n = _csv_number(cell)
                nums[c] = n is not None
                ints[c] = ints[c] and isinstance(n, int)
    return tuple(pa.int64() if ints[c] else pa.float64() if nums[c] else pa.string() for c in columns)


def _stamp(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_mtime_ns, st.st_size


def column_types(path: Path, columns: Sequence[str], time_column: str | None = None,
                 ) -> list[pa.DataType]:
    """The Arrow type of each of ``columns`` (the time column: int64 µs)."""
    import pyarrow as pa

    try:
        if path.suffix == ".csv":
            plain = tuple(c for c in columns if c != time_column)
            found = dict(zip(plain, _csv_types(path, plain, _stamp(path)), strict=True))
        else:
            import pyarrow.parquet as pq

            schema = pq.read_schema(path)
            found = {c: schema.field(c).type for c in columns if c != time_column}
    except (OSError, ValueError, KeyError, pa.ArrowException) as e:
        raise ConfigError(f"{path}: cannot read the columns {', '.join(columns)}: {e!r}") from None
    return [pa.int64() if c == time_column else found[c] for c in columns]


def read_rows(path: Path, columns: Sequence[str], time_column: str | None = None,
              ) -> Iterator[tuple[Any, ...]]:
    """The cells of ``columns``, row by row (module docstring); the time column as µs."""
    import pyarrow as pa

    if path.suffix == ".csv":
        yield from _csv_rows(path, columns, time_column)
        return
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path, columns=list(dict.fromkeys(columns)))
    except (OSError, ValueError, pa.ArrowException) as e:
        raise ConfigError(f"{path}: cannot read the columns {', '.join(columns)}: {e}") from None
    for batch in table.to_batches():
        cols = [_parquet_times(path, batch.column(c), c) if c == time_column
                else batch.column(c).to_pylist() for c in columns]
        yield from zip(*cols, strict=True)


def _csv_rows(path: Path, columns: Sequence[str], time_column: str | None,
              ) -> Iterator[tuple[Any, ...]]:
    missing = [c for c in columns if c not in read_header(path)]
    if missing:
        raise ConfigError(f"{path} has no column(s) {', '.join(missing)}")
    kinds = column_types(path, columns, time_column)
    convert = [_csv_converter(path, c, k, c == time_column) for c, k in zip(columns, kinds, strict=True)]
    with path.open(newline="", encoding="utf-8") as f:
        for n, row in enumerate(csv.DictReader(f), start=1):
            yield tuple(conv(row[c], n) for conv, c in zip(convert, columns, strict=True))


def _csv_converter(path: Path, column: str, kind: pa.DataType, is_time: bool) -> Any:
    import pyarrow as pa

    if is_time:
        def event(cell: str, n: int) -> int:
            try:
                return parse_event_time(cell)
            except ValueError:
                raise _event_error(path, column, n, cell, "expected an event time: "
                                   + " or ".join(EVENT_FORMATS)) from None
        return event
    if kind == pa.int64():
        return lambda cell, _n: int(cell) if cell else None
    if kind == pa.float64():
        return lambda cell, _n: float(cell) if cell else None
    return lambda cell, _n: cell


def _parquet_times(path: Path, col: pa.Array, name: str) -> list[int]:
    import pyarrow as pa

    t = col.type
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        import pyarrow.compute as pc

        micros = pc.cast(col, pa.timestamp("us", tz=getattr(t, "tz", None)), safe=False)
        return list(micros.cast(pa.int64()).to_pylist())
    if pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t):
        out = []
        for i, cell in enumerate(col.to_pylist(), start=1):
            try:
                out.append(parse_event_time(cell))
            except ValueError:
                raise _event_error(path, name, i, cell, "expected an event time: "
                                   + " or ".join(EVENT_FORMATS)) from None
        return out
    raise ConfigError(f"{path}: column {name!r} of type {t} cannot be an event time "
                      "(expected integer microseconds, a timestamp, a date or a string)")


@functools.lru_cache(maxsize=32)
def _scan(path: Path, column: str, stamp: tuple[int, int]) -> EventSpan:
    rows, first, last = 0, 0, 0
    for rows, (event,) in enumerate(read_rows(path, (column,), column), start=1):
        if rows == 1:
            first = event
        elif event < last:
            raise _event_error(path, column, rows, event,
                               f"rows out of event time order: event time {event} µs is before "
                               f"the previous row's {last} µs")
        last = event
    return EventSpan(rows, first, last)


def scan_event_times(path: Path, column: str) -> EventSpan:
    """Every event time of ``column`` checked (module docstring); cached per file version."""
    try:
        stamp = _stamp(path)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e}") from None
    return _scan(path, column, stamp)
