"""Hypothesis strategies for valid protocol messages (and for almost-valid ones).

Valid means: what :func:`protocol.codec.encode` accepts and what decodes back equal. Other
test packages may import these to build messages for their own properties.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from protocol.messages import (
    Ack,
    Batch,
    ConsistencyState,
    HeartbeatRequest,
    HeartbeatResponse,
    Message,
    ReconcileGrant,
    ReconcileRefuse,
    ReconcileRequest,
    Subscribe,
    Unsubscribe,
)
from protocol.tuples import Kind, Tuple, make_tuple

__all__ = [
    "MESSAGE_STRATEGIES",
    "any_values",
    "ints",
    "messages",
    "names",
    "tuples",
    "values",
]

#: Every int orjson carries: signed 64-bit up to unsigned 64-bit.
ints = st.integers(min_value=-(2**63), max_value=2**64 - 1)
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
tuples: st.SearchStrategy[Tuple] = st.builds(
    make_tuple,
    st.sampled_from(Kind),
    ints,
    ints,
    ints,
    st.lists(values, max_size=6).map(tuple),
)
states = st.sampled_from(ConsistencyState)

MESSAGE_STRATEGIES: dict[type[Any], st.SearchStrategy[Any]] = {
    Batch: st.builds(Batch, names, st.lists(tuples, max_size=20).map(tuple)),
    Subscribe: st.builds(Subscribe, names, names, ints, ints),
    Unsubscribe: st.builds(Unsubscribe, names, names),
    HeartbeatRequest: st.builds(HeartbeatRequest, names, ints),
    HeartbeatResponse: st.builds(
        HeartbeatResponse, names, ints, states, st.dictionaries(names, states, max_size=5)
    ),
    Ack: st.builds(Ack, names, names, ints),
    ReconcileRequest: st.builds(ReconcileRequest, names, names, ints, ints),
    ReconcileGrant: st.builds(ReconcileGrant, names, ints),
    ReconcileRefuse: st.builds(ReconcileRefuse, names, ints, names),
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
