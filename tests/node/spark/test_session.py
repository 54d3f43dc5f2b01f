"""The Java check and the process's one Spark session (node/spark/session.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from node.spark.session import java_problem, local_driver_memory, spark_session


def test_java_17_is_there() -> None:
    assert java_problem() is None


def test_a_missing_or_old_java_is_one_line_saying_so(tmp_path: Path) -> None:
    assert "no java found" in (java_problem(str(tmp_path / "nope")) or "")
    old = tmp_path / "java"
    old.write_text('#!/bin/sh\necho \'openjdk version "11.0.2" 2019-01-15\' >&2\n')
    old.chmod(0o755)
    assert java_problem(str(old)) == f"Spark needs Java 17 or newer: {old} is Java 11"
    ancient = tmp_path / "java8"
    ancient.write_text('#!/bin/sh\necho \'java version "1.8.0_292"\' >&2\n')
    ancient.chmod(0o755)
    assert java_problem(str(ancient)) == f"Spark needs Java 17 or newer: {ancient} is Java 8"


def test_the_session_is_one_per_process(spark: Any) -> None:
    assert spark_session() is spark
    assert spark.range(10).selectExpr("sum(id) AS s").collect()[0]["s"] == 45
    with pytest.raises(ValueError, match="already running"):
        spark_session("spark://127.0.0.1:1")


def test_an_embedded_session_gets_a_quarter_of_memory_as_its_heap(spark: Any) -> None:
    assert local_driver_memory(24 * 2**30) == "6g"
    assert local_driver_memory(2 * 2**30) == "1g"  # never under Spark's own default
    assert local_driver_memory(256 * 2**30) == "8g"
    # The suite's session was built without the setting: the JVM got the default.
    assert spark.sparkContext.getConf().get("spark.driver.memory") == local_driver_memory()
    # ... and the JVM started with that heap (a setting read too late would leave 1 GiB).
    heap = spark.sparkContext._jvm.java.lang.Runtime.getRuntime().maxMemory()
    assert heap > 0.8 * int(local_driver_memory()[:-1]) * 2**30, heap
