"""The SUnion/SOutput conformance cases do what their notes promise.

The shared conformance suite checks every operator against its case; these tests check
that the fault cases really exercise what they claim: the all-stable SUnion script releases
only stable buckets (with empty-bucket jumps), and a tentative suffix on one input leads to
tentative releases that UNDO + corrections + the case's ``reconcile`` turn back into the
straight-through stream. Also a snapshot/restore round trip at every step.
"""

from __future__ import annotations

import random

import orjson
import pytest

from operators import Operator, create
from protocol.tuples import Kind, Tuple, undo
from tests.operators.cases_fault import SOUTPUT_CASE, SUNION_CASE, apply_undos, data_of
from tests.operators.harness import Case, Step

SEEDS = range(25)


def build(c: Case) -> Operator:
    return create(c.type_name, "op", c.input_schemas, c.params)


def run(op: Operator, steps: list[Step]) -> list[Tuple]:
    return [t for s in steps for t in op.process(s.port, s.batch, s.now)]


def tentative_suffix(steps: list[Step], port: int, start: int) -> tuple[list[Step], int]:
    """Steps with port's data from step ``start`` on turned TENTATIVE, then UNDO(last
    stable id) and the stable suffix (at the last step's now); and that last stable id."""
    last_stable = max(
        [t.id for s in steps[:start] if s.port == port for t in s.batch if t.kind is Kind.STABLE]
        + [0]
    )
    out = list(steps[:start])
    suffix = [s for s in steps[start:] if s.port == port]
    for s in steps[start:]:
        batch = s.batch
        if s.port == port:
            batch = [t._replace(kind=Kind.TENTATIVE) if t.kind is Kind.STABLE else t for t in batch]
        out.append(Step(s.port, batch, s.now))
    now = steps[-1].now
    out.append(Step(port, [undo(last_stable)], now))
    out += [Step(port, s.batch, now) for s in suffix]
    return out, last_stable


@pytest.mark.parametrize("seed", SEEDS)
def test_sunion_case_all_stable_run(seed: int) -> None:
    steps = SUNION_CASE.script(random.Random(seed))
    op = build(SUNION_CASE)
    out = run(op, steps)
    assert all(t.kind is not Kind.TENTATIVE for t in out)
    assert op.signals == [] and op.next_deadline() is None
    n_data = sum(t.kind is Kind.STABLE for s in steps for t in s.batch)
    assert len(data_of(out)) == n_data  # everything released by the end


def test_sunion_case_tentative_suffix_is_released_then_corrected() -> None:
    tentative_runs = 0
    for seed in SEEDS:
        rng = random.Random(seed)
        steps = SUNION_CASE.script(rng)
        straight = data_of(run(build(SUNION_CASE), steps))
        port = rng.randrange(len(SUNION_CASE.input_schemas))
        tsteps, _ = tentative_suffix(steps, port, rng.randrange(len(steps) // 3))
        op = build(SUNION_CASE)
        out = run(op, tsteps)
        if any(t.kind is Kind.TENTATIVE for t in out):
            tentative_runs += 1
            assert op.signals[0].kind is Kind.UP_FAILURE
            assert op.signals[-1].kind is Kind.REC_REQUEST
        assert SUNION_CASE.reconcile is not None
        out += SUNION_CASE.reconcile(op, tsteps[-1].now)
        assert data_of(apply_undos(out)) == straight
    assert tentative_runs >= len(SEEDS) // 2


@pytest.mark.parametrize("case", [SUNION_CASE, SOUTPUT_CASE], ids=lambda c: c.type_name)
def test_snapshot_restore_at_every_step(case: Case) -> None:
    steps = case.script(random.Random(7))
    for cut in range(len(steps) + 1):
        a = build(case)
        run(a, steps[:cut])
        b = build(case)
        b.restore(orjson.loads(orjson.dumps(a.snapshot())))
        assert run(a, steps[cut:]) == run(b, steps[cut:])
