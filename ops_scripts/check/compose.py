"""``dpc check RUN_DIR``: judge DESIGN.md section 6's properties on the logs of a run.

Role: Jepsen's split (STYLE.md 12). A run leaves its logs (``node/procs/rundir.py``) and, when a
harness injected faults, its history (``history.jsonl``, ``ops_scripts/check/history.py``).
:func:`load_history` reads the logs, :func:`load_events` the history (both in
``ops_scripts/check/recorded.py``; the package re-exports every checker); :func:`check_run`, a pure function of both,
composes the checkers of ``ops_scripts/check/properties.py``, ``sources.py`` and
``liveness.py`` into a list of :class:`Verdict`
(``valid``, ``invalid``, ``unknown``) and the :class:`Figures` harnesses print. The reference (``ops_scripts/check/reference.py``) is the failure-free run of the sources.

* **availability** (per client, property 1): every new result whose input had a path to
  the client arrived within k*X (``availability.judge_delays``, outages from
  ``ops_scripts/check/paths.py``). Only with a history: without one (a plain ``dpc launch``, a
  test that injected faults by hand) there is no knowing when paths existed, and the delays
  are a report that never changes the exit code.
* **no-duplicates** (per client, property 2): the raw log's STABLE ids strictly increase.
* **stable-never-undone** (per client, property 4): no UNDO arrives while a STABLE tuple
  above its id is in force.
* **exactly-once** (per client whose every upstream node is a flux pair, docs/flux.md):
  the raw log is the reference, each tuple once, in order, stable on arrival.
* **eventual-consistency** (per source, property 3's inputs): the source's log is
  evidence, not truth: ids 1.. without a gap or a repeat, and an end record that agrees
  with it and with the config (``ops_scripts/check/sources.py``).
* **eventual-consistency** (per client, properties 2-4): the client's stream with UNDOs
  applied holds no tentative tuple and its stable tuples equal the reference of its stream.
  Applying is checked, never forced: a duplicate or an UNDO that would take back a stable
  tuple is invalid here too, with the row of the log as evidence. A stream whose path
  promises only gap recovery (``paths.stream_promise``: an amnesia node on it) is judged
  by that promise: the same UNDO and tentative rules, losses and different tuples counted
  (``recovery.classify``), and it must end recovered: its last tuple is the reference's
  (by content: a takeover renumbers ids).
* **replica-convergence** (property 3), per replica and output stream: the same check on
  what the replica emitted. A replica that crashed and recovered (node/replica/recovery.py,
  ``recoveries.jsonl``) is judged in parts: each earlier incarnation's log, cut short by the
  crash, must be a correct prefix (a tentative tail is allowed: its correction is the new
  incarnation's business), and the current log must continue the reference after the
  stable id it restored from. Gap streams as for clients, except that the replicas of the
  pair whose own mode promises the gap need not end recovered (a secondary emits nothing,
  a primary killed stops mid-stream). Per node, when the history has ``digest`` events:
  all its replicas report the same state hashes (one missing is excused only if it was
  down), unless its mode's secondary holds another state by design (amnesia's is empty):
  valid, saying nothing was compared.
* **liveness** (per replica and per client, property 6; with a history only, like
  availability: without one there is no final heal to judge from): after the final heal
  every replica is STABLE again and every client holds every result whose input came
  before it, within the bound B the config implies (``ops_scripts/check/liveness.py``; the
  evidence gives B's formula with its numbers).
* **masking** (per client of a node's stream, issue 46; with a history only): a fault that
  touched only some replicas of the nodes on the client's path, while one replica of each
  kept every input, is masked: no tentative result whose tmax lies in its window, every new
  result there within B = detection + answer + switch + the path's normal delay
  (``ops_scripts/check/masking.py``; a client none of whose faults was such a failure is
  valid, its evidence saying it was not judged).

Output: a table (property, subject, status, evidence), each client's availability (counts,
Delay_new, the distribution of the checked delays), ``dpc check: N valid, M invalid, K
unknown -> PASS|FAIL``, and ``check.json``: ``verdicts``, ``summary``, ``availability``
(per client) and ``figures`` (:data:`FIGURE_KEYS`).

Invariants: a checker that raises yields ``unknown`` with the exception text, never
``valid``; a missing or unreadable log or history yields ``unknown`` naming it;
:func:`run_check` returns 0 only when every verdict is valid (and there is at least one).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from node.config.model import ClusterConfig, NodeConfig
from node.errors import ConfigError
from node.procs.rundir import RunDir
from operators.taxonomy import RecoveryType, replicas_share_state
from ops_scripts.check.availability import ClientDelays, assess, bound_for, judge_delays
from ops_scripts.check.history import count_events, final_digests
from ops_scripts.check.liveness import live_subject, liveness_verdicts
from ops_scripts.check.masking import masking_verdicts
from ops_scripts.check.paths import (
    Outage,
    client_outages,
    down_at_end,
    flux_path,
    own_promise,
    stream_promise,
)
from ops_scripts.check.properties import (
    Status,
    Verdict,
    check_availability,
    check_client,
    check_digests,
    check_exactly_once,
    check_idle_replica,
    check_no_duplicates,
    check_recovered_replica,
    check_replica,
    check_stable_never_undone,
    client_subject,
    describe_delays,
    guarded,
    node_subject,
    replica_subject,
    seconds,
)
from ops_scripts.check.recorded import History, load_events, load_history, not_gathered
from ops_scripts.check.reference import reference_outputs
from ops_scripts.check.sources import check_source_log, source_subject
from ops_scripts.errors import CheckError
from protocol.tuples import DATA_KINDS, Tuple

__all__ = ["FIGURE_KEYS", "Figures", "check_run", "run_check"]

Event = Mapping[str, Any]


# ---------------------------------------------------------------- the verdicts (pure)
#: The keys of check.json's ``figures`` (what ``dpc run``, ``torture``, ``simulate`` print).
FIGURE_KEYS = ("tuples_checked", "new_results_checked", "excused", "worst_delay_us",
               "bound_us", "faults", "worst_client", "availability_judged")


@dataclass(frozen=True, slots=True)
class Figures:
    """The numbers of one check, for harnesses to print.

    ``tuples_checked``: data tuples received by all clients; ``new_results_checked`` /
    ``excused``: new results judged against the bound / excused by an outage, over all
    clients; ``worst_delay_us``, ``bound_us`` and ``worst_client`` belong together: the
    client whose worst checked delay (measured, without a history) came closest to, or went
    furthest over, its bound (None if there is none); ``faults``: fault events in the
    history; ``availability_judged``: the run had a history, so availability is a verdict.
    ``delays``: each client's distribution (check.json's ``availability``, not its
    ``figures``)."""

    tuples_checked: int = 0
    new_results_checked: int = 0
    excused: int = 0
    worst_delay_us: int | None = None
    bound_us: int | None = None
    faults: int = 0
    worst_client: str | None = None
    availability_judged: bool = False
    delays: tuple[ClientDelays, ...] = ()

    def as_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in FIGURE_KEYS}


def _reference(config: ClusterConfig, h: History) -> tuple[dict[str, list[Tuple]] | None, str]:
    """The reference run of the sources' logs, or why there is none."""
    why = "; ".join(v for k, v in h.problems.items() if k.startswith("source "))
    if why:
        return None, why
    try:
        return reference_outputs(config, h.sources), ""
    except Exception as e:  # noqa: BLE001  the reference is checker work: its crash
        return None, f"{type(e).__name__}: {e}"  # makes every verdict needing it unknown


def _source_verdicts(config: ClusterConfig, h: History) -> list[Verdict]:
    """Each source's log and end record (eventual consistency's inputs, ``sources.py``)."""
    verdicts = []
    for name, src in config.sources.items():
        subject = source_subject(name)
        if subject in h.problems:
            verdicts.append(Verdict("eventual-consistency", Status.UNKNOWN, h.problems[subject],
                                    subject))
            continue
        verdicts.append(guarded(
            "eventual-consistency", subject, lambda src=src, name=name: check_source_log(
                src, h.sources.get(name, []), h.source_ends.get(name),
                end_problem=h.end_problems.get(name), file_rows=h.file_rows.get(name),
                file_problem=h.file_problems.get(name))))
    return verdicts


def _promised(checker: Callable[..., Verdict], config: ClusterConfig, stream: str,
              pair_of: NodeConfig | None = None) -> Callable[..., Verdict]:
    """``checker`` judging by ``stream``'s promise (``paths.stream_promise``), worked out
    when it runs, inside ``guarded``: a crash there is unknown. ``pair_of``: the node whose
    replica emitted the stream; its end is judged unless its own mode promises the gap."""
    def run(*args: Any) -> Verdict:
        extra: dict[str, Any] = {}
        if pair_of is not None:
            extra["judge_end"] = own_promise(pair_of) is not RecoveryType.GAP
        return checker(*args, promise=stream_promise(config, stream), **extra)
    return run


def _idle(node: NodeConfig, got: Sequence[Tuple] | None) -> bool:
    """A replica of a pair whose secondary does not process, without a restore in its
    current incarnation and with no data tuple in its log: judged as a secondary
    (``check_idle_replica``); amnesia's pair is the gap promise's business instead."""
    return (got is not None and not replicas_share_state(node.settings.ha)
            and node.settings.ha != "amnesia"
            and not any(t.kind in DATA_KINDS for t in got))


def _log_verdicts(config: ClusterConfig, h: History, reference: dict[str, list[Tuple]] | None,
                  why: str) -> list[Verdict]:
    """The verdicts of the logs alone, in property order: each client's no-duplicates and
    stable-never-undone, each source's log, each client's eventual-consistency, then each
    replica stream's convergence."""
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
    verdicts += _source_verdicts(config, h)
    for c, subject, got in clients:
        judge("eventual-consistency", subject, _promised(check_client, config, c.stream), c, got)
    for c, subject, got in clients:
        if flux_path(config, c.stream):
            judge("exactly-once", subject, check_exactly_once, c, got)
    for node in config.nodes.values():
        for r in node.replicas:
            for s in node.outputs:
                got = h.replicas.get((r.name, s))
                subject = replica_subject(r.name, s)
                if (r.name, s) in h.restored_after:
                    recovered = functools.partial(
                        check_recovered_replica, earlier_after=h.earlier_after.get((r.name, s), []))
                    judge("replica-convergence", subject, _promised(recovered, config, s, node),
                          r.name, s, got, h.restored_after[(r.name, s)],
                          h.earlier.get((r.name, s), []))
                elif _idle(node, got):
                    idle = functools.partial(
                        check_idle_replica, earlier_after=h.earlier_after.get((r.name, s), []))
                    judge("replica-convergence", subject, idle, r.name, s, got,
                          h.earlier.get((r.name, s), []))
                else:
                    judge("replica-convergence", subject,
                          _promised(check_replica, config, s, node), r.name, s, got)
    return verdicts


def _availability(config: ClusterConfig, events: Sequence[Event] | None, h: History,
                  ) -> tuple[list[Verdict], list[ClientDelays]]:
    """Each client's delays; with a history, its availability verdict too."""
    outages: dict[str, list[Outage]] | None = None
    problem = h.problems.get("history")
    if events is not None and problem is None:
        try:
            outages = client_outages(config, events)
        except Exception as e:  # noqa: BLE001  checker crash: availability unknown, never a pass
            problem = f"cannot compute the outages: {type(e).__name__}: {e}"
    verdicts: list[Verdict] = []
    found: list[ClientDelays] = []
    for c in config.clients.values():
        subject = client_subject(c)
        mine = outages.get(c.name, []) if outages is not None else []
        d: ClientDelays | None = None
        why = h.problems.get(subject, "no log of the client")
        if c.name in h.clients:
            try:
                tuples, arrivals = h.clients[c.name], h.arrivals[c.name]
                if len(arrivals) != len(tuples):
                    raise CheckError(f"{len(arrivals)} arrival times for {len(tuples)} tuples")
                windows = None if outages is None else [(o.start, o.end) for o in mine]
                rows = list(zip(arrivals, tuples, strict=True))
                d = judge_delays(c.name, c.stream, rows, bound_for(config, c.stream), windows)
                found.append(d)  # measured even when the history is unusable: a report
            except Exception as e:  # noqa: BLE001  a bug of ours or garbage in the log: unknown
                why = f"checker crashed: {type(e).__name__}: {e}"
        if events is None:
            continue  # no history: the delays are a report
        if d is None or problem is not None:
            verdicts.append(Verdict("availability", Status.UNKNOWN, problem or why, subject))
        else:
            verdicts.append(guarded("availability", subject, check_availability, subject, d,
                                    mine))
    return verdicts, found


def _node_digests(node: NodeConfig, events: Sequence[Event]) -> Verdict:
    """One node's state digests verdict. A node whose mode's secondary holds another state
    than its primary by design (``taxonomy.replicas_share_state``: amnesia's secondary an
    empty network) keeps its verdict, valid, saying why nothing was compared: left out, the
    table would hide that its state went unjudged."""
    if not replicas_share_state(node.settings.ha):
        why = (f"not compared: ha {node.settings.ha}'s secondary does not hold its primary's "
               "state by design (amnesia's holds an empty query network, passive standby's "
               "the primary's last checkpoint, unrestored)")
        return Verdict("replica-convergence", Status.VALID, why, node_subject(node.name))
    return check_digests(node.name, [r.name for r in node.replicas], final_digests(events),
                         down_at_end(events))


def _digests(config: ClusterConfig, events: Sequence[Event] | None) -> list[Verdict]:
    """Per node, the state digests verdict, when the history has ``digest`` events."""
    if not events or not count_events(events, "digest"):
        return []
    return [guarded("replica-convergence", node_subject(node.name), _node_digests, node, events)
            for node in config.nodes.values()]


def _client_rows(config: ClusterConfig, h: History,
                 ) -> tuple[dict[str, list[tuple[int, Tuple]]], dict[str, str]]:
    """Each client's log as ``(arrival, tuple)`` rows, and the run's problems (subject ->
    why), with a client whose arrivals do not match its tuples among them."""
    problems = dict(h.problems)
    clients: dict[str, list[tuple[int, Tuple]]] = {}
    for c, rows in h.clients.items():
        arrivals = h.arrivals.get(c, [])
        if len(arrivals) == len(rows):
            clients[c] = list(zip(arrivals, rows, strict=True))
        else:  # load_history reads both together: a bug of ours, the client's verdict unknown
            problems[client_subject(config.clients[c])] = (
                f"{len(arrivals)} arrival times for {len(rows)} tuples")
    return clients, problems


def _liveness(config: ClusterConfig, events: Sequence[Event], h: History,
              reference: dict[str, list[Tuple]] | None, why: str) -> list[Verdict]:
    """Property 6 per replica and per client (``liveness.py``); a crash is unknown."""
    clients, problems = _client_rows(config, h)
    if "history" in problems:  # unreadable: every liveness verdict is unknown, saying so
        for subject in [*(live_subject(r.name) for n in config.nodes.values() for r in n.replicas),
                        *(client_subject(c) for c in config.clients.values())]:
            problems[subject] = problems["history"]
    try:
        return liveness_verdicts(config, events, states=h.states, clients=clients,
                                 sources=h.sources, reference=reference, why=why,
                                 problems=problems)
    except Exception as e:  # noqa: BLE001  checker crash: liveness unknown, never a pass
        return [Verdict("liveness", Status.UNKNOWN, f"checker crashed: {type(e).__name__}: {e}")]


def _figures(h: History, events: Sequence[Event] | None,
             delays: Sequence[ClientDelays]) -> Figures:
    worst = max((d for d in delays if d.max_us is not None),
                key=lambda d: (d.max_us or 0) - d.bound_us, default=None)
    return Figures(
        tuples_checked=sum(1 for tuples in h.clients.values() for t in tuples
                           if isinstance(t, Tuple) and t.kind in DATA_KINDS),
        new_results_checked=sum(d.checked for d in delays if d.judged),
        excused=sum(d.excused for d in delays),
        worst_delay_us=None if worst is None else worst.max_us,
        bound_us=None if worst is None else worst.bound_us,
        faults=count_events(events, "fault") if events else 0,
        worst_client=None if worst is None else worst.client,
        availability_judged=events is not None,
        delays=tuple(delays),
    )


def check_run(config: ClusterConfig, events: Sequence[Event] | None,
              h: History) -> tuple[list[Verdict], Figures]:
    """Every verdict of one run and its figures (pure): the logs ``h`` and the history's
    ``events`` (None: the run has no history; availability is then a report, no verdict),
    as :func:`load_events` gives them or as a simulation holds them in memory. Order:
    availability, no-duplicates, stable-never-undone, eventual-consistency (sources, then
    clients), replica-convergence of the streams and of the state digests, then liveness
    and masking (with a history only, like availability)."""
    available, delays = _availability(config, events, h)
    reference, why = _reference(config, h)
    verdicts = [*available, *_log_verdicts(config, h, reference, why), *_digests(config, events)]
    if events is not None:
        verdicts += _liveness(config, events, h, reference, why)
        verdicts += masking_verdicts(config, events, *_client_rows(config, h))
    if not verdicts:
        verdicts.append(Verdict("run", Status.UNKNOWN, "the config has no client and no node"))
    return verdicts, _figures(h, events, delays)


# ---------------------------------------------------------------- the command
def _table(verdicts: Sequence[Verdict], out: TextIO) -> None:
    rows = [("property", "subject", "status", "evidence")]
    rows += [(v.name, v.subject, str(v.status), v.evidence) for v in verdicts]
    w = [max(len(r[i]) for r in rows) for i in range(3)]
    for r in rows:
        print(f"{r[0]:<{w[0]}}  {r[1]:<{w[1]}}  {r[2]:<{w[2]}}  {r[3]}", file=out)


def _availability_report(config: ClusterConfig, h: History, figures: Figures,
                         out: TextIO) -> list[dict[str, Any]]:
    """Print each client's availability and return it for check.json: the counts and
    Delay_new of ``availability.assess`` (every new result, excused or not), then the
    distribution of the checked delays. What happens here never changes run_check's code."""
    print(file=out)
    if not figures.availability_judged:
        print("availability: no run history (history.jsonl): delays are a report, not a "
              "verdict", file=out)
        print("liveness: no run history (history.jsonl): no final heal to judge from, not "
              "judged", file=out)
    delays = {d.client: d for d in figures.delays}
    found: list[dict[str, Any]] = []
    for c in config.clients.values():
        if c.name not in h.clients:
            why = h.problems.get(client_subject(c), "no log")
            print(f"availability: client {c.name}: no log ({why}), skipped", file=out)
            continue
        try:
            a = assess(config, c.name, list(zip(h.arrivals[c.name], h.clients[c.name],
                                                strict=True)))
        except (KeyError, ValueError) as e:  # a report: one bad log must not hide the others
            # (a client's rows and arrivals of unequal length: zip's ValueError; a stream
            # bound_for cannot follow to its sources: KeyError, or ValueError on a cycle)
            print(f"availability: client {c.name}: cannot assess: {type(e).__name__}: {e}",
                  file=out)
            continue
        d = delays.get(c.name)
        # With a history the verdict is the judged figure's (the next line): the raw one
        # counts the start-up and the outages too, and "EXCEEDED" there misled readers of
        # runs that passed (make demo printed it).
        raw = (" over every new result, start-up and outages included (judged below)"
               if d is not None and d.judged else
               f" (bound k*X = {a.bound_us / 1e6:.2f} s: {'EXCEEDED' if a.exceeded else 'kept'})")
        print(f"availability: {a.client} received {a.received}, tentative {a.n_tentative}, "
              f"undos {a.n_undo}, Delay_new {a.delay_new_us / 1e6:.2f} s{raw}", file=out)
        entry: dict[str, Any] = dataclasses.asdict(a)
        if d is not None:
            judged = f", {d.excused} excused by {d.outages} outage(s)" if d.judged else ""
            print(f"availability: {a.client} new results{judged}; {describe_delays(d)}; "
                  f"{d.late} over the bound {seconds(d.bound_us)}", file=out)
            entry["delays"] = dataclasses.asdict(d)
        found.append(entry)
    return found


def run_check(run_dir: Path, *, out: TextIO = sys.stdout, config_path: Path | None = None) -> int:
    """``dpc check RUN_DIR [--config CLUSTER.toml]``: print the verdict table, write
    ``RUN_DIR/check.json``; return 0 if every verdict is valid, 1 otherwise, 2 if the run
    dir or its config is unusable (or, an ``--hosts ssh`` run, its hosts' files are not
    gathered). The config is the one the run recorded (``dpc launch``,
    ``dpc run`` and every ``dpc node`` write ``config.toml``), or ``config_path``."""
    rd = RunDir(run_dir)
    if not rd.path.is_dir():
        print(f"dpc check: error: {rd.path} is not a run directory (no such directory)", file=out)
        return 2
    if (why := not_gathered(rd)) is not None:  # --hosts ssh: its logs are on its hosts
        print(f"dpc check: error: {why}", file=out)
        return 2
    source = config_path if config_path is not None else rd.config
    if not source.is_file():
        how = "no such file" if config_path is not None else (
            "no cluster config: name the one the run used with --config CLUSTER.toml")
        print(f"dpc check: error: {source} is missing ({how})", file=out)
        return 2
    from node.config.load import load_config

    try:
        config = load_config(source)
    except ConfigError as e:  # unreadable, not TOML or invalid: load_config says which
        print(f"dpc check: error: cannot load {source}: {type(e).__name__}: {e}", file=out)
        return 2
    h = History()
    try:
        h = load_history(rd, config)
        verdicts, figures = check_run(config, load_events(rd, h), h)
    except Exception as e:  # noqa: BLE001  a bug of ours: the run is unknown, never a pass
        verdicts = [Verdict("run", Status.UNKNOWN, f"checker crashed: {type(e).__name__}: {e}")]
        figures = Figures()
    counts = {s.value: sum(1 for v in verdicts if v.status == s) for s in Status}
    ok = counts["valid"] == len(verdicts) > 0
    _table(verdicts, out)
    availability = _availability_report(config, h, figures, out)
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
        "figures": figures.as_json(),
    }
    try:
        rd.check_json.write_text(json.dumps(report, indent=2) + "\n")
    except OSError as e:
        print(f"dpc check: error: cannot write {rd.check_json}: {e}", file=out)
        return 2
    return 0 if ok else 1
