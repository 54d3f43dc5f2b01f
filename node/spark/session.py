"""The Spark session of a process, and the Java check before it (issues 16, 17).

Role: the one place ``dpc reconcile`` (and its tests and bench) and a replica's Spark replay
(node/spark/replay.py) get Spark from. Spark runs
embedded (``local[*]``) unless a master is named; every ``--conf`` setting passes through.
A process holds one session: building one costs seconds (a JVM), so the test suite and a
reconcile of many runs reuse it.

Java: PySpark starts a JVM; without a working ``java`` (17 or newer) it fails with a page of
stack trace. :func:`java_problem` says in one line what is missing, before any of that.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["DEFAULT_MASTER", "JAVA_MIN", "java_problem", "local_driver_memory", "spark_session",
           "stop_session"]

DEFAULT_MASTER = "local[*]"
JAVA_MIN = 17

_session: SparkSession | None = None
_master: str | None = None


def local_driver_memory(total_bytes: int | None = None) -> str:
    """The driver heap of an embedded (``local``) session unless ``spark.driver.memory`` is
    given: a quarter of the machine's memory, 1 to 8 GiB. In local mode the whole job runs
    in the driver (the executors are its threads), and Spark's own default (1 GiB) made the
    JVM spend 30 s of an 80 s reconcile of 10^6 logged tuples collecting garbage (issue
    16's profile). The larger heap did not shorten that run on 2 cores (82 s: JIT and
    planning bound it); it is room for runs of 10^7 and more, not a speed-up."""
    if total_bytes is None:
        total_bytes = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return f"{max(1, min(8, total_bytes // 4 // 2**30))}g"


def java_problem(java: str | None = None) -> str | None:
    """None when a Java runtime Spark can use is there; else one line saying what is
    missing. ``java``: the executable to try (default: ``$JAVA_HOME/bin/java``, else
    ``java`` on the PATH)."""
    if java is None:
        home = os.environ.get("JAVA_HOME")
        java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.path.exists(java):
        return (f"Spark needs Java {JAVA_MIN} or newer: no java found (install a JDK {JAVA_MIN}, "
                "e.g. apt install openjdk-17-jre-headless, or set JAVA_HOME)")
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"Spark needs Java {JAVA_MIN} or newer: {java} -version failed: {exc}"
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if out.returncode != 0 or m is None:
        return f"Spark needs Java {JAVA_MIN} or newer: {java} -version says nothing usable"
    major = int(m.group(1)) if m.group(1) != "1" else int(m.group(2) or 0)
    if major < JAVA_MIN:
        return f"Spark needs Java {JAVA_MIN} or newer: {java} is Java {major}"
    return None


def spark_session(master: str | None = None, conf: Mapping[str, str] | None = None,
                  app: str = "dpc reconcile") -> SparkSession:
    """The process's Spark session, built on first use: ``master`` (default
    ``spark.master`` in ``conf``, else ``local[*]``) and every ``conf`` setting. Asking
    again returns the same session; asking for another master is an error (stop first)."""
    global _session, _master
    conf = dict(conf or {})
    master = master or conf.pop("spark.master", None) or DEFAULT_MASTER
    conf.pop("spark.master", None)
    if _session is not None:
        if master != _master:
            raise ValueError(f"a Spark session on {_master} is already running in this process; "
                             f"stop it before asking for one on {master}")
        return _session
    from pyspark.sql import SparkSession

    # Python workers run this interpreter (the venv's: pyarrow, orjson and the package),
    # not whatever `python3` the PATH finds first.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        # Small local jobs: a few partitions, not the default 200.
        .config("spark.sql.shuffle.partitions", str(max(2, 2 * (os.cpu_count() or 1))))
        .config("spark.sql.session.timeZone", "UTC")
    )
    if master.startswith("local"):
        # An embedded session talks to itself only: on loopback, not on whatever address
        # the host name resolves to (Spark's default, with a warning).
        for key in ("spark.driver.host", "spark.driver.bindAddress"):
            conf.setdefault(key, "127.0.0.1")
    if master.startswith("local") and "spark.driver.memory" not in conf:
        # Read when the JVM starts: PySpark passes builder settings to spark-submit.
        builder = builder.config("spark.driver.memory", local_driver_memory())
    for key, value in conf.items():
        builder = builder.config(key, value)
    _session = builder.getOrCreate()
    _session.sparkContext.setLogLevel("ERROR")
    _master = master
    return _session


def stop_session() -> None:
    """Stop the process's session (a new one may then be built, on any master)."""
    global _session, _master
    if _session is not None:
        _session.stop()
    _session = _master = None
