"""The properties of DESIGN.md section 6 as pure checkers, one :class:`Verdict` each.

Role: Jepsen's checkers (STYLE.md 12). ``ops_scripts/check/compose.py`` reads a run and composes
these; each function here takes plain data (tuples, delays, digests) and returns a verdict
``valid``, ``invalid`` or ``unknown`` with evidence that points at the log row, the tuple
id or the operator. One property each (DESIGN.md section 6):

1. :func:`check_availability`: new results with a path to the client within k*X;
2. :func:`check_no_duplicates`: no STABLE tuple reaches a client twice;
3. :func:`check_stream` (via :func:`check_client`): eventual consistency with a reference;
   for replicas :func:`check_replica` / :func:`check_recovered_replica` (their streams)
   and :func:`check_digests` (their state at the end); a stream whose path promises only
   *gap* recovery (``ops_scripts/check/paths.py`` ``stream_promise``: an amnesia node on
   it) is judged by that promise instead of equality (:func:`check_stream`);
4. :func:`check_stable_never_undone`: every UNDO takes back tentative tuples only.

Invariants: no I/O, no clock; a checker that raises is turned into ``unknown`` by
:func:`guarded`, never into ``valid``; row numbers in evidence are 1-based positions in the
log the checker was given (``node/procs/rundir.py``: row n of a file is element n-1 read back).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from node.config.model import ClientConfig
from ops_scripts.check.availability import ClientDelays, NewResult
from ops_scripts.check.paths import Outage, Promise
from ops_scripts.check.recovery import RecoveryType, classify, content
from ops_scripts.errors import CheckError
from protocol.tuples import Kind, Tuple
from protocol.undo_rule import undo_cut

__all__ = [
    "Status",
    "Verdict",
    "apply_undos_checked",
    "check_availability",
    "check_client",
    "check_digests",
    "check_idle_replica",
    "check_no_duplicates",
    "check_recovered_replica",
    "check_replica",
    "check_stable_never_undone",
    "check_stream",
    "client_subject",
    "describe_delays",
    "fmt_tuple",
    "guarded",
    "node_subject",
    "replica_subject",
    "seconds",
]


class Status(StrEnum):
    VALID = "valid"
    INVALID = "invalid"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Verdict:
    """One property judged on one subject (a client, a replica's output stream, a node)."""

    name: str  # the property, e.g. "eventual-consistency"
    status: Status
    evidence: str
    subject: str = ""


def guarded(name: str, subject: str, checker: Callable[..., Verdict], *args: Any) -> Verdict:
    """Run a checker; if it raises (or returns something else), the verdict is unknown."""
    try:
        verdict = checker(*args)
        if not isinstance(verdict, Verdict):
            raise TypeError(f"checker returned {verdict!r}, not a Verdict")
        return dataclasses.replace(verdict, status=Status(verdict.status))
    except Exception as e:  # noqa: BLE001  a crashing checker is unknown, never a pass
        return Verdict(name, Status.UNKNOWN, f"checker crashed: {type(e).__name__}: {e}", subject)


def client_subject(c: ClientConfig) -> str:
    return f"client {c.name} ({c.stream})"


def replica_subject(replica: str, stream: str) -> str:
    return f"replica {replica} ({stream})"


# ---------------------------------------------------------------- property 1
def seconds(us: int | None) -> str:
    """Microseconds as evidence shows them: ``"2.700 s"`` (``"-"`` for None)."""
    return "-" if us is None else f"{us / 1e6:.3f} s"


def _result(r: NewResult) -> str:
    return (f"row {r.row}: {r.kind}(id={r.id}, tmax={r.tmax}) arrived at {r.arrival}, "
            f"delay {seconds(r.delay)}")


def describe_delays(d: ClientDelays) -> str:
    """The distribution of a client's checked delays, in one line."""
    how = "checked" if d.judged else "measured"  # without a history nothing is judged
    if not d.checked:
        return f"no new result {how}"
    worst = f"; worst {_result(d.worst)}" if d.worst is not None else ""
    return (f"{d.checked} {how}: p50 {seconds(d.p50_us)}, p90 {seconds(d.p90_us)}, "
            f"p99 {seconds(d.p99_us)}, max {seconds(d.max_us)}{worst}")


def check_availability(subject: str, d: ClientDelays, outages: Sequence[Outage] = ()) -> Verdict:
    """Property 1, **availability**: every new result (the tmax rule of
    ``ops_scripts/check/availability.py``: corrections and replays left out) whose input had a path
    to the client (``ops_scripts/check/paths.py``: not excused by an outage) arrived within the
    bound k*X of its tmax. ``d`` must be judged against a history (``d.judged``): without
    one, availability is a report, and this raises :class:`CheckError`."""
    if not d.judged:
        raise CheckError("no run history: availability is a report, not a verdict")
    excused = f"{d.excused} excused by {len(outages)} outage(s)"
    if outages:
        shown = "; ".join(f"[{o.start}, {'end' if o.end is None else o.end}): {o.why}"
                          for o in outages[:3])
        excused += f" ({shown}{'; ...' if len(outages) > 3 else ''})"
    bound = f"bound k*X = {seconds(d.bound_us)}"
    if d.first_late is not None:
        why = (f"{_result(d.first_late)} > {bound} while the client had a path; {d.late} of "
               f"{d.checked} checked new results late ({describe_delays(d)}); {excused}")
        return Verdict("availability", Status.INVALID, why, subject)
    why = f"every new result within the {bound}: {describe_delays(d)}; {excused}"
    return Verdict("availability", Status.VALID, why, subject)


# ---------------------------------------------------------------- properties 2 and 4
def check_no_duplicates(subject: str, received: Sequence[Tuple]) -> Verdict:
    """Property 2, **no-duplicates**: no STABLE tuple reaches the client twice. In the raw
    log (UNDOs not applied) the STABLE tuples' ids strictly increase: an UNDO only ever
    takes back tentative tuples, so a stable id can never legitimately come again, whichever
    replica the client switched to. Evidence: both rows."""
    seen: dict[int, int] = {}  # stable id -> its first row
    last: tuple[int, Tuple] | None = None
    for row, t in enumerate(received, start=1):
        if t.kind is not Kind.STABLE:
            continue
        if last is not None and t.id <= last[1].id:
            if t.id in seen:
                first = seen[t.id]
                why = f"repeats the stable tuple of row {first}"
            else:  # not a repeat of any id, but below one: out of order
                first = last[0]
                why = f"has an id not above the stable tuple of row {first}"
            return Verdict("no-duplicates", Status.INVALID, (
                f"row {row}: {fmt_tuple(t)} {why} ({fmt_tuple(received[first - 1])}); "
                "stable ids must strictly increase"), subject)
        seen.setdefault(t.id, row)
        last = (row, t)
    why = f"{len(seen)} stable tuples, ids strictly increasing: none received twice"
    return Verdict("no-duplicates", Status.VALID, why, subject)


def check_stable_never_undone(subject: str, received: Sequence[Tuple]) -> Verdict:
    """Property 4, **stable-never-undone**: every UNDO(u) at the client targets a tentative
    suffix: when it arrives, no STABLE tuple with id > u is in force (UNDOs before it applied
    as the client applies them, from the end while the id exceeds u). Evidence: the UNDO's
    row and the stable tuple it would take back (the one with the highest id)."""
    # The data in force (UNDOs applied by the one rule, protocol.undo_rule; control tuples
    # never change which data an UNDO removes) and, beside each, the highest-id stable tuple
    # at or below it, so that each UNDO is judged in O(1) however long the log.
    kept: list[Tuple] = []
    best: list[tuple[int, Tuple] | None] = []
    undos = 0
    for row, t in enumerate(received, start=1):
        if t.kind is Kind.UNDO:
            undos += 1
            top = best[-1] if best else None
            if top is not None and top[1].id > t.id:
                return Verdict("stable-never-undone", Status.INVALID, (
                    f"row {row}: UNDO({t.id}) would take back the stable tuple "
                    f"{fmt_tuple(top[1])} (row {top[0]}); an UNDO takes back tentative tuples "
                    "only"), subject)
            cut = undo_cut(kept, t.id)
            del kept[cut:], best[cut:]
        elif t.kind in (Kind.STABLE, Kind.TENTATIVE):
            b = best[-1] if best else None
            if t.kind is Kind.STABLE and (b is None or t.id >= b[1].id):
                b = (row, t)
            kept.append(t)
            best.append(b)
    why = f"{undos} UNDO(s), each taking back tentative tuples only"
    return Verdict("stable-never-undone", Status.VALID, why, subject)


# ---------------------------------------------------------------- eventual consistency
def fmt_tuple(t: Tuple) -> str:
    """A tuple as evidence shows it: ``STABLE(id=7, time=.., tmax=.., values=[..])``."""
    return f"{t.kind.name}(id={t.id}, time={t.time}, tmax={t.tmax}, values={list(t.values)})"


def apply_undos_checked(
    stream: Sequence[Tuple],
) -> tuple[list[tuple[int, Tuple]], str | None]:
    """Apply UNDOs as a client does (the one UNDO rule, ``protocol.undo_rule``), checking
    each step: returns the data tuples in force as ``(row, tuple)`` (row = 1-based
    position in ``stream``) and the first violation, if any (then the tuples in force are
    those up to it). Violations: a data tuple whose id is not above the id of the tuple in
    force before it (a duplicate, or out of order), and an UNDO(u) while a STABLE tuple with
    id > u is in force (stable tuples are never undone). Control tuples never change which
    data an UNDO removes: only data tuples are kept."""
    kept: list[Tuple] = []
    rows: list[int] = []  # rows[i]: the row of kept[i]
    for row, t in enumerate(stream, start=1):
        if t.kind is Kind.UNDO:
            cut = undo_cut(kept, t.id)
            taken = next((i for i in range(cut, len(kept)) if kept[i].kind is Kind.STABLE), None)
            if taken is not None:
                return list(zip(rows, kept, strict=True)), (
                    f"row {row}: UNDO({t.id}) takes back the stable tuple "
                    f"{fmt_tuple(kept[taken])} (row {rows[taken]}); stable tuples are never "
                    "undone"
                )
            del kept[cut:], rows[cut:]
        elif t.kind in (Kind.STABLE, Kind.TENTATIVE):
            if kept and t.id <= kept[-1].id:
                prev_row, prev = rows[-1], kept[-1]
                what = "a duplicate of" if t.id == prev.id else "out of order after"
                return list(zip(rows, kept, strict=True)), (
                    f"row {row}: {fmt_tuple(t)} is {what} the tuple in force {fmt_tuple(prev)} "
                    f"(row {prev_row}); ids must increase"
                )
            kept.append(t)
            rows.append(row)
    return list(zip(rows, kept, strict=True)), None


def _difference(who: str, got: list[tuple[int, Tuple]], ref: Sequence[Tuple]) -> str | None:
    for i, ((row, g), r) in enumerate(zip(got, ref, strict=False)):
        if g != r:
            hint = ""
            if i + 1 < len(ref) and g == ref[i + 1]:
                hint = f"; the expected tuple is missing ({who} has the next one)"
            elif i + 1 < len(got) and got[i + 1][1] == r:
                hint = "; the received tuple is extra (the expected one follows it)"
            return (
                f"first difference at index {i} of the final stable stream: got {fmt_tuple(g)} "
                f"(row {row}), expected {fmt_tuple(r)}{hint} ({len(got)} vs {len(ref)} tuples)"
            )
    n, m = len(got), len(ref)
    if n < m:
        return f"{who} received {n} of {m} tuples (first missing: {fmt_tuple(ref[n])})"
    if n > m:
        extra = f"first extra: {fmt_tuple(got[m][1])}, row {got[m][0]}"
        return f"{who} has {n} stable tuples, the reference {m} ({extra})"
    return None


#: Above this many tuples a differing stream is not aligned with its reference for the
#: evidence (an alignment is quadratic at worst; a huge generated run must not hang on it).
CLASSIFY_UP_TO = 100_000


def _as_recovery(got: Sequence[Tuple], reference: Sequence[Tuple]) -> str:
    """The recovery type the stream shows (ops_scripts/check/recovery.py), for evidence."""
    if max(len(got), len(reference)) > CLASSIFY_UP_TO:
        return f"; not aligned with the reference as a recovery (over {CLASSIFY_UP_TO:,} tuples)"
    return f"; as a recovery: {classify(got, reference)}"


def _gap_counts(got: Sequence[Tuple], reference: Sequence[Tuple]) -> str:
    """What a gap recovery cost the stream, for evidence: lost and different tuples."""
    if max(len(got), len(reference)) > CLASSIFY_UP_TO:
        return f"not aligned with the reference (over {CLASSIFY_UP_TO:,} tuples)"
    r = classify(got, reference)
    counts = f"{r.lost} lost, {r.different} different"
    counts += f", {r.repeated} repeated" if r.repeated else ""
    return counts + (f" (first lost: {fmt_tuple(r.first_lost)})" if r.first_lost else "")


def _unrecovered(got: Sequence[Tuple], reference: Sequence[Tuple]) -> str | None:
    """Why ``got`` did not end recovered (None: it did): its last data tuple must be the
    reference's last in content (ids differ after a takeover); an empty reference wants an
    empty stream."""
    if not reference:
        return None if not got else f"{len(got)} tuple(s) where the reference has none"
    if not got:
        return f"no tuple; the reference ends with {fmt_tuple(reference[-1])}"
    if content(got[-1]) != content(reference[-1]):
        return (f"it ends with {fmt_tuple(got[-1])}, the reference with "
                f"{fmt_tuple(reference[-1])}")
    return None


def _judge_gap(name: str, subject: str, got: Sequence[Tuple], reference: Sequence[Tuple],
               promise: Promise, judge_end: bool) -> Verdict:
    """A stream whose path promises gap recovery (``got``: its data tuples in force, all
    stable): losses and different tuples are what the promise allows; with ``judge_end``
    the stream must have ended recovered (:func:`_unrecovered`)."""
    verb = "promises" if len(promise.by) == 1 else "promise"
    promised = f"gap recovery, as {promise.who()} {verb}"
    problem = _unrecovered(got, reference) if judge_end else None
    if problem is not None:
        why = (f"not recovered by its end: {problem}; {promised}, the output is the "
               "failure-free one again after a loss" + _as_recovery(got, reference))
        return Verdict(name, Status.INVALID, why, subject)
    why = f"{promised}: {_gap_counts(got, reference)}"
    why += ("; recovered by its end (its last tuple is the reference's)" if judge_end else
            "; its end not judged (a pair's replica: a secondary emits nothing, a primary "
            "killed stops mid-stream)")
    return Verdict(name, Status.VALID, why, subject)


def check_stream(
    name: str, subject: str, received: Sequence[Tuple], reference: Sequence[Tuple], who: str,
    promise: Promise | None = None, *, judge_end: bool = True,
    before: Sequence[Tuple] = (),
) -> Verdict:
    """The final stable stream of ``received`` (UNDOs applied, checked) against ``reference``
    (its data tuples, all STABLE). ``who`` names the logger in evidence ("client").

    Under a *gap* ``promise`` (an amnesia node on the stream's path) the UNDO and tentative
    rules are the same, and the stream need not equal the reference: it is classified
    against it (``before``: what earlier incarnations held, counted with it) and, with
    ``judge_end``, must end recovered, its last tuple the reference's in content. Any
    other promise, or none, is judged by equality."""
    kept, violation = apply_undos_checked(received)
    if violation is not None:
        return Verdict(name, Status.INVALID, violation, subject)
    tentative = [k for k in kept if k[1].kind is Kind.TENTATIVE]
    if tentative:
        row, first = tentative[0]
        why = f"{len(tentative)} tentative tuple(s) still in force after applying UNDOs"
        why += f" (first: {fmt_tuple(first)}, row {row}): never corrected"
        return Verdict(name, Status.INVALID, why, subject)
    if promise is not None and promise.type is RecoveryType.GAP:
        got = [*before, *(t for _, t in kept)]
        return _judge_gap(name, subject, got, reference, promise, judge_end)
    difference = _difference(who, kept, reference)
    if difference is not None:
        why = difference + _as_recovery([t for _, t in kept], reference)
        return Verdict(name, Status.INVALID, why, subject)
    n_tent = sum(1 for t in received if t.kind is Kind.TENTATIVE)
    n_undo = sum(1 for t in received if t.kind is Kind.UNDO)
    why = f"{len(kept)} stable tuples equal the reference; no tentative tuple remains"
    why += f" ({n_tent} tentative received, {n_undo} UNDO(s) applied)"
    return Verdict(name, Status.VALID, why, subject)


def check_client(
    client: ClientConfig, received: Sequence[Tuple], reference: Mapping[str, Sequence[Tuple]],
    promise: Promise | None = None,
) -> Verdict:
    """Eventual consistency of one client's log against the reference of its stream, by
    its ``promise`` (:func:`check_stream`: a gap stream must end recovered)."""
    subject = client_subject(client)
    if client.stream not in reference:
        raise CheckError(f"no reference for stream {client.stream!r}")
    return check_stream(
        "eventual-consistency", subject, received, reference[client.stream], "client", promise
    )


def check_exactly_once(client: ClientConfig, received: Sequence[Tuple],
                       reference: Mapping[str, Sequence[Tuple]]) -> Verdict:
    """**exactly-once** (Flux, docs/flux.md), for a client whose every upstream node is a
    flux pair: in its raw log, each tuple of the failure-free run arrives exactly once, in
    order, stable when it first arrives: no tentative tuple, no UNDO, no gap, no repeat
    (sequence numbers and values both the reference's). Evidence: the first row that
    differs, or the first reference tuple missing."""
    subject = client_subject(client)
    if client.stream not in reference:
        raise CheckError(f"no reference for stream {client.stream!r}")
    ref = reference[client.stream]
    k = 0
    for row, t in enumerate(received, start=1):
        if t.kind is Kind.BOUNDARY or t.kind is Kind.REC_DONE:
            continue
        if t.kind is not Kind.STABLE:
            return Verdict("exactly-once", Status.INVALID,
                           f"row {row}: {fmt_tuple(t)}: a flux path delivers stable tuples "
                           "only", subject)
        want = ref[k] if k < len(ref) else None
        if want is None or (t.id, t.time, t.values) != (want.id, want.time, want.values):
            what = ("beyond the reference's end" if want is None else
                    f"expected {fmt_tuple(want)}" + (" (a repeat)" if t.id < want.id else
                                                     " (a loss)" if t.id > want.id else ""))
            return Verdict("exactly-once", Status.INVALID,
                           f"row {row}: {fmt_tuple(t)}: {what}", subject)
        k += 1
    if k < len(ref):
        return Verdict("exactly-once", Status.INVALID,
                       f"{len(ref) - k} tuple(s) of the reference never arrived, the first "
                       f"{fmt_tuple(ref[k])}", subject)
    return Verdict("exactly-once", Status.VALID,
                   f"{k} tuples, each once, in order, stable on arrival (sequence numbers "
                   f"{ref[0].id if ref else 0}..{ref[-1].id if ref else 0})", subject)


def check_replica(
    replica: str, stream: str, emitted: Sequence[Tuple], reference: Mapping[str, Sequence[Tuple]],
    promise: Promise | None = None, *, judge_end: bool = True,
) -> Verdict:
    """Convergence of what one replica emitted on ``stream`` to the reference, by the
    stream's ``promise``; ``judge_end`` False for a replica of a process pair whose own
    mode promises the gap (its secondary emits nothing: :func:`check_stream`)."""
    if stream not in reference:
        raise CheckError(f"no reference for stream {stream!r}")
    subject = replica_subject(replica, stream)
    return check_stream("replica-convergence", subject, emitted, reference[stream], "replica",
                        promise, judge_end=judge_end)


def _recovered_gap(subject: str, emitted: Sequence[Tuple], earlier: Sequence[Sequence[Tuple]],
                   ref: Sequence[Tuple], promise: Promise, judge_end: bool) -> Verdict:
    """A recovered replica of a gap stream: its ids are not the reference's (a takeover
    upstream renumbered them), so no incarnation is a prefix by id. Each earlier
    incarnation obeys the UNDO rules (a tentative tail is the next one's business), and
    their stable tuples, then the current log, are judged as one gap stream."""
    before: list[Tuple] = []
    for k, log in enumerate(earlier, start=1):
        kept, violation = apply_undos_checked(log)
        if violation is not None:
            return Verdict("replica-convergence", Status.INVALID,
                           f"incarnation {k} (before a crash): {violation}", subject)
        before += [t for _, t in kept if t.kind is Kind.STABLE]
    v = check_stream("replica-convergence", subject, emitted, ref, "replica", promise,
                     judge_end=judge_end, before=before)
    note = f"recovered; {len(earlier)} earlier incarnation(s) counted with it; "
    return dataclasses.replace(v, evidence=note + v.evidence)


def check_recovered_replica(
    replica: str, stream: str, emitted: Sequence[Tuple], restored_after: int,
    earlier: Sequence[Sequence[Tuple]], reference: Mapping[str, Sequence[Tuple]],
    earlier_after: Sequence[int] = (), promise: Promise | None = None, *,
    judge_end: bool = True,
) -> Verdict:
    """A replica that recovered from a partner's state after output id ``restored_after``:
    every earlier incarnation's log is a correct prefix, and the current log continues the
    reference after ``restored_after`` (judged as the reference's tuples through that id
    followed by the log, so that an UNDO reaching into the restored prefix is caught).
    ``earlier_after[k-1]``: the id after which incarnation k's log begins (0: the start;
    an incarnation after an earlier recovery begins after that recovery's id). Under a
    gap ``promise``, ids are not the reference's: :func:`_recovered_gap`."""
    if stream not in reference:
        raise CheckError(f"no reference for stream {stream!r}")
    ref = reference[stream]
    subject = replica_subject(replica, stream)
    if promise is not None and promise.type is RecoveryType.GAP:
        return _recovered_gap(subject, emitted, earlier, ref, promise, judge_end)
    problem = _earlier_problem(earlier, earlier_after, ref)
    if problem is not None:
        return Verdict("replica-convergence", Status.INVALID, problem, subject)
    prefix = [t for t in ref if t.id <= restored_after]
    if restored_after and (not prefix or prefix[-1].id != restored_after):
        why = f"recovered after id {restored_after}, which is not a tuple of the reference"
        return Verdict("replica-convergence", Status.INVALID, why, subject)
    v = check_stream("replica-convergence", subject, [*prefix, *emitted], ref, "replica")
    note = (f"recovered after id {restored_after}; {len(earlier)} earlier incarnation(s) "
            "a correct prefix; ")
    return dataclasses.replace(v, evidence=note + v.evidence)


def _earlier_problem(earlier: Sequence[Sequence[Tuple]], earlier_after: Sequence[int],
                     ref: Sequence[Tuple]) -> str | None:
    """Why an earlier incarnation's log is not a correct prefix of the reference (None:
    each is). ``earlier_after[k-1]``: the id after which incarnation k's log begins."""
    for k, log in enumerate(earlier, start=1):
        after = earlier_after[k - 1] if k <= len(earlier_after) else 0
        kept, violation = apply_undos_checked([*(t for t in ref if t.id <= after), *log])
        stable = [(row, t) for row, t in kept if t.kind is Kind.STABLE]
        if violation is None:
            violation = _difference(f"incarnation {k}", stable, ref[: len(stable)])
        if violation is not None:
            return f"incarnation {k} (before a crash): {violation}"
    return None


def check_idle_replica(
    replica: str, stream: str, emitted: Sequence[Tuple], earlier: Sequence[Sequence[Tuple]],
    reference: Mapping[str, Sequence[Tuple]], earlier_after: Sequence[int] = (),
) -> Verdict:
    """A replica of a process pair whose secondary does not process (passive standby) and
    whose current incarnation restored nothing: a secondary all along, it emitted no data
    tuple since it started, and every earlier incarnation's log is a correct prefix."""
    if stream not in reference:
        raise CheckError(f"no reference for stream {stream!r}")
    subject = replica_subject(replica, stream)
    data = [t for t in emitted if t.kind in (Kind.STABLE, Kind.TENTATIVE)]
    if data:
        why = (f"emitted {len(data)} data tuple(s) in this incarnation (first: "
               f"{fmt_tuple(data[0])}) without restoring a checkpoint: its secondary should "
               "emit nothing")
        return Verdict("replica-convergence", Status.INVALID, why, subject)
    problem = _earlier_problem(earlier, earlier_after, reference[stream])
    if problem is not None:
        return Verdict("replica-convergence", Status.INVALID, problem, subject)
    why = (f"a secondary in this incarnation: emitted nothing; {len(earlier)} earlier "
           "incarnation(s) a correct prefix")
    return Verdict("replica-convergence", Status.VALID, why, subject)


# ---------------------------------------------------------------- property 3: state
def node_subject(node: str) -> str:
    return f"node {node} (state digests)"


def check_digests(node: str, replicas: Sequence[str], digests: Mapping[str, Mapping[str, Any]],
                  down_at_end: Collection[str] = ()) -> Verdict:
    """Property 3, **replica-convergence** of state: the replicas of ``node`` that reported
    a digest at the end of the run (``digests``: replica -> operator -> hash) report the
    same hashes. A difference is invalid, naming both replicas and the first operator (in
    the first replica's order) that differs. A replica without a digest is excused when the
    history shows it down at the end (``down_at_end``, e.g. still RECOVERING): the verdict
    stays valid, with a note; otherwise it is unknown (it should have reported)."""
    subject = node_subject(node)
    have = [r for r in replicas if r in digests]
    missing = [r for r in replicas if r not in digests]
    if have:
        first = digests[have[0]]
        for other in have[1:]:
            theirs = digests[other]
            ops = [*first, *sorted(set(theirs) - set(first))]
            differ = [op for op in ops if first.get(op) != theirs.get(op)]
            if differ:
                op = differ[0]
                why = (f"replicas {have[0]} and {other} differ at operator {op!r}: "
                       f"{have[0]} {first.get(op, 'no digest')!r}, "
                       f"{other} {theirs.get(op, 'no digest')!r} "
                       f"({len(differ)} of {len(ops)} operators differ)")
                return Verdict("replica-convergence", Status.INVALID, why, subject)
    unexplained = [r for r in missing if r not in down_at_end]
    if not have or unexplained:
        who = ", ".join(unexplained or missing)
        why = (f"no state digest from {who}, which the history does not show down at the end"
               if unexplained else f"no replica reported a state digest ({who} down at the end)")
        if len(have) > 1:
            why += f"; {', '.join(have)} agree"
        return Verdict("replica-convergence", Status.UNKNOWN, why, subject)
    n_ops = len(digests[have[0]])
    why = (f"{', '.join(have)}: identical digests of {n_ops} operator(s)" if len(have) > 1
           else f"only {have[0]} reported a digest ({n_ops} operator(s))")
    if missing:
        why += f"; no digest from {', '.join(missing)}: down at the end per the history"
    return Verdict("replica-convergence", Status.VALID, why, subject)
