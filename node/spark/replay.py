"""The ``spark`` replay engine: a reconciliation's operator runs in Spark tasks (issue 17).

Role: the runtime side of ``QueryNetwork.replay_remote`` / ``finish_remote``. A
:class:`SparkReplayer` owns the replica's Spark session and runs each
:class:`~operators.vectorized.remote.ChainJob` as one Spark task: ``mapInArrow`` over a
one-row, one-partition frame whose function reads the job from a file, runs
:func:`~operators.vectorized.remote.run_job` (the vectorized replay's own code, reading the
spilled segments by path, memory-mapped) and writes the result to a file. One partition,
in tuple-time order: the operators below a SUnion hold state across keys in general (a
join's band, an aggregate's groups) and ids are numbered in the SUnion's order, so the one
order the result is defined by is kept; partitioning by key where a network allows it is
not done (the closing note of issue 17 says so).

Files, not Spark's RPC, carry jobs and results: a step's input may be millions of tuples
(Spark warns above 1 MiB of task and refuses results above ``spark.driver.maxResultSize``),
and the task reads the segments from the same disk anyway. So the task must run where the
replica's run directory is: ``local[*]``, or a standalone cluster whose workers share that
disk (loopback, as the tests run it).

Never stalls the node: the session starts in a thread ahead of need (:meth:`warm`, which
the manager calls once a failure has lasted a few X), and :meth:`run` blocks only the
thread the manager runs it in (``asyncio.to_thread``) while the event loop goes on
answering heartbeats and partners; the manager's input gate holds new input meanwhile, as
for any replay step.
"""

from __future__ import annotations

import logging
import pickle
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from functools import partial
from itertools import count
from pathlib import Path
from typing import Any

from node.errors import NodeError
from operators.vectorized.remote import ChainJob, ChainResult, run_job

__all__ = ["SparkReplayer"]


class SparkReplayer:
    """A replica's Spark session and the replay jobs it runs (see the module docstring)."""

    def __init__(self, conf: Mapping[str, str], workdir: Path, app: str,
                 log: logging.Logger) -> None:
        self._conf = dict(conf)
        self._workdir = Path(workdir)
        self._app = app
        self._log = log
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._session: Any = None
        self._error: BaseException | None = None
        self._ids = count(1)
        #: Seconds the session took to start (None before it has).
        self.start_s: float | None = None
        #: Jobs run, the input tuples they replayed, and the seconds they took.
        self.jobs = 0
        self.tuples = 0
        self.seconds = 0.0
        #: The job running now: (its input tuples, time.monotonic() at its start).
        self.running: tuple[int, float] | None = None

    @property
    def state(self) -> str:
        """``cold`` (not asked for), ``starting``, ``ready`` or ``failed``."""
        if self._error is not None:
            return "failed"
        if self._ready.is_set():
            return "ready"
        return "cold" if self._thread is None else "starting"

    def warm(self) -> None:
        """Start the session in a thread, unless it is started (or starting) already."""
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._start, name=f"{self._app} session",
                                            daemon=True)
            self._thread.start()

    def _start(self) -> None:
        from .session import spark_session

        began = time.monotonic()
        self._log.warning("%s: starting a Spark session (master %s) for the replay",
                          self._app, self._conf.get("spark.master", "local[*]"))
        try:
            session = spark_session(conf=self._conf, app=self._app)
            # One empty task: a Python worker starts and imports the engine now, not in
            # the first replay (seconds on a loaded machine).
            session.range(1, numPartitions=1).mapInArrow(_warm_task, "tuples long").collect()
            self._session = session
        except BaseException as exc:  # noqa: BLE001  (not swallowed: run() raises it)
            self._error = exc
            self._log.error("%s: the Spark session did not start: %s: %s", self._app,
                            type(exc).__name__, exc)
            return
        finally:
            self._ready.set()
        self.start_s = round(time.monotonic() - began, 3)
        self._log.warning("%s: Spark session ready in %.1f s", self._app, self.start_s)

    def run(self, jobs: Sequence[ChainJob]) -> list[ChainResult]:
        """Run ``jobs`` (one Spark task each), starting the session first if need be.
        Blocks: call it in a worker thread."""
        self.warm()
        self._ready.wait()
        if self._error is not None:
            raise NodeError(f"{self._app}: the Spark session did not start: "
                            f"{type(self._error).__name__}: {self._error}") from self._error
        return [self._run_one(job) for job in jobs]

    def eta(self) -> float | None:
        """Seconds the running job still needs at the pace of the jobs so far (None: no
        job running, or none finished yet)."""
        running = self.running
        if running is None or self.seconds <= 0 or self.tuples <= 0:
            return None
        tuples, since = running
        left = tuples * self.seconds / self.tuples - (time.monotonic() - since)
        return round(max(0.0, left), 3)

    def _run_one(self, job: ChainJob) -> ChainResult:
        self._workdir.mkdir(parents=True, exist_ok=True)
        began = time.monotonic()
        self.running = (job.tuples, began)
        n = next(self._ids)
        job_path = self._workdir / f"job-{n:06d}.pickle"
        result_path = self._workdir / f"result-{n:06d}.pickle"
        try:
            with job_path.open("wb") as f:
                pickle.dump(job, f, protocol=5)
            frame = self._session.range(1, numPartitions=1).mapInArrow(
                partial(_task, str(job_path), str(result_path)), "tuples long")
            frame.collect()
            with result_path.open("rb") as f:
                result: ChainResult = pickle.load(f)
        finally:
            self.running = None
            job_path.unlink(missing_ok=True)
            result_path.unlink(missing_ok=True)
        self.jobs += 1
        self.tuples += job.tuples
        self.seconds += time.monotonic() - began
        return result

    def stop(self) -> None:
        """Stop the session (the replica ends); a session still starting is left to die
        with the process (its thread is a daemon)."""
        if self._ready.is_set() and self._session is not None:
            from .session import stop_session

            stop_session()


def _warm_task(batches: Iterator[Any]) -> Iterator[Any]:
    import pyarrow as pa

    for _ in batches:
        pass
    yield pa.RecordBatch.from_pydict({"tuples": [0]})


def _task(job_path: str, result_path: str, batches: Iterator[Any]) -> Iterator[Any]:
    """The Spark task: the job from its file, run here, its result to its file."""
    import pyarrow as pa

    for _ in batches:  # the one-row frame that makes the one task
        pass
    with open(job_path, "rb") as f:
        job: ChainJob = pickle.load(f)
    result = run_job(job)
    with open(result_path, "wb") as f:
        pickle.dump(result, f, protocol=5)
    yield pa.RecordBatch.from_pydict({"tuples": [job.tuples]})
