"""Properties: the buffer holds the stream in force by the one UNDO rule, and whatever the
producer did, a subscriber that held an earlier state of the stream and applies
``replay(s, t)`` holds the buffer's stream in force (its REC_DONEs aside: a replay is
history and carries none).

The buffer finds "after data tuple u" by binary search (its fast path); the reference is
``protocol.undo_rule`` (a plain scan from the end). A hypothesis state machine drives a
producer (stable runs, tentative runs, stable and tentative boundaries, REC_DONEs, UNDO to
the last stable id or later, corrections, batches that mix all of them), two consumers that
ack, and subscribers that copied the stream at random moments; the reference applies the
same tuples with ``helpers.apply``. A plain property feeds random valid streams
(``tests.protocol.strategies.producer_batches``) and compares with ``apply_undos``.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from protocol.tuples import DATA_KINDS, TENTATIVE_BOUNDARY_ID, Kind, Tuple
from protocol.undo_rule import apply_undos, kept_end
from state import OutputBuffer, ReplayError
from state.spill import SpillStore
from state.spill_list import SpillList
from tests.protocol.strategies import producer_batches

from .helpers import RD, TB, B, S, T, U, apply, data_of, last_ids


@settings(max_examples=300, deadline=None)
@given(producer_batches(), st.booleans())
def test_the_buffer_holds_the_one_rules_stream_in_force(
    batches: list[list[Tuple]], one_batch: bool
) -> None:
    stream = [t for batch in batches for t in batch]
    b = OutputBuffer("prop")
    for batch in [stream] if one_batch else batches:
        b.append(batch)
    expected = apply_undos(stream)
    assert list(b) == expected
    s, t = last_ids(expected)
    assert (b.last_stable_id, b.last_id) == (s, max(s, t))


class BufferMachine(RuleBasedStateMachine):
    def new_buffer(self) -> OutputBuffer:
        return OutputBuffer("prop")

    @initialize()
    def start(self) -> None:
        self.buffer = self.new_buffer()
        self.buffer.set_consumers(["a", "b"])
        self.model: list[Tuple] = []  # the stream in force, from the first tuple
        self.pending: list[Tuple] = []  # produced, not yet appended (one batch)
        self.copies: list[list[Tuple]] = []  # what subscribers held at some moment
        self.next_id = 1

    # ------------------------------------------------------------------ producer
    def produce(self, tuples: list[Tuple]) -> None:
        self.pending.extend(tuples)
        apply(self.model, tuples)

    def tainted(self) -> bool:
        """A tentative tuple or boundary in force: no stable tuple may follow until an UNDO."""
        return any(
            t.kind is Kind.TENTATIVE or (t.kind is Kind.BOUNDARY and t.id == TENTATIVE_BOUNDARY_ID)
            for t in self.model
        )

    @precondition(lambda self: not self.tainted())
    @rule(n=st.integers(1, 4), gap=st.integers(0, 2))
    def stable_run(self, n: int, gap: int) -> None:
        first = self.next_id + gap
        self.produce([S(i) for i in range(first, first + n)])
        self.next_id = first + n

    @rule(n=st.integers(1, 4), gap=st.integers(0, 2))
    def tentative_run(self, n: int, gap: int) -> None:
        first = self.next_id + gap
        self.produce([T(i) for i in range(first, first + n)])
        self.next_id = first + n

    @rule(kind=st.sampled_from(["rec_done", "boundary", "tentative_boundary"]))
    def control(self, kind: str) -> None:
        time = 10 * self.next_id
        self.produce([{"rec_done": RD, "boundary": B(time), "tentative_boundary": TB(time)}[kind]])

    @rule(data=st.data())
    def undo(self, data: st.DataObject) -> None:
        s, _ = last_ids(self.model)
        u = data.draw(st.integers(s, self.next_id + 1), label="undo to")
        self.produce([U(u)])
        # Ids restart after the last tuple kept (corrections reuse the undone ids).
        self.next_id = max((t.id for t in data_of(self.model)), default=0) + 1

    @rule(n=st.integers(0, 3))
    def correction(self, n: int) -> None:
        s, _ = last_ids(self.model)
        self.produce([U(s), *[S(i) for i in range(s + 1, s + 1 + n)], RD])
        self.next_id = s + 1 + n

    @rule()
    def flush(self) -> None:
        self.buffer.append(self.pending)
        self.pending = []

    # ------------------------------------------------------------------ consumers
    @rule(consumer=st.sampled_from(["a", "b"]), back=st.integers(-3, 6))
    def ack(self, consumer: str, back: int) -> None:
        # back < 0: the consumer got stable tuples from another replica that is ahead.
        self.flush()
        s, _ = last_ids(self.model)
        self.buffer.ack(consumer, max(0, s - back))

    @rule()
    def subscriber_copies(self) -> None:
        self.flush()
        self.copies.append(list(self.model))

    @precondition(lambda self: bool(self.copies))
    @rule(data=st.data())
    def resubscribe(self, data: st.DataObject) -> None:
        self.flush()
        held = list(data.draw(st.sampled_from(self.copies), label="subscriber"))
        s, t = last_ids(held)
        if s < self.buffer.trimmed_up_to:
            try:
                self.buffer.replay(s, t)
            except ReplayError:
                return
            raise AssertionError(f"replay({s}, {t}) below the trim point did not raise")
        reply = self.buffer.replay(s, t)
        # A replay is history: no REC_DONE (state/buffer.py); the checks below compare
        # streams without their REC_DONEs.
        assert all(x.kind is not Kind.REC_DONE for x in reply)
        continued = t > s and not (reply and reply[0].kind is Kind.UNDO)
        # The spec of case 2: continue iff the buffer's last stable id is s and it holds
        # tentative tuples with every id s+1..t.
        model_s, _ = last_ids(self.model)
        run = list(range(s + 1, t + 1))
        assert continued == (t > s and model_s == s and _ids_in(self.model, s, t) == run)
        held_run = _ids_in(held, s, t)
        rest = reply
        if reply and reply[0].kind is Kind.UNDO:
            assert reply[0] == U(s)  # case 3 undoes exactly the subscriber's tentatives
            apply(held, reply[:1])  # keeps the controls after data tuple s (new UNDO rule)
            rest = reply[1:]
            assert all(x.kind is not Kind.UNDO for x in rest)
        # The rest restates everything after the last data tuple the subscriber holds now
        # (max(s, t), or s after the UNDO), controls included: the subscriber drops its own
        # trailing controls first (boundaries are idempotent; this makes the check exact).
        del held[kept_end(held, max(s, t)) :]
        apply(held, rest)
        if not continued:
            assert _no_rec_done(held) == _no_rec_done(self.model)
            return
        # The continuation is exact; before it, the subscriber keeps its own tentative run
        # (the buffer cannot see it), equal in data when it too has every id s+1..t
        # (tentative values are a function of the id here), with controls possibly moved.
        assert (_no_rec_done(held[kept_end(held, t) :])
                == _no_rec_done(self.model[kept_end(self.model, t) :]))
        if held_run == run:
            assert data_of(held) == data_of(self.model)

    # ------------------------------------------------------------------ invariants
    @invariant()
    def buffer_holds_the_stream_in_force_after_the_trim_point(self) -> None:
        if self.pending:
            return
        b = self.buffer
        assert list(b) == self.model[kept_end(self.model, b.trimmed_up_to) :]
        s, t = last_ids(self.model)
        assert b.last_stable_id == s
        assert b.last_id == max(s, t, b.trimmed_up_to)
        assert b.trimmed_up_to <= s
        trimmed = self.model[: kept_end(self.model, b.trimmed_up_to)]
        assert all(x.kind is not Kind.TENTATIVE for x in trimmed)


def _no_rec_done(stream: list[Tuple]) -> list[Tuple]:
    return [x for x in stream if x.kind is not Kind.REC_DONE]


def _ids_in(stream: list[Tuple], s: int, t: int) -> list[int]:
    return [x.id for x in stream if x.kind in DATA_KINDS and s < x.id <= t]


BufferMachine.TestCase.settings = settings(max_examples=250, stateful_step_count=40, deadline=None)
test_replay_restores_the_stream_in_force = BufferMachine.TestCase


class SpilledBufferMachine(BufferMachine):
    """The same buffer holding its stream in a spill list that keeps one tuple in memory
    (state/spill_list.py): every index, slice, cut and trim crosses the disk."""

    def new_buffer(self) -> OutputBuffer:
        self.dir = Path(tempfile.mkdtemp(prefix="spill-"))
        self.store = SpillStore(self.dir, "prop")
        return OutputBuffer("prop", spill=SpillList(self.store, 1))

    @invariant()
    def disk_holds_what_is_held(self) -> None:
        if hasattr(self, "store"):
            assert self.store.stats().tuples + self.buffer._items.in_memory == \
                len(self.buffer._items)  # type: ignore[union-attr]

    def teardown(self) -> None:
        if hasattr(self, "dir"):
            shutil.rmtree(self.dir, ignore_errors=True)


SpilledBufferMachine.TestCase.settings = settings(
    max_examples=80, stateful_step_count=40, deadline=None)
test_a_spilled_buffer_replays_the_same = SpilledBufferMachine.TestCase


@settings(max_examples=100, deadline=None)
@given(producer_batches(), st.booleans())
def test_a_spilled_buffer_holds_the_same_stream_in_force(
    batches: list[list[Tuple]], one_batch: bool
) -> None:
    stream = [t for batch in batches for t in batch]
    with tempfile.TemporaryDirectory() as d:
        b = OutputBuffer("prop", spill=SpillList(SpillStore(d, "prop"), 1))
        for batch in [stream] if one_batch else batches:
            b.append(batch)
        assert list(b) == apply_undos(stream)
