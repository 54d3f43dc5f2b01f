"""The frames ``dpc fuzz`` judges: valid samples of every message, and their mutations.

Role: the generator half of the fuzzer (:mod:`ops_scripts.harness.fuzz` judges). Rules:

* :data:`SAMPLES` holds valid messages of every class of ``MESSAGE_CLASSES``; a class
  without one, or a sample that does not round-trip, stops the fuzzer before it starts
  (:class:`FuzzError`): a new message class comes with its samples, here.
* A frame is random bytes or one :class:`Mutation` of a sample's frame: bytes edited, the
  header's length, version or type changed, or the payload's JSON changed (a node of
  another type, a list one item short or long, extreme or negative ints, floats and
  non-finite tokens, bools, deep nesting, broken UTF-8, a name twice, unknown codes).
  JSON mutations re-frame the payload with its true length, so they reach the validation.
* Deterministic: frame ``index`` of ``seed`` is drawn from its own ``random.Random((seed
  << 32) | index)`` (the frame and the chunk sizes it is fed in), so :func:`frame_at`
  rebuilds any frame alone.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from functools import partial
from itertools import pairwise
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.ipc as ipc

from ops_scripts.errors import FuzzError
from protocol.codec import DEFAULT_MAX_FRAME_SIZE, VERSION, decode_frame, encode
from protocol.columns import encode_columns
from protocol.errors import LocalProtocolError, RemoteProtocolError
from protocol.messages import (
    MESSAGE_CLASSES,
    MESSAGE_TYPES,
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
from protocol.payloads import show
from protocol.tuples import Kind, boundary, make_tuple, rec_done, tentative_boundary, undo

__all__ = ["SAMPLES", "Case", "Mutation", "SamplePool", "check_samples", "draw", "frame_at"]

_S, _T = ConsistencyState, Kind
_U64, _I64 = 2**64 - 1, -(2**63)

#: Valid messages of every class, the seeds of the mutations (several per class: empty and
#: full containers, every tuple kind and consistency state, the extreme ints, odd strings).
SAMPLES: dict[type[Message], tuple[Message, ...]] = {
    Batch: (
        Batch("s1", ()),
        Batch("s1", (make_tuple(_T.STABLE, 1, 1000, 1000, ("a", 1, 2.5, True, None)),
                     make_tuple(_T.TENTATIVE, 2, 2000, 1500, ("é[{\"\\", -1, -0.0, False, "")),
                     boundary(3000))),
        Batch("out", (tentative_boundary(4000), undo(1), make_tuple(_T.UNDO_START, 0, 0, 0, ()),
                      rec_done(5000), make_tuple(_T.UP_FAILURE, 0, 6000, 6000, ()),
                      make_tuple(_T.REC_REQUEST, 0, 0, 0, ()))),
        Batch("", (make_tuple(_T.STABLE, 2**63 - 1, _I64, 0, (2**63 - 1, _I64, 1e308, 5e-324, "☃")),)),
        # mixed-type columns travel as orjson text per cell (protocol/columns.py)
        Batch("m", (make_tuple(_T.STABLE, 1, 10, 10, (1, "a", None, _U64)),
                    make_tuple(_T.TENTATIVE, 2, 20, 20, (2.5, 3, True, 1)), boundary(30),
                    make_tuple(_T.STABLE, 3, 40, 40, (None, None, False, -1)))),
    ),
    Subscribe: (Subscribe("s1", "n2a", 0, 0), Subscribe("", "é", _U64, 2**63, 7),
                Subscribe("s1", "n1b", 0, 0, live=True)),
    Unsubscribe: (Unsubscribe("s1", "n2a"), Unsubscribe("out", ""),
                  Unsubscribe("s1", "n1b", release=True)),
    HeartbeatRequest: (HeartbeatRequest("n1a", 0), HeartbeatRequest("n2b", 17, {"s1": 3, "s2": 0}),
                       HeartbeatRequest("x", -1, {"é": _U64})),
    HeartbeatResponse: (
        HeartbeatResponse("n1a", 1, _S.STABLE, {}, {}),
        HeartbeatResponse("n1b", 42, _S.UP_FAILURE, {"out": _S.STABILIZATION, "o2": _S.STABLE},
                          {"out": 12345, "o2": 0}),
        HeartbeatResponse("", _I64, _S.STABILIZATION, {"": _S.UP_FAILURE}, {"": _U64}),
    ),
    Ack: (Ack("s1", "n2a", 5), Ack("s", "", 0)),
    ReconcileRequest: (ReconcileRequest("n1a", "n1", 1, 0), ReconcileRequest("r", "", _U64, _I64)),
    ReconcileGrant: (ReconcileGrant("n1b", 1), ReconcileGrant("", 0)),
    ReconcileRefuse: (ReconcileRefuse("n1b", 1, "reconciling"), ReconcileRefuse("n1b", -2, "")),
    Hello: (Hello("c1", "0f" * 16), Hello("", "")),
    Challenge: (Challenge("n1a", "a1" * 16, "5e" * 32), Challenge("é", "", "")),
    Proof: (Proof("77" * 32), Proof("")),
    StandbyCheckpoint: (
        StandbyCheckpoint("n1a", 1, 0, {}, {}, {}),
        StandbyCheckpoint("n1a", 7, 6, {"u": {"buckets": [[1, 2.5, None, "é"]], "n": 3},
                                        "out": {"last_stable_id": 12}},
                          {"s1": (12, 12), "s2": (0, 3)},
                          {"n1.out": (make_tuple(_T.STABLE, 13, 1000, 1000, ("a", 1)),
                                      boundary(2000))}),
    ),
    StandbyAck: (StandbyAck("n1b", 7, False), StandbyAck("", _I64, True)),
}


class Mutation(Enum):
    """How a frame was made (one mutation of one sample's frame, or random bytes)."""

    RANDOM_BYTES = "random bytes"
    NONE = "none"  # the sample's frame as it is
    BIT_FLIP = "bit flip"
    INSERT = "byte insert"
    DELETE = "byte delete"
    OVERWRITE = "byte overwrite"
    TRUNCATE = "truncation"
    EXTEND = "extension"
    LENGTH_BIG = "length too big"
    LENGTH_SMALL = "length too small"
    LENGTH_ZERO = "length zero"
    LENGTH_OVER = "length over the limit"
    VERSION = "version byte"
    TYPE = "type byte"
    WRONG_TYPE = "json wrong type"
    ARITY = "json wrong arity"
    HUGE_INT = "json huge int"
    NEGATIVE_INT = "json negative int"
    FLOAT = "json float"
    BOOL = "json bool for int"
    NESTING = "json deep nesting"
    NON_UTF8 = "json non-utf-8"
    DUPLICATE_KEY = "json duplicate key"
    UNKNOWN_CODE = "json unknown code"
    COLUMN_TYPE = "columns: a column of another Arrow type"
    COLUMN_LAYOUT = "columns: a column dropped, added, renamed or moved"
    COLUMN_VALUES = "columns: hostile values"
    IPC_STRUCTURE = "columns: IPC messages and options"


_Path = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class _Sample:
    """A sample's frame and its payload as a tree of lists, with the paths of its nodes (a
    Batch: the message itself as the tree, no paths: its payload is binary)."""

    frame: bytes
    code: int
    tree: Any
    nodes: tuple[_Path, ...]
    lists: tuple[_Path, ...]
    leaves: tuple[_Path, ...]
    ints: tuple[_Path, ...]
    codes: tuple[_Path, ...]  # where enum codes are (tuple kinds, consistency states)
    strs: tuple[_Path, ...]
    entries: tuple[_Path, ...]  # lists of [name, ...] entries: mappings on the wire

    def at(self, path: _Path) -> Any:
        node = self.tree
        for i in path:
            node = node[i]
        return node


def _prepare(msg: Message) -> _Sample:
    frame = encode(msg)
    if isinstance(msg, Batch):  # binary: mutated as columns (_COLUMN_MUTATORS), not as JSON
        return _Sample(frame, frame[5], msg, (), (), (), (), (), (), ())
    tree = orjson.loads(frame[6:])
    found: list[tuple[_Path, Any]] = []

    def walk(node: Any, path: _Path) -> None:
        found.append((path, node))
        if type(node) is list:
            for i, x in enumerate(node):
                walk(x, (*path, i))

    walk(tree, ())

    def paths(ok: Callable[[Any], bool]) -> tuple[_Path, ...]:
        return tuple(p for p, x in found if ok(x))

    def is_entries(x: Any) -> bool:
        return type(x) is list and bool(x) and all(
            type(e) is list and e and type(e[0]) is str for e in x)

    def is_code(path: _Path) -> bool:  # a small int that 255 may not replace: a code
        try:
            decode_frame(_frame(frame[5], _replace(tree, path, 255)))
        except Exception:  # noqa: BLE001 - refused, or a crash that judge() will report
            return True
        return False

    small = paths(lambda x: type(x) is int and 0 <= x < 16)
    return _Sample(
        frame, frame[5], tree, nodes=paths(lambda x: True),
        lists=paths(lambda x: type(x) is list), leaves=paths(lambda x: type(x) is not list),
        ints=paths(lambda x: type(x) is int), codes=tuple(filter(is_code, small)),
        strs=paths(lambda x: type(x) is str), entries=paths(is_entries))


def check_samples(samples: Mapping[type[Message], Sequence[Message]] = SAMPLES) -> None:
    """:class:`FuzzError` unless every class of ``MESSAGE_CLASSES`` has samples and every
    sample is a valid message of its class (it encodes and decodes back equal)."""
    if unknown := sorted(c.__name__ for c in samples if c not in MESSAGE_TYPES):
        raise FuzzError(f"SAMPLES has classes that are not messages: {', '.join(unknown)}")
    for cls in MESSAGE_CLASSES.values():
        if not samples.get(cls):
            raise FuzzError(f"message class {cls.__name__} has no sample in SAMPLES "
                            "(ops_scripts/harness/fuzzcases.py): add valid ones")
        for msg in samples[cls]:
            try:
                ok = type(msg) is cls and decode_frame(encode(msg)) == msg
            except (LocalProtocolError, RemoteProtocolError) as exc:
                raise FuzzError(f"sample {show(msg)} of {cls.__name__} is invalid: {exc}") from None
            if not ok:
                raise FuzzError(f"sample {show(msg)} of {cls.__name__} is not a valid "
                                f"{cls.__name__} that decodes back equal")


@dataclass(frozen=True, slots=True)
class SamplePool:
    """The samples, checked and prepared for mutation, by class (in wire-code order)."""

    classes: tuple[tuple[str, tuple[_Sample, ...]], ...]
    all: tuple[_Sample, ...]

    @classmethod
    def of(cls, samples: Mapping[type[Message], Sequence[Message]] = SAMPLES) -> SamplePool:
        """:class:`FuzzError` if :func:`check_samples` finds a problem."""
        check_samples(samples)
        classes = tuple((c.__name__, tuple(map(_prepare, samples[c])))
                        for c in MESSAGE_CLASSES.values())
        return cls(classes, tuple(s for _, ss in classes for s in ss))


# ------------------------------------------------------------------------- the mutations
_Mutator = Callable[[random.Random, _Sample, SamplePool], bytes]
_HOLE = "\x00fuzz\x00"  # a string no sample holds: where a raw JSON token goes
_HOLE_JSON = orjson.dumps(_HOLE)
_ANY_JSON: tuple[Any, ...] = ("x", "", 7, 0, -3, 1.5, [], [0], ["x", 1], {}, {"k": 1}, None, True)
_JSONISH = b'[]{}",:0123456789-.eE \\tfn'


def _replace(tree: Any, path: _Path, new: Any) -> Any:
    if not path:
        return new
    copy = list(tree)
    copy[path[0]] = _replace(tree[path[0]], path[1:], new)
    return copy


def _frame(code: int, tree: Any, raw: bytes = b"") -> bytes:
    """A frame of type ``code`` holding ``tree``, its hole (if any) filled with ``raw``."""
    body = orjson.dumps(tree).replace(_HOLE_JSON, raw, 1)
    return struct.pack(">IBB", len(body) + 2, VERSION, code) + body


def _framed(s: _Sample, tree: Any, raw: bytes = b"") -> bytes:
    return _frame(s.code, tree, raw)


def _splice(rng: random.Random, s: _Sample, where: tuple[_Path, ...], raws: Sequence[bytes]
            ) -> bytes:
    """One node of ``where`` (any leaf if it is empty) replaced by one of ``raws``."""
    path = rng.choice(where or s.leaves)
    return _framed(s, _replace(s.tree, path, _HOLE), rng.choice(raws))


def _bytes_edit(op: Mutation, rng: random.Random, s: _Sample, _pool: SamplePool) -> bytes:
    data = bytearray(s.frame)
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        i = rng.randrange(len(data) + (op is Mutation.INSERT))
        if op is Mutation.BIT_FLIP:
            data[i] ^= 1 << rng.randrange(8)
        elif op is Mutation.INSERT:
            data[i:i] = (rng.randbytes(rng.randint(1, 4)) if rng.random() < 0.5
                         else bytes([rng.choice(_JSONISH)]))
        elif op is Mutation.DELETE:
            del data[i : i + rng.randint(1, 4)]
        else:
            data[i] = rng.randrange(256) if rng.random() < 0.5 else rng.choice(_JSONISH)
        if not data:
            break
    return bytes(data)


def _random_bytes(rng: random.Random, _s: _Sample, pool: SamplePool) -> bytes:
    roll, n = rng.random(), rng.randint(0, 48)
    body = rng.randbytes(n) if roll < 0.6 else bytes(rng.choice(_JSONISH) for _ in range(n))
    if roll < 0.3:
        return body
    code = rng.choice(pool.all).code if rng.random() < 0.9 else rng.randrange(256)
    return struct.pack(">IBB", n + 2, VERSION, code) + body  # a header, then garbage


def _extend(rng: random.Random, s: _Sample, pool: SamplePool) -> bytes:
    roll, other = rng.random(), rng.choice(pool.all).frame
    if roll < 0.4:
        return s.frame + rng.randbytes(rng.randint(1, 16))
    return s.frame + (other if roll < 0.8 else other[: rng.randrange(len(other))])


def _with_length(s: _Sample, length: int) -> bytes:
    return struct.pack(">I", length) + s.frame[4:]


def _other_byte(rng: random.Random, s: _Sample, at: int, choices: Sequence[int]) -> bytes:
    value = s.frame[at]
    while value == s.frame[at]:
        value = rng.choice(choices) if rng.random() < 0.6 else rng.randrange(256)
    return s.frame[:at] + bytes([value]) + s.frame[at + 1 :]


def _wrong_type(rng: random.Random, s: _Sample, _pool: SamplePool) -> bytes:
    path = rng.choice(s.nodes)
    old, new = s.at(path), rng.choice(_ANY_JSON)
    while type(new) is type(old):
        new = rng.choice(_ANY_JSON)
    return _framed(s, _replace(s.tree, path, new))


def _arity(rng: random.Random, s: _Sample, _pool: SamplePool) -> bytes:
    path = rng.choice(s.lists)
    items, roll = list(s.at(path)), rng.random()
    if items and roll < 0.35:
        del items[rng.randrange(len(items))]
    elif roll < 0.7:
        extra = rng.choice(items) if items and rng.random() < 0.5 else rng.choice(_ANY_JSON)
        items.insert(rng.randint(0, len(items)), extra)
    elif roll < 0.85:
        items += items
    else:
        items = []
    return _framed(s, _replace(s.tree, path, items))


def _nesting(rng: random.Random, s: _Sample, _pool: SamplePool) -> bytes:
    depth, roll = rng.choice((2, 16, 200, 1023, 1024, 1025, 5000)), rng.random()
    if roll < 0.5:
        raw = b"[" * depth + b"1" * (rng.random() < 0.5) + b"]" * depth
    elif roll < 0.85:
        raw = b'{"a":' * depth + b"1" + b"}" * depth
    else:  # unbalanced
        raw = b"[" * depth + b"]" * rng.randrange(depth)
    return _framed(s, _replace(s.tree, rng.choice(s.nodes), _HOLE), raw)


_BAD_UTF8 = (b"\xff", b"\xfe", b"\x80", b"\xc0\xaf", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
             b"\xe2\x82", b"\\ud800", b"\\udfff", b"\\ud800\\u0041", b"\\ud83d\\ude00", b"\x00",
             b"\x1f", b"\\x41", b"\\u00", b"\\")


def _non_utf8(rng: random.Random, s: _Sample, _pool: SamplePool) -> bytes:
    path = rng.choice(s.strs or s.leaves)
    old = s.at(path)
    text = orjson.dumps(old if type(old) is str else "x")[1:-1]
    cut = rng.randint(0, len(text))
    raw = b'"' + text[:cut] + rng.choice(_BAD_UTF8) + text[cut:] + b'"'
    return _framed(s, _replace(s.tree, path, _HOLE), raw)


def _duplicate_key(rng: random.Random, s: _Sample, _pool: SamplePool) -> bytes:
    if s.entries and rng.random() < 0.7:  # a mapping sent as [[name, ...], ...]: a name twice
        path = rng.choice(s.entries)
        items = list(s.at(path))
        twin = list(rng.choice(items))
        if rng.random() < 0.5 and type(twin[-1]) is int:  # the same name, another value
            twin[-1] = (twin[-1] + 1) % _U64
        items.insert(rng.randint(0, len(items)), twin)
        return _framed(s, _replace(s.tree, path, items))
    raw = rng.choice((b'{"a":1,"a":2}', b'{"k":[],"k":{}}', b'{"":0,"":0}'))
    return _framed(s, _replace(s.tree, rng.choice(s.nodes), _HOLE), raw)


def _ints(*xs: int) -> tuple[bytes, ...]:
    return tuple(str(x).encode() for x in xs)


# ------------------------------------------------------------- columns (a Batch's payload)
def _batch_frame(stream: str, body: bytes) -> bytes:
    name = stream.encode()
    payload = struct.pack(">H", len(name)) + name + body
    return struct.pack(">IBB", len(payload) + 2, VERSION, MESSAGE_TYPES[Batch]) + payload


def _ipc(batches: Sequence[pa.RecordBatch], schema: pa.Schema | None = None,
         **options: Any) -> bytes:
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, schema or batches[0].schema,
                        options=ipc.IpcWriteOptions(**options)) as w:
        for b in batches:
            w.write_batch(b)
    return bytes(sink.getvalue().to_pybytes())


def _with(rb: pa.RecordBatch, i: int, array: pa.Array, field: pa.Field | None = None
          ) -> pa.RecordBatch:
    arrays, fields = list(rb.columns), list(rb.schema)
    arrays[i] = array
    fields[i] = field or pa.field(fields[i].name, array.type)
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def _other_array(rng: random.Random, n: int) -> pa.Array:
    """``n`` values of a random Arrow type, mostly of types a Batch never holds."""
    ints = [rng.randint(-3, 9) for _ in range(n)]
    return rng.choice((
        lambda: pa.array(ints, pa.int32()), lambda: pa.array(ints, pa.int8()),
        lambda: pa.array([abs(x) for x in ints], pa.uint64()),
        lambda: pa.array(ints, pa.float64()), lambda: pa.array(ints, pa.float32()),
        lambda: pa.array(map(str, ints), pa.string()),
        lambda: pa.array(map(str, ints), pa.large_string()),
        lambda: pa.array([str(x).encode() for x in ints], pa.binary()),
        lambda: pa.array([x > 0 for x in ints], pa.bool_()), lambda: pa.nulls(n),
        lambda: pa.array([[x] for x in ints], pa.list_(pa.int64())),
        lambda: pa.array(map(str, ints)).dictionary_encode(),
        lambda: pa.array(ints, pa.timestamp("us")),
        lambda: pa.array([{"a": x} for x in ints]),
        lambda: pa.array(ints, pa.int64()),
    ))()


def _column_type(rng: random.Random, s: _Sample, _pool: SamplePool) -> bytes:
    msg: Batch = s.tree
    rb = msg.columns.batch
    i = rng.randrange(rb.num_columns)
    meta = {"dpc": "json"} if rng.random() < 0.2 else None
    array = _other_array(rng, rb.num_rows)
    field = pa.field(rb.schema.field(i).name, array.type, metadata=meta)
    return _batch_frame(msg.stream, _ipc([_with(rb, i, array, field)]))


def _column_layout(rng: random.Random, s: _Sample, _pool: SamplePool) -> bytes:
    msg: Batch = s.tree
    rb = msg.columns.batch
    arrays, fields = list(rb.columns), list(rb.schema)
    roll, i = rng.random(), rng.randrange(len(arrays))
    if roll < 0.25 and len(arrays) > 1:
        del arrays[i], fields[i]
    elif roll < 0.5:
        j = rng.randrange(len(arrays) + 1)
        arrays.insert(j, arrays[i])
        fields.insert(j, fields[i].with_name(rng.choice((fields[i].name, f"v{len(fields) - 4}"))))
    elif roll < 0.75:
        name = rng.choice(("", "kind", "id", "v0", "v1", "v00", "V0", "kind ", "é", "v-1"))
        fields[i] = fields[i].with_name(name)
    else:
        j = rng.randrange(len(arrays))
        arrays[i], arrays[j], fields[i], fields[j] = arrays[j], arrays[i], fields[j], fields[i]
    return _batch_frame(msg.stream, _ipc([pa.RecordBatch.from_arrays(
        arrays, schema=pa.schema(fields))]))


_BAD_CELLS = (b"{", b"[1]", b'{"a":1}', b"NaN", b"Infinity", b"1e999", b"18446744073709551616",
              b"-9223372036854775809", b'"\\ud800"', b"\xff", b"", b"nul", b"1 2", b'"a', b"true ")


def _column_values(rng: random.Random, s: _Sample, _pool: SamplePool) -> bytes:
    msg: Batch = s.tree
    rb = msg.columns.batch
    n = rb.num_rows
    if not n:
        return _batch_frame(msg.stream, _ipc([rb]))
    row = rng.randrange(n)
    roll = rng.random()
    if roll < 0.2:  # an unknown kind
        kinds = rb.column(0).to_pylist()
        kinds[row] = rng.choice((8, 9, 127, -1, -128))
        rb = _with(rb, 0, pa.array(kinds, pa.int8()))
    elif roll < 0.35:  # a null in a key column
        i = rng.randrange(4)
        col = rb.column(i).to_pylist()
        col[row] = None
        rb = _with(rb, i, pa.array(col, rb.schema.field(i).type))
    elif roll < 0.5 and rb.num_columns > 4:  # a value on any row (control rows too)
        i = rng.randrange(4, rb.num_columns)
        col = rb.column(i).to_pylist()
        typ = rb.schema.field(i).type
        col[row] = {pa.int64(): 7, pa.float64(): 1.5, pa.string(): "x", pa.bool_(): True,
                    pa.binary(): b"1"}.get(typ)
        rb = _with(rb, i, pa.array(col, typ), rb.schema.field(i))
    elif roll < 0.65:  # a non-finite float
        vals = [rng.choice((float("nan"), float("inf"), -float("inf"), 1.0)) for _ in range(n)]
        i = rng.randrange(4, rb.num_columns + 1) if rb.num_columns > 4 else 4
        array = pa.array(vals, pa.float64())
        if i == rb.num_columns:
            rb = pa.RecordBatch.from_arrays([*rb.columns, array],
                                            schema=rb.schema.append(pa.field(f"v{i - 4}", array.type)))
        else:
            rb = _with(rb, i, array)
    elif roll < 0.85:  # a bad orjson cell
        cells: list[bytes | None] = [b"1"] * n
        cells[row] = rng.choice(_BAD_CELLS)
        i = 4 if rb.num_columns == 4 else rng.randrange(4, rb.num_columns)
        kinds = rb.column(0).to_pylist()
        cells = [None if k > 1 else c for k, c in zip(kinds, cells, strict=True)]
        field = pa.field(f"v{i - 4}", pa.binary(), metadata={"dpc": "json"})
        array = pa.array(cells, pa.binary())
        rb = (_with(rb, i, array, field) if i < rb.num_columns else pa.RecordBatch.from_arrays(
            [*rb.columns, array], schema=rb.schema.append(field)))
    else:  # invalid UTF-8 in a string column (Arrow's full validation refuses it)
        raw = [rng.choice((b"ok", b"\xff", b"\xc3", b"\xed\xa0\x80")) for _ in range(n)]
        array = pa.array(raw, pa.binary()).view(pa.string())
        field = pa.field("v0", pa.string())
        rb = (_with(rb, 4, array, field) if rb.num_columns > 4 else pa.RecordBatch.from_arrays(
            [*rb.columns, array], schema=rb.schema.append(field)))
    return _batch_frame(msg.stream, _ipc([rb]))


def _ipc_structure(rng: random.Random, s: _Sample, _pool: SamplePool) -> bytes:
    msg: Batch = s.tree
    rb = msg.columns.batch
    body = encode_columns(msg.columns)
    roll = rng.random()
    if roll < 0.2:
        body = _ipc([rb], compression=rng.choice(("lz4", "zstd")))
    elif roll < 0.35:
        body = _ipc([rb] * rng.randint(0, 3), rb.schema)  # no batch, or several
    elif roll < 0.45:
        body = body[:-8] if rng.random() < 0.5 else body + body[-8:]  # EOS missing / twice
    elif roll < 0.55:
        body = _ipc([rb], metadata_version=ipc.MetadataVersion.V4)
    elif roll < 0.65:
        body = _ipc([rb.replace_schema_metadata({"k": "v" * rng.randint(0, 64)})])
    elif roll < 0.75:  # the Arrow file format instead of the stream format
        sink = pa.BufferOutputStream()
        with ipc.new_file(sink, rb.schema) as w:
            w.write_batch(rb)
        body = sink.getvalue().to_pybytes()
    elif roll < 0.85:  # a sliced batch (buffers with offsets)
        body = _ipc([rb.slice(rng.randint(0, rb.num_rows))])
    else:  # the stream name's length says too much or too little
        name = msg.stream.encode()
        size = max(0, len(name) + rng.choice((-2, -1, 1, 2, 1000)))
        payload = struct.pack(">H", min(size, 65535)) + name + body
        return struct.pack(">IBB", len(payload) + 2, VERSION, MESSAGE_TYPES[Batch]) + payload
    return _batch_frame(msg.stream, body)


_COLUMN_MUTATORS: dict[Mutation, _Mutator] = {
    Mutation.COLUMN_TYPE: _column_type,
    Mutation.COLUMN_LAYOUT: _column_layout,
    Mutation.COLUMN_VALUES: _column_values,
    Mutation.IPC_STRUCTURE: _ipc_structure,
}


_HUGE = _ints(2**63 - 1, 2**63, _U64, 2**64, _I64, _I64 - 1, 10**20, -(10**30), 10**400)
_NEGATIVE = (*_ints(-1, _I64, -(2**31), -(10**9)), b"-0")
_FLOATS = (b"NaN", b"-NaN", b"Infinity", b"-Infinity", b"1e400", b"-1e400", b"1.0", b"-0.0",
           b"0.5", b"1e308", b"5e-324", b"1E2", b"2.0e0", b"1e-400", b"1.", b".5", b"01")
_CODES = (*_ints(-1, len(Kind), len(ConsistencyState), 255, 256, 2**31), b"1.0", b'"0"')
_LIMIT = DEFAULT_MAX_FRAME_SIZE

_MUTATORS: dict[Mutation, _Mutator] = {
    Mutation.RANDOM_BYTES: _random_bytes,
    Mutation.NONE: lambda rng, s, pool: s.frame,
    Mutation.TRUNCATE: lambda rng, s, pool: s.frame[: rng.randrange(len(s.frame))],
    Mutation.EXTEND: _extend,
    Mutation.LENGTH_BIG: lambda rng, s, pool: _with_length(s, len(s.frame) - 4 + rng.choice(
        (1, 2, rng.randint(3, 64), rng.randint(65, _LIMIT - len(s.frame) + 4)))),
    Mutation.LENGTH_SMALL: lambda rng, s, pool: _with_length(s, rng.randint(2, len(s.frame) - 5)),
    Mutation.LENGTH_ZERO: lambda rng, s, pool: _with_length(s, rng.choice((0, 1))),
    Mutation.LENGTH_OVER: lambda rng, s, pool: _with_length(
        s, rng.choice((_LIMIT + 1, 2**32 - 1, rng.randint(_LIMIT + 1, 2**32 - 1)))),
    Mutation.VERSION: lambda rng, s, pool: _other_byte(rng, s, 4, (0, 1, VERSION + 1, 255)),
    Mutation.TYPE: lambda rng, s, pool: _other_byte(rng, s, 5, (0, *(x.code for x in pool.all))),
    Mutation.WRONG_TYPE: _wrong_type,
    Mutation.ARITY: _arity,
    Mutation.HUGE_INT: lambda rng, s, pool: _splice(rng, s, s.ints, _HUGE),
    Mutation.NEGATIVE_INT: lambda rng, s, pool: _splice(rng, s, s.ints, _NEGATIVE),
    Mutation.FLOAT: lambda rng, s, pool: _splice(rng, s, s.leaves, _FLOATS),
    Mutation.BOOL: lambda rng, s, pool: _splice(rng, s, s.ints, (b"true", b"false")),
    Mutation.NESTING: _nesting,
    Mutation.NON_UTF8: _non_utf8,
    Mutation.DUPLICATE_KEY: _duplicate_key,
    Mutation.UNKNOWN_CODE: lambda rng, s, pool: _splice(rng, s, s.codes or s.ints, _CODES),
}
for _op in (Mutation.BIT_FLIP, Mutation.INSERT, Mutation.DELETE, Mutation.OVERWRITE):
    _MUTATORS[_op] = partial(_bytes_edit, _op)
_MUTATORS.update(_COLUMN_MUTATORS)
_COLUMN_MUTATIONS = tuple(_COLUMN_MUTATORS)
_JSON_MUTATIONS = frozenset(m for m in Mutation if m.value.startswith("json"))
_MUTATIONS = tuple(m for m in Mutation if m not in _COLUMN_MUTATORS)


# ----------------------------------------------------------------------------- frames
@dataclass(frozen=True, slots=True)
class Case:
    """Frame ``index`` of ``seed``: how it was made, its bytes, and the chunk sizes it is
    fed in (the second decoding; the first feeds it whole)."""

    seed: int
    index: int
    mutation: Mutation
    message_class: str | None  # the mutated sample's class (None: random bytes)
    frame: bytes
    chunks: tuple[int, ...]


def draw(seed: int, index: int, pool: SamplePool) -> Case:
    """Frame ``index`` of a run with ``seed`` on ``pool`` (the module docstring's rules)."""
    rng = random.Random((seed << 32) | index)
    mutation = rng.choice(_MUTATIONS)
    name, samples = pool.classes[0] if rng.random() < 0.5 else rng.choice(pool.classes)
    sample = rng.choice(samples)
    if isinstance(sample.tree, Batch) and mutation in _JSON_MUTATIONS:
        mutation = rng.choice(_COLUMN_MUTATIONS)
    frame = _MUTATORS[mutation](rng, sample, pool)
    n = len(frame)
    if n <= 32 and rng.random() < 0.05:  # a byte at a time: every header split
        chunks: tuple[int, ...] = (1,) * n
    else:  # 1 to 3 cuts anywhere (empty chunks too), one often inside the header
        cuts = [rng.randint(0, n) for _ in range(rng.randint(1, 3))]
        cuts[0] = min(cuts[0], rng.randint(0, 8))
        chunks = tuple(b - a for a, b in pairwise((0, *sorted(cuts), n)))
    return Case(seed, index, mutation, None if mutation is Mutation.RANDOM_BYTES else name,
                frame, chunks)


def frame_at(seed: int, index: int,
             samples: Mapping[type[Message], Sequence[Message]] = SAMPLES) -> Case:
    """Frame ``index`` of a run with ``seed``, rebuilt alone."""
    return draw(seed, index, SamplePool.of(samples))
