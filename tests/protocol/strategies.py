"""Hypothesis strategies for valid protocol messages (and for almost-valid ones), and for
valid streams as a producer emits them.

Valid means: what :func:`protocol.codec.encode` accepts and what decodes back equal. Other
test packages may import these to build messages for their own properties.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from protocol.messages import (
    Ack,
    Batch,
    Challenge,
    ConsistencyState,
    HeartbeatRequest,
    HeartbeatResponse,
    Hello,
    Message,
    Proof,
    ReconcileGrant,
    ReconcileRefuse,
    ReconcileRequest,
    StandbyAck,
    StandbyCheckpoint,
    Subscribe,
    Unsubscribe,
)
from protocol.tuples import (
    DATA_KINDS,
    Kind,
    Tuple,
    boundary,
    make_tuple,
    rec_done,
    tentative_boundary,
    undo,
)
from protocol.undo_rule import apply_undo

__all__ = [
    "MESSAGE_STRATEGIES",
    "any_values",
    "batch_tuples",
    "ints",
    "messages",
    "names",
    "producer_batches",
    "tuples",
    "values",
]

#: Every int orjson carries: signed 64-bit up to unsigned 64-bit.
ints = st.integers(min_value=-(2**63), max_value=2**64 - 1)
#: Acked tuple ids and heartbeat frontiers (tuple times): never negative.
ack_ids = st.integers(min_value=0, max_value=2**64 - 1)
#: Stream / replica names, including the empty string and non-ASCII (never lone surrogates).
names = st.text(max_size=12)
#: Attribute values: JSON scalars, floats finite.
values = st.one_of(
    st.none(),
    st.booleans(),
    ints,
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=16),
)
#: Tuple ids, times and tmax: signed 64-bit (int64 columns on the wire).
int64s = st.integers(min_value=-(2**63), max_value=2**63 - 1)
tuples: st.SearchStrategy[Tuple] = st.builds(
    lambda kind, i, t, m, vals: make_tuple(
        kind, i, t, m, vals if kind in (Kind.STABLE, Kind.TENTATIVE) else ()),
    st.sampled_from(Kind),
    int64s,
    int64s,
    int64s,
    st.lists(values, max_size=6).map(tuple),
)  # (control tuples carry no values)


@st.composite
def batch_tuples(draw: st.DrawFn, max_size: int = 20) -> tuple[Tuple, ...]:
    """What one Batch carries: data tuples of one arity (a stream has one schema) and
    control tuples, which carry no values."""
    arity = draw(st.integers(0, 6))
    out = []
    for kind, i, t, m in draw(st.lists(st.tuples(st.sampled_from(Kind), int64s, int64s,
                                                  int64s), max_size=max_size)):
        data = kind in (Kind.STABLE, Kind.TENTATIVE)
        vals = tuple(draw(st.lists(values, min_size=arity, max_size=arity))) if data else ()
        out.append(make_tuple(kind, i, t, m, vals))
    return tuple(out)


states = st.sampled_from(ConsistencyState)

MESSAGE_STRATEGIES: dict[type[Any], st.SearchStrategy[Any]] = {
    Batch: st.builds(Batch, names, batch_tuples()),
    Subscribe: st.builds(Subscribe, names, names, ints, ints, ints, st.booleans()),
    Unsubscribe: st.builds(Unsubscribe, names, names, st.booleans()),
    HeartbeatRequest: st.builds(
        HeartbeatRequest, names, ints, st.dictionaries(names, ack_ids, max_size=5)
    ),
    HeartbeatResponse: st.builds(
        lambda replica, seq, state, entries: HeartbeatResponse(
            replica, seq, state, {s: e[0] for s, e in entries.items()},
            {s: e[1] for s, e in entries.items()},
        ),
        names, ints, states, st.dictionaries(names, st.tuples(states, ack_ids), max_size=5),
    ),
    Ack: st.builds(Ack, names, names, ints),
    ReconcileRequest: st.builds(ReconcileRequest, names, names, ints, ints),
    ReconcileGrant: st.builds(ReconcileGrant, names, ints),
    ReconcileRefuse: st.builds(ReconcileRefuse, names, ints, names),
    Hello: st.builds(Hello, names, names),
    Challenge: st.builds(Challenge, names, names, names),
    Proof: st.builds(Proof, names),
    StandbyCheckpoint: st.builds(
        StandbyCheckpoint, names, ints, ints,
        st.dictionaries(names, st.recursive(
            values, lambda inner: st.lists(inner, max_size=4)
            | st.dictionaries(names, inner, max_size=4), max_leaves=12), max_size=4),
        st.dictionaries(names, st.tuples(ack_ids, ack_ids), max_size=4),
        st.dictionaries(names, st.lists(tuples, max_size=5).map(tuple), max_size=3),
        st.dictionaries(names, st.lists(st.lists(st.integers(0, 50), min_size=1, max_size=1)
                                        .map(lambda i: [i[0], 7]), max_size=3), max_size=3)),
    StandbyAck: st.builds(StandbyAck, names, ints, st.booleans()),
}

#: Any valid message.
messages: st.SearchStrategy[Message] = st.one_of(*MESSAGE_STRATEGIES.values())

#: Values that may or may not be encodable: NaN, infinities, huge ints, containers, other
#: types, lone surrogates. For "encode refuses exactly what would not come back equal".
any_values = st.one_of(
    values,
    st.floats(),
    st.integers(),
    st.text(alphabet=st.characters(codec=None, categories=["Cs", "Ll"]), max_size=3),
    st.lists(st.integers(), max_size=2),
    st.lists(st.integers(), max_size=2).map(tuple),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
    st.sampled_from([Kind.UNDO, ConsistencyState.STABLE, b"bytes", object()]),
    st.datetimes(),
)


# ------------------------------------------------------------------ streams with UNDOs
_STEPS = ("stable", "tentative", "boundary", "tentative_boundary", "rec_done", "undo", "flush")


@st.composite
def producer_batches(draw: st.DrawFn, max_steps: int = 30) -> list[list[Tuple]]:
    """A valid stream as a producer (an SOutput, an operator) emits it, cut into batches:
    STABLE and TENTATIVE runs whose ids increase (with gaps, as a filter leaves), stable and
    tentative boundaries, REC_DONEs, and UNDOs (UNDO(u) with u from the last stable id in
    force up to one past the last id: it never takes back a stable tuple). Taint is sticky:
    no STABLE tuple follows a TENTATIVE tuple or a tentative boundary in force. After an
    UNDO the ids go on after the last data tuple kept (corrections reuse the undone ids)."""
    in_force: list[Tuple] = []  # what the stream holds so far, to keep the next steps valid
    batches: list[list[Tuple]] = []
    batch: list[Tuple] = []
    next_id = 1
    for _ in range(draw(st.integers(0, max_steps))):
        step = draw(st.sampled_from(_STEPS))
        stable_ids = [t.id for t in in_force if t.kind is Kind.STABLE]
        tainted = any(
            t.kind is Kind.TENTATIVE or (t.kind is Kind.BOUNDARY and t.id) for t in in_force
        )
        new: list[Tuple] = []
        if step in ("stable", "tentative") and not (step == "stable" and tainted):
            kind = Kind.STABLE if step == "stable" else Kind.TENTATIVE
            first = next_id + draw(st.integers(0, 2))
            n = draw(st.integers(1, 3))
            new = [make_tuple(kind, i, 10 * i, 10 * i, (i, step)) for i in range(first, first + n)]
            next_id = first + n
        elif step == "boundary":
            new = [boundary(10 * next_id)]
        elif step == "tentative_boundary":
            new = [tentative_boundary(10 * next_id)]
        elif step == "rec_done":
            new = [rec_done(10 * next_id)]
        elif step == "undo":
            u = draw(st.integers(max(stable_ids, default=0), next_id))
            new = [undo(u)]
        elif step == "flush" and batch:
            batches.append(batch)
            batch = []
        for t in new:
            if t.kind is Kind.UNDO:
                apply_undo(in_force, t.id)
                next_id = max((x.id for x in in_force if x.kind in DATA_KINDS), default=0) + 1
            else:
                in_force.append(t)
        batch.extend(new)
    if batch:
        batches.append(batch)
    return batches
