"""A replay step's operator runs below one SUnion, packed to run in another process.

Role: what a Spark task runs (node/spark/replay.py submits it). The node's network does the
step's SUnion bookkeeping itself (``QueryNetwork.replay_remote``) and packs the rest as a
:class:`ChainJob`: the network's spec, the names of the operators below the SUnion (its
SOutputs excepted: they feed the node's output buffers, so they run at home), each one's
``snapshot()``, and the SUnion's release (boundaries, and per bucket where its tuples are:
in-memory lists, or spilled chunks by file path, read where the job runs). :func:`run_job`
builds the same network there, restores those snapshots, builds the release as a flow
straight from the segments and runs the very code of the in-process vectorized replay
(``QueryNetwork._run_below``), then gives back a :class:`ChainResult`: the streams the
SOutputs read and each operator's snapshot after the step, which the node restores
(``QueryNetwork.finish_remote``). ``restore(snapshot())`` preserves future behaviour
(operators/base.py, held by the conformance suite), so the node's operators end exactly as
an in-process replay leaves them: the same output and state whichever engine ran.

Both are pickled (protocol 5): a job holds only plain data, tuples and detached chunks; a
result holds Arrow tables. Files, not Spark's RPC, carry them (node/spark/replay.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from operators.base import Plain
from operators.buckets import Released
from operators.errors import OperatorError
from operators.spec import NetworkSpec
from protocol.tuples import Tuple
from state.spill import Chunk, SegmentReader, SpillStore

from .engine import Stream

__all__ = ["ChainJob", "ChainResult", "run_job"]


@dataclass(frozen=True)
class ChainJob:
    """One SUnion's replay step, below it: see the module docstring."""

    spec: NetworkSpec
    undo_logs: bool
    serializer: str
    names: tuple[str, ...]
    snapshots: dict[str, Plain]
    released: list[Tuple]
    runs: list[Released]
    now: int

    @classmethod
    def of(cls, spec: NetworkSpec, undo_logs: bool, serializer: str, names: Sequence[str],
           snapshots: dict[str, Plain], released: list[Tuple], runs: Sequence[Released],
           now: int, store: SpillStore | None = None,
           written: list[Chunk] | None = None) -> ChainJob:
        """The job, its spilled chunks detached from the node's stores (by path). With a
        ``store``, the buckets' in-memory tuples are written there first, one segment
        (their chunks appended to ``written``: the caller releases them once the job ran),
        so the job carries no tuple: pickling a million of them cost seconds each way,
        writing them as Arrow a fraction of that, and the task reads them as columns."""
        if store is not None:
            runs = _written(runs, store, [] if written is None else written)
        reader = SegmentReader(serializer)  # one for the job: a segment mapped once there
        return cls(spec, undo_logs, serializer, tuple(names), snapshots, list(released),
                   [_detached(r, reader) for r in runs], now)

    @property
    def tuples(self) -> int:
        """Input tuples the job replays (for progress and logs)."""
        return sum(src.length if isinstance(src, Chunk) else len(src)
                   for r in self.runs for sources in r.ports for src in sources)


@dataclass(frozen=True)
class ChainResult:
    """What :func:`run_job` gives back: the output streams of the operators the node's
    SOutputs read (by name), per part of the step (``release.released_streams``: its
    stable head, then what followed), every operator's snapshot after the step, the
    operator runs (vectorized / per tuple) and the signals the operators raised."""

    parts: list[dict[str, Stream]]
    snapshots: dict[str, Plain]
    runs: dict[str, int]
    signals: list[tuple[str, Tuple]]


def run_job(job: ChainJob) -> ChainResult:
    """Run ``job`` here (in a Spark task): see the module docstring."""
    from operators.network import QueryNetwork  # (not at import: the network imports us)

    return QueryNetwork(job.spec, undo_logs=job.undo_logs).run_job(job)


def _written(runs: Sequence[Released], store: SpillStore, written: list[Chunk]
             ) -> list[Released]:
    """``runs`` with every non-empty in-memory list replaced by its chunk in ``store``."""
    lists = [src for r in runs for sources in r.ports for src in sources
             if isinstance(src, list) and src]
    if not lists:
        return list(runs)
    chunks = iter(store.write(lists))
    out_runs = []
    for r in runs:
        ports: list[list[Chunk | list[Tuple]]] = []
        for sources in r.ports:
            port: list[Chunk | list[Tuple]] = []
            for src in sources:
                if isinstance(src, list) and src:
                    chunk = next(chunks)
                    written.append(chunk)
                    port.append(chunk)
                elif isinstance(src, Chunk) or src:
                    port.append(src)
            ports.append(port)
        out_runs.append(Released(r.at, r.first_id, ports, r.store or store))
    return out_runs


def _detached(r: Released, reader: SegmentReader) -> Released:
    chunks = [src for sources in r.ports for src in sources if isinstance(src, Chunk)]
    if not chunks:
        return Released(r.at, r.first_id, r.ports, None)
    if not isinstance(r.store, SpillStore):
        raise OperatorError("a released bucket holds spilled tuples but no spill store")
    store = r.store
    # (a chunk's segment knows its path: detaching needs a store only to check it is held)
    ports = [[store.detached(src) if isinstance(src, Chunk) else src for src in sources]
             for sources in r.ports]
    return Released(r.at, r.first_id, ports, reader)
