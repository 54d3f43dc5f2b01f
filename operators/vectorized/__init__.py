"""The vectorized operators: the relational operators over Arrow record batches (issue 17).

A second implementation of the operators of :mod:`operators` for bulk work (a replay after
a long failure, in-process or inside Spark tasks), held by tests to produce the same
tuples, bit for bit, as the per-tuple one (DESIGN.md 3: one contract, two
implementations). Not imported by :mod:`operators` (it loads pyarrow: a replica starts
without it, tests/node/procs/test_startup.py).

| module | role |
|---|---|
| ``expr.py`` | ``filter`` / ``map`` expressions as pyarrow compute, exact or not at all: a batch the translation cannot compute with Python's result falls back to the operators' compiled Python |
| ``flow.py`` | a stream's tuples over several waves of a replay: one Arrow table and its boundaries (``Flow``, ``Mark``) |
| ``entries.py`` | the order a multi-input operator processes its flows in, and the undo log it has after them |
| ``stateless.py`` | ``filter`` and ``map`` over a flow |
| ``join.py`` | the band join over flows: its pairs found once per step, from a grid of band-wide time cells per key (a sort-merge where the grid would be too large); its state and undo log worked out |
| ``union.py`` | ``union`` over flows: every input's rows renumbered in processing order |
| ``soutput.py`` | the output guard over a flow: after a checkpoint rewind, the replayed duplicates dropped and the UNDO placed where the per-tuple SOutput puts it |
| ``aggregate.py`` | the windowed ``aggregate`` over a flow: two exact vectorized folds, rows into (pane, group) accumulators in arrival order, then each closing window's panes in pane order |
| ``release.py`` | SUnion's release of a replay step as a flow, spilled buckets straight from their Arrow segments |
| ``engine.py`` | one operator over a step: vectorized, or per tuple wave by wave where it cannot be exact |
"""
