"""The live path in columns (issue 48) holds the per-tuple path's output and state.

The same input, fed to two query networks of the same spec, once as tuples and once as
columns (a Batch off the wire), through stable waves, a failure episode (an input silent
past alpha*X: tentative releases, late tuples for released buckets), its reconciliation
(checkpoint/redo's rewind) and an input's UNDO: every call's outputs (exact Python types)
and every operator's snapshot must be equal. The columnar SUnion keeps STABLE runs as
columns and releases such buckets as one run; the network runs filters and SOutput
vectorized over those waves (live_min_rows 0: every wave) and everything else per tuple.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from node.config.load import load_config
from operators import QueryNetwork
from protocol.columns import Columns
from protocol.tuples import Kind, Tuple, boundary, make_tuple, undo

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

BUCKET = 100_000
WAIT = 2_700_000  # the basic example's alpha*X


def exact(tuples: list[Tuple]) -> list[tuple[Tuple, tuple[type, ...]]]:
    return [(t, tuple(map(type, t.values))) for t in tuples]


def every(result: Any) -> list[Tuple]:
    return [t for tuples in result.outputs.values() for t in tuples]


class Pair:
    """Two networks of one spec: ``a`` fed tuples, ``b`` the same as columns."""

    def __init__(self, spec: Any) -> None:
        self.a, self.b = QueryNetwork(spec), QueryNetwork(spec)
        self.b.live_min_rows = 0  # every wave of columns vectorized where it can be
        self.signals: list[tuple[str, Tuple]] = []  # since the caller last cleared them

    def both(self, call: str, *args: Any) -> None:
        """Call both; the outputs, the signals and every operator's state are equal."""
        ra, rb = getattr(self.a, call)(*args), getattr(self.b, call)(*args)
        assert exact(every(ra)) == exact(every(rb))
        assert ra.signals == rb.signals
        assert self.a.snapshot() == self.b.snapshot()
        self.signals += ra.signals

    def push(self, stream: str, batch: list[Tuple], now: int) -> None:
        """Push both (``b`` as columns); the outputs and signals are equal (the states are
        compared at ``both``: a snapshot per push made the test three times as long)."""
        ra = self.a.push(stream, batch, now)
        rb = self.b.push(stream, Columns.from_tuples(batch), now)
        assert exact(every(ra)) == exact(every(rb))
        assert ra.signals == rb.signals
        self.signals += ra.signals


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_columns_and_tuples_give_the_same_output_and_state(seed: int) -> None:
    node = load_config(EXAMPLES / "basic.toml").nodes["n1"]
    pair = Pair(node.network)
    rng = random.Random(seed)
    ids = dict.fromkeys(node.inputs, 0)
    silent = node.inputs[-1]
    cut_from, cut_to = 6, 6 + WAIT // BUCKET + 5  # the silent input's outage, in buckets
    held: list[Tuple] = []
    checkpoint = pair.a.checkpoint()
    rewound = False
    for w in range(45):
        now = (w + 1) * BUCKET + rng.randrange(1000)
        for s in node.inputs:
            batch = []
            for _ in range(rng.choice((0, 1, 5, 40, 300))):
                ids[s] += 1
                t = w * BUCKET + rng.randrange(BUCKET)
                batch.append(make_tuple(Kind.STABLE, ids[s], t, t,
                                        (rng.randrange(100), rng.randrange(100))))
            batch.sort(key=lambda x: x.time) if rng.random() < 0.8 else None  # some out of order
            batch = [make_tuple(Kind.STABLE, i, t.time, t.tmax, t.values)
                     for i, t in zip(sorted(x.id for x in batch), batch, strict=True)]
            batch.append(boundary((w + 1) * BUCKET))
            if s == silent and cut_from <= w < cut_to:
                held += batch  # the input is cut: its tuples come late, at the heal
                continue
            if s == silent and w == cut_to and held:
                pair.push(s, held, now)  # late tuples for buckets released tentative
                held = []
            if w == 10 and s == node.inputs[0] and batch[:-1]:
                # An input's correction: its last tuples undone, then sent again.
                pair.push(s, batch, now)
                keep = batch[0].id - 1
                pair.push(s, [undo(keep)], now)
                ids[s] = keep
                continue
            pair.push(s, batch, now)
        pair.both("on_timer", now + WAIT // 2)
        if w == 3:
            checkpoint = pair.a.checkpoint()
            assert checkpoint == pair.b.checkpoint()
        if not rewound and any(t.kind is Kind.REC_REQUEST for _, t in pair.signals):
            pair.both("rewind", checkpoint, now)
            rewound = True
        pair.signals.clear()
    assert rewound  # the failure was reconciled (REC_REQUEST, then the rewind)
    assert pair.b.live_runs["vectorized"] > 0  # the columnar path ran
    sunion = pair.b.operator("u")
    assert sunion.columns_fallback > 0  # and so did its fallbacks (late, out of order)


def test_a_bucket_released_from_columns_orders_ties_by_input_then_id() -> None:
    """Equal times across inputs: (time, input, id), as the tuple release."""
    node = load_config(EXAMPLES / "basic.toml").nodes["n1"]
    pair = Pair(node.network)
    for k, s in enumerate(node.inputs):
        batch = [make_tuple(Kind.STABLE, i, 500, 500, (i % 100, 10 * k + i % 10))
                 for i in range(1, 50)] + [boundary(BUCKET)]
        pair.push(s, batch, BUCKET + 1)
    pair.both("on_timer", BUCKET + 2)
