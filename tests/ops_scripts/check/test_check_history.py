"""``check_run``: the verdicts on a whole run with its history (history.jsonl events):
availability (a late new result caught, or excused by an outage), each corruption caught by
its own property, replica convergence in the outputs and in the state digests, and a
crashing or unreadable history (unknown, never valid)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from ops_scripts.check import History, Status, check_run
from ops_scripts.check.availability import NewResult, new_results
from protocol.tuples import Kind, Tuple, undo
from tests.ops_scripts.check.world import (
    AV,
    C1,
    EC,
    HASHES,
    LV,
    MK,
    N1,
    ND,
    RC,
    SECOND,
    SU,
    World,
    arrivals_for,
    corrected,
    desc,
    digest,
    fault,
    heal,
    keyed,
    link,
    stable_lines,
    state,
)


def logs(world: World, client: list[Tuple], arrivals: list[int] | None = None) -> History:
    """Correct logs of every replica, and ``client`` as c1's log."""
    _, sources, ref = world
    return History(
        sources=sources,
        clients={"c1": client},
        arrivals={"c1": arrivals if arrivals is not None else arrivals_for(client)},
        replicas={("n1a", "n1.out"): corrected(ref), ("n1b", "n1.out"): [*ref]},
    )


def clean_events(world: World) -> list[dict[str, Any]]:
    """A history: n1a cut from c1 for 1 s (n1b serves it), healed; digests at the end."""
    config, _, _ = world
    return [
        {"t": 0, "event": "start", "config": "hand-built.toml", "name": "t"},
        {"t": 0, "event": "ready"},  # up at once: nothing before it to excuse
        state(0, "n1a", "STABLE"), state(0, "n1b", "STABLE"),
        fault(1 * SECOND, 1, config, **link("n1a", "c1")),
        heal(2 * SECOND, 1),
        {"t": 7 * SECOND, "event": "heal_all"},
        digest(9 * SECOND, "n1a", **HASHES), digest(9 * SECOND, "n1b", **HASHES),
        {"t": 10 * SECOND, "event": "end"},
    ]


def late(world: World, by: int = 4 * SECOND) -> tuple[History, NewResult]:
    """Clean logs, but one new result of c1, mid-stream, arrives ``by`` after its tmax."""
    _, _, ref = world
    client = corrected(ref)
    arrivals = arrivals_for(client)
    results = new_results(list(zip(arrivals, client, strict=True)))
    r = results[len(results) // 2]
    arrivals[r.row - 1] = r.tmax + by
    return logs(world, client, arrivals), dataclasses.replace(r, arrival=r.tmax + by, delay=by)


def test_a_clean_run_with_a_history_is_valid_on_all_six_properties(world: World) -> None:
    config, _, ref = world
    verdicts, figures = check_run(config, clean_events(world), logs(world, corrected(ref)))
    assert [v for v in verdicts if v.status is not Status.VALID] == []
    assert {v.name for v in verdicts} == {AV, ND, SU, EC, RC, LV, MK}
    # Changed: liveness per replica and per client, eventual consistency per source too;
    # masking per client (the cut of n1a from c1 is a subset failure: n1b served it).
    assert {v.subject for v in verdicts if v.name == LV} == {"replica n1a", "replica n1b", C1}
    assert {v.subject for v in verdicts if v.name == MK} == {C1}
    assert {v.subject for v in verdicts if v.name == EC} == {"source s1", "source s2", C1}
    by = keyed(verdicts)
    assert "every new result within the bound k*X = 3.000 s" in by[AV, C1].evidence
    assert "0 excused by 0 outage(s)" in by[AV, C1].evidence  # n1b kept a path
    assert "n1a, n1b: identical digests of 3 operator(s)" in by[RC, N1].evidence
    assert figures.as_json() == {
        "tuples_checked": len([t for t in corrected(ref) if t.kind is not Kind.UNDO
                               and t.kind is not Kind.REC_DONE and t.kind is not Kind.BOUNDARY]),
        "new_results_checked": figures.delays[0].checked, "excused": 0,
        "worst_delay_us": 50_000, "bound_us": 3 * SECOND, "faults": 1, "worst_client": "c1",
        "availability_judged": True,
    }
    assert figures.delays[0].checked == 15 and figures.delays[0].p99_us == 50_000
    # Without a history: no availability and no liveness verdict (a report), the others
    # as before.
    verdicts, figures = check_run(config, None, logs(world, corrected(ref)))
    assert not {AV, LV} & {v.name for v in verdicts} and not figures.availability_judged
    assert figures.delays[0].checked == 15 and figures.new_results_checked == 0


def test_a_late_new_result_is_caught_with_its_line_id_and_delay(world: World) -> None:
    config, _, _ = world
    h, r = late(world)
    v = keyed(check_run(config, clean_events(world), h)[0])[AV, C1]
    assert v.status is Status.INVALID, v.evidence
    assert (f"row {r.row}: {r.kind}(id={r.id}, tmax={r.tmax}) arrived at {r.arrival}, delay "
            "4.000 s > bound k*X = 3.000 s while the client had a path; 1 of ") in v.evidence
    assert f"max 4.000 s; worst row {r.row}:" in v.evidence
    _, figures = check_run(config, clean_events(world), h)
    assert figures.worst_delay_us == 4 * SECOND and figures.bound_us == 3 * SECOND
    # At exactly the bound: kept.
    h, _ = late(world, by=3 * SECOND)
    assert keyed(check_run(config, clean_events(world), h)[0])[AV, C1].status is Status.VALID


@pytest.mark.parametrize("outage", ["client isolated", "every replica paused"])
def test_the_same_late_result_is_excused_by_an_outage(world: World, outage: str) -> None:
    config, _, _ = world
    h, r = late(world)
    at, until = r.tmax + 1 * SECOND, r.tmax + 2 * SECOND  # tmax within [start - 3 s, ...]
    if outage == "client isolated":
        isolate = {"fault": "partition", "shape": "isolate", "process": "c1"}
        faults = [fault(at, 7, config, **isolate), heal(until, 7)]
    else:
        faults = [fault(at, 7, config, fault="pause", process="n1a"),
                  fault(at, 8, config, fault="pause", process="n1b"),
                  heal(until, 7), heal(until, 8)]
    events = sorted([*clean_events(world), *faults], key=lambda e: e["t"])
    verdicts, figures = check_run(config, events, h)
    v = keyed(verdicts)[AV, C1]
    assert v.status is Status.VALID, v.evidence
    assert f"excused by 1 outage(s) ([{at}, {until}): " in v.evidence
    assert figures.excused >= 1 and figures.faults == 2 + (outage != "client isolated")
    why = "n1a-c1 cut; n1b-c1 cut" if outage == "client isolated" else "n1a down; n1b down"
    assert why in v.evidence
    # The excuse reaches k*X around the outage, no further: the same outage ending 3.5 s
    # before the late result's tmax leaves it checked.
    early = [dict(e, t=e["t"] - 5500 * 1000) if e in faults else e for e in events]
    early.sort(key=lambda e: e["t"])
    assert keyed(check_run(config, early, h)[0])[AV, C1].status is Status.INVALID


def test_duplicate_and_undone_stable_tuples_and_missing_and_extra_with_a_history(
    world: World,
) -> None:
    """Each corruption caught by its own property, with the history in place."""
    config, _, ref = world
    events = clean_events(world)
    base = corrected(ref)
    i = stable_lines(base)[5]
    dup = [*base[: i + 1], base[i], *base[i + 1 :]]
    by = keyed(check_run(config, events, logs(world, dup))[0])
    assert by[ND, C1].status is Status.INVALID and f"row {i + 2}:" in by[ND, C1].evidence
    assert f"repeats the stable tuple of row {i + 1}" in by[ND, C1].evidence
    assert by[SU, C1].status is Status.VALID and by[EC, C1].status is Status.INVALID
    undone = [*base[: i + 1], undo(base[i - 2].id), *base[i - 1 :]]
    by = keyed(check_run(config, events, logs(world, undone))[0])
    assert by[SU, C1].status is Status.INVALID
    assert f"row {i + 2}: UNDO({base[i - 2].id}) would take back the stable tuple " \
           f"STABLE({desc(base[i])}) (row {i + 1})" in by[SU, C1].evidence
    missing = [t for k, t in enumerate(base) if k != stable_lines(base)[7]]
    by = keyed(check_run(config, events, logs(world, missing))[0])
    assert by[EC, C1].status is Status.INVALID and "missing" in by[EC, C1].evidence
    assert by[ND, C1].status is by[SU, C1].status is by[AV, C1].status is Status.VALID
    extra_tuple = ref[-1]._replace(id=ref[-1].id + 1, time=ref[-1].time + SECOND)
    extra = [*base[:-1], extra_tuple, base[-1]]
    by = keyed(check_run(config, events, logs(world, extra))[0])
    assert by[EC, C1].status is Status.INVALID
    assert f"first extra: STABLE({desc(extra_tuple)}), row {len(extra) - 1}" in by[EC, C1].evidence


def test_replica_divergence_in_outputs_and_in_digests(world: World) -> None:
    config, _, ref = world
    h = logs(world, corrected(ref))
    bad = [*ref]
    bad[3] = bad[3]._replace(values=(*bad[3].values[:-1], -5))
    h.replicas[("n1b", "n1.out")] = bad
    events = [e for e in clean_events(world) if e["event"] != "digest"]
    events += [digest(9 * SECOND, "n1a", **HASHES),
               digest(9 * SECOND, "n1b", **{**HASHES, "agg": "ee", "out": "dd"})]
    by = keyed(check_run(config, events, h)[0])
    stream = by[RC, "replica n1b (n1.out)"]
    assert stream.status is Status.INVALID and "index 3" in stream.evidence
    assert f"got STABLE({desc(bad[3])}) (row 4)" in stream.evidence
    state_v = by[RC, N1]
    assert state_v.status is Status.INVALID
    assert ("replicas n1a and n1b differ at operator 'agg': n1a '2e', n1b 'ee' "
            "(2 of 3 operators differ)") in state_v.evidence


def test_a_missing_digest_is_excused_only_for_a_replica_down_at_the_end(world: World) -> None:
    config, _, ref = world
    h = logs(world, corrected(ref))
    only_a = [e for e in clean_events(world) if e.get("process") != "n1b" or e["event"] != "digest"]
    v = keyed(check_run(config, only_a, h)[0])[RC, N1]
    assert v.status is Status.UNKNOWN
    assert "no state digest from n1b, which the history does not show down at the end" in v.evidence
    recovering = sorted([*only_a, state(8 * SECOND, "n1b", "RECOVERING")],
                        key=lambda e: e["t"])
    v = keyed(check_run(config, recovering, h)[0])[RC, N1]
    assert v.status is Status.VALID
    assert v.evidence == ("only n1a reported a digest (3 operator(s)); no digest from n1b: down "
                          "at the end per the history")
    # A history with no digest events: no digest verdict at all.
    plain = [e for e in clean_events(world) if e["event"] != "digest"]
    assert N1 not in {v.subject for v in check_run(config, plain, h)[0]}


def test_a_crashing_or_unreadable_history_is_unknown_never_valid(world: World) -> None:
    config, _, ref = world
    h = logs(world, corrected(ref))
    broken = [*clean_events(world), {"t": 3 * SECOND, "event": "fault", "id": 9}]  # no effects
    by = keyed(check_run(config, broken, h)[0])
    assert by[AV, C1].status is Status.UNKNOWN
    assert "cannot compute the outages: HistoryError" in by[AV, C1].evidence
    assert by[LV, C1].status is by[LV, "replica n1a"].status is Status.UNKNOWN
    assert "cannot read the history's faults: history event" in by[LV, C1].evidence
    bad_digest = [*clean_events(world), {"t": 9 * SECOND, "event": "digest", "process": "n1b",
                                         "hashes": 17}]
    v = keyed(check_run(config, bad_digest, h)[0])[RC, N1]
    assert v.status is Status.UNKNOWN and "checker crashed" in v.evidence
    h.problems["history"] = "unreadable history history.jsonl: line 3: not JSON"
    by = keyed(check_run(config, [], h)[0])
    for key in [(AV, C1), (LV, C1), (LV, "replica n1a")]:
        assert by[key].status is Status.UNKNOWN and "line 3: not JSON" in by[key].evidence
    no_arrivals = logs(world, corrected(ref))
    no_arrivals.arrivals.clear()
    v = keyed(check_run(config, clean_events(world), no_arrivals)[0])[AV, C1]
    assert v.status is Status.UNKNOWN and "checker crashed: KeyError" in v.evidence
