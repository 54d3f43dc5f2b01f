"""Undo/redo reconciliation of a whole query network with a join (examples/basic.toml's
shape: SUnion(s1, s2, s3) -> two filters -> windowed join -> SOutput).

The bug this guards against (seen in examples/scenarios/split.toml): the SUnion's UNDO
reaches the join on both of its inputs in the same wave. The join's generic undo of its
left input re-fed the right input's *tentative* entries that followed (they were about to
be undone by the right input's own UNDO), so tentative tuples came out right after the
UNDO, SOutput forced a spurious REC_DONE before them, and a second UNDO followed. Expected
on the output stream: UNDO(last stable id), the corrections (STABLE), then REC_DONE when
the node's reconciliation completes -- nothing tentative, no REC_DONE, no second UNDO in
between -- and the final stream equal to the failure-free one.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from operators import QueryNetwork
from operators.sunion import SUnion
from protocol.tuples import Kind, Tuple, boundary, make_tuple
from state.spill import SpillStats
from tests.operators.cases_fault import apply_undos, data_of

S, T = Kind.STABLE, Kind.TENTATIVE
BUCKET = 100
WAIT = 250  # alpha*X, in tuple-time units (now advances with tuple time)
STREAMS = ("s1", "s2", "s3")


def spec() -> dict[str, Any]:
    return {
        "inputs": {s: ["key", "value"] for s in STREAMS},
        "operators": [
            {"name": "u", "type": "sunion", "inputs": list(STREAMS), "bucket": BUCKET,
             "wait": WAIT, "process_wait": 50, "recovery": "undo"},
            {"name": "left", "type": "filter", "inputs": ["u"], "where": "value < 50"},
            {"name": "right", "type": "filter", "inputs": ["u"], "where": "value >= 70"},
            {"name": "j", "type": "join", "inputs": ["left", "right"], "on": [["key", "key"]],
             "band": 150},
            {"name": "out", "type": "soutput", "inputs": ["j"]},
        ],
        "outputs": ["out"],
    }


def ticks(seed: int, n_buckets: int) -> list[dict[str, list[Tuple]]]:
    """Per bucket, per stream: its tuples of that bucket then the boundary closing it."""
    rng = random.Random(seed)
    ids = dict.fromkeys(STREAMS, 0)
    out = []
    for b in range(n_buckets):
        tick: dict[str, list[Tuple]] = {}
        for s in STREAMS:
            batch = []
            for t in sorted(rng.randrange(b * BUCKET, (b + 1) * BUCKET) for _ in range(rng.randint(1, 6))):
                ids[s] += 1
                batch.append(make_tuple(S, ids[s], t, t, (rng.randint(0, 3), rng.randint(0, 99))))
            tick[s] = [*batch, boundary((b + 1) * BUCKET)]
        out.append(tick)
    return out


def kinds(stream: list[Tuple]) -> str:
    """The stream's shape, for failure messages: S/T runs, U(id), R."""
    parts: list[str] = []
    for t in stream:
        if t.kind is Kind.UNDO:
            parts.append(f"U({t.id})")
        elif t.kind is Kind.REC_DONE:
            parts.append("R")
        elif t.kind in (S, T):
            parts.append(f"{t.kind.name[0]}{t.id}")
    return " ".join(parts)


def run(seed: int, *, fail: tuple[int, int] | None, replay_step: int | None,
        spill: Path | None = None, stats: list[SpillStats] | None = None) -> list[Tuple]:
    """Feed the ticks; with ``fail = (a, b)`` stream s3 is silent from bucket a to bucket b
    (exclusive) and its missed input arrives at bucket b, then the node reconciles by
    undo/redo as node/replica/manager.py does, through the network's reconciliation surface:
    UNDO_START, then ``replay`` steps, then REC_DONE. ``spill``: the network keeps almost
    nothing of its SUnion's kept input and its undo logs in memory, the rest there."""
    net = QueryNetwork(spec())
    if spill is not None:
        net.set_spill(spill, 1)
    u = net.operator("u")
    assert isinstance(u, SUnion)
    net.set_replay_step(replay_step)
    out: list[Tuple] = []
    held: list[Tuple] = []
    all_ticks = ticks(seed, 30)
    for b, tick in enumerate(all_ticks):
        now = (b + 1) * BUCKET
        out += net.on_timer(now).outputs["out"]
        for s in STREAMS:
            batch = tick[s]
            if fail is not None and s == "s3" and fail[0] <= b < fail[1]:
                held += batch
                continue
            if fail is not None and s == "s3" and b == fail[1]:
                batch = held + batch
            out += net.push(s, batch, now).outputs["out"]
        if fail is not None and b == fail[1]:
            assert u.in_failure and u.rec_requested, "the failure must heal with corrections in"
            res = net.undo_start(now)
            out += res.outputs["out"]
            steps = 1
            while net.replaying:
                out += net.replay(now).outputs["out"]
                steps += 1
            if replay_step is not None:
                assert steps > 2, "the replay must take several steps"
            assert net.replay_progress() == u.replay_progress and u.replay_progress[1] > 0
            assert not u.in_failure and net.caught_up()
            out += net.end_reconciliation(now).outputs["out"]
    out += net.on_timer(10**9).outputs["out"]
    if stats is not None:
        stats.append(net.spill_stats())
    return out


@pytest.mark.parametrize("replay_step", [1, None])
@pytest.mark.parametrize("seed", range(12))
def test_undo_reconciliation_through_a_join_emits_undo_corrections_rec_done(
    seed: int, replay_step: int | None
) -> None:
    reference = run(seed, fail=None, replay_step=replay_step)
    assert not any(t.kind in (T, Kind.UNDO, Kind.REC_DONE) for t in reference)
    out = run(seed, fail=(8, 16), replay_step=replay_step)
    shape = kinds(out)
    assert any(t.kind is T for t in out), f"the failure produced no tentative output: {shape}"
    undos = [i for i, t in enumerate(out) if t.kind is Kind.UNDO]
    assert undos, f"no UNDO: {shape}"
    first = undos[0]
    assert not any(t.kind is T for t in out[first:]), (
        f"TENTATIVE tuples after the reconciliation's UNDO: {shape}"
    )
    rec = [i for i, t in enumerate(out) if t.kind is Kind.REC_DONE]
    assert len(rec) == 1 and rec[0] > first, f"one REC_DONE, after the UNDO: {shape}"
    assert undos == [first], f"a second UNDO during the reconciliation: {shape}"
    # The final stream (UNDOs applied; none takes back a stable tuple) is the failure-free
    # one, its data and its stable boundaries; no stable boundary was sent twice.
    final = apply_undos(out)
    assert data_of(final) == data_of(reference)
    stable_boundaries = [t.time for t in out if t.kind is Kind.BOUNDARY]
    assert stable_boundaries == [t.time for t in reference if t.kind is Kind.BOUNDARY]
    assert [t for t in final if t.kind is not Kind.REC_DONE] == reference


@pytest.mark.parametrize("seed", range(6))
def test_undo_reconciliation_from_spilled_logs_is_the_same(seed: int, tmp_path: Path) -> None:
    """Every undo log and the SUnion's kept input on disk (state/spill_list.py): the very
    same output, and once reconciled, nothing left there but what the next UNDO may need."""
    kept = run(seed, fail=(8, 16), replay_step=3)
    stats: list[SpillStats] = []
    assert run(seed, fail=(8, 16), replay_step=3, spill=tmp_path, stats=stats) == kept
    [st] = stats
    assert st.written_tuples > 100, st  # the failure's input and logs did go to disk
    on_disk = [p for p in tmp_path.rglob("*.arrow")]
    assert st.segments == len(on_disk) and st.deleted_segments > 0, (st, on_disk)


def test_join_undo_when_the_other_input_went_tentative_first() -> None:
    """The right input's tentative tuple came before the left one's: UNDO on the left must
    rebuild from before both (not keep the right's tentative tuple in the state, which left
    the join tainted: the left corrections came out TENTATIVE, then a second UNDO)."""
    from operators import create

    def join() -> Any:
        return create("join", "j", [("k", "v"), ("k", "w")], {"on": [["k", "k"]], "band": 10})

    def d(kind: Kind, id: int, t: int, v: int) -> Tuple:
        return make_tuple(kind, id, t, t, (1, v))

    j = join()
    out: list[Tuple] = []
    out += j.process(0, [d(S, 1, 5, 10)]) + j.process(1, [d(S, 1, 6, 20)])
    out += j.process(1, [d(T, 2, 12, 99)])  # the right input goes tentative first
    out += j.process(0, [d(T, 2, 13, 98)])
    mark = len(out)
    out += j.process(0, [make_tuple(Kind.UNDO, 1, 0, 0, ()), d(S, 2, 13, 11)])
    out += j.process(1, [make_tuple(Kind.UNDO, 1, 0, 0, ()), d(S, 2, 12, 21)])
    after = [(t.kind, t.id) for t in out[mark:]]
    assert after[0] == (Kind.UNDO, 1)
    assert all(k is S for k, _ in after[1:]), after

    ref = join()
    straight: list[Tuple] = []
    for port, t in ((0, d(S, 1, 5, 10)), (1, d(S, 1, 6, 20)), (0, d(S, 2, 13, 11)), (1, d(S, 2, 12, 21))):
        straight += ref.process(port, [t])
    assert data_of(apply_undos(out)) == data_of(straight)
