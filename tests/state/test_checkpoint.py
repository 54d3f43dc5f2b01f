"""Checkpoints: take/restore (with rewind), encode/decode, and the incremental store."""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest

from state import (
    Checkpoint,
    CheckpointError,
    CheckpointStore,
    decode_checkpoint,
    encode_checkpoint,
    restore_checkpoint,
    take_checkpoint,
)


class Part:
    """A checkpointable part whose restore keeps the very object it is given (the worst
    case for aliasing)."""

    def __init__(self, state: Any) -> None:
        self.state = state
        self.restores = 0

    def snapshot(self) -> Any:
        return orjson.loads(orjson.dumps(self.state))

    def restore(self, snap: Any) -> None:
        self.state = snap
        self.restores += 1


def network() -> dict[str, Part]:
    return {
        "filter1": Part({"last_id": 7, "log": [[0, 1, 10, 10, ["a", 1.5]]], "tainted": False}),
        "agg": Part({"groups": {"x": [1, 2, 3], "y": []}, "ratio": 0.25, "none": None}),
        "queue:in": Part([[0, 8, 80, 80, [True, "z"]]]),
    }


def test_encode_decode_round_trip() -> None:
    cp = take_checkpoint(network(), seq=3, now=1_000_000)
    blob = encode_checkpoint(cp)
    assert isinstance(blob, bytes)
    back = decode_checkpoint(blob)
    assert back == cp
    assert (back.seq, back.taken_at) == (3, 1_000_000)


def test_restore_brings_every_part_back_and_can_be_repeated() -> None:
    parts = network()
    before = {name: p.snapshot() for name, p in parts.items()}
    cp = take_checkpoint(parts, seq=1, now=0)
    for _ in range(2):  # a second failure restores the same checkpoint again
        for p in parts.values():
            if isinstance(p.state, dict):
                p.state["mutated"] = True
            else:
                p.state.append(1)
        restore_checkpoint(parts, cp)
        assert {name: p.state for name, p in parts.items()} == before
    # The parts mutated what they were given; the checkpoint itself is untouched.
    assert dict(cp.parts) == before


def test_rewind_calls_the_function_instead_of_restore() -> None:
    parts = network()
    cp = take_checkpoint(parts, seq=2, now=5)
    parts["agg"].state = {"changed": 1}
    parts["filter1"].state = {"changed": 2}
    seen: list[Any] = []
    restore_checkpoint(parts, cp, rewind={"agg": seen.append})
    assert seen == [cp.parts["agg"]]
    assert parts["agg"].restores == 0 and parts["agg"].state == {"changed": 1}
    assert parts["filter1"].restores == 1 and parts["filter1"].state == cp.parts["filter1"]


def test_missing_and_extra_parts_are_named_and_nothing_is_restored() -> None:
    parts = network()
    cp = take_checkpoint(parts, seq=4, now=0)
    parts["agg"].state = "live"
    other = {"agg": parts["agg"], "join9": Part(None), "queue:in": parts["queue:in"]}
    with pytest.raises(CheckpointError) as err:
        restore_checkpoint(other, cp)
    msg = str(err.value)
    assert "checkpoint 4" in msg and "no snapshot of 'join9'" in msg
    assert "unknown part(s) 'filter1'" in msg
    assert parts["agg"].state == "live" and parts["agg"].restores == 0


def test_a_bare_snapshot_restores_like_a_checkpoint_in_the_order_of_the_parts() -> None:
    """The network restores (and rewinds) through this one function, from its own
    snapshots: a mapping of parts, no checkpoint header."""
    parts = network()
    snaps = {name: p.snapshot() for name, p in parts.items()}
    order: list[str] = []
    for name, p in parts.items():
        p.restore = lambda s, name=name, p=p: (order.append(name), Part.restore(p, s))  # type: ignore[method-assign]
    parts["agg"].state = {"changed": 1}
    restore_checkpoint(parts, snaps, rewind={"filter1": lambda s: order.append("rewind filter1")})
    assert order == ["rewind filter1", "agg", "queue:in"]
    assert parts["agg"].state == snaps["agg"] and parts["agg"].state is not snaps["agg"]
    del snaps["agg"]
    with pytest.raises(CheckpointError, match="the snapshot does not match the network: it has "
                                              "no snapshot of 'agg'"):
        restore_checkpoint(parts, snaps)


def test_rewind_of_an_unknown_part_is_refused() -> None:
    parts = network()
    cp = take_checkpoint(parts, seq=1, now=0)
    with pytest.raises(CheckpointError, match=r"rewind names unknown part.*'sunion'"):
        restore_checkpoint(parts, cp, rewind={"sunion": lambda s: None})
    assert all(p.restores == 0 for p in parts.values())


@pytest.mark.parametrize(
    ("blob", "match"),
    [
        (b"", "not valid JSON"),
        (b'{"v":1,"seq":1,"taken_at"', "not valid JSON"),
        (b"[1, 2]", "expected a JSON object, found list"),
        (b'{"v":2,"seq":1,"taken_at":0,"parts":{}}', "version 2; this build reads version 1"),
        (b'{"seq":1,"taken_at":0,"parts":{}}', "version None"),
        (b'{"v":1,"seq":"1","taken_at":0,"parts":{}}', "expected int 'seq'.*found str"),
        (b'{"v":1,"seq":1,"taken_at":0,"parts":[]}', "object 'parts'.*list"),
    ],
)
def test_corrupt_or_foreign_blobs_raise(blob: bytes, match: str) -> None:
    with pytest.raises(CheckpointError, match=match):
        decode_checkpoint(blob)


def test_a_truncated_real_checkpoint_raises() -> None:
    blob = encode_checkpoint(take_checkpoint(network(), seq=1, now=0))
    with pytest.raises(CheckpointError, match="corrupt checkpoint"):
        decode_checkpoint(blob[: len(blob) // 2])


def test_unencodable_snapshot_names_the_part() -> None:
    cp = Checkpoint(1, 0, {"ok": [1], "bad": {"x": object()}})
    with pytest.raises(CheckpointError, match="snapshot of part 'bad' is not plain data"):
        encode_checkpoint(cp)
    with pytest.raises(CheckpointError, match="part 'bad'"):
        CheckpointStore().put(cp)


def test_store_writes_only_changed_parts_and_reassembles() -> None:
    store = CheckpointStore()
    with pytest.raises(CheckpointError, match="empty"):
        store.latest()
    parts = network()
    assert store.put(take_checkpoint(parts, 1, 100)) == ("filter1", "agg", "queue:in")
    parts["agg"].state["ratio"] = 0.5
    cp2 = take_checkpoint(parts, 2, 200)
    assert store.put(cp2) == ("agg",)
    assert store.latest() == cp2
    assert store.part_seq("agg") == 2 and store.part_seq("filter1") == 1
    stats = store.stats
    assert (stats.puts, stats.parts_written, stats.parts_skipped) == (2, 4, 2)
    # Reconfiguration: a part disappears, another appears.
    del parts["queue:in"]
    parts["join"] = Part({"left": [], "right": [[1, 2]]})
    cp3 = take_checkpoint(parts, 3, 300)
    assert store.put(cp3) == ("join",)
    assert store.latest() == cp3 and store.last_seq == 3
    with pytest.raises(CheckpointError, match="no part 'queue:in'"):
        store.part_seq("queue:in")


def test_store_refuses_stale_checkpoints_and_stays_intact_on_error() -> None:
    store = CheckpointStore()
    cp = take_checkpoint(network(), 5, 0)
    store.put(cp)
    with pytest.raises(
        CheckpointError, match="checkpoint 5 is not newer than the stored checkpoint 5"
    ):
        store.put(cp)
    with pytest.raises(CheckpointError):
        store.put(Checkpoint(6, 0, {**cp.parts, "agg": {1, 2}}))
    assert store.latest() == cp and store.stats.puts == 1


def test_store_matches_full_checkpoints_on_random_histories() -> None:
    rng = random.Random(20240605)
    store = CheckpointStore()
    state: dict[str, Any] = {f"op{i}": {"n": 0, "xs": []} for i in range(8)}
    expected_written = 0
    for seq in range(1, 200):
        changed = {name for name in state if rng.random() < 0.2}
        if seq == 1:
            changed = set(state)
        for name in changed:
            state[name]["n"] += 1
            state[name]["xs"].append(rng.choice([None, 1, -2.5, "s", [1, "t"]]))
        expected_written += len(changed)
        cp = Checkpoint(seq, seq * 10, orjson.loads(orjson.dumps(state)))
        assert set(store.put(cp)) == changed
        assert store.latest() == decode_checkpoint(encode_checkpoint(cp))
    assert store.stats.parts_written == expected_written
    assert store.stats.parts_skipped == 199 * 8 - expected_written
