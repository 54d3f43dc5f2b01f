"""Continuous eventual checkpointing of a query network (operators/cec.py, state/cec.py).

The property: run a network on stable input, writing its CEC frames; "crash" it after any
step; build the eventual checkpoint from the frames (newest first), restore a fresh network
from it and replay every input from where the recovery says. The output before the crash
followed by the recovered network's output is the failure-free output, tuple for tuple, and
the final state is the failure-free state -- for any crash point, several crashes in one run,
and any checkpoint policy (G_open only, or G_checks forced by tiny Q / U).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import orjson
import pytest

from operators import QueryNetwork
from operators.cec import CecPolicy, CecWriter, cec_problems, recover
from protocol.tuples import Kind, Tuple, boundary, make_tuple
from protocol.undo_rule import apply_undos
from state.cec import build_ec

S = Kind.STABLE
BUCKET = 100
STREAMS = ("s1", "s2", "s3")


def join_spec() -> dict[str, Any]:
    return {
        "inputs": {s: ["key", "value"] for s in STREAMS},
        "operators": [
            {"name": "u", "type": "sunion", "inputs": list(STREAMS), "bucket": BUCKET,
             "wait": 10**12},  # (never tentative: the streams lag each other)
            {"name": "left", "type": "filter", "inputs": ["u"], "where": "value < 50"},
            {"name": "right", "type": "filter", "inputs": ["u"], "where": "value >= 70"},
            {"name": "j", "type": "join", "inputs": ["left", "right"], "on": [["key", "key"]],
             "band": 150},
            {"name": "out", "type": "soutput", "inputs": ["j"]},
        ],
        "outputs": ["out"],
    }


def aggregate_spec() -> dict[str, Any]:
    return {
        "inputs": {s: ["key", "value"] for s in STREAMS},
        "operators": [
            {"name": "u", "type": "sunion", "inputs": list(STREAMS), "bucket": BUCKET,
             "wait": 10**12},  # (never tentative: the streams lag each other)
            {"name": "f", "type": "filter", "inputs": ["u"], "where": "value >= 10"},
            {"name": "a", "type": "aggregate", "inputs": ["f"], "window": 300, "slide": 100,
             "group_by": ["key"],
             "aggregates": [{"fn": "count", "as": "n"}, {"fn": "sum", "attr": "value", "as": "s"},
                            {"fn": "avg", "attr": "value", "as": "m"},
                            {"fn": "min", "attr": "value", "as": "lo"}]},
            {"name": "m", "type": "map", "inputs": ["a"],
             "fields": {"key": "key", "n": "n * 2"}},
            {"name": "out", "type": "soutput", "inputs": ["m"]},
        ],
        "outputs": ["out"],
    }


def union_aggregate_spec() -> dict[str, Any]:
    """A union below the SUnion, a tumbling aggregate without groups below it."""
    return {
        "inputs": {s: ["key", "value"] for s in STREAMS},
        "operators": [
            {"name": "u", "type": "sunion", "inputs": list(STREAMS), "bucket": BUCKET,
             "wait": 10**12},  # (never tentative: the streams lag each other)
            {"name": "lo", "type": "filter", "inputs": ["u"], "where": "value < 30"},
            {"name": "hi", "type": "filter", "inputs": ["u"], "where": "value > 80"},
            {"name": "both", "type": "union", "inputs": ["lo", "hi"]},
            {"name": "a", "type": "aggregate", "inputs": ["both"], "window": 200,
             "aggregates": [{"fn": "count", "as": "n"}, {"fn": "max", "attr": "value", "as": "x"}]},
            {"name": "out", "type": "soutput", "inputs": ["a"]},
        ],
        "outputs": ["out"],
    }


def long_window_spec() -> dict[str, Any]:
    """Tumbling windows of five buckets: steps that release input but emit nothing, so a
    frame can be written while SOutput's last input is a failure's tentative tuple."""
    spec = aggregate_spec()
    spec["operators"][2] = {"name": "a", "type": "aggregate", "inputs": ["f"], "window": 500,
                            "group_by": ["key"], "aggregates": [{"fn": "count", "as": "n"}]}
    spec["operators"][3]["fields"] = {"key": "key", "n": "n"}
    return spec


SPECS = {"join": join_spec, "aggregate": aggregate_spec, "union-aggregate": union_aggregate_spec,
         "long-window": long_window_spec}


def steps(seed: int, n_buckets: int) -> list[tuple[str, list[Tuple]]]:
    """The input as push calls: per stream, per bucket, its tuples then a boundary; keys
    from few values, so that parts are shared and reopened. The streams' calls are merged
    at random (each stream in order), so that one stream runs several buckets ahead of
    another and the SUnion holds pending input and watermarks past its release point."""
    rng = random.Random(seed)
    per_stream: dict[str, list[list[Tuple]]] = {}
    for s in STREAMS:
        ids, calls = 0, []
        for b in range(n_buckets):
            batch = []
            for t in sorted(rng.randrange(b * BUCKET, (b + 1) * BUCKET)
                            for _ in range(rng.randint(0, 6))):
                ids += 1
                batch.append(make_tuple(S, ids, t, t, (rng.randint(0, 4), rng.randint(0, 99))))
            calls.append([*batch, boundary((b + 1) * BUCKET)])
        per_stream[s] = calls
    out: list[tuple[str, list[Tuple]]] = []
    while any(per_stream.values()):
        s = rng.choice([s for s in STREAMS if per_stream[s]])
        out.append((s, per_stream[s].pop(0)))
    return out


@dataclass
class _Frame:
    t: int
    doc: dict[str, Any]
    size: int = 1


def _logged(frame: tuple[int, dict[str, Any]]) -> _Frame:
    """A frame as the log gives it back: encoded when written (it may share the live
    state), decoded when read."""
    return _Frame(frame[0], orjson.loads(orjson.dumps(frame[1])))


def data(ts: list[Tuple]) -> list[Tuple]:
    return [t for t in ts if t[0] is S]


def run_with_crashes(name: str, seed: int, crashes: list[int], policy: CecPolicy
                     ) -> tuple[list[Tuple], dict[str, Any], list[_Frame]]:
    """Play ``steps`` with a crash (recovery from the frames) before each step in
    ``crashes``; return the output, the final digest state and the frames."""
    inputs = steps(seed, 40)
    frames: list[_Frame] = []
    net = QueryNetwork(SPECS[name](), undo_logs=False)
    writer = CecWriter(net, policy)
    emitted: list[Tuple] = []
    # Per stream, the flattened input, to replay after a resume id.
    flat: dict[str, list[Tuple]] = {s: [] for s in STREAMS}
    position: list[tuple[str, int, int]] = []  # per step: (stream, start, end) in flat
    for s, batch in inputs:
        position.append((s, len(flat[s]), len(flat[s]) + len(batch)))
        flat[s].extend(batch)
    todo = list(range(len(inputs)))
    i = 0
    while i < len(todo):
        k = todo[i]
        if k in crashes and frames:
            crashes = [c for c in crashes if c != k]
            ec = build_ec(reversed(frames))
            assert ec is not None
            net = QueryNetwork(SPECS[name](), undo_logs=False)
            rec = recover(net, ec, now=k)
            emitted += rec.output.outputs["out"]
            writer = CecWriter(net, policy)
            writer.resume_from(ec)
            # Replay each stream's elements after its resume id that came before step k,
            # in the original push order, then go on with step k.
            for j in range(k):
                s, lo, hi = position[j]
                after = _after(flat[s], rec.resume[s])
                batch = [e for e in flat[s][max(lo, after):hi]]
                if batch:
                    _push(net, writer, frames, s, batch, j, emitted)
            continue
        s, lo, hi = position[k]
        _push(net, writer, frames, s, flat[s][lo:hi], k, emitted)
        i += 1
    return emitted, net.digest_states(), frames


def _after(stream: list[Tuple], resume: int) -> int:
    """Index in ``stream`` right after its data tuple ``resume`` (0 for resume 0)."""
    if resume == 0:
        return 0
    for idx, t in enumerate(stream):
        if t[0] is S and t[1] == resume:
            return idx + 1
    raise AssertionError(f"no data tuple {resume}")


def _push(net: QueryNetwork, writer: CecWriter, frames: list[_Frame], s: str,
          batch: list[Tuple], now: int, emitted: list[Tuple]) -> None:
    out = net.push(s, batch, now * 10)
    frame = writer.step(now * 10, out)
    if frame is not None:
        assert not frames or frame[0] >= frames[-1].t, "frames in tuple-time order"
        frames.append(_logged(frame))
    emitted += out.outputs["out"]


POLICIES = {
    "open-only": CecPolicy(q=0, u=0),
    "tiny-q": CecPolicy(q=3, u=0, ci=10, cp=10),
    "tiny-u": CecPolicy(q=0, u=5, ci=5, cp=20),
}


@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("name", sorted(SPECS))
def test_recovery_from_the_log_equals_the_failure_free_run(name: str, policy: str) -> None:
    reference, ref_state, _ = run_with_crashes(name, 7, [], POLICIES[policy])
    assert data(reference), "the case must produce output"
    rng = random.Random(f"{name}-{policy}")
    for _ in range(8):
        crashes = sorted(rng.sample(range(1, 120), rng.randint(1, 3)))
        got, state, _ = run_with_crashes(name, 7, crashes, POLICIES[policy])
        assert data(got) == data(reference), f"crashes before steps {crashes}"
        assert [t for t in got if t[0] not in (S, Kind.BOUNDARY)] == [], crashes
        assert state == ref_state, f"crashes before steps {crashes}"


def test_g_checks_shorten_the_extent() -> None:
    """Tiny Q: the eventual checkpoint reaches fewer frames back than with G_open only."""
    extents = {}
    for policy in ("open-only", "tiny-q"):
        _, _, frames = run_with_crashes("aggregate", 3, [], POLICIES[policy])
        ec = build_ec(reversed(frames))
        assert ec is not None
        extents[policy] = ec.extent_frames
    assert extents["tiny-q"] < extents["open-only"], extents


def test_networks_cec_cannot_checkpoint_are_refused_by_name() -> None:
    spec = aggregate_spec()
    spec["operators"][3] = {"name": "m", "type": "union", "inputs": ["a"]}
    problems = cec_problems(QueryNetwork(spec, undo_logs=False))
    assert len(problems) == 1 and "'m' (union)" in problems[0] and "'a'" in problems[0]
    with pytest.raises(ValueError, match="reads the output of stateful operator 'a'"):
        CecWriter(QueryNetwork(spec, undo_logs=False))
    with pytest.raises(ValueError, match="keep undo logs"):
        CecWriter(QueryNetwork(aggregate_spec()))


# ---------------------------------------------------------------- crashes in a failure
class MiniReplica:
    """What a replica's runtime and consistency manager do to its network, in a few lines:
    checkpoint right before a failure's first tentative release, and on REC_REQUEST rewind
    to it and replay one bucket per call (new input held meanwhile, as the manager does),
    then end the reconciliation; a CEC frame after every call. Recovery from the frames."""

    def __init__(self, name: str, policy: CecPolicy, frames: list[_Frame]) -> None:
        self.name, self.policy, self.frames = name, policy, frames
        self.net = QueryNetwork(_failing(SPECS[name]()), undo_logs=False)
        self.writer = CecWriter(self.net, policy)
        self.checkpoint: dict[str, Any] | None = None
        self.emitted: list[Tuple] = []
        self.replaying = False

    def recover(self, now: int) -> dict[str, int]:
        ec = build_ec(reversed(self.frames))
        assert ec is not None
        self.net = QueryNetwork(_failing(SPECS[self.name]()), undo_logs=False)
        rec = recover(self.net, ec, now)
        self.writer = CecWriter(self.net, self.policy)
        self.writer.resume_from(ec)
        self.replaying = False
        self.checkpoint = self.net.checkpoint()  # (the runtime takes one after a recovery)
        self._done(rec.output, now)
        return rec.resume

    def push(self, stream: str, batch: list[Tuple], now: int) -> None:
        if (not self.net.in_failure and not self.replaying
                and self.net.episode_may_begin(now, stream)):
            self.checkpoint = self.net.checkpoint()  # (on_failure checkpointing)
            self.net.truncate()
        self._done(self.net.push(stream, batch, now), now)

    def reconcile(self, now: int) -> None:
        """Replay one step, if a replay is under way."""
        if not self.replaying:
            return
        self._done(self.net.replay(now), now)
        if not self.net.replaying:
            self.replaying = False
            self._done(self.net.end_reconciliation(now), now)

    def _done(self, out: Any, now: int) -> None:
        frame = self.writer.step(now, out)
        if frame is not None:
            self.frames.append(_logged(frame))
        self.emitted += out.outputs["out"]
        if any(t[0] is Kind.REC_REQUEST for _, t in out.signals):
            assert self.checkpoint is not None, "an episode without its checkpoint"
            self.net.set_replay_step(1)
            self.replaying = True
            self._done(self.net.rewind(self.checkpoint, now), now)


def _failing(spec: dict[str, Any]) -> dict[str, Any]:
    """The spec with an SUnion that releases tentatively after a short wait."""
    for op in spec["operators"]:
        if op["type"] == "sunion":
            op["wait"] = 30
    return spec


def play_failure(name: str, seed: int, crashes: list[int], policy: CecPolicy
                 ) -> tuple[list[Tuple], dict[str, Any]]:
    """Stream s3 is withheld from call 30 to call 70 (its calls are queued, then delivered);
    ``now`` advances 10 per call, so the SUnion releases tentatively meanwhile. New input
    waits while a reconciliation replays, one bucket per *tick* (as the manager holds it).
    A crash before tick k (a push or a replay step) recovers from the frames and replays
    every input after its resume id."""
    calls = steps(seed, 40)
    delivered: dict[str, list[Tuple]] = {s: [] for s in STREAMS}  # what each stream sent
    frames: list[_Frame] = []
    r = MiniReplica(name, policy, frames)
    tick = 0

    def before_tick(now: int) -> None:
        nonlocal tick
        tick += 1
        if tick in crashes and frames:
            resume = r.recover(now)
            for st in STREAMS:
                rest = delivered[st][_after(delivered[st], resume[st]):]
                if rest:
                    r.push(st, rest, now)

    def send(st: str, batch: list[Tuple], now: int) -> None:
        while r.replaying:
            before_tick(now)
            r.reconcile(now)
        before_tick(now)
        delivered[st] += batch
        r.push(st, batch, now)

    held: list[list[Tuple]] = []
    k = 0
    for k, (s, batch) in enumerate(calls):
        now = k * 10
        if 30 <= k < 70 and s == "s3":
            held.append(batch)
            continue
        for b in held if k >= 70 else []:
            send("s3", b, now)
        held = held if k < 70 else []
        send(s, batch, now)
    while r.replaying:
        before_tick((k + 1) * 10)
        r.reconcile((k + 1) * 10)
    return r.emitted, r.net.digest_states()


@pytest.mark.parametrize("policy", ["open-only", "tiny-q"])
@pytest.mark.parametrize("name", sorted(SPECS))
def test_crashes_in_failure_and_stabilization_recover_exactly(name: str, policy: str) -> None:
    """Crashes while the SUnion releases tentatively and while a reconciliation replays
    (the log then holds frames of a replay whose watermarks run ahead of its release
    point): the stream in force ends equal to the failure-free one, nothing tentative
    left, and the state too."""
    reference, ref_state, _ = run_with_crashes(name, 11, [], POLICIES[policy])
    got, state = play_failure(name, 11, [], POLICIES[policy])
    assert any(t[0] is Kind.TENTATIVE for t in got), "the failure must release tentatively"
    assert data(apply_undos(got)) == data(reference)
    rng = random.Random(f"failure-{name}-{policy}")
    # Single crashes at every 3rd tick through the failure, the heal and the replays (a
    # crash during a replay after tentative output: dpc simulate seed 24975), then pairs.
    for crashes in ([[k] for k in range(31, 131, 3)]
                    + [sorted(rng.sample(range(20, 130), 2)) for _ in range(8)]):
        got, state = play_failure(name, 11, crashes, POLICIES[policy])
        final = apply_undos(got)
        assert [t for t in final if t[0] is Kind.TENTATIVE] == [], crashes
        assert data(final) == data(reference), f"crashes before calls {crashes}"
        assert state == ref_state, f"crashes before calls {crashes}"
