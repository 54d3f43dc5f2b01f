"""One Spark session for the whole suite (building one starts a JVM: seconds), the suite's
JVMs told to compile less, and the agreement test left out of pytest-xdist's workers
(test_agreement.py says why)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from ops_scripts.reconcile.session import java_problem, spark_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: The JIT options of every JVM the suite starts (the session's driver and the ``dpc
#: reconcile`` processes: spark-submit reads SPARK_SUBMIT_OPTS; a standalone master and
#: worker: SPARK_DAEMON_JAVA_OPTS). The suite's jobs are many and tiny, so the JVMs spent
#: their CPU compiling hot code with C2 and collecting in parallel GC threads: with the
#: client compiler only and the serial collector, test_plans + test_reference + test_final
#: took 104 CPU-s instead of 164 (93 -> 82 s) on 2 cores, where the suite is CPU-bound.
#: The suite only: a user's reconcile of 10^7 tuples wants C2 (README, dpc bench reconcile).
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
for _var in ("SPARK_SUBMIT_OPTS", "SPARK_DAEMON_JAVA_OPTS"):
    os.environ[_var] = f"{JVM_OPTIONS} {os.environ.get(_var, '')}".strip()


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
