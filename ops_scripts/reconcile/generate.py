"""A generator of large, consistent run directories (``dpc generate-run``; issue 16).

Role: the input of ``dpc bench reconcile`` (``ops_scripts/bench/reconcile.py``) and of
tests that need a run far larger than a real ``dpc run`` or ``dpc simulate`` makes in
their time. :func:`generate_run` writes a run directory (layout: ``node/procs/rundir.py``)
that ``dpc check`` and ``dpc reconcile`` both call valid, of about ``tuples`` *logged
tuples*: the rows of every source log plus every row of every client and replica tuple
log (data and control tuples alike: what ``dpc reconcile`` ingests as its ``sources`` and
``logs`` tables).

Theory of operation. Tuple time runs from :data:`T0`. Each source (synthetic and paced by
the wall clock: ``generator = "synthetic"``, no ``time_column``) draws its values with its
own generator (``node/procs/generators.py``) and stamps tuple n with the instant it is due
at its rate (``node/procs/pacing.py`` ``RatePace``). One second of tuple time at a time,
every source's tuples of that second, with a BOUNDARY at each multiple of its
``boundary_interval``, are logged (Arrow IPC, a batch per second) and pushed through every
node's query network, the operators themselves, failure-free (every SUnion's wait never
expires, as ``ops_scripts/check/reference.py`` sets it), nodes in config order, each
node's output feeding the nodes reading it. Boundaries close SUnion buckets exactly as the
end-of-stream boundary of the reference run does, so the STABLE tuples emitted equal
``reference_outputs`` of the same source logs (a test holds them equal). The sources then
end their streams (end records, reason ``request``) and END_OF_STREAM flushes the last
windows. Only a second of input, the operators' windows and one failure's worth of output
are ever in memory: SUnion's replay buckets are truncated after every second.

Each output stream is written to every replica of its node and to every client reading
it, as what they emitted / received, with arrival times: a tuple leaves at ``max(previous
arrival, tmax + bucket + 5 ms)`` (a boundary: its time for tmax), and reaches a client
1 ms later; the tuples leaving at one instant are one write (``node/procs/runlog.py``). ``failures`` episodes are spread over the run: a source feeding the client's
node is cut off from that node's replicas (a ``partition`` of shape ``source`` in the
history, its heal, the replicas' UP_FAILURE / STABILIZATION / STABLE states) for
``alpha*X + 2 s``. On every stream of a node downstream of the cut source, the results
whose tmax falls in the failure come first as a *tentative* stretch (a seeded subset of
them, numbered on from the last stable id ``u``, each arriving ``alpha*X`` plus a little
after its tmax: SUnion's hold), then, at the heal, ``UNDO(u)``, the stable results again
with their own ids, and REC_DONE (``protocol/undo_rule.py``: the UNDO takes back the
tentative stretch only). Every new result arrives within ``k*X`` of its tmax, so the
availability verdicts hold; the history's ``end`` comes after the liveness deadline
(``ops_scripts/check/liveness.py``) so that liveness is judged, and valid.

Invariants: the run directory is new or empty (never overwritten); every file is written
as a stream (no log is held whole); the same config, size, seed and failures give the
same bytes.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from node.config.load import load_config
from node.config.model import ClusterConfig, NodeConfig, SourceConfig
from node.procs.generators import arrow_types, make_generator
from node.procs.pacing import RatePace, next_multiple
from node.procs.rundir import RunDir, write_source_end
from node.procs.runlog import RunLogWriter
from operators.network import QueryNetwork
from ops_scripts.check.availability import bound_for
from ops_scripts.check.liveness import node_bounds
from ops_scripts.check.reference import END_OF_STREAM, failure_free
from ops_scripts.errors import GenerateError
from ops_scripts.harness.history import fault_effects
from ops_scripts.harness.schedule import Fault
from protocol.columns import Columns
from protocol.tuples import Kind, Tuple, boundary, make_tuple, rec_done, undo
from state.tuplelog import TupleLogWriter

__all__ = ["DEFAULT_CONFIG", "T0", "Generated", "generate_run"]

#: The config a generated run uses unless told otherwise (the paper's basic setup).
DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "examples" / "basic.toml"
#: Tuple time of the run's start (µs), as the simulation's clock starts.
T0 = 1_700_000_000_000_000
US = 1_000_000
#: Tuple time generated per step: one batch per source log, one push per input stream.
STEP = US
#: A replica emits a result this long after its bucket's end (the boundary's trip).
EMIT_SLACK = 5_000
#: A client receives what a replica emitted this much later (one loopback hop).
HOP = 1_000
#: How long the calibration run is (tuple-time seconds), to size the real one.
CALIBRATION_S = 5
#: A failure lasts alpha*X and this much more, so that tentative results come out.
FAILURE_EXTRA = 2 * US
#: The share of the results in a failure that come out in the tentative stretch.
TENTATIVE_SHARE = 0.7


@dataclass
class Generated:
    """What :func:`generate_run` wrote: ``logged`` = ``source_rows`` + ``log_rows``."""

    run_dir: Path
    seconds: float  # tuple-time seconds the sources ran
    source_rows: int
    log_rows: int  # client and replica log rows
    tentative: int  # tentative rows, over every log
    failures: int
    wall_seconds: float
    per_log: dict[str, int] = field(default_factory=dict)  # relative path -> rows

    @property
    def logged(self) -> int:
        return self.source_rows + self.log_rows


@dataclass(frozen=True, slots=True)
class _Failure:
    start: int  # tuple time of the cut
    heal: int
    source: str
    node: str


# ---------------------------------------------------------------- the failure-free run
def _check_config(config: ClusterConfig) -> None:
    for src in config.sources.values():
        if src.generator != "synthetic" or src.time_column is not None or src.rate <= 0:
            raise GenerateError(f"source {src.name!r}: only synthetic sources paced by a rate "
                                f"are generated (generator {src.generator!r}, time_column "
                                f"{src.time_column!r}, rate {src.rate})")
    if not config.clients:
        raise GenerateError(f"{config.path}: no client: nothing reads an output stream")


class _Sources:
    """Every source's tuples, a step of tuple time at a time (ids 1, 2, ... in order)."""

    def __init__(self, config: ClusterConfig) -> None:
        self.srcs = list(config.sources.values())
        self._values = {s.name: make_generator(s) for s in self.srcs}
        self._pace = {s.name: RatePace(T0, s.rate) for s in self.srcs}
        self.produced = dict.fromkeys(config.sources, 0)

    def step(self, end: int) -> dict[str, list[Tuple]]:
        """The tuples due before ``end``, per source."""
        out: dict[str, list[Tuple]] = {}
        for s in self.srcs:
            pace, values, n = self._pace[s.name], self._values[s.name], self.produced[s.name]
            got = []
            while (t := pace.due_at(n + 1)) < end:
                n += 1
                got.append(make_tuple(Kind.STABLE, n, t, t, next(values)))
            self.produced[s.name] = n
            out[s.name] = got
        return out


def _with_boundaries(src: SourceConfig, tuples: list[Tuple], start: int, end: int) -> list[Tuple]:
    """``tuples`` (times in ``[start, end)``) with the BOUNDARY a source sends at every
    multiple of its interval in ``(start, end]``, each after the tuples before it."""
    out: list[Tuple] = []
    i, step = 0, src.boundary_interval
    b = next_multiple(start, step)
    while b <= end:
        while i < len(tuples) and tuples[i][2] < b:
            out.append(tuples[i])
            i += 1
        out.append(boundary(b))
        b += step
    out.extend(tuples[i:])
    return out


def _stream(config: ClusterConfig, seconds: int) -> Iterator[tuple[dict[str, list[Tuple]],
                                                                  dict[str, list[Tuple]]]]:
    """Per step: (source -> its tuples, node output stream -> what its SOutput emitted);
    after the last step, ``({}, the outputs of END_OF_STREAM)``."""
    sources = _Sources(config)
    nets = {n.name: QueryNetwork(failure_free(n.network), undo_logs=False)
            for n in config.nodes.values()}

    def run(feeds: Mapping[str, list[Tuple]]) -> dict[str, list[Tuple]]:
        streams = dict(feeds)
        produced: dict[str, list[Tuple]] = {}
        for node in config.nodes.values():
            net = nets[node.name]
            by_op: dict[str, list[Tuple]] = {op: [] for op in node.outputs.values()}
            for stream in node.network.inputs:
                for op, tuples in net.push(stream, streams[stream], 0).outputs.items():
                    if op in by_op:
                        by_op[op].extend(tuples)
            net.truncate()  # nothing is ever replayed: SUnion's replay buckets can go
            for global_name, op in node.outputs.items():
                produced[global_name] = streams[global_name] = by_op[op]
        return produced

    for k in range(seconds):
        start, end = T0 + k * STEP, T0 + (k + 1) * STEP
        tuples = sources.step(end)
        feeds = {s.name: _with_boundaries(s, tuples[s.name], start, end) for s in sources.srcs}
        yield tuples, run(feeds)
    yield {}, run({s: [boundary(END_OF_STREAM)] for s in config.sources})


def _readers(config: ClusterConfig) -> dict[str, int]:
    """Output stream -> how many logs hold it (its node's replicas and its clients)."""
    out = {s: len(n.replicas) for n in config.nodes.values() for s in n.outputs}
    for c in config.clients.values():
        out[c.stream] = out.get(c.stream, 0) + 1
    return out


def _rows_per_second(config: ClusterConfig) -> float:
    """Logged rows per second of tuple time, measured on a short failure-free run."""
    readers, rows = _readers(config), 0
    for k, (tuples, outputs) in enumerate(_stream(config, CALIBRATION_S)):
        if k == CALIBRATION_S:
            break
        rows += sum(map(len, tuples.values()))
        rows += sum(len(out) * readers[s] for s, out in outputs.items())
    return rows / CALIBRATION_S


# ---------------------------------------------------------------- failures
def _failed_node(config: ClusterConfig) -> NodeConfig:
    node = config.producer_of(next(iter(config.clients.values())).stream)
    if not isinstance(node, NodeConfig):
        raise GenerateError("the first client reads a source's stream: no node to fail")
    return node


def _failure_seconds(config: ClusterConfig, n: int) -> int:
    """The shortest run that holds ``n`` failures (none: 1 s): each failure and X after
    it within the run's middle seven tenths (the first tenth and last fifth stay quiet)."""
    if n <= 0:
        return 1
    st = _failed_node(config).settings
    return -(-n * (st.wait + FAILURE_EXTRA + st.x) * 10 // (7 * US))


def _failures(config: ClusterConfig, seconds: int, n: int) -> list[_Failure]:
    """``n`` cuts spread evenly over the run (:func:`_failure_seconds`), each of the last
    source feeding the first client's node, from all of that node's replicas."""
    if n <= 0:
        return []
    node = _failed_node(config)
    length = node.settings.wait + FAILURE_EXTRA
    first, last = T0 + seconds * US // 10, T0 + seconds * US * 4 // 5
    gap = (last - first) // n
    source = _upstream_sources(config)[node.name][-1]
    return [_Failure(first + i * gap, first + i * gap + length, source, node.name)
            for i in range(n)]


def _upstream_sources(config: ClusterConfig) -> dict[str, list[str]]:
    """Node -> the sources it reads from, directly or through other nodes (config order)."""
    out: dict[str, list[str]] = {}
    for node in config.nodes.values():
        found: list[str] = []
        for s in node.inputs:
            p = config.producer_of(s)
            for name in ([s] if isinstance(p, SourceConfig) else out[p.name]):
                if name not in found:
                    found.append(name)
        out[node.name] = found
    return out


class _Timing:
    """One output stream's arrival times and failure episodes (module docstring)."""

    def __init__(self, settings_of: NodeConfig, failures: list[_Failure], end: int,
                 rng: random.Random) -> None:
        st = settings_of.settings
        self.delay = st.bucket + EMIT_SLACK
        self.hold = st.wait + min(self.delay, (st.x - st.wait) // 2)  # tentative lag
        self.late = min(self.delay, (st.x - st.wait) // 2)  # the heal's detection
        self.failures = list(failures)
        self.end = end  # sources' last time: END_OF_STREAM leaves then
        self.rng = rng
        self.last = 0  # latest arrival
        self.stable = 0  # last stable id emitted
        self.held: list[Tuple] | None = None  # the failure's results, to be corrected
        self.next_tentative = 0
        self.tentative = 0

    def feed(self, tuples: list[Tuple]) -> list[tuple[int, Tuple]]:
        out: list[tuple[int, Tuple]] = []
        for t in tuples:
            data = t[0] is Kind.STABLE
            if self.held is None and data and self.failures and t[3] >= self.failures[0].start:
                self.held, self.next_tentative = [], self.stable + 1
            if self.held is not None:
                f = self.failures[0]
                if not (data and t[3] >= f.heal):
                    self._fail(self.held, t, f, out)
                    continue
                self._correct(f, out)
            self._emit(t, out)
        return out

    def finish(self) -> list[tuple[int, Tuple]]:
        out: list[tuple[int, Tuple]] = []
        if self.held is not None:
            self._correct(self.failures[0], out)
        return out

    def _emit(self, t: Tuple, out: list[tuple[int, Tuple]]) -> None:
        basis = t[3] if t[0] is Kind.STABLE else min(t[2], self.end)
        self.last = max(self.last, basis + self.delay)
        if t[0] is Kind.STABLE:
            self.stable = t[1]
        out.append((self.last, t))

    def _fail(self, held: list[Tuple], t: Tuple, f: _Failure,
              out: list[tuple[int, Tuple]]) -> None:
        held.append(t)
        if t[0] is Kind.STABLE and t[3] < f.heal - self.hold + self.late \
                and self.rng.random() < TENTATIVE_SHARE:
            self.last = max(self.last, t[3] + self.hold)
            out.append((self.last, make_tuple(Kind.TENTATIVE, self.next_tentative, t[2], t[3],
                                              t[4])))
            self.next_tentative += 1
            self.tentative += 1

    def _correct(self, f: _Failure, out: list[tuple[int, Tuple]]) -> None:
        self.last = max(self.last, f.heal + self.late)
        out.append((self.last, undo(self.stable)))
        for t in self.held or ():
            out.append((self.last, t))
            if t[0] is Kind.STABLE:
                self.stable = t[1]
        out.append((self.last, rec_done(self.last)))
        self.held = None
        self.failures.pop(0)


# ---------------------------------------------------------------- writing
def _writes(rows: list[tuple[int, Tuple]]) -> Iterator[tuple[int, list[Tuple]]]:
    """``(arrival, tuples)`` of each run of consecutive rows that arrive together: one
    write each, as a process logs what it receives (or emits) at one instant."""
    start = 0
    for k in range(1, len(rows) + 1):
        if k == len(rows) or rows[k][0] != rows[start][0]:
            yield rows[start][0], [t for _, t in rows[start:k]]
            start = k


class _Logs:
    """The open tuple logs of one output stream: its node's replicas', its clients'."""

    def __init__(self, rd: RunDir, config: ClusterConfig, stream: str) -> None:
        node = config.producer_of(stream)
        if not isinstance(node, NodeConfig):
            raise GenerateError(f"stream {stream!r} is no node's output")
        self.replicas = [rd.replica_output(r.name, stream) for r in node.replicas]
        self.clients = [rd.client_log(c.name) for c in config.clients.values()
                        if c.stream == stream]
        self._files: list[tuple[Path, RunLogWriter, int]] = [
            *((p, RunLogWriter(p), 0) for p in self.replicas),
            *((p, RunLogWriter(p), HOP) for p in self.clients),
        ]
        self.rows = {p: 0 for p, _, _ in self._files}
        self.first_client_arrival: int | None = None

    def write(self, rows: list[tuple[int, Tuple]]) -> None:
        if not rows:
            return
        for arrival, tuples in _writes(rows):
            columns = Columns.from_tuples(tuples)  # once for every log of the stream
            for _, w, offset in self._files:
                w.write(columns, arrival + offset)
        for path, _, _ in self._files:
            self.rows[path] += len(rows)
        if self.clients and self.first_client_arrival is None:
            self.first_client_arrival = rows[0][0] + HOP

    def close(self) -> None:
        for _, w, _ in self._files:
            w.close()


def _history(rd: RunDir, config: ClusterConfig, failures: list[_Failure],
             ready: int, last_arrival: int) -> None:
    """``history.jsonl`` and every replica's ``states.jsonl``: start, ready, each failure
    (fault, states, heal), the final ``heal_all``, and an ``end`` after the liveness
    deadline of every subject."""
    events: list[dict[str, Any]] = [{"t": T0, "event": "start", "config": str(config.path),
                                     "name": "generated"}, {"t": ready, "event": "ready"}]
    states: dict[str, list[tuple[int, str]]] = {
        r.name: [(T0, "STABLE")] for n in config.nodes.values() for r in n.replicas}
    for i, f in enumerate(failures):
        node = config.nodes[f.node]
        st = node.settings
        replicas = tuple(r.name for r in node.replicas)
        fault = Fault((f.start - T0) / US, (f.heal - f.start) / US, "partition",
                      {"shape": "source", "source": f.source, "replicas": replicas,
                       "cut": "blackhole"})
        events.append({"t": f.start, "event": "fault", "id": i, "fault": fault.table(),
                       "describe": fault.describe(), **fault_effects(fault, config)})
        events.append({"t": f.heal, "event": "heal", "id": i})
        late = min(st.bucket + EMIT_SLACK, (st.x - st.wait) // 2)
        for r in replicas:
            states[r] += [(f.start + st.heartbeat_misses * st.heartbeat_interval, "UP_FAILURE"),
                          (f.heal + late // 2, "STABILIZATION"), (f.heal + late + 1, "STABLE")]
    healed = ready
    if failures:
        healed = failures[-1].heal
        events.append({"t": healed, "event": "heal_all"})
    longest = max((f.heal - f.start for f in failures), default=0)
    bounds = node_bounds(config, longest)
    deadline = max([b.total for b in bounds.values()]
                   + [bounds[p.name].total + bound_for(config, c.stream)
                      for c in config.clients.values()
                      if isinstance(p := config.producer_of(c.stream), NodeConfig)])
    events += [{"t": r_t, "event": "state", "process": r, "state": s}
               for r, seq in states.items() for r_t, s in seq]
    events.append({"t": max(last_arrival + US // 10, healed + deadline + US), "event": "end"})
    events.sort(key=lambda e: e["t"])
    rd.history.write_bytes(b"".join(orjson.dumps(e, option=orjson.OPT_APPEND_NEWLINE)
                                    for e in events))
    for r, seq in states.items():
        path = rd.replica_states(r)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"".join(orjson.dumps({"t": t, "state": s},
                                               option=orjson.OPT_APPEND_NEWLINE) for t, s in seq))


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def generate_run(config: ClusterConfig | str | Path, out_dir: str | Path, tuples: int,
                 seed: int, failures: int = 0, *,
                 progress: Callable[[str], None] | None = _stderr) -> Generated:
    """Write a run directory of about ``tuples`` logged tuples at ``out_dir`` (new or
    empty) for ``config`` (a loaded config or its TOML path), with ``failures`` failure
    episodes; ``seed`` picks which results each tentative stretch holds (the values are
    the sources' own seeds'). ``progress``: where a line goes about every 10% (None:
    quiet). Raises :class:`GenerateError` on a config or size it cannot generate."""
    began = time.perf_counter()
    if not isinstance(config, ClusterConfig):
        config = load_config(Path(config))
    _check_config(config)
    if tuples < 1 or failures < 0:
        raise GenerateError(f"need tuples >= 1 and failures >= 0, got {tuples} and {failures}")
    rd = RunDir(out_dir)
    if rd.path.exists() and any(rd.path.iterdir()):
        raise GenerateError(f"{rd.path}: not empty (a generated run never overwrites)")
    rate = _rows_per_second(config)
    if rate <= 0:
        raise GenerateError(f"{config.path}: the sources produce nothing")
    seconds = round(tuples / rate)
    if seconds < (least := _failure_seconds(config, failures)):
        seconds = least  # a smaller run cannot hold the failures: larger than asked, said
    planned = _failures(config, seconds, failures)
    rd.ensure()
    rd.config.write_text(config.path.read_text())
    say = progress or (lambda _line: None)
    say(f"generate: {rd.path}: {seconds:,} s of {config.name} at ~{rate:,.0f} logged rows/s, "
        f"{len(planned)} failure(s)")
    rng = random.Random(seed)
    reached = _upstream_sources(config)
    timings: dict[str, _Timing] = {}
    logs: dict[str, _Logs] = {}
    for node in config.nodes.values():
        mine = [f for f in planned if f.source in reached[node.name]]
        for s in node.outputs:
            timings[s] = _Timing(node, mine, T0 + seconds * US, rng)
            logs[s] = _Logs(rd, config, s)
    writers = {s.name: TupleLogWriter(rd.source_log(s.name), s.schema, flush_every=1 << 40,
                                      types=arrow_types(s)) for s in config.sources.values()}
    last_time = dict.fromkeys(config.sources, T0)
    produced = dict.fromkeys(config.sources, 0)
    source_rows = 0
    try:
        for k, (got, outputs) in enumerate(_stream(config, seconds)):
            for name, batch in got.items():
                writers[name].append(batch)
                writers[name].flush()
                if batch:
                    last_time[name], produced[name] = batch[-1][2], batch[-1][1]
                source_rows += len(batch)
            for s, out in outputs.items():
                logs[s].write(timings[s].feed(out))
            if k % max(1, seconds // 10) == 0 and k < seconds:
                rows = sum(n for lg in logs.values() for n in lg.rows.values())
                say(f"generate: {k:,}/{seconds:,} s, {source_rows + rows:,} rows, "
                    f"{time.perf_counter() - began:,.1f} s")
        for s, timing in timings.items():
            logs[s].write(timing.finish())
    finally:
        for w in writers.values():
            w.close()
        for lg in logs.values():
            lg.close()
    for name in config.sources:
        write_source_end(rd, name, t=last_time[name], reason="request", last_id=produced[name])
    ready = max(lg.first_client_arrival or T0 for lg in logs.values())
    last_arrival = max(t.last for t in timings.values()) + HOP
    _history(rd, config, planned, ready, last_arrival)
    for n in config.nodes.values():
        for r in n.replicas:
            rd.mark_ready(r.name)
    for c in config.clients.values():
        rd.mark_ready(c.name)
        rd.mark_done(c.name)
    per_log = {str(p.relative_to(rd.path)): n for lg in logs.values() for p, n in lg.rows.items()}
    per_log.update({f"sources/{s}.arrow": n for s, n in produced.items()})
    done = Generated(
        run_dir=rd.path, seconds=float(seconds), source_rows=source_rows,
        log_rows=sum(n for lg in logs.values() for n in lg.rows.values()),
        tentative=sum(t.tentative * len(logs[s].rows) for s, t in timings.items()),
        failures=len(planned), wall_seconds=time.perf_counter() - began, per_log=per_log)
    say(f"generate: {done.logged:,} logged tuples ({done.source_rows:,} source rows, "
        f"{done.log_rows:,} client and replica rows) in {done.wall_seconds:,.1f} s")
    return done
