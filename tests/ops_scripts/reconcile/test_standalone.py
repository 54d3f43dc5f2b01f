"""A real standalone Spark cluster on loopback (ops_scripts/reconcile/standalone.py): the
reference computed on it equals the one computed on the suite's local session."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from node.config.load import load_config
from ops_scripts.harness.simulate import DEFAULT_CLUSTER, simulate_one
from ops_scripts.reconcile.reference import reference
from ops_scripts.reconcile.standalone import ClusterError, StandaloneCluster
from ops_scripts.reconcile.tables import ingest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# The driver on the cluster runs in a process of its own: this one holds the local session,
# and a process holds one (session.py).
DRIVER = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from ops_scripts.reconcile.reference import reference
    from ops_scripts.reconcile.session import spark_session
    from ops_scripts.reconcile.tables import ingest

    master, conf, run_dir, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
    spark = spark_session(master, conf)
    tables = ingest([Path(run_dir)], Path(out))
    reference(spark, tables).write.parquet(str(Path(out) / "got"))
    spark.stop()
""")


def gone(pid: int) -> bool:
    """No process ``pid`` and no process in its group (each was a group's leader)."""
    for probe in (os.kill, os.killpg):
        try:
            probe(pid, 0)
        except ProcessLookupError:
            continue
        return False
    return True


def test_the_reference_on_a_standalone_cluster_is_the_local_one(
        spark: SparkSession, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    simulate_one(load_config(DEFAULT_CLUSTER), 6, run_dir)
    want = reference(spark, ingest([run_dir], tmp_path / "local")).collect()
    assert len(want) > 100
    with StandaloneCluster(tmp_path / "cluster") as cluster:
        pids = cluster.pids
        assert cluster.master_url.startswith("spark://127.0.0.1:") and len(pids) == 2
        driver = subprocess.run(
            [sys.executable, "-c", DRIVER, cluster.master_url, json.dumps(cluster.driver_conf),
             str(run_dir), str(tmp_path / "remote")],
            env={**os.environ, "PYSPARK_PYTHON": sys.executable}, capture_output=True,
            text=True, timeout=600)
        assert driver.returncode == 0, driver.stderr[-4000:]
        # The job ran on this cluster (not in an embedded local master).
        apps = cluster.status()["completedapps"]
        assert [a["name"] for a in apps] == ["dpc reconcile"]
    assert all(gone(pid) for pid in pids), pids
    got = spark.read.parquet(str(tmp_path / "remote" / "got")).collect()
    key = ("run", "stream", "id")
    assert sorted(got, key=lambda r: [r[k] for k in key]) == \
        sorted(want, key=lambda r: [r[k] for k in key])


def test_a_worker_that_cannot_start_is_a_clear_error_and_leaves_nothing(tmp_path: Path) -> None:
    # An unparsable memory size: the worker prints its usage and exits at once, and the
    # error quotes its log, without waiting for the deadline.
    cluster = StandaloneCluster(tmp_path / "cluster", memory="lots", start_timeout=120)
    why = r"(?s)the worker \(pid \d+\) exited with code 1 .*worker\.log:.*Usage: Worker"
    with pytest.raises(ClusterError, match=why), cluster:
        pass
    assert cluster.pids and all(gone(pid) for pid in cluster.pids)
