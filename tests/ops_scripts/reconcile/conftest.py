"""One Spark session for the whole suite (building one starts a JVM: seconds)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from ops_scripts.reconcile.session import java_problem, spark_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    problem = java_problem()
    if problem is not None:  # loud: the image has Java 17 (DEVELOPERS.md); never a skip
        raise RuntimeError(problem)
    yield spark_session()
