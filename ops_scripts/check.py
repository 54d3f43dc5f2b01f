"""``dpc check RUN_DIR``: verify DESIGN.md section 6's properties on the logs of a run.

Role: Jepsen's split (STYLE.md 12). A run writes a history into its run directory
(``node/runlog.py``); :func:`load_history` reads it and pure checkers
(``ops_scripts/properties.py``) judge it, each returning a :class:`Verdict`: ``valid``,
``invalid`` or ``unknown``.

* The **reference** (:func:`reference_outputs`) is the failure-free run: every node's query
  network, fresh, fed each input stream whole from the logs (sources log every tuple before
  sending it) and then ``BOUNDARY(2**62)``, the end of the stream. SUnion orders its inputs
  on ``(time, input index, id)``, so the result does not depend on arrival interleaving.
  Every SUnion's ``wait`` is set to never expire: nothing is released tentatively.
* **no-duplicates** (per client, property 2): the raw log's STABLE ids strictly increase.
* **stable-never-undone** (per client, property 4): no UNDO arrives while a STABLE tuple
  above its id is in force.
* **eventual-consistency** (per client, properties 2-4): the client's stream with UNDOs
  applied holds no tentative tuple and its stable tuples equal the reference of its stream.
  Applying is checked, never forced: a data tuple whose id does not exceed the one in force
  before it (a duplicate) or an UNDO that would take back a stable tuple is invalid by
  itself, with the line of the log as evidence.
* **replica-convergence** (per replica and output stream, property 3): the same check on
  what the replica emitted, so every replica ends with the same stream as the reference.
  A replica that crashed and recovered (node/recovery.py, ``recoveries.jsonl``) is judged
  in parts: each earlier incarnation's log, cut short by the crash, must be a correct
  prefix (checked UNDOs, stable tuples equal to the reference's first ones; a tentative tail
  is allowed: its correction is the new incarnation's business), and the current log must
  continue the reference after the stable id it restored from.

After the verdicts, an **availability** report (``ops_scripts/availability.py``): per client,
tuples received, tentative tuples, UNDOs and Delay_new against the bound k*X, printed and
stored under ``"availability"`` in check.json. It is a report, not a verdict: it never
changes the exit code.

Invariants: a checker that raises yields ``unknown`` with the exception text, never
``valid``; a missing or unreadable log yields ``unknown`` naming it; :func:`run_check`
returns 0 only when every verdict is valid (and there is at least one).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from node.config import ClusterConfig
from node.runlog import RunDir, read_client_parquet, read_jsonl_tuples, read_source_log
from operators.network import QueryNetwork
from operators.spec import NetworkSpec
from protocol.tuples import Kind, Tuple, boundary

from .availability import load_availability
from .properties import (
    CheckError,
    Status,
    Verdict,
    apply_undos_checked,
    check_client,
    check_no_duplicates,
    check_recovered_replica,
    check_replica,
    check_stable_never_undone,
    check_stream,
    client_subject,
    fmt_tuple,
    guarded,
    replica_subject,
)

__all__ = [
    "END_OF_STREAM",
    "CheckError",
    "History",
    "Status",
    "Verdict",
    "apply_undos_checked",
    "check_client",
    "check_history",
    "check_no_duplicates",
    "check_recovered_replica",
    "check_replica",
    "check_stable_never_undone",
    "check_stream",
    "guarded",
    "load_history",
    "reference_outputs",
    "run_check",
]

#: The final boundary that ends every stream of the reference run.
END_OF_STREAM = 2**62


# ---------------------------------------------------------------- the reference run
def _failure_free(spec: NetworkSpec) -> NetworkSpec:
    ops = tuple(
        dataclasses.replace(o, params={**o.params, "wait": END_OF_STREAM})
        if o.type == "sunion"
        else o
        for o in spec.operators
    )
    return NetworkSpec(spec.inputs, ops, spec.outputs)  # every SUnion wait: never expires


def reference_outputs(
    config: ClusterConfig, source_tuples: Mapping[str, Sequence[Tuple]]
) -> dict[str, list[Tuple]]:
    """The data tuples of every node output stream in a failure-free run (pure).

    Nodes run in config order (topological): each input stream is pushed whole, in the
    network's input order, as its STABLE tuples (control tuples in a log are skipped) then
    ``BOUNDARY(END_OF_STREAM)``. Raises :class:`CheckError` if an input has no tuples (no
    log, no upstream node) or a source log holds a tentative tuple.
    """
    streams: dict[str, list[Tuple]] = {}
    for name, tuples in source_tuples.items():
        bad = next((t for t in tuples if t.kind is Kind.TENTATIVE), None)
        if bad is not None:
            raise CheckError(f"source log {name!r} holds a tentative tuple: {fmt_tuple(bad)}")
        streams[name] = [t for t in tuples if t.kind is Kind.STABLE]
    outputs: dict[str, list[Tuple]] = {}
    for node in config.nodes.values():
        net = QueryNetwork(_failure_free(node.network))
        produced: dict[str, list[Tuple]] = {op: [] for op in node.outputs.values()}
        for stream in node.network.inputs:
            if stream not in streams:
                raise CheckError(
                    f"node {node.name!r}: no tuples for input stream {stream!r} (neither a "
                    "logged source nor the output of an earlier node)"
                )
            result = net.push(stream, [*streams[stream], boundary(END_OF_STREAM)], 0)
            for op, tuples in result.outputs.items():
                if op in produced:
                    produced[op].extend(tuples)
        for global_name, op in node.outputs.items():
            bad = next((t for t in produced[op] if t.kind in (Kind.TENTATIVE, Kind.UNDO)), None)
            if bad is not None:
                where = f"node {node.name!r}, stream {global_name!r}"
                raise CheckError(f"{where}: the failure-free run emitted {fmt_tuple(bad)}")
            data = [t for t in produced[op] if t.kind is Kind.STABLE]
            outputs[global_name] = streams[global_name] = data
    return outputs


# ---------------------------------------------------------------- the history
@dataclass
class History:
    """What a run logged. ``problems``: subject ("source s1", "client c1 (n1.out)",
    "replica n1a (n1.out)") -> why its log is missing or unreadable."""

    sources: dict[str, list[Tuple]] = field(default_factory=dict)
    clients: dict[str, list[Tuple]] = field(default_factory=dict)
    replicas: dict[tuple[str, str], list[Tuple]] = field(default_factory=dict)
    #: (replica, stream) -> the output logs of its earlier incarnations, oldest first.
    earlier: dict[tuple[str, str], list[list[Tuple]]] = field(default_factory=dict)
    #: (replica, stream) -> the id after which its current log begins (its last recovery).
    restored_after: dict[tuple[str, str], int] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)


def _jsonl_data(path: Path) -> list[Tuple]:
    return [t for _, t in read_jsonl_tuples(path)]


def _parquet_data(path: Path) -> list[Tuple]:
    return [t for _, t in read_client_parquet(path)]


def load_history(rd: RunDir, config: ClusterConfig) -> History:
    """Read every log the config implies; record what is missing or unreadable. A client
    whose JSONL log is gone but whose Parquet copy exists is read from the Parquet."""
    h = History()

    def read(subject: str, path: Path, reader: Callable[..., list[Tuple]], *args: Any) -> Any:
        if not path.exists():
            h.problems[subject] = f"missing log {path}"
            return None
        try:
            return reader(*args)
        except Exception as e:
            h.problems[subject] = f"unreadable log {path}: {e}"
            return None

    for s in config.sources:
        if (got := read(f"source {s}", rd.source_log(s), read_source_log, rd, s)) is not None:
            h.sources[s] = got
    for c in config.clients.values():
        path, reader = rd.client_log(c.name), _jsonl_data
        if not path.exists() and rd.client_parquet(c.name).exists():
            path, reader = rd.client_parquet(c.name), _parquet_data
        if (got := read(client_subject(c), path, reader, path)) is not None:
            h.clients[c.name] = got
    for node in config.nodes.values():
        for r in node.replicas:
            for stream in node.outputs:
                path = rd.replica_output(r.name, stream)
                subject = replica_subject(r.name, stream)
                if (got := read(subject, path, _jsonl_data, path)) is not None:
                    h.replicas[(r.name, stream)] = got
                _read_recoveries(h, rd, r.name, stream, subject)
    return h


def _read_recoveries(h: History, rd: RunDir, replica: str, stream: str, subject: str) -> None:
    path = rd.replica_recoveries(replica)
    if not path.exists():
        return
    try:
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        h.restored_after[(replica, stream)] = int(records[-1]["outputs"][stream])
    except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
        h.problems[subject] = f"unreadable recovery log {path}: {e!r}"
        return
    logs, k = [], 1
    while (p := rd.replica_output_before(replica, stream, k)).exists():
        try:
            logs.append(_jsonl_data(p))
        except Exception as e:
            h.problems[subject] = f"unreadable log {p}: {e}"
            return
        k += 1
    h.earlier[(replica, stream)] = logs


def check_history(config: ClusterConfig, h: History) -> list[Verdict]:
    """Every verdict for one run (pure), in property order: each client's no-duplicates,
    stable-never-undone and eventual-consistency (the last against the reference run), then
    each replica's output streams' replica-convergence."""
    reference: dict[str, list[Tuple]] | None = None
    why = "; ".join(v for k, v in h.problems.items() if k.startswith("source "))
    if not why:
        try:
            reference = reference_outputs(config, h.sources)
        except Exception as e:
            why = f"{type(e).__name__}: {e}"
    verdicts: list[Verdict] = []

    def judge(name: str, subject: str, checker: Callable[..., Verdict], *args: Any,
              needs_reference: bool = True) -> None:
        if subject in h.problems:
            verdicts.append(Verdict(name, Status.UNKNOWN, h.problems[subject], subject))
        elif not needs_reference:
            verdicts.append(guarded(name, subject, checker, *args))
        elif reference is None:
            verdicts.append(Verdict(name, Status.UNKNOWN, f"no reference run: {why}", subject))
        else:
            verdicts.append(guarded(name, subject, checker, *args, reference))

    clients = [(c, client_subject(c), h.clients.get(c.name)) for c in config.clients.values()]
    for _, subject, got in clients:
        judge("no-duplicates", subject, check_no_duplicates, subject, got, needs_reference=False)
    for _, subject, got in clients:
        judge("stable-never-undone", subject, check_stable_never_undone, subject, got,
              needs_reference=False)
    for c, subject, got in clients:
        judge("eventual-consistency", subject, check_client, c, got)
    for node in config.nodes.values():
        for r in node.replicas:
            for s in node.outputs:
                got = h.replicas.get((r.name, s))
                subject = replica_subject(r.name, s)
                if (r.name, s) in h.restored_after:
                    judge("replica-convergence", subject, check_recovered_replica, r.name, s,
                          got, h.restored_after[(r.name, s)], h.earlier.get((r.name, s), []))
                else:
                    judge("replica-convergence", subject, check_replica, r.name, s, got)
    if not verdicts:
        verdicts.append(Verdict("run", Status.UNKNOWN, "the config has no client and no node"))
    return verdicts


# ---------------------------------------------------------------- the command
def _table(verdicts: Sequence[Verdict], out: TextIO) -> None:
    rows = [("property", "subject", "status", "evidence")]
    rows += [(v.name, v.subject, str(v.status), v.evidence) for v in verdicts]
    w = [max(len(r[i]) for r in rows) for i in range(3)]
    for r in rows:
        print(f"{r[0]:<{w[0]}}  {r[1]:<{w[1]}}  {r[2]:<{w[2]}}  {r[3]}", file=out)


def _availability_report(rd: RunDir, config: ClusterConfig, out: TextIO) -> list[dict[str, Any]]:
    """Print each client's availability (``ops_scripts/availability.py``) and return it for
    check.json. A report, not a verdict: whatever happens here, run_check's code is the same."""
    notes: list[str] = []
    try:
        found = load_availability(rd, config, notes=notes)
    except Exception as e:  # a bug of ours in the report must not hide the verdicts
        found, notes = [], [f"cannot assess: {type(e).__name__}: {e}"]
    print(file=out)
    for a in found:
        print(
            f"availability: {a.client} received {a.received}, tentative {a.n_tentative}, "
            f"undos {a.n_undo}, Delay_new {a.delay_new_us / 1e6:.2f} s (bound k*X = "
            f"{a.bound_us / 1e6:.2f} s: {'EXCEEDED' if a.exceeded else 'kept'})",
            file=out,
        )
    for note in notes:
        print(f"availability: {note}", file=out)
    return [dataclasses.asdict(a) for a in found]


def run_check(run_dir: Path, *, out: TextIO = sys.stdout) -> int:
    """``dpc check RUN_DIR``: print the verdict table, write ``RUN_DIR/check.json``; return
    0 if every verdict is valid, 1 otherwise, 2 if the run dir or its config is unusable."""
    rd = RunDir(run_dir)
    if not rd.path.is_dir():
        print(f"dpc check: error: {rd.path} is not a run directory (no such directory)", file=out)
        return 2
    if not rd.config.is_file():
        print(f"dpc check: error: {rd.config} is missing (no cluster config)", file=out)
        return 2
    try:
        from node.config_load import load_config

        config = load_config(rd.config)
    except Exception as e:
        print(f"dpc check: error: cannot load {rd.config}: {type(e).__name__}: {e}", file=out)
        return 2
    try:
        verdicts = check_history(config, load_history(rd, config))
    except Exception as e:  # a bug of ours: never a pass
        verdicts = [Verdict("run", Status.UNKNOWN, f"checker crashed: {type(e).__name__}: {e}")]
    counts = {s.value: sum(1 for v in verdicts if v.status == s) for s in Status}
    ok = counts["valid"] == len(verdicts) > 0
    _table(verdicts, out)
    availability = _availability_report(rd, config, out)
    summary = ", ".join(f"{n} {s}" for s, n in counts.items())
    print(f"\ndpc check: {summary} -> {'PASS' if ok else 'FAIL'}", file=out)
    report = {
        "run_dir": str(rd.path),
        "verdicts": [
            {"property": v.name, "subject": v.subject, "status": v.status, "evidence": v.evidence}
            for v in verdicts
        ],
        "summary": {**counts, "total": len(verdicts), "ok": ok},
        "availability": availability,
    }
    try:
        rd.check_json.write_text(json.dumps(report, indent=2) + "\n")
    except OSError as e:
        print(f"dpc check: error: cannot write {rd.check_json}: {e}", file=out)
        return 2
    return 0 if ok else 1
