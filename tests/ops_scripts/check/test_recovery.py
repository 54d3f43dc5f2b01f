"""The recovery a stream shows against its reference (ops_scripts/check/recovery.py): the
paper's Figure 2, one case per type, and the evidence an invalid verdict now carries."""

from __future__ import annotations

from ops_scripts.check.properties import check_stream
from ops_scripts.check.recovery import RecoveryType, classify
from protocol.tuples import Kind, Tuple, make_tuple


def t(i: int, v: int | None = None, *, id: int | None = None) -> Tuple:
    """Result i of a stream (time 100 i, value i unless ``v``), id i unless ``id``."""
    return make_tuple(Kind.STABLE, i if id is None else id, 100 * i, 100 * i + 5,
                      (i if v is None else v,))


REF = [t(i) for i in range(1, 7)]  # t1 .. t6


def renumbered(ts: list[Tuple]) -> list[Tuple]:
    """As a consumer holds them: ids increase along the stream (a restarted producer's)."""
    return [make_tuple(x.kind, n, x.time, x.tmax, x.values) for n, x in enumerate(ts, 1)]


def test_precise_is_the_reference() -> None:
    r = classify(REF, REF)
    assert r.type is RecoveryType.PRECISE and str(r) == "precise"


def test_gap_loses_tuples() -> None:  # t4 lost
    r = classify(renumbered([*REF[:3], *REF[4:]]), REF)
    assert (r.type, r.lost, r.repeated, r.different) == (RecoveryType.GAP, 1, 0, 0)
    assert r.first_lost == REF[3] and str(r) == "gap (1 lost)"


def test_repeating_sends_identical_tuples_twice() -> None:  # t2 t3 again after t3
    r = classify(renumbered([*REF[:3], *REF[1:]]), REF)
    assert (r.type, r.lost, r.repeated, r.different) == (RecoveryType.REPEATING, 0, 2, 0)


def test_convergent_sends_different_duplicates_then_converges() -> None:  # t2' t3' after t3
    got = [*REF[:3], t(2, 99), t(3, 98), *REF[3:]]
    r = classify(renumbered(got), REF)
    assert (r.type, r.lost, r.repeated, r.different) == (RecoveryType.CONVERGENT, 0, 0, 2)
    assert r.first_extra is not None and r.first_extra.values == (99,)


def test_a_partial_result_in_place_of_the_whole_one_is_a_gap() -> None:
    """Amnesia on an aggregate: the window the restart cut into comes out from part of its
    input, the whole one never: something was lost, whatever came instead."""
    got = [*REF[:3], t(4, 1), *REF[4:]]
    r = classify(renumbered(got), REF)
    assert (r.type, r.lost, r.different) == (RecoveryType.GAP, 1, 1)


def test_the_types_are_ordered_from_the_strongest() -> None:
    assert RecoveryType.PRECISE < RecoveryType.REPEATING < RecoveryType.CONVERGENT \
        < RecoveryType.DIVERGENT < RecoveryType.GAP


def test_an_invalid_stream_says_which_recovery_it_shows() -> None:
    v = check_stream("eventual-consistency", "client c1", renumbered([*REF[:3], *REF[4:]]),
                     REF, "client")
    assert v.status.value == "invalid"
    assert "as a recovery: gap (1 lost)" in v.evidence
