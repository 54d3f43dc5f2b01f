"""A real standalone Spark cluster on loopback (ops_scripts/reconcile/standalone.py):
``dpc reconcile --master`` on it (and ``[spark] "spark.master"`` in the run's config) says
what it says on the suite's local session."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from node.config.load import load_config
from ops_scripts.harness.simulate import DEFAULT_CLUSTER, simulate_one
from ops_scripts.reconcile.run import run_reconcile
from ops_scripts.reconcile.standalone import ClusterError, StandaloneCluster

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

def gone(pid: int) -> bool:
    """No process ``pid`` and no process in its group (each was a group's leader)."""
    for probe in (os.kill, os.killpg):
        try:
            probe(pid, 0)
        except ProcessLookupError:
            continue
        return False
    return True


def test_dpc_reconcile_on_a_standalone_cluster_says_what_it_says_locally(
        spark: SparkSession, tmp_path: Path) -> None:
    """``dpc reconcile --master spark://...`` (a process of its own: this one holds the
    local session, and a process holds one) prints the same verdicts and computes the same
    reference as on the suite's local session. The driver's settings for the cluster come
    from the run's ``[spark]`` section, so that path is the real one too (and the section's
    own ``spark.master``: test_run.py)."""
    run_dir = tmp_path / "run"
    simulate_one(load_config(DEFAULT_CLUSTER), 6, run_dir)
    local = io.StringIO()
    assert run_reconcile([run_dir], out=tmp_path / "local", stdout=local,
                         stderr=io.StringIO()) == 0
    want = spark.read.parquet(str(tmp_path / "local" / "tables" / "reference")).collect()
    assert len(want) > 100
    with StandaloneCluster(tmp_path / "cluster") as cluster:
        pids = cluster.pids
        assert cluster.master_url.startswith("spark://127.0.0.1:") and len(pids) == 2
        # The executor's JVM gets the suite's JIT options too (conftest.py: the driver's
        # and the daemons' come from the environment, an executor's only from the app).
        conf = {**cluster.driver_conf,
                "spark.executor.extraJavaOptions": os.environ["SPARK_SUBMIT_OPTS"]}
        with (run_dir / "config.toml").open("a", encoding="utf-8") as f:
            f.write("\n[spark]\n" + "".join(f"{json.dumps(k)} = {json.dumps(v)}\n"
                                            for k, v in conf.items()))
        remote = subprocess.run(
            [sys.executable, "-m", "ops_scripts.cli", "reconcile", str(run_dir),
             "--master", cluster.master_url, "--out", str(tmp_path / "remote")],
            capture_output=True, text=True, timeout=600)
        assert remote.returncode == 0, remote.stdout + remote.stderr[-4000:]
        # The job ran on this cluster (not in an embedded local master).
        apps = cluster.status()["completedapps"]
        assert [a["name"] for a in apps] == ["dpc reconcile"]
    assert all(gone(pid) for pid in pids), pids
    assert f"on {cluster.master_url}" in remote.stderr
    assert remote.stdout.splitlines()[0] == local.getvalue().splitlines()[0]
    got = spark.read.parquet(str(tmp_path / "remote" / "tables" / "reference")).collect()
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
