"""The CEC record log: round trips across segments, reopen, torn tails cut at every byte,
corruption refused with the file named, the index behind ``forward(from_t)``, trimming, and
a hypothesis state machine against a list model."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from state import StateError
from state.ceclog import BLOCK, FORMAT_VERSION, MAGIC, CecLog, Frame, FramePos

HEADER = len(MAGIC) + 1


def doc(i: int) -> dict[str, Any]:
    return {"i": i, "name": f"op{i % 7}", "state": list(range(i % 5)), "x": i / 3}


def seg_path(d: Path, seq: int) -> Path:
    return d / f"{seq:08d}.ceclog"


def segments(d: Path) -> list[Path]:
    return sorted(d.glob("*.ceclog"))


def seen(frames: list[Frame]) -> list[tuple[int, dict[str, Any]]]:
    return [(f.t, f.doc) for f in frames]


def filled(d: Path, n: int, **kw: Any) -> tuple[list[tuple[int, dict[str, Any]]], list[FramePos]]:
    items = [(i // 3, doc(i)) for i in range(n)]
    with CecLog(d, **kw) as log:
        return items, [log.append(t, x) for t, x in items]


def test_round_trip_forward_and_backward_across_small_segments(tmp_path: Path) -> None:
    items = [(i // 3, doc(i)) for i in range(60)]
    log = CecLog(tmp_path, segment_bytes=200, index_every=2)
    positions = [log.append(t, x) for t, x in items[:30]] + log.append_many(items[30:])
    fwd, bwd = list(log.forward()), list(log.backward())
    assert seen(fwd) == items
    assert bwd == fwd[::-1]
    assert [f.pos for f in fwd] == positions
    files = segments(tmp_path)
    assert log.stats.segments == len(files) > 5
    assert log.stats.bytes == sum(p.stat().st_size for p in files)
    assert (log.stats.frames, log.stats.last_t, log.stats.torn_bytes) == (60, 19, 0)
    assert log.first_pos() == FramePos(0, HEADER) and log.last_pos() == positions[-1]
    for p in files:  # frames never span segments; a segment exceeds the bound only by one frame
        mine = [f for f in fwd if seg_path(tmp_path, f.pos.segment) == p]
        assert HEADER + sum(f.size for f in mine) == p.stat().st_size
        assert p.stat().st_size <= 200 or len(mine) == 1
    log.close()


def test_a_frame_bigger_than_a_segment_gets_a_segment_of_its_own(tmp_path: Path) -> None:
    with CecLog(tmp_path, segment_bytes=64) as log:
        big = {"blob": "x" * 500}
        positions = log.append_many([(1, {}), (2, big), (3, {})])
        assert [p.segment for p in positions] == [0, 1, 2]
        assert seen(list(log.backward())) == [(3, {}), (2, big), (1, {})]


def test_backward_reads_segments_bigger_than_its_block(tmp_path: Path) -> None:
    sizes = [5000] * 120 + [BLOCK + 1000] + [30, 70000] * 8  # frames across block ends
    items = [(k // 4, {"k": k, "pad": "p" * n}) for k, n in enumerate(sizes)]
    with CecLog(tmp_path, segment_bytes=3 * BLOCK) as log:
        log.append_many(items)
        assert log.stats.segments >= 2
        assert seg_path(tmp_path, 0).stat().st_size > 2 * BLOCK
        assert seen(list(log.backward())) == items[::-1]
        assert seen(list(log.forward(items[125][0]))) == items[124:]


def test_reopen_continues_in_the_last_segment_and_keeps_order(tmp_path: Path) -> None:
    items, positions = filled(tmp_path, 10, segment_bytes=4096)
    log = CecLog(tmp_path, segment_bytes=4096)
    assert (log.stats.frames, log.stats.last_t, log.last_pos()) == (10, 3, positions[-1])
    more = [(3, doc(10)), (4, doc(11))]
    size = seg_path(tmp_path, 0).stat().st_size
    assert log.append_many(more)[0] == FramePos(0, size)
    assert len(segments(tmp_path)) == 1
    with pytest.raises(StateError, match="t 2 appended after t 4"):
        log.append(2, {})
    log.close()
    with CecLog(tmp_path) as again:
        assert seen(list(again.forward())) == items + more
        assert again.stats.torn_bytes == 0


@pytest.mark.parametrize("own_segment", [False, True], ids=["shared", "alone"])
def test_a_tail_torn_at_every_byte_is_cut_and_the_log_goes_on(
    tmp_path: Path, own_segment: bool
) -> None:
    src = tmp_path / "src"
    items, _ = filled(src, 7)
    bound = seg_path(src, 0).stat().st_size if own_segment else 4096
    with CecLog(src, segment_bytes=bound) as log:
        pos = log.append(9, {"last": "frame", "n": 12345})
    assert pos.segment == (1 if own_segment else 0)
    end = seg_path(src, pos.segment).stat().st_size
    first = 0 if own_segment else pos.offset  # a segment torn to nothing goes whole
    for cut in range(first, end):
        d = tmp_path / f"cut{cut}"
        shutil.copytree(src, d)
        with open(seg_path(d, pos.segment), "r+b") as f:
            f.truncate(cut)
        with CecLog(d, segment_bytes=bound) as log:
            assert seen(list(log.forward())) == items
            assert log.stats.torn_bytes == cut - first
            assert (cut == first) or log.stats.torn_bytes > 0
            log.append(10, {"after": cut})
        with CecLog(d) as log:
            assert seen(list(log.backward())) == [(10, {"after": cut}), *items[::-1]]
            assert log.stats.torn_bytes == 0
        shutil.rmtree(d)


def test_a_tail_torn_in_a_later_segment_leaves_the_earlier_one_whole(tmp_path: Path) -> None:
    items, positions = filled(tmp_path, 12, segment_bytes=150)
    last = seg_path(tmp_path, positions[-1].segment)
    first_of_last = next(p for p in positions if p.segment == positions[-1].segment)
    with open(last, "r+b") as f:
        f.truncate(first_of_last.offset + 5)  # the last segment's first frame is torn
    with CecLog(tmp_path, segment_bytes=150) as log:
        kept = positions.index(first_of_last)
        assert seen(list(log.forward())) == items[:kept]
        assert not last.exists() and log.stats.torn_bytes == HEADER + 5
        log.append(99, {})
        assert seen(list(log.forward())) == [*items[:kept], (99, {})]


@pytest.mark.parametrize("garbage", [b"garbage!", bytes(20), bytes(64), bytes(range(200)),
                                     b"\xff\xff\xff\x7f" + bytes(30)])
def test_garbage_after_the_last_frame_is_cut(tmp_path: Path, garbage: bytes) -> None:
    items = [(0, {}), (0, {"a": 1})]  # t 0, and {} is the smallest payload
    with CecLog(tmp_path) as log:
        log.append_many(items)
    with open(seg_path(tmp_path, 0), "ab") as f:
        f.write(garbage)
    with CecLog(tmp_path) as log:
        assert seen(list(log.forward())) == items
        assert log.stats.torn_bytes == len(garbage)
        log.append(0, {"b": 2})
        assert seen(list(log.backward())) == [(0, {"b": 2}), *items[::-1]]


@pytest.mark.parametrize("which", [-1, 3])
def test_a_flipped_payload_byte_in_the_last_segment_cuts_from_that_frame(
    tmp_path: Path, which: int
) -> None:
    items, positions = filled(tmp_path, 8)
    path = seg_path(tmp_path, 0)
    size = path.stat().st_size
    data = bytearray(path.read_bytes())
    data[positions[which].offset + 16 + 3] ^= 0x20
    path.write_bytes(bytes(data))
    with CecLog(tmp_path) as log:
        kept = positions.index(positions[which])
        assert seen(list(log.forward())) == items[:kept]
        assert log.stats.torn_bytes == size - positions[which].offset > 0


def test_a_corrupt_frame_in_an_earlier_segment_is_corruption(tmp_path: Path) -> None:
    items, positions = filled(tmp_path, 20, segment_bytes=200)
    assert positions[-1].segment >= 2
    bad = positions[1]
    path = seg_path(tmp_path, bad.segment)
    data = bytearray(path.read_bytes())
    data[bad.offset + 16 + 2] ^= 0x01  # the payload: open trusts it, readers check it
    path.write_bytes(bytes(data))
    with CecLog(tmp_path, segment_bytes=200) as log:
        assert log.stats.torn_bytes == 0 and log.stats.frames == 20
        with pytest.raises(StateError, match=rf"{path}.*offset {bad.offset}"):
            list(log.backward())
        with pytest.raises(StateError, match=rf"{path}.*offset {bad.offset}"):
            list(log.forward())
        last_t = items[-1][0]  # a read that starts past the bad frame does not meet it
        assert seen(list(log.forward(last_t))) == [x for x in items if x[0] == last_t]


def test_a_time_out_of_order_across_segments_is_corruption(tmp_path: Path) -> None:
    _, positions = filled(tmp_path, 20, segment_bytes=200)
    last_of_0 = [p for p in positions if p.segment == 0][-1]
    path = seg_path(tmp_path, 0)
    data = bytearray(path.read_bytes())
    data[last_of_0.offset + 8:last_of_0.offset + 16] = (1000).to_bytes(8, "little")  # its t
    path.write_bytes(bytes(data))
    with CecLog(tmp_path, segment_bytes=200) as log:
        with pytest.raises(StateError, match=rf"{path}.*offset {last_of_0.offset}.*t 1000"):
            list(log.backward())
        with pytest.raises(StateError, match=rf"{seg_path(tmp_path, 1)}.*offset {HEADER}"):
            list(log.forward())


def test_a_broken_frame_chain_in_an_earlier_segment_refuses_to_open(tmp_path: Path) -> None:
    _, positions = filled(tmp_path, 20, segment_bytes=200)
    path = seg_path(tmp_path, 0)
    data = bytearray(path.read_bytes())
    data[positions[1].offset] ^= 0x04  # a payload length
    path.write_bytes(bytes(data))
    with pytest.raises(StateError, match=rf"{path}.*offset {positions[1].offset}"):
        CecLog(tmp_path, segment_bytes=200)


@pytest.mark.parametrize("head", [b"DPCXXX\x01", MAGIC + bytes([FORMAT_VERSION + 1]), b"DP\x00"])
@pytest.mark.parametrize("last", [True, False])
def test_a_bad_magic_or_version_is_refused_naming_the_file(
    tmp_path: Path, head: bytes, last: bool
) -> None:
    filled(tmp_path, 20, segment_bytes=200)
    path = segments(tmp_path)[-1 if last else 0]
    path.write_bytes(head + path.read_bytes()[HEADER:])
    with pytest.raises(StateError, match=rf"{path}.*(magic|version)"):
        CecLog(tmp_path)


def test_a_segment_torn_while_created_is_dropped(tmp_path: Path) -> None:
    items, _ = filled(tmp_path, 4)
    for k in range(HEADER + 2):
        path = seg_path(tmp_path, 1)
        path.write_bytes((MAGIC + bytes([FORMAT_VERSION]) + b"\x05")[:k])
        with CecLog(tmp_path) as log:
            assert seen(list(log.forward())) == items and log.stats.torn_bytes == k
            assert not path.exists()


def test_misuse_is_refused_and_leaves_the_log_unchanged(tmp_path: Path) -> None:
    log = CecLog(tmp_path)
    log.append(5, {"a": 1})
    for t, d, what in [(4, {}, "t 4 appended after t 5"), (True, {}, "64-bit int"),
                       (5.0, {}, "64-bit int"), (1 << 63, {}, "64-bit int"),
                       (6, [1], "dict, got list"), (6, {"s": {1, 2}}, "cannot encode"),
                       (6, {"big": 1 << 64}, "cannot encode"), (6, {1: 2}, "cannot encode")]:
        with pytest.raises(StateError, match=what):
            log.append(t, d)  # type: ignore[arg-type]
    with pytest.raises(StateError, match="t 6 appended after t 7"):
        log.append_many([(6, {}), (7, {}), (6, {})])
    assert seen(list(log.forward())) == [(5, {"a": 1})]
    assert log.append_many([]) == []
    log.close()
    with pytest.raises(StateError, match="after close"):
        log.append(6, {})
    with pytest.raises(StateError, match="segment_bytes"):
        CecLog(tmp_path, segment_bytes=0)


def test_forward_from_every_t_starts_at_the_first_frame_at_or_after_it(tmp_path: Path) -> None:
    ts = [-3] * 5 + [0] + [2] * 17 + [3, 4] + [9] * 9 + [10]
    items = [(t, {"k": k}) for k, t in enumerate(ts)]
    for every in (1, 2, 5, 64):
        d = tmp_path / str(every)
        with CecLog(d, segment_bytes=120, index_every=every) as log:
            log.append_many(items)
            assert log.stats.segments > 3
            for from_t in range(-6, 14):
                got = seen(list(log.forward(from_t)))
                assert got == [(t, x) for t, x in items if t >= from_t], (every, from_t)


def test_drop_before_frees_whole_segments_and_keeps_the_current_one(tmp_path: Path) -> None:
    items, positions = filled(tmp_path, 30, segment_bytes=200)
    log = CecLog(tmp_path, segment_bytes=200)
    mid = positions[15]
    before = {p: p.stat().st_size for p in segments(tmp_path)}
    freed = log.drop_before(mid)
    gone = [p for p in before if not p.exists()]
    assert gone == [seg_path(tmp_path, s) for s in range(mid.segment)]
    assert freed == sum(before[p] for p in gone) > 0
    assert log.first_pos() == FramePos(mid.segment, HEADER)
    kept = [x for x, p in zip(items, positions, strict=True) if p.segment >= mid.segment]
    assert seen(list(log.forward())) == kept
    assert log.drop_before(FramePos(10**6, 0)) > 0 and log.stats.segments == 1
    assert log.drop_before(FramePos(10**6, 0)) == 0
    assert seg_path(tmp_path, positions[-1].segment).exists()
    log.append(20, {"z": 1})
    log.close()
    with CecLog(tmp_path, segment_bytes=200) as again:
        assert seen(list(again.forward()))[-1] == (20, {"z": 1})
        assert again.stats.frames == 1 + sum(p.segment == positions[-1].segment
                                             for p in positions)


values = st.one_of(st.integers(-(1 << 63), (1 << 63) - 1), st.text(max_size=12), st.none(),
                   st.booleans(), st.floats(allow_nan=False, allow_infinity=False),
                   st.lists(st.integers(-5, 5), max_size=3))
docs = st.dictionaries(st.text(max_size=4), values, max_size=3)


class CecLogMachine(RuleBasedStateMachine):
    """Appends, reopens, torn tails and trims against a list of (position, t, doc)."""

    @initialize(segment_bytes=st.sampled_from([40, 150, 1000]), every=st.sampled_from([1, 3, 64]))
    def start(self, segment_bytes: int, every: int) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="ceclog-"))
        self.kw: dict[str, Any] = {"segment_bytes": segment_bytes, "index_every": every}
        self.log = CecLog(self.dir, **self.kw)
        self.model: list[tuple[FramePos, int, dict[str, Any]]] = []

    def last_t(self) -> int:
        return self.model[-1][1] if self.model else -2

    @rule(dt=st.integers(0, 2), d=docs)
    def append(self, dt: int, d: dict[str, Any]) -> None:
        t = self.last_t() + dt
        self.model.append((self.log.append(t, d), t, d))

    @rule(batch=st.lists(st.tuples(st.integers(0, 2), docs), max_size=6))
    def append_many(self, batch: list[tuple[int, dict[str, Any]]]) -> None:
        t, items = self.last_t(), []
        for dt, d in batch:
            t += dt
            items.append((t, d))
        positions = self.log.append_many(items)
        self.model += [(p, t, d) for p, (t, d) in zip(positions, items, strict=True)]

    @rule()
    def reopen(self) -> None:
        self.log.close()
        self.log = CecLog(self.dir, **self.kw)
        assert self.log.stats.torn_bytes == 0

    @precondition(lambda self: self.model)
    @rule(keep=st.integers(0, 1 << 20))
    def tear_the_last_frame(self, keep: int) -> None:
        frame = next(self.log.backward())
        self.log.close()
        with open(seg_path(self.dir, frame.pos.segment), "r+b") as f:
            f.truncate(frame.pos.offset + keep % frame.size)
        self.log = CecLog(self.dir, **self.kw)
        self.model.pop()

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def drop_before(self, data: st.DataObject) -> None:
        pos = data.draw(st.sampled_from([p for p, _, _ in self.model]))
        self.log.drop_before(pos)
        floor = min(pos.segment, self.model[-1][0].segment)
        self.model = [m for m in self.model if m[0].segment >= floor]

    @rule(from_t=st.integers(-3, 60))
    def forward_from(self, from_t: int) -> None:
        got = [(f.pos, f.t, f.doc) for f in self.log.forward(from_t)]
        assert got == [m for m in self.model if m[1] >= from_t]

    @invariant()
    def reads_back_the_model(self) -> None:
        assert [(f.pos, f.t, f.doc) for f in self.log.forward()] == self.model
        assert [(f.pos, f.t, f.doc) for f in self.log.backward()] == self.model[::-1]
        stats = self.log.stats
        assert stats.frames == len(self.model)
        assert stats.last_t == (self.model[-1][1] if self.model else None)
        assert self.log.last_pos() == (self.model[-1][0] if self.model else None)

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.dir)


CecLogMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=25,
                                           deadline=None)
test_the_log_behaves_like_a_list = CecLogMachine.TestCase
