"""One Spark session for the whole suite (building one starts a JVM: seconds), and the
agreement test left out of pytest-xdist's workers (test_agreement.py says why)."""

from __future__ import annotations

import os
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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    out = [i for i in items if i.path.name == "test_agreement.py"]
    if out:
        items[:] = [i for i in items if i not in out]
        config.hook.pytest_deselected(items=out)
