"""Restart points (operators/restart.py): a network restored to one, fed each input after
its resume id, emits exactly what the original emitted after that point, ids included
(upstream backup's precise recovery); networks without restart points are refused."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from operators import QueryNetwork
from operators.restart import at_rest, restart, restart_point, restart_problems
from protocol.tuples import Kind, Tuple
from tests.operators.test_cec import STREAMS, aggregate_spec, join_spec, long_window_spec, steps


def tumbling_spec() -> dict[str, Any]:
    return long_window_spec()  # SUnion -> filter -> tumbling aggregate -> map -> SOutput


def data(ts: list[Tuple]) -> list[Tuple]:
    return [t for t in ts if t[0] is Kind.STABLE]


@pytest.mark.parametrize("seed", range(6))
def test_a_restart_from_any_restart_point_emits_what_the_original_did(seed: int) -> None:
    inputs = steps(seed, 40)
    net = QueryNetwork(tumbling_spec(), undo_logs=False)
    emitted: list[Tuple] = []
    points: list[tuple[int, dict[str, Any]]] = []  # (steps done, the point, as sent)
    for k, (s, batch) in enumerate(inputs):
        emitted += net.push(s, batch, k).outputs["out"]
        if at_rest(net):
            points.append((k + 1, orjson.loads(orjson.dumps(restart_point(net)))))
    assert len(points) >= 5, "a tumbling window comes to rest now and then"
    original = data(emitted)
    for done, point in points[:: max(1, len(points) // 5)]:
        fresh = QueryNetwork(tumbling_spec(), undo_logs=False)
        rec = restart(fresh, point["h"])
        assert rec.resume == point["resume"]
        again: list[Tuple] = list(rec.output.outputs["out"])
        # Each stream's elements after its resume id (boundaries included), in the original
        # push order: what upstream's buffers replay.
        started = {st: rec.resume[st] == 0 for st in STREAMS}
        for k, (s, batch) in enumerate(inputs):
            keep = []
            for t in batch:
                if started[s]:
                    keep.append(t)
                elif t[0] is Kind.STABLE and t[1] == rec.resume[s]:
                    started[s] = True
            if keep:
                again += fresh.push(s, keep, k).outputs["out"]
        last = point["out"]["out"]
        assert data(again) == [t for t in original if t[1] > last], (seed, done)


def test_networks_without_restart_points_are_refused_by_name() -> None:
    assert restart_problems(QueryNetwork(tumbling_spec(), undo_logs=False)) == []
    sliding = restart_problems(QueryNetwork(aggregate_spec(), undo_logs=False))
    assert any("sliding windows (slide 100 < window 300)" in p for p in sliding), sliding
    band = restart_problems(QueryNetwork(join_spec(), undo_logs=False))
    assert any("a join's time band" in p for p in band), band
