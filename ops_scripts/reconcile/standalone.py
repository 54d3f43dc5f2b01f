"""A real standalone Spark cluster on loopback: one master, one worker (tests, benches).

Role: what lets ``dpc reconcile``'s tests and bench run its jobs on a cluster, with
executors in their own JVMs and Python workers, instead of only ``local[*]`` in the
driver's JVM. :class:`StandaloneCluster` starts a Spark master and one worker as
processes, from the PySpark installation itself (``<pyspark>/bin/spark-class``: PySpark
ships the jars and launch scripts a standalone cluster needs, so no separate Spark).

Theory of operation. ``__enter__`` picks free loopback ports (``node.net.ports``), starts
the master, then the worker pointed at it, each in a session of its own with its output in
``<log_dir>/master.log`` / ``worker.log`` (the worker's work directory is
``<log_dir>/work``), and polls the master's JSON status page
(``http://127.0.0.1:<webui>/json/``) until the worker is ALIVE there: a condition, never a
fixed sleep. A process that exits early, or a deadline passed, is an error quoting the
tail of both logs. ``__exit__`` (also when starting failed) stops each by its pid: SIGTERM,
SIGKILL after a grace period, then waits for it; what the worker started in its process
group (executor JVMs, their Python workers) and outlived it is killed last.

Invariants: everything listens on 127.0.0.1 only (``--host`` for the RPC endpoints,
``SPARK_LOCAL_IP`` for the web UIs, which otherwise bind every interface); ``SPARK_HOME``
is the PySpark package directory and ``PYSPARK_PYTHON`` this interpreter, so that
executors run the driver's Python, with this repository importable (it is installed in
the virtualenv in editable mode); after ``__exit__`` no process of the cluster is left.
A driver uses :attr:`StandaloneCluster.master_url` and :attr:`StandaloneCluster.driver_conf`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

from node.net.ports import free_port
from ops_scripts.errors import ClusterError

__all__ = ["ClusterError", "StandaloneCluster", "spark_home"]

HOST = "127.0.0.1"


def spark_home() -> Path:
    """The PySpark package directory: it holds ``bin/spark-class`` and ``jars/``."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()[-lines:]
    except OSError as e:
        return f"    (cannot read {path}: {e})"
    return "\n".join(f"    {line}" for line in text) or "    (empty)"


class StandaloneCluster:
    """A Spark master and one worker (``cores`` cores, ``memory`` of executor memory) on
    127.0.0.1, logging into ``log_dir``; a context manager. ``start_timeout``: seconds for
    the worker to register; ``grace``: seconds between SIGTERM and SIGKILL on exit."""

    def __init__(self, log_dir: Path, *, cores: int = 1, memory: str = "1g",
                 start_timeout: float = 120.0, grace: float = 10.0) -> None:
        self.log_dir = Path(log_dir)
        self.cores, self.memory = cores, memory
        self.start_timeout, self.grace = start_timeout, grace
        self.port = self.webui_port = self.worker_webui_port = 0
        self.master: subprocess.Popen[bytes] | None = None
        self.worker: subprocess.Popen[bytes] | None = None

    # ------------------------------------------------------------------ what a driver needs
    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.port}"

    @property
    def driver_conf(self) -> dict[str, str]:
        """Settings for a driver on this machine: executors reach it on loopback too."""
        return {"spark.driver.host": HOST, "spark.driver.bindAddress": HOST,
                "spark.executor.memory": self.memory}

    @property
    def pids(self) -> list[int]:
        """The master's and the worker's pids (those started so far)."""
        return [p.pid for p in (self.master, self.worker) if p is not None]

    def status(self) -> dict[str, Any]:
        """The master's JSON status page (workers, applications), as parsed."""
        url = f"http://{HOST}:{self.webui_port}/json/"
        with urllib.request.urlopen(url, timeout=5) as response:
            status: dict[str, Any] = json.loads(response.read())
        return status

    # ------------------------------------------------------------------ start and stop
    def __enter__(self) -> StandaloneCluster:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def _env(self) -> dict[str, str]:
        return {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": HOST,
                "PYSPARK_PYTHON": sys.executable,
                # The master's REST submission server listens on a fixed port (6066) that
                # a second cluster on the machine would collide on; nothing here uses it.
                "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
                "SPARK_LOCAL_DIRS": str(self.log_dir / "local")}

    def _spawn(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        with open(self.log_dir / f"{name}.log", "wb") as log:
            # A session of its own: the worker's executors join its process group, which
            # stop() empties; spark-class execs java, so the pid is the JVM's.
            return subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), *args], env=self._env(),
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)

    def _start(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        (self.log_dir / "work").mkdir(exist_ok=True)
        self.port, self.webui_port = free_port(HOST), free_port(HOST)
        self.worker_webui_port = free_port(HOST)
        self.master = self._spawn(
            "master", "org.apache.spark.deploy.master.Master", "--host", HOST,
            "--port", str(self.port), "--webui-port", str(self.webui_port))
        self.worker = self._spawn(
            "worker", "org.apache.spark.deploy.worker.Worker", self.master_url,
            "--host", HOST, "--port", str(free_port(HOST)),
            "--webui-port", str(self.worker_webui_port), "--cores", str(self.cores),
            "--memory", self.memory, "--work-dir", str(self.log_dir / "work"))
        self._wait_for_worker()

    def _wait_for_worker(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        seen = "no answer yet"
        while True:
            for name, proc in (("master", self.master), ("worker", self.worker)):
                if proc is not None and proc.poll() is not None:
                    raise self._failure(f"the {name} (pid {proc.pid}) exited with code "
                                        f"{proc.returncode} before the worker registered")
            try:
                workers = self.status().get("workers", [])
                if any(w.get("state") == "ALIVE" for w in workers):
                    return
                seen = f"workers {[w.get('state') for w in workers]}"
            except (OSError, ValueError) as e:  # not listening yet; a half-written page
                seen = f"{type(e).__name__}: {e}"
            if time.monotonic() > deadline:
                raise self._failure(f"no worker ALIVE at {self.master_url} after "
                                    f"{self.start_timeout:.0f} s (last status: {seen})")
            time.sleep(0.25)

    def _failure(self, what: str) -> ClusterError:
        return ClusterError(
            f"standalone Spark cluster: {what}\n"
            f"  {self.log_dir / 'master.log'}:\n{_tail(self.log_dir / 'master.log')}\n"
            f"  {self.log_dir / 'worker.log'}:\n{_tail(self.log_dir / 'worker.log')}")

    def stop(self) -> None:
        """Stop the worker, then the master, by pid (idempotent); then kill whatever is
        left in their process groups (executors a killed worker could not stop)."""
        for proc in (self.worker, self.master):
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=self.grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for proc in (self.worker, self.master):
            if proc is None:
                continue
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # its group: pgid == pid (own session)
            except ProcessLookupError:
                continue  # the group is empty: nothing outlived its leader
            deadline = time.monotonic() + self.grace
            while _group_alive(proc.pid) and time.monotonic() < deadline:
                time.sleep(0.05)


def _group_alive(pgid: int) -> bool:
    """Whether any process of group ``pgid`` is left (a zombie counts until reaped)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
