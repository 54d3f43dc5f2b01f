"""The replay engines on random networks: the same output and the same end state.

A random query network below one SUnion (tests/networks.py: chains of filters, maps,
windowed aggregates, band joins and unions over int and float attributes, floats such as
-0.0 and 1e16 included) goes through a failure: a stable prefix, a checkpoint, one input
silent while the other goes on (buckets released tentative), the silent input's tuples
coming back late, then checkpoint/redo: rewind, the replay in steps, REC_DONE. With the
engine ``vectorized``, and with ``spark``'s jobs (pickled both ways and run by a fresh
network, as a Spark task runs them: tests/node/spark/ runs them on Spark itself), every
call returns exactly what the per-tuple replay returns (floats by their bits) and every
operator ends in exactly its state.
"""

from __future__ import annotations

import random
import struct
import tempfile
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from operators import NetworkOutput, QueryNetwork
from protocol.tuples import Kind, Tuple, boundary, make_tuple
from tests.networks import networks
from tests.operators.vectorized.test_remote import RemoteNetwork

BUCKET = 100_000  # µs, the scale of tests/networks.py's windows and bands


def spec(ops: list[dict[str, Any]], schema: tuple[str, ...]) -> dict[str, Any]:
    sunion = {"name": "u", "type": "sunion", "inputs": ["s1", "s2"], "bucket": BUCKET,
              "wait": BUCKET // 2}
    return {"inputs": {"s1": list(schema), "s2": list(schema)},
            "operators": [sunion, *ops], "outputs": ["out"]}


def bucket(rng: random.Random, schema: tuple[str, ...], first_id: int, lo: int,
           hi: int) -> list[Tuple]:
    draw = {"k": lambda: rng.randrange(3), "v": lambda: rng.randrange(10),
            "f": lambda: rng.choice([0.1, 0.2, 0.3, -0.0, 0.0, 1e16, rng.uniform(-5, 5)])}
    times = sorted(rng.randrange(lo * BUCKET, hi * BUCKET) for _ in range(rng.randint(1, 30)))
    return [make_tuple(Kind.STABLE, first_id + i, t, t + rng.randrange(3),
                       tuple(draw[a]() for a in schema))
            for i, t in enumerate(times)] + [boundary(hi * BUCKET)]


def scenario(net: QueryNetwork, schema: tuple[str, ...], seed: int,
             step: int | None, withheld: int = 0) -> list[Any]:
    """``withheld``: the silent input's last buckets that do not come back before the
    reconciliation (its replay then ends with buckets still tentative)."""
    rng = random.Random(seed)
    calls: list[NetworkOutput] = []
    net.set_replay_step(step)
    ids = {"s1": 1, "s2": 10**6}
    for b in range(3):
        for s in ("s1", "s2"):
            batch = bucket(rng, schema, ids[s], b, b + 1)
            ids[s] += len(batch) - 1
            calls.append(net.push(s, batch, 0))
    point = net.checkpoint()
    late = []
    for b in range(3, 9):
        batch = bucket(rng, schema, ids["s1"], b, b + 1)
        ids["s1"] += len(batch) - 1
        calls.append(net.push("s1", batch, 10))
        batch = bucket(rng, schema, ids["s2"], b, b + 1)
        ids["s2"] += len(batch) - 1
        late.append(batch)
    calls.append(net.on_timer(10**9))  # s2 is silent: the pending buckets go tentative
    assert net.in_failure
    for batch in late[:len(late) - withheld]:
        calls.append(net.push("s2", batch, 10**9 + 1))
    calls.append(net.rewind(point, 10**9 + 2))
    while net.replaying:
        calls.append(net.replay(10**9 + 3))
    calls.append(net.end_reconciliation(10**9 + 4))
    return [({k: [bits(t) for t in v] for k, v in c.outputs.items()}, c.signals)
            for c in calls]


def bits(t: Tuple) -> tuple[Any, ...]:
    return (*t[:4], tuple(struct.pack("<d", v) if isinstance(v, float) else v for v in t[4]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(net=networks(), seed=st.integers(0, 2**32), step=st.sampled_from([None, 1, 3]),
       engine=st.sampled_from(["vectorized", "spark"]), spill=st.sampled_from([None, 0]),
       withheld=st.sampled_from([0, 0, 2]))
def test_every_engine_replays_a_random_network_as_the_per_tuple_one(
        net: tuple[list[dict[str, Any]], tuple[str, ...]], seed: int, step: int | None,
        engine: str, spill: int | None, withheld: int) -> None:
    ops, schema = net
    inproc = QueryNetwork(spec(ops, schema))
    other = (RemoteNetwork if engine == "spark" else QueryNetwork)(spec(ops, schema))
    other.set_engine(engine)
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        if spill is not None:
            inproc.set_spill(a, spill)
            other.set_spill(b, spill)
        expected = scenario(inproc, schema, seed, step, withheld)
        assert scenario(other, schema, seed, step, withheld) == expected
        assert other.snapshot() == inproc.snapshot()
    assert other.replay_runs["vectorized"] > 0  # (the engine did run, vectorized somewhere)
