"""Conformance cases for the relational operators: filter, map, union, aggregate, join.

Each case's script is drawn from a seeded random: several ports interleaved, batches of
1-6 tuples mixing data and BOUNDARY tuples, tuple times in disorder within each port's
boundary promise (a port's tuples never go below its last boundary), and final
boundaries on every port far past the data, so that every window closes and every join
side is evicted. :func:`script` is shared with the unit tests.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from protocol.tuples import Kind, Tuple, Value, boundary, make_tuple

from .harness import Case, Step, case

__all__ = ["KV", "script", "values_kv"]

KV = ("key", "value")

ValuesFn = Callable[[random.Random, int], tuple[Value, ...]]


def values_kv(rng: random.Random, port: int) -> tuple[Value, ...]:
    return (rng.choice("abcd"), rng.randint(0, 30))


def script(
    rng: random.Random,
    n_ports: int,
    values: ValuesFn,
    *,
    n_steps: int = 40,
    max_batch: int = 6,
    jitter: int = 6,
    advance: int = 3,
    p_boundary: float = 0.25,
) -> list[Step]:
    """An all-STABLE script: per-port ids from 1, times ``clock + [0, jitter]`` where the
    shared clock only moves forward and every boundary is the clock (so it is a true
    promise for the port), and at the end a boundary past everything on every port."""
    clock = rng.randint(0, 20)
    next_id = [1] * n_ports
    last_b = [-1] * n_ports
    steps: list[Step] = []
    hi = 0
    for i in range(n_steps):
        port = rng.randrange(n_ports)
        batch: list[Tuple] = []
        for _ in range(rng.randint(1, max_batch)):
            if rng.random() < p_boundary and clock > last_b[port]:
                batch.append(boundary(clock))
                last_b[port] = clock
            else:
                t = clock + rng.randint(0, jitter)
                hi = max(hi, t)
                batch.append(make_tuple(Kind.STABLE, next_id[port], t, t, values(rng, port)))
                next_id[port] += 1
            clock += rng.randint(0, advance)
        steps.append(Step(port, batch, now=10 * i))
    end = max(hi, clock) + 1000
    for port in range(n_ports):
        steps.append(Step(port, [boundary(end)], now=10 * n_steps + port))
    return steps


def _filter_script(rng: random.Random) -> list[Step]:
    return script(rng, 1, values_kv)


def _union_script(rng: random.Random) -> list[Step]:
    return script(rng, 3, values_kv, n_steps=50)


def _agg_values(rng: random.Random, port: int) -> tuple[Value, ...]:
    # Prices in tenths: not exact in binary, so a sum that depended on batching would show.
    return (rng.choice("abc"), rng.randint(-5, 40), rng.randint(0, 1000) / 10)


def _agg_script(rng: random.Random) -> list[Step]:
    return script(rng, 1, _agg_values, n_steps=50)


def _join_values(rng: random.Random, port: int) -> tuple[Value, ...]:
    return (rng.choice("abc"), rng.randint(0, 99) + 100 * port)


def _join_script(rng: random.Random) -> list[Step]:
    return script(rng, 2, _join_values, n_steps=50, jitter=5, advance=2)


case(
    Case(
        "filter",
        {"where": "value > 10 and key != 'c' or value % 7 == 0"},
        (KV,),
        _filter_script,
        notes="and/or/%, string comparison; passes the same tuple objects",
    )
)

case(
    Case(
        "map",
        {
            "fields": {
                "key": "key",
                "double": "value * 2",
                "quarter": "value / 4",
                "bucket": "value // 7 if value > 3 else -1",
                "label": "key + str(value)",
                "hot": "key in ('a', 'b') and 0 < value <= 20",
                "far": "max(abs(value - 15), 2)",
            }
        },
        (KV,),
        _filter_script,
        notes="arithmetic, conditional, calls, chained comparison, membership",
    )
)

case(
    Case(
        "union",
        {},
        (KV, KV, KV),
        _union_script,
        notes="three ports interleaved; renumbering; UNDO on one port maps to output ids",
        extra={"reference": "arrival"},  # output order is arrival order
    )
)

case(
    Case(
        "aggregate",
        {
            "window": 12,
            "slide": 5,
            "group_by": ["key"],
            "aggregates": [
                {"fn": "count", "as": "n"},
                {"fn": "sum", "attr": "value", "as": "total"},
                {"fn": "avg", "attr": "price", "as": "avg_price"},
                {"fn": "min", "attr": "price", "as": "low"},
                {"fn": "max", "attr": "value", "as": "high"},
            ],
        },
        (("key", "value", "price"),),
        _agg_script,
        notes="sliding windows whose slide does not divide the window; three groups; "
        "float sums (batch invariance)",
    )
)

case(
    Case(
        "join",
        {"on": [["key", "key"]], "band": 3},
        (KV, KV),
        _join_script,
        notes="matches across both ports, band edges (|dt| = 3 in, 4 out), eviction",
        extra={"reference": "arrival"},  # output order is arrival order
    )
)
