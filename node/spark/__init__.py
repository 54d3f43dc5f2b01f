"""Spark in a node's process: the session (and the Java check before it) and the replay engine
that runs a reconciliation's operator runs in Spark tasks (issue 17).

| module | role |
|---|---|
| ``session.py`` | ``java_problem()``; the process's one Spark session (``dpc reconcile`` uses it too) |
| ``replay.py`` | ``SparkReplayer``: the session started ahead of need in a thread; replay jobs run as Spark tasks over the spilled segments |

Neither is imported by the replica unless its replay engine may be ``spark``: pyspark loads
in seconds and the replica starts without it (tests/node/procs/test_startup.py).
"""
