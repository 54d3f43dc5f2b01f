"""The query network: the DAG of operators inside one node, built from a :class:`NetworkSpec`.

Data path: a batch arriving on a node input stream goes to the SUnion(s) reading it; their
output flows through the operators in topological order, synchronously, until it reaches
the SOutputs, whose output is what leaves the node. Nothing is queued between calls, so the
network's state is exactly its operators' states (a checkpoint needs no queues).

Determinism (what keeps replicas identical):

* every stream entering the node goes through an SUnion, which orders its inputs;
* an operator with several inputs (a join, a union) must draw all of them from one and the
  same SUnion, and the network feeds such operators one SUnion bucket at a time (SUnion
  ends each bucket with a BOUNDARY; the network cuts its output there into *waves* and runs
  each wave through the whole downstream DAG before the next). Within a wave, operators run
  in a fixed topological order, so a multi-input operator always sees its ports' batches
  in the same order, whatever the timing of arrivals;
* every stream leaving the node ends in an SOutput.

Columns (issue 48). A node input's batch may be :class:`~protocol.columns.Columns`: its
SUnion keeps its STABLE runs as columns and releases such a bucket as one run of columns
(operators/sunion.py), one item of its output list among the boundary tuples. An operator
whose wave holds a run of columns runs over it vectorized (the replay's engine,
operators/vectorized/: Flow.from_items, run_step, and back with Flow.to_items) when the
wave is STABLE and typed and the operator untainted, and per tuple otherwise, with the
same output and state either way (``live_runs`` counts both). Outputs become tuples at the
end of each call unless ``columnar_outputs``.

The network is the runtime's only door into the operators: besides the data path
(``push``, ``on_timer``) and state (``snapshot``, ``restore``), it offers the edge
operations a node's reconciliation needs (SUnion modes, truncation after a checkpoint,
undo/redo's UNDO_START, checkpoint/redo's ``rewind`` and stepped ``replay``, the REC_DONE
that ends it) over the operators that implement them, found by type when the network is
built (operators/reconciliation.py), never by name or attribute.

Validation at build time names the operator and what is wrong: unknown operator type,
unknown stream, duplicate name, cycle, missing or mistyped parameter, unused operator.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from protocol.columns import Columns
from protocol.tuples import Kind, Schema, Tuple, make_tuple
from state.checkpoint import restore_checkpoint
from state.spill import NO_SPILL, Chunk, SpillStats, SpillStore

from .base import Operator, Plain
from .buckets import Released, Spiller
from .errors import Fallback, OperatorError, SpecError
from .reconciliation import OutputGuard, Rewindable, Serializer
from .registry import OPERATORS, create
from .spec import NetworkSpec
from .taxonomy import NetworkClass, RecoveryClass

if TYPE_CHECKING:  # (pyarrow: imported at the first vectorized replay)
    from .vectorized.engine import Stream
    from .vectorized.remote import ChainJob, ChainResult

__all__ = ["ENGINES", "NetworkOutput", "QueryNetwork", "network_class"]

_KIND = itemgetter(0)
#: How a reconciliation's replay runs the operators below an SUnion: ``inproc`` wave by
#: wave, per tuple; ``vectorized`` every wave of a replay step at once, over Arrow
#: (operators/vectorized/: the same output and state, per tuple where it cannot be exact);
#: ``spark`` the vectorized code in a Spark task (the runtime drives it through
#: :meth:`QueryNetwork.replay_remote`; :meth:`QueryNetwork.replay` runs it vectorized here).
ENGINES = ("inproc", "vectorized", "spark")
_SERIALIZER = "sunion"
#: The operators whose vectorized implementation runs live waves. The stateful ones (join,
#: aggregate) carry their state over from the per-tuple operator and back at every run
#: (operators/vectorized/join.py): worth it over a replay step's many waves, 3x slower
#: than per tuple over one live wave of a thousand tuples. They run per tuple until they
#: keep their state as columns (issue 48).
_LIVE_VECTORIZED = frozenset({"filter", "map", "union", "soutput"})
#: Below this many rows a wave runs per tuple: a vectorized run's fixed cost (flows
#: built, an Arrow call per column) was more than the wave's per-tuple work (about even
#: at 1,000 rows on this 2-core machine, under load: to be measured by dpc bench).
_LIVE_MIN_ROWS = 1000
_EXIT = "soutput"


@dataclass(slots=True)
class NetworkOutput:
    """What one call produced: tuples per output stream (with runs of columns among them
    where the network's ``columnar_outputs`` allows), and control signals (UP_FAILURE,
    REC_REQUEST) as ``(operator name, tuple)`` for the consistency manager."""

    outputs: dict[str, list[Tuple]] = field(default_factory=dict)
    signals: list[tuple[str, Tuple]] = field(default_factory=list)


class QueryNetwork:
    """A built, validated query network. Never called concurrently; no I/O; no clock."""

    def __init__(self, spec: NetworkSpec | Mapping[str, Any], *, undo_logs: bool = True) -> None:
        """``undo_logs=False``: no operator logs its input for undo/redo (fault tolerance
        off, for ``dpc bench overhead``); an UNDO reaching one then raises."""
        if not isinstance(spec, NetworkSpec):
            spec = NetworkSpec.from_dict(spec)
        self.spec = spec
        self.undo_logs = undo_logs
        order = _topological_order(spec)
        by_name = {o.name: o for o in spec.operators}
        schemas: dict[str, Schema] = dict(spec.inputs)
        self.operators: list[Operator] = []
        self._index: dict[str, int] = {}
        for name in order:
            o = by_name[name]
            op = create(o.type, o.name, [schemas[i] for i in o.inputs], o.params)
            op.keeps_undo_log = op.keeps_undo_log and undo_logs
            schemas[name] = op.output_schema
            self._index[name] = len(self.operators)
            self.operators.append(op)
        self.schemas = schemas
        self._parts = {op.name: op for op in self.operators}  # in topological order
        # consumers[stream] -> [(operator index, port)]
        self._consumers: dict[str, list[tuple[int, int]]] = {s: [] for s in schemas}
        for idx, op in enumerate(self.operators):
            for port, src in enumerate(by_name[op.name].inputs):
                self._consumers[src].append((idx, port))
        self.outputs: tuple[str, ...] = spec.outputs
        self._output_set = frozenset(spec.outputs)
        _validate_shape(spec, self.operators, self._consumers)
        # Cut serializer output into per-bucket waves only where some downstream operator
        # has several inputs (otherwise the cut changes nothing and costs a scan).
        multi = any(
            len(by_name[op.name].inputs) > 1 for op in self.operators if op.type_name != _SERIALIZER
        )
        self._split = [multi and op.type_name == _SERIALIZER for op in self.operators]
        # The reconciliation surface, by type (operators/reconciliation.py).
        self._serializers = [(i, op) for i, op in enumerate(self.operators)
                             if isinstance(op, Serializer)]
        self._guards = [(i, op) for i, op in enumerate(self.operators)
                        if isinstance(op, OutputGuard)]
        # Where UNDO_START enters, per SUnion: its first input (a node input stream).
        self._undo_streams = [by_name[op.name].inputs[0] for _, op in self._serializers]
        # Per operator, its input in the current pass: (port, batch); a batch is tuples, a
        # node input's columns, or tuples with runs of columns among them.
        self._pending: list[list[tuple[int, Any]]] = [[] for _ in self.operators]
        self._result = NetworkOutput()
        self._now = 0
        self._inputs = [by_name[op.name].inputs for op in self.operators]
        self.engine = "inproc"
        self._job_store: SpillStore | None = None
        self._job_chunks: list[Chunk] = []
        #: Operator runs of vectorized replays (an SUnion's release counts as one): how
        #: many were vectorized, how many per tuple (no vectorized implementation, or a
        #: step it could not compute exactly).
        self.replay_runs = {"vectorized": 0, "per_tuple": 0}
        #: Operator runs over live waves that held runs of columns: vectorized, or per
        #: tuple (the wave was tentative, mixed-typed, or the operator tainted or has no
        #: vectorized implementation).
        self.live_runs = {"vectorized": 0, "per_tuple": 0}
        #: Whether outputs may hold runs of columns (:class:`NetworkOutput`); False: they
        #: are made tuples at the end of every call (callers that read tuples).
        self.columnar_outputs = False
        #: The smallest wave of columns run vectorized (:data:`_LIVE_MIN_ROWS`).
        self.live_min_rows = _LIVE_MIN_ROWS
        self._serializer_at = [isinstance(op, Serializer) for op in self.operators]

    # ---------------------------------------------------------------- queries
    def operator(self, name: str) -> Operator:
        try:
            return self.operators[self._index[name]]
        except KeyError:
            raise OperatorError(f"query network has no operator '{name}'") from None

    def next_deadline(self) -> int | None:
        """The earliest ``now`` at which :meth:`on_timer` has work."""
        deadlines = [d for op in self.operators if (d := op.next_deadline()) is not None]
        return min(deadlines) if deadlines else None

    # ---------------------------------------------------------------- data path
    def push(self, stream: str, batch: Sequence[Tuple] | Columns, now: int = 0,
             arrived: int | None = None) -> NetworkOutput:
        """Feed a batch arriving on node input ``stream`` (tuples, or columns: see "Columns"
        in the module docstring); return what the node emits.
        ``arrived``: when the batch reached the node, if the node held it until ``now``
        (the SUnions time their delay from then: operators/sunion.py)."""
        consumers = self._consumers.get(stream)
        if consumers is None or stream not in self.spec.inputs:
            raise OperatorError(
                f"query network has no input stream '{stream}'; inputs: {', '.join(self.spec.inputs)}"
            )
        self._begin(now)
        if arrived is None:  # (the common case: nothing to tell the SUnions)
            self._enter(consumers, batch)
            return self._finish()
        serializers = self._serializers
        for _, s in serializers:
            s.arrived = arrived
        try:
            self._enter(consumers, batch)
        finally:
            for _, s in serializers:
                s.arrived = None
        return self._finish()

    def on_timer(self, now: int) -> NetworkOutput:
        """Let every operator whose deadline passed do its timed work (SUnion releases)."""
        self._begin(now)
        for idx, op in enumerate(self.operators):
            d = op.next_deadline()
            if d is not None and d <= now:
                self._emit(idx, op.on_timer(now))
        return self._finish()

    def inject(self, name: str, tuples: Sequence[Tuple], now: int = 0) -> NetworkOutput:
        """Route tuples as if operator ``name`` had produced them (e.g. SOutput's REC_DONE
        from ``end_reconciliation``, or SUnion replay output)."""
        self._begin(now)
        self._emit(self._index[name], list(tuples))
        return self._finish()

    # ---------------------------------------------------------------- state
    def number_after(self, base: int) -> None:
        """Every operator numbers its next outputs after ``base`` (at least): a process pair
        in amnesia whose secondary takes over starts a new range of ids, above every id its
        crashed primary sent (node/replica/runtime.py), so that downstream, which resumes
        by ids, takes its output as new."""
        for op in self.operators:
            op.last_id = max(op.last_id, base)

    def snapshot(self) -> dict[str, Plain]:
        """Every operator's snapshot, by name (plain data)."""
        return {op.name: op.snapshot() for op in self.operators}

    def checkpoint(self) -> dict[str, Plain]:
        """What checkpoint/redo needs to :meth:`rewind` to this point, by operator name:
        the snapshot of every operator, except that the operators that keep what recovery
        needs give only what their ``rewind`` reads (``Rewindable.rewind_point``). Not for
        :meth:`restore`: SUnion's buffered input is not in it."""
        return {op.name: op.rewind_point() if isinstance(op, Rewindable) else op.snapshot()
                for op in self.operators}

    def restore(self, snap: Mapping[str, Plain]) -> None:
        """Restore every operator from :meth:`snapshot` output (a fresh-instance restore).
        ``state.checkpoint.restore_checkpoint`` checks first that ``snap`` holds exactly
        this network's operators (CheckpointError, and nothing restored, otherwise)."""
        restore_checkpoint(self._parts, snap)

    def rewind(self, snap: Mapping[str, Plain], now: int = 0) -> NetworkOutput:
        """Checkpoint/redo: restore every operator from a checkpoint (:meth:`checkpoint`,
        or a whole :meth:`snapshot`), except that operators
        which keep what recovery needs ``rewind`` instead (SUnion keeps its corrected input
        buffer, SOutput its memory of what it emitted), then let every SUnion re-release its
        kept buckets through the network. Returns what the node emits (SOutput drops the
        replayed duplicates and emits the UNDO of the tentative suffix). The restore is
        ``state.checkpoint.restore_checkpoint``'s, with those operators' ``rewind``."""
        self._begin(now)
        rewind = {op.name: partial(self._rewind_one, idx, op)
                  for idx, op in enumerate(self.operators) if isinstance(op, Rewindable)}
        restore_checkpoint(self._parts, snap, rewind=rewind)
        self._replay(now)
        return self._finish()

    def _rewind_one(self, idx: int, op: Rewindable, snap: Plain) -> None:
        immediate = op.rewind(snap)
        if immediate:
            self._emit(idx, list(immediate))

    # ---------------------------------------------------------------- reconciliation
    def set_mode(self, mode: str) -> None:
        """Every SUnion's release mode during a failure episode ("process" or "delay")."""
        for _, s in self._serializers:
            s.set_mode(mode)

    def set_replay_step(self, step: int | None) -> None:
        """Buckets every SUnion re-releases per replay call (None: all at once)."""
        for _, s in self._serializers:
            s.replay_step = step

    def set_engine(self, engine: str) -> None:
        """How a reconciliation's replay runs (one of :data:`ENGINES`). A runtime setting:
        output and state are the same either way."""
        if engine not in ENGINES:
            raise OperatorError(f"unknown replay engine {engine!r}; known: {', '.join(ENGINES)}")
        self.engine = engine

    def set_spill(self, directory: str | os.PathLike[str] | None, memory: int = 0) -> None:
        """Keep at most ``memory`` bytes of what a reconciliation replays in memory, shared
        out evenly among the SUnions' kept input (operators/buckets.py) and the undo logs
        (undo/redo: operators/base.py), the rest in Arrow IPC segments under ``directory``;
        None: everything in memory (the segments written so far are read back and
        deleted)."""
        logging = [op for op in self.operators if op.keeps_undo_log and not op.preserves_ids]
        share = memory // max(1, len(self._serializers) + len(logging))
        path = None if directory is None else Path(directory)
        for _, s in self._serializers:
            s.set_spill(None if path is None
                        else Spiller(SpillStore(path / "input", s.name), share))
        for op in logging:
            op.set_log_spill(None if path is None else SpillStore(path / "undo", op.name), share)
        # A remote replay step's in-memory buckets, written for its job (replay_remote).
        if self._job_store is not None:
            self._job_store.close()
        self._job_store = None if path is None else SpillStore(path / "jobs", "release")

    def spill_stats(self) -> SpillStats:
        """What the SUnions keep on disk now (zero without :meth:`set_spill`)."""
        stats = [s.spiller.stats() for _, s in self._serializers if s.spiller is not None]
        stats += [op.log_spill[0].stats() for op in self.operators if op.log_spill is not None]
        return sum(stats, NO_SPILL)

    def kept_in_memory(self) -> tuple[int, int]:
        """(tuples kept in memory for a replay: the SUnions' kept input and the undo logs,
        their bound in tuples) under :meth:`set_spill` (a bound counts 0 until its holder
        kept a first tuple: it is worked out from that tuple's size); (0, 0) without."""
        spillers = [s.spiller for _, s in self._serializers if s.spiller is not None]
        logs = [m for op in self.operators if (m := op.log_memory()) is not None]
        return (sum(sp.mem for sp in spillers) + sum(m[0] for m in logs),
                sum(sp.limit or 0 for sp in spillers) + sum(m[1] for m in logs))

    def close_spill(self) -> None:
        """Delete every segment on disk without reading it back (the process ends)."""
        if self._job_store is not None:
            self._job_store.close()
        for _, s in self._serializers:
            if s.spiller is not None:
                s.spiller.store.close()
        for op in self.operators:
            if op.log_spill is not None:
                op.log_spill[0].close()

    def episode_may_begin(self, now: int, stream: str | None = None,
                          arrived: int | None = None) -> bool:
        """Whether the next call, at ``now``, may make some SUnion release the first
        tentative bucket of a failure episode: ``push`` of a batch on ``stream`` (that
        reached the node at ``arrived``), or ``on_timer`` (``stream`` None). Everything the network holds before such a call was
        released stable, so the node checkpoints then (ON_FAILURE checkpointing)."""
        if stream is None:
            return any(s.may_begin_episode(now, False) for _, s in self._serializers)
        ops = self.operators
        return any(
            isinstance(op := ops[idx], Serializer) and op.may_begin_episode(now, True, arrived)
            for idx, _ in self._consumers.get(stream, ())
        )

    def truncate(self) -> None:
        """The node just took a checkpoint: every SUnion drops the buckets released
        before it (a replay never goes back further)."""
        for _, s in self._serializers:
            s.truncate()

    def undo_start(self, now: int) -> NetworkOutput:
        """Undo/redo: UNDO_START into every SUnion, each through its first input stream
        (every reader of that stream gets it), in topological order; the SUnions in a
        failure episode emit the UNDO of their tentative suffix and begin their replay."""
        self._begin(now)
        start = make_tuple(Kind.UNDO_START, 0, now, now, ())
        for stream in self._undo_streams:
            self._enter(self._consumers[stream], [start])
        return self._finish()

    def replay(self, now: int) -> NetworkOutput:
        """One more step of a reconciliation's replay (SUnion's ``replay_step``): every
        SUnion re-releases what it may this call."""
        self._begin(now)
        self._replay(now)
        return self._finish()

    def end_reconciliation(self, now: int) -> NetworkOutput:
        """The node's reconciliation completed: every SOutput whose stream is reconciling
        emits its REC_DONE."""
        self._begin(now)
        for idx, g in self._guards:
            done = g.end_reconciliation(now)
            if done:
                self._emit(idx, done)
        return self._finish()

    @property
    def replaying(self) -> bool:
        """True while some SUnion's replay has not reached its end."""
        return any(s.replaying for _, s in self._serializers)

    def replay_progress(self) -> tuple[int, int]:
        """(input tuples re-released, to re-release) of the current or last replay,
        summed over the SUnions."""
        progress = [s.replay_progress for _, s in self._serializers]
        return sum(p[0] for p in progress), sum(p[1] for p in progress)

    def caught_up(self) -> bool:
        """Every SOutput is past the duplicates of the last rewind's replay."""
        return not any(g.dropping_duplicates for _, g in self._guards)

    @property
    def in_failure(self) -> bool:
        """Some SUnion is in a failure episode (it released tentative tuples)."""
        return any(s.in_failure for _, s in self._serializers)

    @property
    def released_to(self) -> int | None:
        """The tuple time before which every SUnion released every bucket (None: the
        network has no SUnion)."""
        return min((s.released_to for _, s in self._serializers), default=None)

    @property
    def buffered(self) -> int:
        """Input tuples the SUnions hold, pending or kept for a replay."""
        return sum(s.buffered for _, s in self._serializers)

    @property
    def late_dropped(self) -> int:
        """Input tuples the SUnions dropped behind a boundary already promised."""
        return sum(s.late_dropped for _, s in self._serializers)

    def digest_states(self) -> dict[str, Plain]:
        """The state replicas must agree on, by operator (``digest_state``). SUnions are
        left out: their buffers hold arrival times, which differ between replicas."""
        return {op.name: op.digest_state() for op in self.operators
                if not isinstance(op, Serializer)}

    def _replay(self, now: int) -> None:
        for idx, s in self._serializers:
            if self.engine != "inproc" and self._vectorizable(idx):
                self._replay_vectorized(idx, *s.replay_released(now))
            else:
                self._emit(idx, s.replay(now))

    def _vectorizable(self, idx: int) -> bool:
        """No other SUnion below SUnion ``idx``: its waves would be cut again."""
        below = {self.operators[idx].name}
        for c in range(idx + 1, len(self.operators)):
            if any(i in below for i in self._inputs[c]):
                if isinstance(self.operators[c], Serializer):
                    return False
                below.add(self.operators[c].name)
        return True

    def _replay_vectorized(self, idx: int, released: list[Tuple], runs: list[Released]
                           ) -> None:
        """What ``_emit`` does with a replay step's release, every wave at once: the
        release is built as columns (spilled buckets straight from disk), and each operator
        below the SUnion runs once over all the waves (operators/vectorized/)."""
        # pyarrow: imported at the first vectorized replay, not with the network
        from .vectorized.release import released_streams

        sunion = self.operators[idx]
        self._drain_signals(sunion)
        for head in released_streams(sunion.output_schema, released, runs):
            self.replay_runs["vectorized" if head.vectorized else "per_tuple"] += 1
            self._run_below(idx, {sunion.name: head}, guards=True)

    def _run_below(self, idx: int, streams: dict[str, Stream], guards: bool) -> None:
        """Every operator below SUnion ``idx`` with an input in ``streams`` (a stream per
        name, extended with each one's output) runs once over its step's streams, in
        topological order; SOutputs only if ``guards`` (a remote replay runs them where
        the node's output buffers are: :meth:`finish_remote`)."""
        from .vectorized.engine import Stream, run_step

        for c in range(idx + 1, len(self.operators)):
            inputs = self._inputs[c]
            op = self.operators[c]
            if not any(i in streams for i in inputs) or (
                    not guards and isinstance(op, OutputGuard)):
                continue
            step = [streams.get(i) or Stream(self.schemas[i], batches=[]) for i in inputs]
            streams[op.name] = out = run_step(op, step, self._port_order(c), self._now)
            self.replay_runs["vectorized" if out.vectorized else "per_tuple"] += 1
            self._drain_signals(op)
            if op.name in self._output_set:
                self._result.outputs[op.name].extend(out.tuples())

    # ------------------------------------------------------- replay elsewhere (Spark)
    def replay_remote(self, now: int) -> tuple[NetworkOutput, list[ChainJob]]:
        """One replay step whose operator runs below each SUnion go elsewhere (a Spark
        task: node/spark/): every SUnion re-releases what it may, as :meth:`replay` does;
        what a SUnion with another below it releases runs here (its output is returned
        now), every other's becomes a :class:`~operators.vectorized.remote.ChainJob`: the
        operators below it (SOutputs excepted) by spec and snapshot, and the release (its
        spilled chunks by path). Pass the jobs' results to :meth:`finish_remote`; nothing
        else may run the network in between (the manager's input gate holds new input)."""
        from .vectorized.remote import ChainJob

        self._begin(now)
        jobs: list[ChainJob] = []
        for idx, s in self._serializers:
            if not self._vectorizable(idx):
                self._emit(idx, s.replay(now))
                continue
            released, runs = s.replay_released(now)
            self._drain_signals(s)
            below = [op.name for c, op in enumerate(self.operators)
                     if c > idx and self._below(idx, c) and not isinstance(op, OutputGuard)]
            jobs.append(ChainJob.of(self.spec, self.undo_logs, s.name, below,
                                    {n: self.operator(n).snapshot() for n in below},
                                    released, runs, now, self._job_store, self._job_chunks))
        return self._finish(), jobs

    def finish_remote(self, jobs: Sequence[ChainJob], results: Sequence[ChainResult],
                      now: int) -> NetworkOutput:
        """The replay step of :meth:`replay_remote` with its jobs' results: each
        operator that ran elsewhere takes its state from there, and the SOutputs below
        run here over the streams the job gave back."""
        self._begin(now)
        if self._job_store is not None:  # the jobs' own segments: read, not needed now
            for chunk in self._job_chunks:
                self._job_store.release(chunk)
        self._job_chunks.clear()
        for job, result in zip(jobs, results, strict=True):
            for name, snap in result.snapshots.items():
                op = self.operator(name)
                op.restore(snap)
                op.now = now
            for k, n in result.runs.items():
                self.replay_runs[k] += n
            self._result.signals.extend(result.signals)
            idx = self._index[job.serializer]
            for part in result.parts:  # (in order: each is a run of the step's waves)
                self._run_below(idx, dict(part), guards=True)
        return self._finish()

    def replay_elsewhere(self, now: int,
                         run: Callable[[list[ChainJob]], Sequence[ChainResult]]
                         ) -> NetworkOutput:
        """One replay step whose jobs ``run`` runs and waits for: :meth:`replay_remote`,
        ``run``, :meth:`finish_remote`, their outputs in that order. For callers that may
        block (a bench, tests); the replica's manager awaits the jobs in a worker thread
        between the two calls instead."""
        out, jobs = self.replay_remote(now)
        rest = self.finish_remote(jobs, run(jobs), now)
        for name, tuples in rest.outputs.items():
            out.outputs.setdefault(name, []).extend(tuples)
        out.signals += rest.signals
        return out

    def run_job(self, job: ChainJob) -> ChainResult:
        """Where a :class:`~operators.vectorized.remote.ChainJob` runs (a fresh network of
        the node's spec, in a Spark task): its operators from their snapshots, the release
        as a flow from the segments, and ``_run_below`` over it, as in-process."""
        from .vectorized.release import released_streams
        from .vectorized.remote import ChainResult

        for name in job.names:
            self.operator(name).restore(job.snapshots[name])
        idx = self._index[job.serializer]
        sunion = self.operators[idx]
        # What the SOutputs below read: the node runs them (finish_remote).
        wanted = {i for c in range(idx + 1, len(self.operators))
                  if self.operators[c].name not in job.names and self._below(idx, c)
                  for i in self._inputs[c]}
        self._begin(job.now)
        parts = []
        for head in released_streams(sunion.output_schema, job.released, job.runs):
            self.replay_runs["vectorized" if head.vectorized else "per_tuple"] += 1
            streams = {sunion.name: head}
            self._run_below(idx, streams, guards=False)
            parts.append({n: s for n, s in streams.items() if n in wanted})
        out = self._finish()
        return ChainResult(parts, {n: self.operator(n).snapshot() for n in job.names},
                           dict(self.replay_runs), list(out.signals))

    def _below(self, idx: int, c: int) -> bool:
        """Whether operator ``c`` reads (through others) from operator ``idx``."""
        seen, todo = set(), [self.operators[c].name]
        target = self.operators[idx].name
        while todo:
            name = todo.pop()
            if name == target:
                return True
            if name in seen or name not in self._index:
                continue
            seen.add(name)
            todo += self._inputs[self._index[name]]
        return False

    def _port_order(self, c: int) -> list[int]:
        """The order in which operator ``c``'s ports get their batches within a wave: by
        producer (topological order), then by the producer's list of consumers."""
        def key(port: int) -> tuple[int, int]:
            src = self._inputs[c][port]
            producer = self._index.get(src, -1)
            return producer, self._consumers[src].index((c, port))
        return sorted(range(len(self._inputs[c])), key=key)

    def _drain_signals(self, op: Operator) -> None:
        if op.signals:
            self._result.signals.extend((op.name, s) for s in op.signals)
            op.signals.clear()

    # ---------------------------------------------------------------- internals
    def _begin(self, now: int) -> None:
        self._now = now
        self._result = NetworkOutput({s: [] for s in self.outputs})

    def _finish(self) -> NetworkOutput:
        result = self._result
        self._result = NetworkOutput()
        if not self.columnar_outputs:
            for name, items in result.outputs.items():
                if _has_columns(items):
                    result.outputs[name] = _tuples(items)
        return result

    def _enter(self, consumers: list[tuple[int, int]], batch: Sequence[Tuple] | Columns) -> None:
        """A batch on a node input stream: queue it for its readers, then run from the
        first of them."""
        first = len(self.operators)
        for idx, port in consumers:
            self._pending[idx].append((port, batch))
            first = min(first, idx)
        self._run(first)

    def _run(self, start: int) -> None:
        """One topological pass from ``start``: every operator with pending input runs."""
        ops, pending, now = self.operators, self._pending, self._now
        for idx in range(start, len(ops)):
            todo = pending[idx]
            if not todo:
                continue
            pending[idx] = []
            op = ops[idx]
            out: list[Any] = []
            if self._serializer_at[idx] or not any(_has_columns(b) for _, b in todo):
                for port, batch in todo:
                    out.extend(op.process(port, batch, now))
            else:
                out = self._run_columns(idx, op, todo)
            # Routes only; this loop runs the consumers next (a splitting SUnion's _emit
            # runs the downstream passes itself, wave by wave).
            self._emit(idx, out, run_downstream=False)

    def _run_columns(self, idx: int, op: Operator, todo: list[tuple[int, Sequence[Any]]]
                     ) -> list[Any]:
        """One operator over a wave that holds runs of columns (a SUnion released a bucket
        as columns): its vectorized implementation over the wave's flows where it has one
        and the wave allows it (STABLE, typed, the operator untainted: the replay's engine,
        operators/vectorized/, held equal to the per-tuple operators by the conformance
        tests), else per tuple. The output keeps runs of columns where it can."""
        from .vectorized.engine import Stream, run_step
        from .vectorized.flow import Flow

        inputs = self._inputs[idx]
        by_port: list[list[Any]] = [[] for _ in inputs]
        for port, batch in todo:
            by_port[port].extend(batch)
        rows = sum(len(x) for items in by_port for x in items if type(x) is Columns)
        if op.type_name in _LIVE_VECTORIZED and not op.tainted and rows >= self.live_min_rows:
            try:
                streams = [Stream(self.schemas[src], flow=Flow.from_items(self.schemas[src], items))
                           for src, items in zip(inputs, by_port, strict=True)]
            except Fallback:
                pass
            else:
                result = run_step(op, streams, self._port_order(idx), self._now)
                self.live_runs["vectorized" if result.vectorized else "per_tuple"] += 1
                return result.flow().to_items() if result.vectorized else result.tuples()
        self.live_runs["per_tuple"] += 1
        out: list[Tuple] = []
        for port, batch in todo:
            out.extend(op.process(port, _tuples(batch), self._now))
        return out

    def _emit(self, idx: int, out: list[Any], run_downstream: bool = True) -> None:
        """Route an operator's output (and drain its signals)."""
        self._drain_signals(self.operators[idx])
        if not out:
            return
        if self._split[idx]:
            # Cut after each BOUNDARY, found by list.index over the kinds (a C scan: a
            # release is thousands of tuples and a handful of boundaries; a run of
            # columns is one item, never a boundary).
            kinds = (list(map(_KIND, out)) if not _has_columns(out)
                     else [None if type(x) is Columns else x[0] for x in out])
            start = 0
            while True:
                try:
                    k = kinds.index(Kind.BOUNDARY, start)
                except ValueError:
                    break
                self._route(idx, out[start : k + 1])
                self._run(idx + 1)
                start = k + 1
            if start < len(out):
                self._route(idx, out[start:])
                self._run(idx + 1)
            return
        self._route(idx, out)
        if run_downstream:
            self._run(idx + 1)

    def _route(self, idx: int, out: list[Any]) -> None:
        name = self.operators[idx].name
        for c_idx, c_port in self._consumers[name]:
            self._pending[c_idx].append((c_port, out))
        if name in self._output_set:
            self._result.outputs[name].extend(out)


def _has_columns(items: Sequence[Any] | Columns) -> bool:
    return isinstance(items, Columns) or Columns in set(map(type, items))


def _tuples(items: Sequence[Any] | Columns) -> list[Tuple]:
    """A batch whose runs of columns are made tuples, in place."""
    if isinstance(items, Columns):
        return items.to_tuples()
    out: list[Tuple] = []
    for x in items:
        if type(x) is Columns:
            out += x.to_tuples()
        else:
            out.append(x)
    return out


def _topological_order(spec: NetworkSpec) -> list[str]:
    names: dict[str, str] = {}
    for o in spec.operators:
        if o.name in names or o.name in spec.inputs:
            raise SpecError(f"operator '{o.name}': the name is used twice (streams and operators share names)")
        names[o.name] = o.type
    known = set(spec.inputs) | set(names)
    for o in spec.operators:
        if not o.inputs:
            raise SpecError(f"operator '{o.name}': 'inputs' is empty")
        for i in o.inputs:
            if i not in known:
                raise SpecError(
                    f"operator '{o.name}': unknown input stream '{i}'; known streams: "
                    + ", ".join(sorted(known))
                )
    deps = {o.name: [i for i in o.inputs if i in names] for o in spec.operators}
    order: list[str] = []
    state: dict[str, int] = {}  # 1 = visiting, 2 = done

    def visit(n: str, path: list[str]) -> None:
        if state.get(n) == 2:
            return
        if state.get(n) == 1:
            cycle = [*path[path.index(n) :], n]
            raise SpecError("query network has a cycle: " + " -> ".join(cycle))
        state[n] = 1
        for d in deps[n]:
            visit(d, [*path, n])
        state[n] = 2
        order.append(n)

    for o in spec.operators:  # spec order breaks ties, so the order is deterministic
        visit(o.name, [])
    return order


def network_class(spec: NetworkSpec) -> NetworkClass:
    """The spec's class in the taxonomy of Hwang et al. (operators/taxonomy.py): its most
    general operator's, the first of those in the spec's order naming it. Reads the
    registered classes only: the spec is not built (an unknown type counts as arbitrary;
    building the network is what refuses it)."""
    worst, culprit = RecoveryClass.REPEATABLE, None
    for o in spec.operators:
        cls = OPERATORS.get(o.type)
        c = cls.recovery_class if cls is not None else RecoveryClass.ARBITRARY
        if c > worst:
            worst, culprit = c, o
    if culprit is None:
        return NetworkClass(worst, None, "every operator is repeatable")
    return NetworkClass(worst, culprit.name, f"{culprit.type} '{culprit.name}' is {worst.label}")


def _validate_shape(
    spec: NetworkSpec, ops: list[Operator], consumers: Mapping[str, list[tuple[int, int]]]
) -> None:
    by_name = {o.name: o for o in spec.operators}
    for stream in spec.inputs:
        for idx, _ in consumers[stream]:
            op = ops[idx]
            if op.type_name != _SERIALIZER:
                raise SpecError(
                    f"operator '{op.name}' ({op.type_name}) reads node input stream '{stream}' "
                    "directly; every stream entering a node must go through an sunion"
                )
    if not spec.outputs:
        raise SpecError("query network: 'outputs' is empty")
    for out in spec.outputs:
        if out not in by_name:
            raise SpecError(f"query network: output '{out}' is not an operator")
        if by_name[out].type != _EXIT:
            raise SpecError(
                f"query network: output '{out}' is a {by_name[out].type}; every stream leaving "
                "a node must end in an soutput"
            )
    for op in ops:
        if not consumers[op.name] and op.name not in spec.outputs:
            raise SpecError(f"operator '{op.name}': its output is used by nothing")
    # Serializer ancestry: which SUnions order each stream.
    serializers: dict[str, frozenset[str]] = {s: frozenset() for s in spec.inputs}
    for op in ops:
        o = by_name[op.name]
        if op.type_name == _SERIALIZER:
            serializers[op.name] = frozenset({op.name})
            continue
        ancestry = frozenset().union(*(serializers[i] for i in o.inputs))
        if len(o.inputs) > 1 and len(ancestry) != 1:
            raise SpecError(
                f"operator '{op.name}' ({op.type_name}) merges inputs ordered by "
                f"{len(ancestry)} different sunions ({', '.join(sorted(ancestry)) or 'none'}); "
                "a multi-input operator must draw all its inputs from one sunion, or replicas "
                "could see them in different orders"
            )
        serializers[op.name] = ancestry
