"""Where ``auto`` switches replay engines (node/config/crossovers.py): the config's values,
else what ``dpc bench replay`` stored on this machine, else the defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from node.config.crossovers import (
    DEFAULT_VECTORIZED_FROM,
    Crossovers,
    crossovers_path,
    read_crossovers,
    thresholds,
    write_crossovers,
)
from node.errors import ConfigError

CLUSTER = {"spark.master": "spark://127.0.0.1:7077"}
LOCAL = {"spark.master": "local[2]"}


def test_stored_crossovers_read_back(tmp_path: Path) -> None:
    path = tmp_path / "dpc" / "x.json"
    assert read_crossovers(path) is None  # nothing measured: None, not an error
    c = Crossovers(300_000, None, "2 cores, 2026-11-27")
    assert write_crossovers(c, path) == path
    assert read_crossovers(path) == c


def test_the_path_is_the_environments_or_the_cache(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    monkeypatch.setenv("DPC_CROSSOVERS", str(tmp_path / "c.json"))
    assert crossovers_path() == tmp_path / "c.json"
    monkeypatch.delenv("DPC_CROSSOVERS")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert crossovers_path() == tmp_path / "dpc" / "replay-crossovers.json"


@pytest.mark.parametrize("text", ["", "[1]", '{"vectorized_from": -5, "spark_from": null}',
                                  '{"vectorized_from": 1.5, "spark_from": null}',
                                  '{"spark_from": 3}'])
def test_a_file_that_is_not_the_benchs_is_an_error_naming_it(tmp_path: Path,
                                                             text: str) -> None:
    path = tmp_path / "c.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match=rf"{path}: not a crossovers file of dpc bench replay"):
        read_crossovers(path)


def test_the_config_wins_then_the_measurement_then_the_defaults() -> None:
    measured = Crossovers(200_000, 5_000_000)
    assert thresholds(7, 9, {}, measured) == (7, 9)
    assert thresholds(None, None, {}, measured) == (200_000, 5_000_000)
    assert thresholds(None, None, {}, None) == (DEFAULT_VECTORIZED_FROM, None)
    # Spark never won here: not used on this machine alone, used on a named cluster.
    never = Crossovers(200_000, None)
    assert thresholds(None, None, LOCAL, never) == (200_000, None)
    assert thresholds(None, None, CLUSTER, never) == (200_000, 200_000)
    assert thresholds(None, 10**8, CLUSTER, never) == (200_000, 10**8)
