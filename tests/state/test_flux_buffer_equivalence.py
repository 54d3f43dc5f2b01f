"""The runtime's output buffer keeps Flux's buffer invariants (docs/flux.md): for a stream
produced in id order and acknowledged in order (the paper's amortized acks), what
``OutputBuffer`` trims equals what ``FluxBuffer`` (state/flux_buffer.py, the paper's buffer
written out with its marks) evicts, through dangling acks (a consumer acks ids it got from
the producer's partner, before they are produced here) and a failed consumer's ``ack_all``
(``OutputBuffer.release``) and its new replica's rejoin (its Subscribe at its partner's
position: the paper's ``csync`` with ``reset``)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from protocol.tuples import Kind, make_tuple
from state.buffer import OutputBuffer
from state.flux_buffer import FluxBuffer, Mark

DEST = {"p": Mark.PRIM, "s": Mark.SEC}
ops = st.lists(st.one_of(
    st.tuples(st.just("put"), st.integers(1, 4)),
    st.tuples(st.just("ack"), st.sampled_from(["p", "s"]), st.integers(0, 6)),
    st.tuples(st.just("fail"), st.sampled_from(["p", "s"])),
    st.tuples(st.just("rejoin"), st.sampled_from(["p", "s"])),
), max_size=40)


@given(ops)
def test_what_the_output_buffer_trims_is_what_flux_s_buffer_evicts(program: list[tuple]) -> None:
    flux, buf = FluxBuffer(), OutputBuffer("s")
    buf.set_consumers(("p", "s"))
    produced, acked, failed = 0, {"p": 0, "s": 0}, set[str]()
    for op in program:
        if op[0] == "put":
            for _ in range(op[1]):
                produced += 1
                flux.put(produced, produced)
                buf.append([make_tuple(Kind.STABLE, produced, produced, produced, (produced,))])
        elif op[0] == "ack":
            _, who, ahead = op
            if who in failed:
                continue
            acked[who] = max(acked[who], produced + ahead - 3)  # in order; ahead: dangling
            if acked[who] > 0:
                flux.ack(acked[who], DEST[who], through=True)
                buf.ack(who, acked[who])
        elif op[0] == "fail":
            if failed:
                continue  # one failure per pair
            failed.add(op[1])
            flux.ack_all(DEST[op[1]])
            buf.release(op[1])
        elif op[1] in failed:  # its new replica holds its partner's state (csync, reset)
            failed.remove(op[1])
            other = "s" if op[1] == "p" else "p"
            acked[op[1]] = acked[other]
            flux.reset(DEST[op[1]])
            if acked[other] > 0:
                flux.ack(acked[other], DEST[op[1]], through=True)
            buf.ack(op[1], acked[other])  # (its Subscribe acks what it holds, 0 too)
        assert buf.trimmed_up_to == flux.floor, (op, produced, acked, failed)
