"""The operator conformance suite (STYLE.md 10), run for every registered operator.

For each operator type in :data:`operators.OPERATORS` and each seed, on its :class:`Case`
(``tests/operators/cases_*.py``, see :mod:`tests.operators.harness`):

* replay determinism: two fresh instances, same calls, same outputs;
* snapshot -> orjson -> restore into a fresh (or a used) instance -> same future outputs;
* boundaries in the all-stable run: strictly increasing, no STABLE tuple older than a
  boundary before it, tmax never above the newest input tmax;
* undo + redo equals straight-through: one port's suffix first arrives TENTATIVE
  (values perturbed, some dropped, boundaries held back or sent as tentative), then
  ``UNDO(last stable id)`` and the true suffix; with the output UNDOs applied (none may
  take back a STABLE tuple), the data equals that of the all-stable run (for union and
  join, which are order-dependent, one with the same arrival order). Also: sticky taint,
  tmax, boundaries, replay and snapshots in the middle of the failure;
* the undo log stays bounded in a long all-stable run.

An operator without a case fails ``test_has_case`` (the other tests skip it).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import orjson
import pytest

import operators
from operators import OPERATORS, Operator, create
from protocol.tuples import (
    DATA_KINDS,
    TENTATIVE_BOUNDARY_ID,
    Kind,
    Tuple,
    make_tuple,
    tentative_boundary,
    undo,
)
from protocol.undo_rule import apply_undo

from . import harness
from .harness import Case, Step

__all__ = ["apply_undos", "check_determinism", "check_log_bounded", "check_snapshots"]
__all__ += ["check_undo_redo", "make_failure"]

harness.load_cases()
TYPES = sorted(operators.OPERATORS)
SEEDS = range(12)
STABLE, TENTATIVE, BOUNDARY = Kind.STABLE, Kind.TENTATIVE, Kind.BOUNDARY


# ---------------------------------------------------------------------- helpers
def build(c: Case) -> Operator:
    return create(c.type_name, "op", c.input_schemas, c.params)


def feed(op: Operator, steps: Sequence[Step]) -> list[list[Tuple]]:
    return [op.process(s.port, s.batch, s.now) for s in steps]


def flat(outs: Sequence[Sequence[Tuple]]) -> list[Tuple]:
    return [t for o in outs for t in o]


def data(stream: Sequence[Tuple]) -> list[tuple[int, int, int, int, tuple[object, ...]]]:
    return [(int(t[0]), t[1], t[2], t[3], t[4]) for t in stream if t[0] in DATA_KINDS]


def apply_undos(stream: Sequence[Tuple]) -> list[Tuple]:
    """The stream with every UNDO(u) applied by the one UNDO rule (``protocol.undo_rule``;
    data tuple u may be missing: a filter dropped it). Fails if an UNDO takes back a STABLE
    tuple."""
    res: list[Tuple] = []
    for t in stream:
        if t[0] is Kind.UNDO:
            stable = [x for x in apply_undo(res, t[1]) if x[0] is STABLE]
            assert not stable, f"{t} takes back the stable tuple {stable[0]}"
        else:
            res.append(t)
    return res


def snap_roundtrip(op: Operator) -> object:
    return orjson.loads(orjson.dumps(op.snapshot()))


def restored(c: Case, snap: object) -> Operator:
    fresh = build(c)
    fresh.restore(snap)
    return fresh


def case_for(type_name: str) -> Case:
    c = harness.CASES.get(type_name)
    if c is None:
        pytest.fail(f"no conformance case for {type_name!r}: add one in tests/operators/cases_*.py")
    return c


# ---------------------------------------------------------------------- checks
def check_boundaries(stream: Sequence[Tuple], *, strict: bool, what: str) -> None:
    """Boundaries increase (strictly or not); no STABLE tuple is older than a boundary
    before it."""
    last = None
    for t in stream:
        if t[0] is BOUNDARY:
            if last is not None:
                assert t[2] > last or (not strict and t[2] == last), (
                    f"{what}: boundary {t[2]} after boundary {last}"
                )
            last = t[2]
        elif t[0] is STABLE and last is not None:
            assert t[2] >= last, f"{what}: stable tuple {t} after boundary {last}"


def check_tmax(steps: Sequence[Step], outs: Sequence[Sequence[Tuple]]) -> None:
    newest = None
    for s, o in zip(steps, outs, strict=True):
        for t in s.batch:
            if t[0] in DATA_KINDS:
                newest = t[3] if newest is None else max(newest, t[3])
        for t in o:
            if t[0] in DATA_KINDS:
                assert newest is not None and t[3] <= newest, f"tmax of {t} > {newest} fed"


def check_determinism(c: Case, steps: Sequence[Step]) -> None:
    assert feed(build(c), steps) == feed(build(c), steps)


def check_snapshots(c: Case, steps: Sequence[Step], rng: random.Random) -> None:
    """Snapshot at random points; restored copies (fresh, or a used instance) continue
    exactly like the original."""
    for _ in range(3):
        k = rng.randrange(len(steps) + 1)
        a = build(c)
        feed(a, steps[:k])
        snap = snap_roundtrip(a)
        b = restored(c, snap)
        used = build(c)
        feed(used, steps[: rng.randrange(len(steps) + 1)])
        used.restore(snap)
        expected = feed(a, steps[k:])
        assert feed(b, steps[k:]) == expected, f"restored at step {k} diverges"
        assert feed(used, steps[k:]) == expected, f"restore over state at step {k} diverges"


@dataclass
class Failure:
    """A failure variant of an all-stable script (see :func:`make_failure`)."""

    port: int
    steps: list[Step]  # what the operator gets
    reference: list[Step]  # the same final input, all stable, in the same arrival order
    first_tentative: int | None  # index in steps of the first TENTATIVE input
    undo_at: int  # index in steps of the UNDO
    corrected_at: int  # index in steps after which the corrections are all in
    boundaries: bool  # p's boundaries flowed during the tentative phase

    def __str__(self) -> str:
        return (
            f"failure on port {self.port}: tentative input from step {self.first_tentative}, "
            f"UNDO at step {self.undo_at}, boundaries while tentative: {self.boundaries}"
        )


def _perturb(
    rng: random.Random, values: tuple[object, ...], seen: list[list[object]]
) -> tuple[object, ...]:
    if rng.random() < 0.3:
        return values
    i = rng.randrange(len(values))
    return (*values[:i], rng.choice(seen[i]), *values[i + 1 :])


def make_failure(steps: Sequence[Step], rng: random.Random) -> Failure | None:
    """From an all-stable script: pick a port p and a split point in p's stream between
    two data tuples (after u, or before the first: u = 0; p's boundaries between them may
    fall on either side). From the split until a later step, p's data arrives TENTATIVE
    (renumbered from u+1, values perturbed, about a quarter dropped) and p's boundaries
    are either held back or, in half the variants, sent as tentative boundaries;
    other ports are unchanged. Then ``UNDO(u)`` and p's true suffix arrive, and the
    script goes on."""
    entries: dict[int, list[tuple[int, int]]] = {}
    for si, s in enumerate(steps):
        for bi in range(len(s.batch)):
            entries.setdefault(s.port, []).append((si, bi))
    pdata = {
        port: [e for e in es if steps[e[0]].batch[e[1]][0] in DATA_KINDS]
        for port, es in entries.items()
    }
    candidates = sorted(port for port, d in pdata.items() if d)
    if not candidates:
        return None
    p = rng.choice(candidates)
    mine = pdata[p]
    k = rng.randrange(len(mine))  # mine[k] is p's first data tuple after the split
    after = entries[p].index(mine[k - 1]) + 1 if k > 0 else 0
    ss, sb = entries[p][rng.randint(after, entries[p].index(mine[k]))]
    u = steps[mine[k - 1][0]].batch[mine[k - 1][1]][1] if k > 0 else 0
    su = rng.randrange(mine[k][0] + 1, len(steps) + 1)
    seen: list[list[object]] = [[] for _ in steps[mine[0][0]].batch[mine[0][1]][4]]
    for si, bi in mine:
        for i, v in enumerate(steps[si].batch[bi][4]):
            seen[i].append(v)
    fail: list[Step] = []
    ref: list[Step] = []
    delayed: list[Tuple] = []
    next_id = u + 1
    with_boundaries = rng.random() < 0.5
    first_tentative = None
    undo_at = corrected_at = -1
    for i in range(len(steps) + 1):
        if i == su:
            now = steps[i].now if i < len(steps) else steps[-1].now
            undo_at = len(fail)
            if rng.random() < 0.5:
                fail.append(Step(p, [undo(u), *delayed], now))
            else:
                fail.append(Step(p, [undo(u)], now))
                if delayed:
                    fail.append(Step(p, delayed, now))
            corrected_at = len(fail) - 1
            if delayed:
                ref.append(Step(p, delayed, now))
        if i == len(steps):
            break
        s = steps[i]
        if s.port != p or i < ss or i >= su:
            fail.append(s)
            ref.append(s)
            continue
        pre, post = (s.batch[:sb], s.batch[sb:]) if i == ss else ((), s.batch)
        if pre:
            fail.append(Step(p, pre, s.now))
            ref.append(Step(p, pre, s.now))
        delayed.extend(post)
        tentative = []
        for t in post:
            if t[0] in DATA_KINDS and rng.random() < 0.75:
                values = _perturb(rng, t[4], seen)
                tentative.append(make_tuple(TENTATIVE, next_id, t[2], t[3], values))
                next_id += 1
            elif t[0] is BOUNDARY and with_boundaries:
                tentative.append(tentative_boundary(t[2]))
        if tentative:
            if first_tentative is None:  # a tentative boundary taints like a tuple
                first_tentative = len(fail)
            fail.append(Step(p, tentative, s.now))
    return Failure(p, fail, ref, first_tentative, undo_at, corrected_at, with_boundaries)


def run_failure(
    c: Case, op: Operator, f: Failure, start: int = 0, end: int | None = None
) -> list[list[Tuple]]:
    outs = []
    for i in range(start, len(f.steps) if end is None else end):
        s = f.steps[i]
        o = op.process(s.port, s.batch, s.now)
        if i == f.corrected_at and c.reconcile is not None:
            o = o + c.reconcile(op, s.now)
        outs.append(o)
    return outs


def check_undo_redo(c: Case, steps: Sequence[Step], rng: random.Random) -> None:
    f = make_failure(steps, rng)
    if f is None:
        return
    # The straight run is the original script; an order-dependent operator (union, join:
    # ``extra={"reference": "arrival"}``) is compared with an all-stable run of the same
    # arrival order instead (p's suffix arriving where the corrections did).
    arrival = c.extra.get("reference") == "arrival"
    ref_out = flat(feed(build(c), f.reference if arrival else steps))
    op = build(c)
    outs = run_failure(c, op, f)
    applied = apply_undos(flat(outs))
    assert data(applied) == data(ref_out), f"{f}: with UNDOs applied, output != straight run"
    # Tentative boundaries promise nothing about the corrected stream: leave them out.
    promised = [t for t in flat(outs) if t[0] is not BOUNDARY or t[1] != TENTATIVE_BOUNDARY_ID]
    check_boundaries(apply_undos(promised), strict=False, what=f"{f}, UNDOs applied")
    check_tmax(f.steps, outs)
    if f.first_tentative is not None:
        # Sticky taint: nothing STABLE from the first TENTATIVE input (operators that use
        # the base's taint) or output (SUnion and SOutput decide themselves) to the UNDO.
        if type(op).uses_undo_log:
            tainted_from = f.first_tentative
        else:
            tainted_from = next(
                (i for i, o in enumerate(outs) if any(t[0] is TENTATIVE for t in o)), f.undo_at
            )
        for i in range(tainted_from, f.undo_at):
            stable = [t for t in outs[i] if t[0] is STABLE]
            assert not stable, f"{f}: STABLE output {stable[0]} while tainted (step {i})"
            if type(op).uses_undo_log:  # the base's taint: boundaries are tentative too
                b = [t for t in outs[i] if t[0] is BOUNDARY and t[1] != TENTATIVE_BOUNDARY_ID]
                assert not b, f"{f}: stable boundary {b[0]} while tainted (step {i})"
    # Replay determinism through the failure, and snapshots taken in the middle of it.
    assert run_failure(c, build(c), f) == outs
    k = rng.randrange(len(f.steps) + 1)
    a = build(c)
    run_failure(c, a, f, 0, k)
    b = restored(c, snap_roundtrip(a))
    assert run_failure(c, b, f, k) == outs[k:], f"{f}: restored at step {k} diverges"


def shifted(steps: Sequence[Step], rounds: int) -> list[list[Step]]:
    """``rounds`` copies of the script, each later in time and ids than the previous."""
    times = [t[2] for s in steps for t in s.batch if t[0] in DATA_KINDS or t[0] is BOUNDARY]
    span = max(times) - min(times) + 1
    top = max((t[1] for s in steps for t in s.batch if t[0] in DATA_KINDS), default=0)
    now_span = max(s.now for s in steps) + 1

    def move(t: Tuple, r: int) -> Tuple:
        i = t[1] + r * top if t[0] in DATA_KINDS else t[1]
        return t._replace(id=i, time=t[2] + r * span, tmax=t[3] + r * span)

    return [
        [Step(s.port, [move(t, r) for t in s.batch], s.now + r * now_span) for s in steps]
        for r in range(rounds)
    ]


def check_log_bounded(c: Case, steps: Sequence[Step], rounds: int = 8) -> None:
    """In an all-stable run the undo log holds what the state needs, not the history."""
    op = build(c)
    sizes: list[int] = []
    fed = 0
    for part in shifted(steps, rounds):
        peak = 0
        for s in part:
            op.process(s.port, s.batch, s.now)
            fed += len(s.batch)
            peak = max(peak, len(op._log), len(op._markers))
        sizes.append(peak)
    early, late = max(sizes[:2]), max(sizes[rounds // 2 :])
    assert late <= 1.5 * early + 10, f"undo log grows with the input: peaks per round {sizes}"
    assert late < fed / 3, f"undo log holds {late} of {fed} entries fed"


# ---------------------------------------------------------------------- the suite
@pytest.mark.parametrize("type_name", TYPES)
def test_has_case(type_name: str) -> None:
    assert type_name in harness.CASES, (
        f"operator type {type_name!r} is registered but has no conformance case: add one "
        "with harness.case(Case(...)) in tests/operators/cases_*.py"
    )


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("type_name", TYPES)
def test_replay_determinism(type_name: str, seed: int) -> None:
    c = case_for(type_name)
    check_determinism(c, c.script(random.Random(seed)))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("type_name", TYPES)
def test_snapshot_restore(type_name: str, seed: int) -> None:
    c = case_for(type_name)
    check_snapshots(c, c.script(random.Random(seed)), random.Random(seed + 1000))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("type_name", TYPES)
def test_stable_boundaries_and_tmax(type_name: str, seed: int) -> None:
    c = case_for(type_name)
    steps = c.script(random.Random(seed))
    outs = feed(build(c), steps)
    stream = flat(outs)
    assert all(t[0] is not TENTATIVE for t in stream), "TENTATIVE output from stable input"
    assert all(t[1] == 0 for t in stream if t[0] is BOUNDARY), "tentative boundary, stable input"
    check_boundaries(stream, strict=True, what="stable run")
    check_tmax(steps, outs)
    assert any(t[0] is BOUNDARY for t in stream), "final input boundaries did not propagate"


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("type_name", TYPES)
def test_undo_redo_equals_straight_through(type_name: str, seed: int) -> None:
    c = case_for(type_name)
    steps = c.script(random.Random(seed))
    rng = random.Random(seed + 2000)
    for _ in range(4):
        check_undo_redo(c, steps, rng)


#: Operators that keep the base's undo log (filter and map pass UNDOs through; SUnion and
#: SOutput keep their own, bounded by the failure they hold).
LOGGING_TYPES = [t for t in TYPES if OPERATORS[t].uses_undo_log and not OPERATORS[t].preserves_ids]


def test_some_operators_keep_an_undo_log() -> None:
    assert {"aggregate", "join", "union"} <= set(LOGGING_TYPES)


@pytest.mark.parametrize("type_name", LOGGING_TYPES)
def test_undo_log_bounded(type_name: str) -> None:
    c = case_for(type_name)
    check_log_bounded(c, c.script(random.Random(7)))
