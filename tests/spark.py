"""The suite's Spark: one session per test process, and the JIT options of every JVM the
suite starts (import this module where a test starts Spark, or starts processes that may).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from node.spark.session import java_problem, spark_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["JVM_OPTIONS", "spark"]

#: The JIT options of every JVM the suite starts (the session's driver, the ``dpc
#: reconcile`` processes and the replicas' own sessions, whose processes inherit them:
#: spark-submit reads SPARK_SUBMIT_OPTS; a standalone master and worker:
#: SPARK_DAEMON_JAVA_OPTS). The suite's jobs are many and tiny, so the JVMs spent
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


