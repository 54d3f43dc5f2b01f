"""The vectorized operators: the relational operators over Arrow record batches (issue 17).

A second implementation of the operators of :mod:`operators` for bulk work (a replay after
a long failure, in-process or inside Spark tasks), held by tests to produce the same
tuples, bit for bit, as the per-tuple one (DESIGN.md 3: one contract, two
implementations). Not imported by :mod:`operators` (it loads pyarrow: a replica starts
without it, tests/node/procs/test_startup.py).

| module | role |
|---|---|
| ``expr.py`` | ``filter`` / ``map`` expressions as pyarrow compute, exact or not at all: a batch the translation cannot compute with Python's result falls back to the operators' compiled Python |
"""
