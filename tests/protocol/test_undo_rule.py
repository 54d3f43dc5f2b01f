"""The UNDO rule (protocol/undo_rule.py): each kind of tuple by example, then against the
rule as DESIGN.md words it, on random valid streams."""

from __future__ import annotations

from hypothesis import given, settings

from protocol import (
    DATA_KINDS,
    Kind,
    Tuple,
    apply_undo,
    apply_undos,
    boundary,
    kept_end,
    make_tuple,
    rec_done,
    undo,
    undo_cut,
    undone_from,
)
from protocol.tuples import TENTATIVE_BOUNDARY_ID, tentative_boundary

from .strategies import producer_batches


def S(i: int) -> Tuple:
    return make_tuple(Kind.STABLE, i, 10 * i, 10 * i, (i,))


def T(i: int) -> Tuple:
    return make_tuple(Kind.TENTATIVE, i, 10 * i, 10 * i, (-i,))


B, TB, RD = boundary, tentative_boundary, rec_done


# ---------------------------------------------------------------------- by example
def test_data_tuples_after_u_go_and_the_stable_boundary_between_stays() -> None:
    stream = [S(1), S(2), B(30), RD(), T(3), TB(40), T(4), B(50)]
    assert undo_cut(stream, 2) == 4
    assert apply_undos([*stream, undo(2)]) == [S(1), S(2), B(30), RD()]


def test_a_tentative_boundary_after_u_starts_the_cut_even_without_data_after_it() -> None:
    assert undo_cut([S(1), S(2), B(30), TB(40)], 2) == 3
    assert undo_cut([S(1), S(2), B(30), TB(40), T(3)], 2) == 3
    # Before data tuple u, a tentative boundary is not "after u": it stays.
    assert apply_undos([S(1), TB(20), T(2), T(3), undo(2)]) == [S(1), TB(20), T(2)]


def test_without_data_or_tentative_boundary_after_u_nothing_is_undone() -> None:
    stream = [S(1), T(2), B(30), RD()]
    assert undo_cut(stream, 2) == undo_cut(stream, 9) == len(stream)
    assert apply_undo(list(stream), 2) == []


def test_undo_zero_takes_every_data_tuple_and_keeps_the_controls_before_the_first() -> None:
    assert apply_undos([B(5), RD(), T(1), B(15), T(2), undo(0)]) == [B(5), RD()]
    assert undo_cut([], 0) == kept_end([], 0) == 0


def test_u_missing_from_the_stream_cuts_after_the_last_data_tuple_below_it() -> None:
    # A filter dropped tuple 3: UNDO(3) keeps 1, 2 and the boundary after them.
    stream = [S(1), S(2), B(25), T(4), T(5)]
    assert kept_end(stream, 3) == 2 and undone_from(stream, 2) == 3
    assert apply_undos([*stream, undo(3)]) == [S(1), S(2), B(25)]


def test_apply_undo_removes_in_place_and_returns_what_it_removed() -> None:
    stream = [S(1), B(15), T(2), TB(25), T(3)]
    assert apply_undo(stream, 1) == [T(2), TB(25), T(3)]
    assert stream == [S(1), B(15)]


def test_undos_are_applied_in_order_and_never_kept() -> None:
    got = apply_undos([S(1), T(2), T(3), undo(2), T(3), undo(1), S(2), RD(), T(3)])
    assert got == [S(1), S(2), RD(), T(3)]
    assert apply_undos(iter([undo(0), S(1)])) == [S(1)]  # any iterable; nothing to undo


def test_a_log_whose_ids_do_not_increase_is_cut_after_the_last_id_at_most_u() -> None:
    # What a client popping from the end does: 5 stays because 3, after it, is <= 4.
    assert apply_undos([S(1), T(5), T(3), T(6), undo(4)]) == [S(1), T(5), T(3)]


# ---------------------------------------------------------------------- against the words
def _design_cut(stream: list[Tuple], u: int) -> int:
    """DESIGN.md section 2, read forwards: the first data tuple with id > u, or the first
    tentative boundary after u (after the last data tuple with id <= u), whichever comes
    first; the end if neither exists."""
    after_u = max(
        (i + 1 for i, t in enumerate(stream) if t.kind in DATA_KINDS and t.id <= u), default=0
    )
    first_data = next(
        (i for i, t in enumerate(stream) if t.kind in DATA_KINDS and t.id > u), len(stream)
    )
    first_tb = next(
        (
            i
            for i in range(after_u, len(stream))
            if stream[i].kind is Kind.BOUNDARY and stream[i].id == TENTATIVE_BOUNDARY_ID
        ),
        len(stream),
    )
    return min(first_data, first_tb)


@settings(max_examples=300, deadline=None)
@given(producer_batches())
def test_every_undo_of_a_valid_stream_cuts_where_the_design_says(
    batches: list[list[Tuple]],
) -> None:
    in_force: list[Tuple] = []
    for t in (t for b in batches for t in b):
        if t.kind is not Kind.UNDO:
            in_force.append(t)
            continue
        cut = undo_cut(in_force, t.id)
        assert cut == _design_cut(in_force, t.id)
        assert all(x.kind is not Kind.STABLE for x in in_force[cut:])  # a valid stream
        del in_force[cut:]
    assert apply_undos(t for b in batches for t in b) == in_force
