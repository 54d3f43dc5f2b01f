"""``dpc check``'s per-property checkers on correct and corrupted histories of one client or
replica (no run history): eventual consistency against the reference, no duplicates, stable
never undone, replica convergence, a crashing checker or a missing log (unknown, never
valid), and a crashed replica judged incarnation by incarnation."""

from __future__ import annotations

from ops_scripts.check import (
    History,
    Status,
    Verdict,
    apply_undos_checked,
    check_client,
    check_no_duplicates,
    check_recovered_replica,
    check_replica,
    check_run,
    check_stable_never_undone,
    guarded,
)
from ops_scripts.cluster.demo import apply_undos
from protocol.tuples import Kind, Tuple, boundary, undo
from tests.ops_scripts.check.world import (
    C1,
    EC,
    ND,
    RC,
    SU,
    World,
    corrected,
    desc,
    keyed,
    stable_lines,
)


def client_verdict(world: World, history: list[Tuple]) -> Verdict:
    config, _, ref = world
    return check_client(config.clients["c1"], history, {"n1.out": ref})


# ---------------------------------------------------------------- the checkers
def test_correct_histories_are_valid(world: World) -> None:
    _, _, ref = world
    for history in ([*ref, boundary(2**62)], corrected(ref), [undo(0), *corrected(ref)]):
        v = client_verdict(world, history)
        assert v.status is Status.VALID, v.evidence
        assert f"{len(ref)} stable tuples equal the reference" in v.evidence
    assert (
        "4 tentative received, 1 UNDO(s) applied" in client_verdict(world, corrected(ref)).evidence
    )
    kept, problem = apply_undos_checked(corrected(ref))
    assert problem is None and [t for _, t in kept] == apply_undos(corrected(ref)) == ref


def test_duplicate_stable_tuple_is_caught(world: World) -> None:
    _, _, ref = world
    history = corrected(ref)
    i = stable_lines(history)[5]
    history.insert(i + 1, history[i])
    v = client_verdict(world, history)
    assert v.status is Status.INVALID
    assert (
        "duplicate" in v.evidence
        and f"row {i + 2}" in v.evidence
        and desc(history[i]) in v.evidence
    )


def test_missing_tuple_is_caught(world: World) -> None:
    _, _, ref = world
    history = corrected(ref)
    gone = history.pop(stable_lines(history)[7])
    v = client_verdict(world, history)
    assert v.status is Status.INVALID
    assert "index 7" in v.evidence and f"expected {gone.kind.name}({desc(gone)})" in v.evidence
    assert "missing" in v.evidence


def test_missing_tail_says_how_many_were_received(world: World) -> None:
    _, _, ref = world
    v = client_verdict(world, list(ref[:-3]))
    assert v.status is Status.INVALID
    assert f"client received {len(ref) - 3} of {len(ref)} tuples" in v.evidence
    assert f"first missing: STABLE({desc(ref[-3])})" in v.evidence


def test_changed_value_is_caught(world: World) -> None:
    _, _, ref = world
    history = corrected(ref)
    i = stable_lines(history)[-2]  # among the corrections
    original = history[i]
    history[i] = original._replace(values=(*original.values[:-1], original.values[-1] + 1))
    v = client_verdict(world, history)
    assert v.status is Status.INVALID
    assert f"got STABLE({desc(history[i])}) (row {i + 1})" in v.evidence
    assert f"expected STABLE({desc(original)})" in v.evidence


def test_undone_stable_tuple_is_flagged_not_applied(world: World) -> None:
    _, _, ref = world
    history = corrected(ref)
    at = stable_lines(history)[10]
    # UNDO below a stable id, then the "corrections" re-send exactly what it removed: a
    # silent apply would end with the right stream.
    history[at + 1 : at + 1] = [undo(history[at - 2].id), history[at - 1], history[at]]
    assert apply_undos(history) == ref
    v = client_verdict(world, history)
    assert v.status is Status.INVALID
    assert f"row {at + 2}: UNDO({history[at - 2].id}) takes back the stable tuple" in v.evidence
    assert desc(history[at - 1]) in v.evidence


def test_no_duplicates_points_at_both_lines(world: World) -> None:
    _, _, ref = world
    assert check_no_duplicates(C1, corrected(ref)).status is Status.VALID
    # Tentative ids come again after their UNDO (the corrections): not a duplicate.
    ok = check_no_duplicates(C1, [*corrected(ref), undo(ref[-1].id)])
    assert ok.status is Status.VALID and f"{len(ref)} stable tuples" in ok.evidence
    history = corrected(ref)
    i = stable_lines(history)[5]
    history.insert(i + 3, history[i])  # the stable tuple of line i+1 again, at line i+4
    v = check_no_duplicates(C1, history)
    assert v.status is Status.INVALID and v.name == ND and v.subject == C1
    assert f"row {i + 4}: STABLE({desc(history[i])}) repeats the stable tuple of row {i + 1}" \
        in v.evidence
    assert client_verdict(world, history).status is Status.INVALID  # and eventual consistency
    swapped = corrected(ref)
    swapped[i], swapped[i + 1] = swapped[i + 1], swapped[i]
    v = check_no_duplicates(C1, swapped)
    assert v.status is Status.INVALID
    assert f"row {i + 2}: STABLE({desc(swapped[i + 1])}) has an id not above the stable tuple " \
        f"of row {i + 1} (STABLE({desc(swapped[i])}))" in v.evidence


def test_stable_never_undone_points_at_the_undo_and_the_stable_tuple(world: World) -> None:
    _, _, ref = world
    v = check_stable_never_undone(C1, corrected(ref))
    assert v.status is Status.VALID and "1 UNDO(s)" in v.evidence
    history = corrected(ref)
    at = stable_lines(history)[10]
    history[at + 1 : at + 1] = [undo(history[at - 2].id), history[at - 1], history[at]]
    v = check_stable_never_undone(C1, history)
    assert v.status is Status.INVALID and v.name == SU
    assert (f"row {at + 2}: UNDO({history[at - 2].id}) would take back the stable tuple "
            f"STABLE({desc(history[at])}) (row {at + 1})") in v.evidence
    # The re-sent tuples are duplicates too: property 2 has its own evidence.
    v = check_no_duplicates(C1, history)
    assert v.status is Status.INVALID and f"row {at + 3}:" in v.evidence
    assert f"repeats the stable tuple of row {at}" in v.evidence
    # An UNDO that reaches below a tentative suffix into the stable prefix, before any
    # stable tuple is re-sent: still caught (the stable tuple in force is named).
    k = len(ref) // 2
    cut = [*ref[:k], ref[k]._replace(kind=Kind.TENTATIVE), undo(ref[k - 3].id)]
    v = check_stable_never_undone(C1, cut)
    assert v.status is Status.INVALID and f"row {k + 2}: UNDO({ref[k - 3].id})" in v.evidence
    assert f"STABLE({desc(ref[k - 1])}) (row {k})" in v.evidence


def test_uncorrected_tentative_tuples_are_caught(world: World) -> None:
    _, _, ref = world
    k = len(ref) // 2
    history = [*ref[:k], ref[k]._replace(kind=Kind.TENTATIVE)]
    v = client_verdict(world, history)
    assert v.status is Status.INVALID and "1 tentative tuple(s) still in force" in v.evidence
    assert f"row {k + 1}" in v.evidence


def test_replica_divergence_is_caught(world: World) -> None:
    config, sources, ref = world
    bad = [*ref]
    bad[3] = bad[3]._replace(tmax=bad[3].tmax + 1)
    h = History(
        sources=sources,
        clients={"c1": corrected(ref)},
        replicas={("n1a", "n1.out"): corrected(ref), ("n1b", "n1.out"): bad},
    )
    verdicts = keyed(check_run(config, None, h)[0])
    assert verdicts[EC, C1].status is Status.VALID
    assert verdicts[RC, "replica n1a (n1.out)"].status is Status.VALID
    assert verdicts[RC, "replica n1b (n1.out)"].status is Status.INVALID
    assert "index 3" in verdicts[RC, "replica n1b (n1.out)"].evidence
    assert check_replica("n1a", "n1.out", ref, {"n1.out": ref}).name == "replica-convergence"


def test_a_crashing_checker_is_unknown_never_valid(world: World) -> None:
    config, sources, ref = world

    def boom(*_: object) -> Verdict:
        raise ZeroDivisionError("kaput")

    v = guarded("p", "s", boom)
    assert v.status is Status.UNKNOWN and "ZeroDivisionError: kaput" in v.evidence
    assert guarded("p", "s", lambda: "valid").status is Status.UNKNOWN  # type: ignore[arg-type, return-value]
    assert guarded("p", "s", lambda: Verdict("p", "bogus", "")).status is Status.UNKNOWN  # type: ignore[arg-type]
    assert guarded("p", "s", lambda: Verdict("p", "valid", "")).status is Status.VALID  # type: ignore[arg-type]
    h = History(
        sources=sources,
        clients={"c1": [1, 2, 3]},  # type: ignore[list-item]
        replicas={("n1a", "n1.out"): ref, ("n1b", "n1.out"): ref},
    )
    verdicts = keyed(check_run(config, None, h)[0])
    for name in (ND, SU, EC):  # every checker of the client crashes on ints
        assert verdicts[name, C1].status is Status.UNKNOWN
        assert "checker crashed" in verdicts[name, C1].evidence


def test_missing_logs_are_unknown(world: World) -> None:
    config, sources, ref = world
    h = History(
        sources=sources,
        clients={"c1": ref},
        replicas={("n1a", "n1.out"): ref},
        problems={"replica n1b (n1.out)": "missing log replicas/n1b/n1.out.arrow"},
    )
    verdicts = keyed(check_run(config, None, h)[0])
    assert verdicts[RC, "replica n1b (n1.out)"].status is Status.UNKNOWN
    assert "missing log replicas/n1b/n1.out.arrow" in verdicts[RC, "replica n1b (n1.out)"].evidence
    no_source = History(
        sources={"s2": sources["s2"]},
        clients={"c1": ref},
        problems={"source s1": "missing log sources/s1.arrow"},
    )
    verdicts = keyed(check_run(config, None, no_source)[0])
    # Changed with the per-property verdicts: no-duplicates and stable-never-undone need no
    # reference run, so they are still judged; the reference-based ones are unknown.
    assert verdicts[ND, C1].status is verdicts[SU, C1].status is Status.VALID
    # Changed: eventual consistency judges each source's log too; s1's is missing (unknown),
    # s2's is whole (valid).
    assert {v.status for k, v in verdicts.items() if k[0] in (EC, RC)
            and not k[1].startswith("source ")} == {Status.UNKNOWN}
    assert verdicts[EC, "source s1"].status is Status.UNKNOWN
    assert verdicts[EC, "source s2"].status is Status.VALID
    assert "no reference run: missing log sources/s1.arrow" in verdicts[EC, C1].evidence


# ---------------------------------------------------------------- a crashed replica
def test_a_recovered_replica_is_judged_by_its_parts(world: World) -> None:
    _, _, ref = world
    refs = {"n1.out": ref}
    k = len(ref) // 2
    cut_short = [*ref[:10], ref[10]._replace(kind=Kind.TENTATIVE)]  # killed mid-failure
    after = ref[k - 1].id  # the partner's last id when the replica restored its state
    v = check_recovered_replica("n1a", "n1.out", ref[k:], after, [cut_short], refs)
    assert v.status is Status.VALID and "recovered after id" in v.evidence, v
    wrong = [*ref[:10], ref[11]]  # a stable tuple the reference does not have there
    v = check_recovered_replica("n1a", "n1.out", ref[k:], after, [wrong], refs)
    assert v.status is Status.INVALID and "incarnation 1" in v.evidence, v
    assert desc(ref[11]) in v.evidence
    gap = ref[k + 1 :]  # the new incarnation skipped a tuple after the restore point
    v = check_recovered_replica("n1a", "n1.out", gap, after, [], refs)
    assert v.status is Status.INVALID and "missing" in v.evidence, v
    undo_into_prefix = [undo(ref[0].id), *ref[k:]]  # takes back restored stable tuples
    v = check_recovered_replica("n1a", "n1.out", undo_into_prefix, after, [], refs)
    assert v.status is Status.INVALID and "never undone" in v.evidence, v


def test_a_replica_killed_twice_has_each_incarnation_judged_from_where_it_began(
        world: World) -> None:
    """Incarnation 2 began after the id its own recovery restored, not at the start."""
    _, _, ref = world
    refs = {"n1.out": ref}
    first, second = 5, 12  # ids restored by the first and the second recovery
    one = list(ref[:8])  # incarnation 1: from the start, killed after 8 tuples
    two = list(ref[first:10])  # incarnation 2: after the first restore, killed again
    now = list(ref[second:])  # incarnation 3: after the second restore
    after = [0, ref[first - 1].id]
    v = check_recovered_replica("n1a", "n1.out", now, ref[second - 1].id, [one, two], refs,
                                earlier_after=after)
    assert v.status is Status.VALID, v
    v = check_recovered_replica("n1a", "n1.out", now, ref[second - 1].id, [one, two], refs)
    assert v.status is Status.INVALID and "incarnation 2" in v.evidence  # judged from id 1
    bad_two = [*ref[first:8], ref[9]]  # incarnation 2 skipped a tuple
    v = check_recovered_replica("n1a", "n1.out", now, ref[second - 1].id, [one, bad_two], refs,
                                earlier_after=after)
    assert v.status is Status.INVALID and "incarnation 2" in v.evidence, v
