"""Conformance cases for the fault-tolerance operators: SUnion and SOutput.

SUnion script shape (why): the input is cut into *ticks*, one per bucket. In tick b every
port sends its tuples of bucket b (in random time order, sometimes split in two batches)
followed by a BOUNDARY, ports in random order; now advances by ``TICK`` per tick, and
sometimes a quiet stretch makes every port jump its boundary several buckets ahead (an
O(1) jump in SUnion). So in the all-STABLE run every bucket is complete within the tick
that fills it (``TICK`` < ``wait``): only stable releases. When the suite turns a suffix of
one port TENTATIVE, that port's buckets stop being stable-ready and, once ``now`` has moved
``wait`` past their first tuple, go out TENTATIVE (an UP_FAILURE episode, then ``process_wait``
releases); the UNDO + stable suffix and the UNDO_START of ``reconcile`` then correct them.
Every earlier bucket is already released when a port's first tentative tuple arrives, so
no stable output ever follows a tentative input.
"""

from __future__ import annotations

import random

from operators.base import Operator
from protocol.tuples import Kind, Tuple, boundary, make_tuple
from protocol.undo_rule import apply_undo
from tests.operators.harness import Case, Step, case

__all__ = ["SOUTPUT_CASE", "SUNION_CASE", "apply_undos", "data_of", "undo_start"]

WIDTH = 100  # bucket width, tuple-time units
TICK = 100  # now advance per tick
WAIT = 250  # > 2 ticks: never expires in the all-stable script
PROCESS_WAIT = 150
N_PORTS = 3


def undo_start() -> Tuple:
    return make_tuple(Kind.UNDO_START, 0, 0, 0, ())


def apply_undos(stream: list[Tuple]) -> list[Tuple]:
    """The stream a client ends with: every UNDO applied by the one UNDO rule
    (``protocol.undo_rule``). Fails if an UNDO(u), u > 0, names no data tuple in force
    (SUnion and SOutput never drop an id, unlike a filter) or takes back a STABLE one
    (property 4)."""
    out: list[Tuple] = []
    for t in stream:
        if t.kind is Kind.UNDO:
            assert t.id == 0 or any(
                x.kind in (Kind.STABLE, Kind.TENTATIVE) and x.id == t.id for x in out
            ), f"UNDO({t.id}) names no tuple of the stream"
            undone = [x for x in apply_undo(out, t.id) if x.kind is Kind.STABLE]
            assert not undone, f"UNDO({t.id}) takes back stable tuples {undone}"
        else:
            out.append(t)
    return out


def data_of(stream: list[Tuple]) -> list[Tuple]:
    return [t for t in stream if t.kind in (Kind.STABLE, Kind.TENTATIVE)]


def _sunion_script(rng: random.Random) -> list[Step]:
    steps: list[Step] = []
    ids = [0] * N_PORTS
    now = 0
    b = 0
    for _ in range(rng.randint(8, 24)):
        jump = 1 if rng.random() < 0.8 else rng.randint(2, 4)
        ports = list(range(N_PORTS))
        rng.shuffle(ports)
        for p in ports:
            data = []
            for _ in range(rng.choice((0, 1, 1, 2, 3, 5))):
                ids[p] += 1
                t = b * WIDTH + rng.randrange(WIDTH)
                data.append(make_tuple(Kind.STABLE, ids[p], t, t, (p, ids[p], rng.randint(0, 9))))
            batch = [*data, boundary((b + jump) * WIDTH)]
            if len(batch) > 2 and rng.random() < 0.3:
                cut = rng.randrange(1, len(batch))
                steps.append(Step(p, batch[:cut], now))
                steps.append(Step(p, batch[cut:], now))
            else:
                steps.append(Step(p, batch, now))
        b += jump
        now += TICK * jump
    return steps


def _sunion_reconcile(op: Operator, now: int) -> list[Tuple]:
    return op.process(0, [undo_start()], now)


SUNION_CASE = case(
    Case(
        type_name="sunion",
        params={"bucket": WIDTH, "wait": WAIT, "process_wait": PROCESS_WAIT},
        input_schemas=(("src", "n", "v"),) * N_PORTS,
        script=_sunion_script,
        reconcile=_sunion_reconcile,
        notes=(
            "3 inputs, one tick per bucket, every port closes each tick with a boundary "
            "(sometimes several buckets ahead): stable releases, empty-bucket jumps; a "
            "tentative suffix blocks its buckets past `wait` -> tentative releases, then "
            "UNDO + corrections and UNDO_START re-release them stable."
        ),
    )
)


def _soutput_script(rng: random.Random) -> list[Step]:
    steps: list[Step] = []
    t = 0
    next_id = 1
    for k in range(rng.randint(3, 15)):
        batch = []
        for _ in range(rng.randint(0, 6)):
            t += rng.randint(0, 30)
            batch.append(make_tuple(Kind.STABLE, next_id, t, t, (next_id, rng.randint(0, 99))))
            next_id += 1
        t += rng.randint(0, 30)
        batch.append(boundary(t))
        if rng.random() < 0.2:
            batch.append(boundary(t))  # a repeated boundary must not pass twice
        steps.append(Step(0, batch, k * 10))
    return steps


SOUTPUT_CASE = case(
    Case(
        type_name="soutput",
        params={},
        input_schemas=(("n", "v"),),
        script=_soutput_script,
        notes="pass-through with ids preserved; repeated boundaries are dropped",
    )
)
