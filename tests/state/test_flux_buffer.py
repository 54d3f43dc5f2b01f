"""Flux's producer buffer (state/flux_buffer.py): the paper's normal case, its dangling
acks as a duplicate filter, take-over and catch-up, and a property over random
interleavings: each destination gets every SN it did not acknowledge, once, in order."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from state.flux_buffer import FluxBuffer, Mark

P, S, PROD = Mark.PRIM, Mark.SEC, Mark.PROD


def send_all(b: FluxBuffer, dest: Mark) -> list[int]:
    """What the producer sends ``dest`` now (acked on send: the paper's action 2a)."""
    sent = []
    while (nxt := b.peek(dest)) is not None:
        b.advance(dest)
        b.ack(nxt[0], dest)
        sent.append(nxt[0])
    return sent


def test_an_entry_goes_once_produced_sent_to_the_primary_and_acked_by_the_secondary() -> None:
    b = FluxBuffer()
    for sn in (1, 2, 3):
        assert b.put(sn, f"t{sn}")
    assert send_all(b, P) == [1, 2, 3] and b.sns() == [1, 2, 3]
    b.ack(2, S, through=True)
    assert b.sns() == [3] and b.floor == 2
    assert b.marks(3) == PROD | P


def test_an_ack_that_outran_production_filters_the_tuple_when_it_comes() -> None:
    b = FluxBuffer()
    b.ack(1, S)  # the secondary got SN 1 from this producer's partner first: dangling
    assert b.marks(1) == S and b.peek(P) is None  # nothing produced yet
    assert b.put(1, "t1") and send_all(b, P) == [1]
    assert b.sns() == [] and b.floor == 1
    assert not b.put(1, "t1 again")  # evicted: a duplicate, ignored
    assert b.put(2, "t2") and not b.put(2, "t2")  # produced twice: the second ignored


def test_take_over_when_the_secondary_consumer_fails() -> None:
    """F-Cons^S fails: its dangling acks go, and entries wait for the primary alone."""
    b = FluxBuffer()
    b.ack(5, S)  # dangling, only the failed one's
    for sn in (1, 2):
        b.put(sn, sn)
    b.ack_all(S)
    assert b.delete == PROD | P and 5 not in b.sns()
    assert send_all(b, P) == [1, 2] and b.sns() == []
    b.put(5, 5)  # still produced later, for the primary
    b.put(3, 3)
    b.put(4, 4)
    assert send_all(b, P) == [3, 4, 5] and b.floor == 5


def test_take_over_when_the_partner_producer_fails_sends_the_secondary_what_it_lacks() -> None:
    """F-Prod^S fails: the secondary consumer sends ``reverse``; from then on this producer
    sends it what it did not acknowledge (from the partner), and the dangling acks filter
    what it already has."""
    b = FluxBuffer()
    for sn in (1, 2, 3):
        b.put(sn, sn)
    send_all(b, P)
    b.ack(2, S, through=True)  # it got 1-2 from the dead partner, and 4 too:
    b.ack(4, S)
    assert send_all(b, S) == [3]  # (reverse: this producer now sends the secondary)
    for sn in (4, 5):
        b.put(sn, sn)
    assert send_all(b, S) == [5] and send_all(b, P) == [4, 5]
    assert b.sns() == [] and b.floor == 5


def test_catch_up_sends_the_new_replica_what_its_partner_had_not_acknowledged() -> None:
    b = FluxBuffer()
    for sn in (1, 2, 3, 4):
        b.put(sn, sn)
    b.advance(P)
    b.ack(1, P)
    assert b.peek(P) == (2, 2)
    b.ack(6, P)  # the primary got 6 from the partner producer already: dangling
    b.ack_all(S)  # the secondary consumer failed: 1 goes (produced, acked by the primary)
    assert b.sns() == [2, 3, 4, 6]
    b.reset(S)  # a new one holds the primary's state: 1 and 6, not 2-4
    assert b.delete == PROD | P | S and b.marks(6) == P | S
    assert send_all(b, S) == [2, 3, 4] and send_all(b, P) == [2, 3, 4]
    b.put(5, 5)
    b.put(6, 6)  # (filtered: both have it)
    assert send_all(b, S) == [5] and send_all(b, P) == [5]
    assert b.sns() == [] and b.floor == 6


def test_the_reversed_buffer_swaps_primary_and_secondary() -> None:
    b = FluxBuffer()
    b.put(1, 1)
    b.ack(2, S)
    send_all(b, P)
    r = b.reversed()
    assert r.marks(1) == PROD | S and r.marks(2) == P
    assert r.peek(S) is None and r.delete == b.delete


@given(st.lists(st.tuples(st.sampled_from(["put", "ackP", "ackS", "sendP", "sendS"]),
                          st.integers(1, 3)), max_size=80))
def test_each_destination_gets_each_sn_it_lacks_once_in_order(ops: list[tuple[str, int]]) -> None:
    """Random interleavings of production (in SN order), in-order cumulative acks from each
    consumer (of SNs its other producer sent it, possibly ahead of this one) and sends: no
    destination is sent an SN twice or one it acknowledged, sends are in SN order, and an
    entry stays exactly while its marks do not cover the delete set."""
    b = FluxBuffer()
    produced = 0
    acked = {P: 0, S: 0}
    sent: dict[Mark, list[int]] = {P: [], S: []}
    horizon = 0  # what the partner producer may have produced (acks come from its sends)
    for op, n in ops:
        if op == "put":
            for _ in range(n):
                produced += 1
                assert b.put(produced, produced)
            horizon = max(horizon, produced + 2)
        elif op.startswith("ack"):
            dest = P if op == "ackP" else S
            to = min(acked[dest] + n, horizon)
            if to > acked[dest]:
                acked[dest] = to
                b.ack(to, dest, through=True)
        else:
            dest = P if op == "sendP" else S
            while (nxt := b.peek(dest)) is not None:
                assert nxt[0] > acked[dest], "sent what the destination acknowledged"
                b.advance(dest)
                sent[dest].append(nxt[0])
    for dest in (P, S):
        assert sent[dest] == sorted(set(sent[dest]))  # once each, in order
        assert all(sn <= produced for sn in sent[dest])
    for sn in b.sns():
        marks = b.marks(sn)
        assert marks is not None and marks & b.delete != b.delete
