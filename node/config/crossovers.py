"""Where ``auto`` switches replay engines: measured on this machine, or set in the config.

``dpc bench replay`` measures each engine's replay rate by log size and stores the
crossovers (the smallest measured log from which the vectorized engine, and a warm Spark
session, beat the engine below them) in one JSON file per machine: ``$DPC_CROSSOVERS``, else
``$XDG_CACHE_HOME/dpc/replay-crossovers.json`` (``~/.cache`` without it). Every replica
reads it at start. :func:`thresholds` says what a replica uses, first found wins:

* ``vectorized_from``: the config's value; the measured crossover; 1,000,000 (what
  ``dpc bench replay`` measured on the 2-core machine the project started on).
* ``spark_from``: the config's value; the measured crossover of a warm Spark session
  (none where Spark never won: on one small machine it does not, issue 17); where the
  config names a Spark master (``[spark]`` ``"spark.master"``, not ``local``), the
  vectorized threshold: a cluster takes the bulk work as soon as it is bulk; else never.

A replica whose ``replay_engine`` is ``spark`` uses Spark whatever the size.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import orjson

from node.errors import ConfigError

__all__ = ["DEFAULT_VECTORIZED_FROM", "Crossovers", "crossovers_path", "read_crossovers",
           "thresholds", "write_crossovers"]

DEFAULT_VECTORIZED_FROM = 1_000_000


@dataclass(frozen=True)
class Crossovers:
    """Input tuples from which each engine beat the one below it (None: never measured
    to), and what measured them (free text: machine, date, sizes)."""

    vectorized_from: int | None
    spark_from: int | None
    measured: str = ""


def crossovers_path() -> Path:
    explicit = os.environ.get("DPC_CROSSOVERS")
    if explicit:
        return Path(explicit)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "dpc" / "replay-crossovers.json"


def read_crossovers(path: Path | None = None) -> Crossovers | None:
    """The stored crossovers, None if nothing was stored; a file that is there but not
    what ``dpc bench replay`` writes is a ConfigError naming it (not silently ignored)."""
    path = crossovers_path() if path is None else path
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        data = orjson.loads(raw)
        values = [data[k] for k in ("vectorized_from", "spark_from")]
        if not all(v is None or (type(v) is int and v >= 0) for v in values):
            raise ValueError("a crossover is not a count of tuples or null")
        return Crossovers(values[0], values[1], str(data.get("measured", "")))
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"{path}: not a crossovers file of dpc bench replay ({e}); run "
                          "dpc bench replay again or delete it") from None


def write_crossovers(c: Crossovers, path: Path | None = None) -> Path:
    path = crossovers_path() if path is None else path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(orjson.dumps({"vectorized_from": c.vectorized_from,
                                  "spark_from": c.spark_from, "measured": c.measured},
                                 option=orjson.OPT_INDENT_2))
    tmp.replace(path)  # (a replica starting meanwhile reads the old file or the new)
    return path


def thresholds(vectorized_from: int | None, spark_from: int | None,
               spark: Mapping[str, str], measured: Crossovers | None) -> tuple[int, int | None]:
    """(vectorized_from, spark_from) a replica uses: see the module docstring."""
    vec = vectorized_from
    if vec is None:
        vec = measured.vectorized_from if measured and measured.vectorized_from is not None \
            else DEFAULT_VECTORIZED_FROM
    if spark_from is not None:
        return vec, spark_from
    if measured is not None and measured.spark_from is not None:
        return vec, measured.spark_from
    master = spark.get("spark.master", "")
    return vec, (vec if master and not master.startswith("local") else None)
