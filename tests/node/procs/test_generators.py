"""Source generators: seeded synthetic values, and replay of CSV / Parquet files."""

from __future__ import annotations

import itertools
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from node.config.model import AttributeGen, SourceConfig
from node.errors import ConfigError
from node.procs.generators import arrow_types, make_generator, make_rows


def source(**kw: object) -> SourceConfig:
    base: dict[str, object] = dict(name="s", schema=("k", "v", "x"), host="127.0.0.1", port=1, rate=10.0,
                                   boundary_interval=100_000, generator="synthetic", seed=3)
    base.update(kw)
    return SourceConfig(**base)  # type: ignore[arg-type]


def test_synthetic_values_follow_their_generators_and_the_seed() -> None:
    attrs = {"k": AttributeGen(kind="key", n=5, dist="zipf", s=1.5), "v": AttributeGen(kind="int", min=10, max=12),
             "x": AttributeGen(kind="seq")}
    src = source(attributes=attrs)
    a = list(itertools.islice(make_generator(src), 2000))
    assert a == list(itertools.islice(make_generator(src), 2000))  # same seed, same values
    assert a != list(itertools.islice(make_generator(source(attributes=attrs, seed=4)), 2000))
    assert {k for k, _, _ in a} <= set(range(5)) and {v for _, v, _ in a} <= {10, 11, 12}
    assert [x for _, _, x in a[:3]] == [1, 2, 3]
    counts = [sum(1 for k, _, _ in a if k == key) for key in range(5)]
    assert counts[0] > 2 * counts[4]  # zipf: the first key dominates
    assert arrow_types(src) == [pa.int64(), pa.int64(), pa.int64()]


def test_csv_file_replay_types_cells_per_column_and_ends(tmp_path: Path) -> None:
    f = tmp_path / "in.csv"
    f.write_text("k,v,x,extra\n1,2.5,abc,z\n2,3,def,z\n")
    src = source(generator="file", file=f)
    assert list(make_generator(src)) == [(1, 2.5, "abc"), (2, 3.0, "def")]
    assert isinstance(list(make_generator(src))[1][1], float)  # "3" in a float column
    assert arrow_types(src) == [pa.int64(), pa.float64(), pa.string()]  # every incarnation alike


def test_parquet_file_replay(tmp_path: Path) -> None:
    f = tmp_path / "in.parquet"
    pq.write_table(pa.table({"x": ["a", "b"], "v": [1, 2], "k": [7, 8]}), f)
    assert list(make_generator(source(generator="file", file=f))) == [(7, 1, "a"), (8, 2, "b")]


def test_csv_missing_column_is_named(tmp_path: Path) -> None:
    f = tmp_path / "in.csv"
    f.write_text("k,v\n1,2\n")
    with pytest.raises(ConfigError, match="no column"):
        list(make_generator(source(generator="file", file=f)))


def test_constants_and_event_times(tmp_path: Path) -> None:
    f = tmp_path / "in.csv"
    f.write_text("when,v\n2010/01/01,1.5\n2010/01/02,2\n")
    src = source(schema=("city", "when", "v"), generator="file", file=f, time_column="when",
                 constants={"city": "Oslo"})
    day = 86_400_000_000
    assert list(make_rows(src)) == [(14_610 * day, ("Oslo", 14_610 * day, 1.5)),
                                    (14_611 * day, ("Oslo", 14_611 * day, 2.0))]
    assert arrow_types(src) == [pa.string(), pa.int64(), pa.float64()]
    hidden = source(schema=("v",), generator="file", file=f, time_column="when")
    assert [r[1] for r in make_rows(hidden)] == [(1.5,), (2.0,)]  # the time column stays out
    synthetic = source(schema=("k", "c"), attributes={"k": AttributeGen(kind="seq")},
                       constants={"c": True})
    assert list(itertools.islice(make_rows(synthetic), 2)) == [(None, (1, True)), (None, (2, True))]
    assert arrow_types(synthetic) == [pa.int64(), pa.bool_()]
