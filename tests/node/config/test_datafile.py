"""A file source's data file (node/config/datafile.py): package files, column types, event
times in every format, their order."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from node.config.datafile import (
    EventSpan,
    column_types,
    parse_event_time,
    read_rows,
    resolve_data_file,
    scan_event_times,
)
from node.errors import ConfigError
from tests.paths import ROOT

JAN1 = int(datetime(2010, 1, 1, tzinfo=UTC).timestamp()) * 1_000_000
H = 3600 * 1_000_000


@pytest.mark.parametrize(("cell", "us"), [
    (JAN1, JAN1),
    (str(JAN1), JAN1),
    ("2010/01/01", JAN1),
    ("2010/01/01 01:00", JAN1 + H),
    ("2010/01/01 01:00:00", JAN1 + H),
    ("2010/1/1 1:00:30.5", JAN1 + H + 30_500_000),
    ("2010-01-01", JAN1),
    ("2010-01-01T01:00:00", JAN1 + H),
    ("2010-01-01T02:00:00+01:00", JAN1 + H),
    ("2010-01-01 01:00:00Z", JAN1 + H),
])
def test_event_times_in_every_format(cell: object, us: int) -> None:
    assert parse_event_time(cell) == us


@pytest.mark.parametrize("cell", ["yesterday", "2010/13/01", "", 1.5, None])
def test_what_is_no_event_time(cell: object) -> None:
    with pytest.raises(ValueError):
        parse_event_time(cell)


def test_package_files_are_found_without_importing_the_package(tmp_path: Path) -> None:
    path = resolve_data_file("package:vega_datasets/_data/seattle-temps.csv", tmp_path)
    assert path.is_file() and path.name == "seattle-temps.csv"
    # In a fresh interpreter: loading the weather example imports neither (vega_datasets's
    # own __init__ imports pandas).
    probe = ("import sys; from node.config.load import load_config; "
             "load_config('examples/weather.toml'); "
             "print(sorted({'vega_datasets', 'pandas'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout
    assert out.strip() == "[]"
    assert resolve_data_file("data.csv", tmp_path) == (tmp_path / "data.csv").resolve()
    with pytest.raises(ConfigError, match=r"no installed Python package 'no_such_pkg'.*no-such-pkg"):
        resolve_data_file("package:no_such_pkg/x.csv", tmp_path)
    with pytest.raises(ConfigError, match=r"has no file '_data/nope\.csv'"):
        resolve_data_file("package:vega_datasets/_data/nope.csv", tmp_path)
    with pytest.raises(ConfigError, match="expected package:NAME/PATH"):
        resolve_data_file("package:vega_datasets", tmp_path)


def test_csv_cells_are_typed_per_column(tmp_path: Path) -> None:
    f = tmp_path / "d.csv"
    f.write_text("a,b,c,t\n1,2,x,2010/01/01\n3,4.5,7,2010/01/01 01:00\n,,,2010/01/01 01:00\n")
    assert column_types(f, ["a", "b", "c", "t"], "t") == [pa.int64(), pa.float64(), pa.string(),
                                                          pa.int64()]
    assert list(read_rows(f, ["a", "b", "c", "t"], "t")) == [
        (1, 2.0, "x", JAN1), (3, 4.5, "7", JAN1 + H), (None, None, "", JAN1 + H)]
    assert isinstance(next(read_rows(f, ["b"]))[0], float)  # 2, a float column's cell


def test_a_time_column_is_scanned_in_order_or_refused_naming_the_row(tmp_path: Path) -> None:
    f = tmp_path / "d.csv"
    f.write_text("t,v\n2010/01/01 00:00,1\n2010/01/01 02:00,2\n2010/01/01 02:00,3\n")
    assert scan_event_times(f, "t") == EventSpan(3, JAN1, JAN1 + 2 * H)
    f.write_text("t,v\n2010/01/01 00:00,1\n2010/01/01 02:00,2\n2010/01/01 01:00,3\n")
    with pytest.raises(ConfigError, match=r"d\.csv: column 't', row 3 \(line 4\): rows out of "
                                          r"event time order"):
        scan_event_times(f, "t")
    f.write_text("t,v\n2010/01/01 00:00,1\nsoon,2\n")
    with pytest.raises(ConfigError, match=r"row 2 \(line 3\): expected an event time.*found 'soon'"):
        scan_event_times(f, "t")


def test_parquet_timestamps_dates_and_integers_are_event_times(tmp_path: Path) -> None:
    f = tmp_path / "d.parquet"
    stamps = pa.array([JAN1, JAN1 + H], pa.timestamp("us", tz="UTC"))
    pq.write_table(pa.table({"ts": stamps, "ns": stamps.cast(pa.timestamp("ns")),
                             "day": pa.array([14610, 14611], pa.date32()),
                             "us": [JAN1, JAN1 + H], "v": [1.5, 2.5]}), f)
    rows = list(read_rows(f, ["v", "ts", "ns", "day", "us"], "ts"))
    assert [r[1] for r in rows] == [JAN1, JAN1 + H]
    for column in ("ts", "ns", "us"):
        assert scan_event_times(f, column) == EventSpan(2, JAN1, JAN1 + H)
    assert scan_event_times(f, "day") == EventSpan(2, JAN1, JAN1 + 24 * H)
    with pytest.raises(ConfigError, match="column 'v' of type double cannot be an event time"):
        scan_event_times(f, "v")
