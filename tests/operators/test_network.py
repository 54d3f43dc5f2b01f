"""The query network: build-time validation, deterministic scheduling, checkpoint/replay."""

from __future__ import annotations

import copy
import random
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from operators import NetworkOutput, OperatorError, QueryNetwork, SpecError
from operators.sunion import SUnion
from protocol.tuples import Kind, Tuple, boundary, make_tuple
from state.errors import CheckpointError

BUCKET = 100


def basic_spec(**sunion: Any) -> dict[str, Any]:
    return {
        "inputs": {"s1": ["key", "value"], "s2": ["key", "value"], "s3": ["key", "value"]},
        "operators": [
            {"name": "u", "type": "sunion", "inputs": ["s1", "s2", "s3"], "bucket": BUCKET,
             "wait": 10**12, **sunion},
            {"name": "f", "type": "filter", "inputs": ["u"], "where": "value % 3 != 0"},
            {"name": "a", "type": "aggregate", "inputs": ["f"], "window": 300, "slide": 100,
             "group_by": ["key"], "aggregates": [{"fn": "sum", "attr": "value", "as": "total"},
                                                 {"fn": "count", "as": "n"}]},
            {"name": "out", "type": "soutput", "inputs": ["a"]},
        ],
        "outputs": ["out"],
    }


def join_spec() -> dict[str, Any]:
    return {
        "inputs": {"s1": ["key", "value"], "s2": ["key", "value"]},
        "operators": [
            {"name": "u", "type": "sunion", "inputs": ["s1", "s2"], "bucket": BUCKET, "wait": 10**12},
            {"name": "lo", "type": "filter", "inputs": ["u"], "where": "value < 50"},
            {"name": "hi", "type": "filter", "inputs": ["u"], "where": "value >= 50"},
            {"name": "j", "type": "join", "inputs": ["lo", "hi"], "on": [["key", "key"]], "band": 150},
            {"name": "out", "type": "soutput", "inputs": ["j"]},
        ],
        "outputs": ["out"],
    }


def stream_inputs(rng: random.Random, streams: list[str], n: int) -> list[tuple[str, list[Tuple]]]:
    """Per stream: n tuples with increasing times and a boundary every bucket; the batches
    of all streams interleaved at random (arrival order must not matter)."""
    per: dict[str, list[list[Tuple]]] = {}
    for s in streams:
        batches: list[list[Tuple]] = []
        cur: list[Tuple] = []
        t = 0
        next_b = BUCKET
        for i in range(1, n + 1):
            t += rng.randint(0, 30)
            while t >= next_b:
                cur.append(boundary(next_b))
                next_b += BUCKET
            cur.append(make_tuple(Kind.STABLE, i, t, t, (rng.randint(0, 3), rng.randint(0, 99))))
            if rng.random() < 0.2:
                batches.append(cur)
                cur = []
        cur.append(boundary(next_b + 10 * BUCKET))
        batches.append(cur)
        per[s] = batches
    order: list[tuple[str, list[Tuple]]] = []
    while any(per.values()):
        s = rng.choice([k for k, v in per.items() if v])
        order.append((s, per[s].pop(0)))
    return order


def run(net: QueryNetwork, steps: list[tuple[str, list[Tuple]]]) -> list[Tuple]:
    out: list[Tuple] = []
    for stream, batch in steps:
        out.extend(net.push(stream, batch).outputs["out"])
    return out


def data(ts: list[Tuple]) -> list[Tuple]:
    return [t for t in ts if t.kind in (Kind.STABLE, Kind.TENTATIVE)]


# ----------------------------------------------------------------------------- validation
def _broken(mutate: Any) -> dict[str, Any]:
    spec = copy.deepcopy(basic_spec())
    mutate(spec)
    return spec


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda s: s["operators"][1].update(type="filtre"), "unknown operator type 'filtre'"),
        (lambda s: s["operators"][1].update(inputs=["nope"]), "unknown input stream 'nope'"),
        (lambda s: s["operators"][2].pop("window"), "missing required parameter 'window'"),
        (lambda s: s["operators"][2].update(window="big"), "'window' must be an integer"),
        (lambda s: s["operators"][1].update(where="nokey > 1"), "nokey"),
        (lambda s: s["operators"][1].update(inputs=["a"]), "cycle"),
        (lambda s: s["operators"][1].update(inputs=["s1"]), "must go through an sunion"),
        (lambda s: s.update(outputs=["a"]), "must end in an soutput"),
        (lambda s: s["operators"].append(dict(s["operators"][1])), "used twice"),
        (lambda s: s["operators"][1].update(extra=1), "unknown parameter(s) extra"),
    ],
)
def test_invalid_specs_name_the_problem(mutate: Any, message: str) -> None:
    with pytest.raises(SpecError, match=None) as err:
        QueryNetwork(_broken(mutate))
    assert message in str(err.value)


def test_multi_input_operator_needs_one_serializer() -> None:
    spec = join_spec()
    spec["operators"].insert(1, {"name": "u2", "type": "sunion", "inputs": ["s2"], "bucket": BUCKET, "wait": 1})
    spec["operators"][0]["inputs"] = ["s1"]
    spec["operators"][3]["inputs"] = ["u2"]  # 'hi' now ordered by another sunion
    with pytest.raises(SpecError, match="2 different sunions"):
        QueryNetwork(spec)


def test_unknown_input_stream_at_run_time() -> None:
    net = QueryNetwork(basic_spec())
    with pytest.raises(Exception, match="no input stream 'zz'"):
        net.push("zz", [])


# ----------------------------------------------------------------------------- determinism
@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32))
def test_join_network_is_independent_of_arrival_interleaving(seed: int) -> None:
    steps = stream_inputs(random.Random(seed), ["s1", "s2"], 60)
    # Same per-stream sequences, another interleaving and batching.
    rng = random.Random(seed + 1)
    per: dict[str, list[Tuple]] = {"s1": [], "s2": []}
    for s, b in steps:
        per[s].extend(b)
    other: list[tuple[str, list[Tuple]]] = []
    while any(per.values()):
        s = rng.choice([k for k, v in per.items() if v])
        n = rng.randint(1, 7)
        other.append((s, per[s][:n]))
        per[s] = per[s][n:]
    assert run(QueryNetwork(join_spec()), steps) == run(QueryNetwork(join_spec()), other)


# ----------------------------------------------------------------------------- checkpoints
@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32), st.floats(0.0, 1.0))
def test_checkpoint_restore_replay_equals_uninterrupted(seed: int, where: float) -> None:
    """Checkpoint anywhere, restore into a fresh network, replay the rest: same output."""
    spec = basic_spec() if seed % 2 else join_spec()
    streams = list(spec["inputs"])
    steps = stream_inputs(random.Random(seed), streams, 40)
    k = int(where * len(steps))
    straight = QueryNetwork(spec)
    before = run(straight, steps[:k])
    snap = straight.snapshot()  # not copied here: a checkpoint must not alias live state
    after = run(straight, steps[k:])
    fresh = QueryNetwork(spec)
    fresh.restore(orjson.loads(orjson.dumps(snap)))
    assert run(fresh, steps[k:]) == after
    assert data(before + after)  # the scenario produced output at all


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32))
def test_without_undo_logs_the_output_is_the_same_and_nothing_is_logged(seed: int) -> None:
    """Fault tolerance off (``dpc bench overhead``): the same results, no undo log kept."""
    spec = basic_spec() if seed % 2 else join_spec()
    steps = stream_inputs(random.Random(seed), list(spec["inputs"]), 40)
    plain = QueryNetwork(spec, undo_logs=False)
    assert run(plain, steps) == run(QueryNetwork(spec), steps)
    assert all(not op._log and not op._markers for op in plain.operators)


def test_an_undo_reaching_an_operator_without_undo_log_is_loud() -> None:
    net = QueryNetwork(basic_spec(wait=50), undo_logs=False)
    for s in ("s1", "s2", "s3"):
        net.push(s, [stable(1, 10), boundary(100)], 0)
    net.push("s1", [stable(2, 120)], 0)
    assert [sig.kind for _, sig in net.on_timer(60).signals] == [Kind.UP_FAILURE]
    for s in ("s1", "s2", "s3"):
        net.push(s, [boundary(200)], 70)
    # The filter passes the UNDO on (it preserves ids); the aggregate would rebuild from
    # its undo log, and has none.
    with pytest.raises(OperatorError, match=r"operator 'a' \(aggregate\): got UNDO\(3\) on input 0 "
                                            "but keeps no undo log"):
        net.undo_start(80)


def test_snapshot_must_match_network() -> None:
    net = QueryNetwork(basic_spec())
    snap = net.snapshot()
    del snap["f"]
    with pytest.raises(CheckpointError, match="the snapshot does not match the network: it has "
                                              "no snapshot of 'f'"):
        net.restore(snap)
    with pytest.raises(CheckpointError, match="no snapshot of 'f'"):
        net.rewind(snap, 0)


# ------------------------------------------------------------------- reconciliation surface
def two_sunion_spec(wait: int = 10**12) -> dict[str, Any]:
    """Two independent paths, each with its own SUnion and SOutput."""
    return {
        "inputs": {"s1": ["key", "value"], "s2": ["key", "value"]},
        "operators": [
            {"name": "u1", "type": "sunion", "inputs": ["s1"], "bucket": BUCKET, "wait": wait},
            {"name": "u2", "type": "sunion", "inputs": ["s2"], "bucket": BUCKET, "wait": 10**12},
            {"name": "f", "type": "filter", "inputs": ["u1"], "where": "value >= 0"},
            {"name": "out1", "type": "soutput", "inputs": ["f"]},
            {"name": "out2", "type": "soutput", "inputs": ["u2"]},
        ],
        "outputs": ["out1", "out2"],
    }


def stable(i: int, time: int, value: int = 1) -> Tuple:
    return make_tuple(Kind.STABLE, i, time, time, (0, value))


def test_the_surface_reaches_every_sunion_and_soutput_and_nothing_else() -> None:
    net = QueryNetwork(two_sunion_spec())
    u1, u2 = net.operator("u1"), net.operator("u2")
    assert isinstance(u1, SUnion) and isinstance(u2, SUnion)
    net.set_mode("delay")
    net.set_replay_step(3)
    assert (u1.mode, u2.mode, u1.replay_step, u2.replay_step) == ("delay", "delay", 3, 3)
    with pytest.raises(OperatorError, match=r"operator 'u1' \(sunion\): mode must be one of"):
        net.set_mode("fast")
    net.push("s1", [stable(1, 10), boundary(300)], 0)
    net.push("s2", [stable(1, 20), boundary(100)], 0)
    # The slowest SUnion says how far the node released; what SUnions hold is summed.
    assert (u1.released_to, u2.released_to, net.released_to) == (300, 100, 100)
    net.push("s2", [stable(2, 150)], 0)
    assert net.buffered == u1.buffered + u2.buffered == 3
    assert not net.in_failure and net.caught_up() and not net.replaying
    assert net.late_dropped == 0 and net.replay_progress() == (0, 0)
    # SUnions' buffers hold arrival times: no digest of them.
    assert set(net.digest_states()) == {"f", "out1", "out2"}
    assert net.end_reconciliation(5) == NetworkOutput({"out1": [], "out2": []})
    assert QueryNetwork(basic_spec()).released_to is not None


def test_undo_start_enters_every_sunion_through_its_first_input() -> None:
    """What the runtime did by hand (UNDO_START pushed on each SUnion's first input, the
    outputs merged), now the network's: the SUnion in a failure episode undoes its
    tentative suffix and re-releases; the other is untouched; REC_DONE then closes only the
    stream that was reconciled."""
    nets = [QueryNetwork(two_sunion_spec(wait=50)) for _ in range(2)]
    for net in nets:
        net.push("s1", [stable(1, 10), boundary(100), stable(2, 120)], 0)
        net.push("s2", [stable(1, 10), boundary(100)], 0)
        fail = net.on_timer(60)  # bucket 1 of u1 expires: released tentative
        assert [s.kind for _, s in fail.signals] == [Kind.UP_FAILURE] and net.in_failure
        net.push("s1", [boundary(200)], 70)  # the input is complete again
    start = make_tuple(Kind.UNDO_START, 0, 80, 80, ())
    by_hand = [nets[0].push(stream, [start], 80) for stream in ("s1", "s2")]
    merged = {name: [t for part in by_hand for t in part.outputs[name]] for name in ("out1", "out2")}
    result = nets[1].undo_start(80)
    assert result.outputs == merged and result.signals == [s for p in by_hand for s in p.signals]
    assert result.outputs["out1"][0] == make_tuple(Kind.UNDO, 1, 0, 0, ())
    assert result.outputs["out2"] == [] and not nets[1].in_failure
    done = nets[1].end_reconciliation(90)
    assert [t.kind for t in done.outputs["out1"]] == [Kind.REC_DONE] and done.outputs["out2"] == []
    assert nets[1].end_reconciliation(95).outputs["out1"] == []  # once


def test_rewind_replays_in_steps_and_is_caught_up_past_the_duplicates() -> None:
    net = QueryNetwork(two_sunion_spec())
    net.push("s1", [stable(1, 10), stable(2, 110), boundary(200)], 0)
    snap = net.snapshot()
    emitted = net.push("s1", [stable(3, 210), stable(4, 310), boundary(400)], 10).outputs["out1"]
    assert [t.id for t in data(emitted)] == [3, 4]
    net.set_replay_step(1)
    first = net.rewind(snap, 20)  # one bucket re-released: a duplicate, dropped
    assert data(first.outputs["out1"]) == [] and net.replaying and not net.caught_up()
    assert net.replay_progress() == (1, 2)
    rest = net.replay(30)
    assert data(rest.outputs["out1"]) == [] and not net.replaying and net.caught_up()
    assert net.replay_progress() == (2, 2)
    net.truncate()  # after a checkpoint here, a rewind cannot go back before it
    with pytest.raises(OperatorError, match="truncated"):
        net.rewind(snap, 40)


def test_a_checkpoint_leaves_out_the_buffers_and_rewinds_like_a_snapshot() -> None:
    """``checkpoint()`` (what the runtime keeps) holds SUnion's bookkeeping, not its buffered
    tuples, and a rewind to it does exactly what a rewind to the whole snapshot does."""
    nets = [QueryNetwork(two_sunion_spec(wait=50)) for _ in range(2)]
    for net in nets:
        net.push("s1", [stable(k, 10 * k) for k in range(1, 30)] + [boundary(300)], 0)
    points = [nets[0].snapshot(), nets[1].checkpoint()]
    assert "buckets" in points[0]["u1"]["state"] and "buckets" not in points[1]["u1"]["state"]
    assert len(orjson.dumps(points[1]["u1"])) < len(orjson.dumps(points[0]["u1"])) / 4
    results = []
    for net, point in zip(nets, points, strict=True):
        net.push("s1", [stable(30, 310), stable(31, 350)], 5)
        fail = net.on_timer(60)  # the pending bucket expires: tentative
        assert net.in_failure and fail.signals
        net.push("s1", [stable(32, 380), boundary(500)], 70)
        results.append((net.rewind(point, 80).outputs, net.replay(90).outputs,
                        net.end_reconciliation(95).outputs, net.digest_states()))
    assert results[0] == results[1]
    assert [t.kind for t in results[0][0]["out1"]].count(Kind.UNDO) == 1
