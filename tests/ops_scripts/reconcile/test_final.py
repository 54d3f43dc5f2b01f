"""The UNDO rule in Spark (ops_scripts/reconcile/final.py) against dpc check's list semantics.

Hundreds of random logs (protocol-like runs of stable and tentative tuples, UNDOs back to
the last stable id, corrections, and random slips: repeats, ids out of order, UNDOs that
reach stable tuples) go into one DataFrame, so one Spark job judges them all; each log is
also given to ``apply_undos_checked`` (``ops_scripts/check/properties.py``). Where the
checker finds a violation, final_streams' first problem is at that line and of that kind;
where it finds none, the rows in force are the checker's, line for line.
"""

from __future__ import annotations

import random
import re
from typing import TYPE_CHECKING, Any

import orjson

from ops_scripts.check.properties import apply_undos_checked
from ops_scripts.reconcile.final import FINAL_COLUMNS, final_streams
from protocol.tuples import Kind, Tuple

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

LOGS = ("run string, process string, role string, stream string, incarnation int, "
        "after bigint, line bigint, arrival bigint, kind string, id bigint, time bigint, "
        "tmax bigint, values string")
REFERENCE = "run string, stream string, id bigint, time bigint, tmax bigint, values string"
HEADS = "run string, process string, stream string, incarnation int, role string, after bigint"


def _t(kind: Kind, ident: int) -> Tuple:
    return Tuple(kind, ident, 10 * ident, 10 * ident, (ident,) if kind.name != "UNDO" else ())


def random_log(rng: random.Random, after: int) -> list[Tuple]:
    """A stream as a client or replica may log it: mostly the protocol (stable ids going
    up, a tentative stretch, its UNDO back to the last stable id, the corrections), with
    slips at a random rate (none in about a third of the logs)."""
    slip = rng.choice([0.0, 0.0, 0.03, 0.1, 0.3])
    out: list[Tuple] = []
    last, stable, tentative = after, after, False
    for _ in range(rng.randint(0, 30)):
        r = rng.random()
        if r < slip / 3:  # a repeat or an id out of order
            out.append(_t(rng.choice([Kind.STABLE, Kind.TENTATIVE]), rng.randint(1, last + 1)))
        elif r < slip * 2 / 3:  # an UNDO to anywhere, stable tuples included
            out.append(_t(Kind.UNDO, rng.randint(0, max(last, 1))))
        elif r < slip:
            out.append(Tuple(Kind.BOUNDARY, rng.choice([0, 1]), 0, 0, ()))
        elif tentative and rng.random() < 0.2:  # the correction: back to the last stable id
            out.append(_t(Kind.UNDO, stable))
            last, tentative = stable, False
        elif rng.random() < 0.15:
            tentative = True
        else:
            last += 1
            out.append(_t(Kind.TENTATIVE if tentative else Kind.STABLE, last))
            stable = last if not tentative else stable
    return out


def _rows(run: str, process: str, stream: str, after: int | None,
          log: list[Tuple]) -> list[tuple[Any, ...]]:
    role = "client" if after is None else "replica"
    inc = 0 if after is None else 1
    return [(run, process, role, stream, inc, after, line, None, t.kind.name, t.id, t.time,
             t.tmax, orjson.dumps(list(t.values)).decode()) for line, t in enumerate(log, 1)]


def _problems(rows: list[Any]) -> list[tuple[int, str]]:
    found = [(r["line"], r["order"]) for r in rows if r["order"] is not None]
    found += [(r["undone_line"], "undone-stable") for r in rows
              if r["kind"] == "STABLE" and r["undone_line"] is not None]
    return sorted(found)


_KIND_OF = {"takes back the stable": "undone-stable", "is a duplicate of": "duplicate",
            "is out of order after": "out-of-order"}


def _checker_problem(violation: str) -> tuple[int, str]:
    m = re.match(r"row (\d+): ", violation)
    assert m is not None, violation
    what = next(k for phrase, k in _KIND_OF.items() if phrase in violation)
    return int(m.group(1)), what


def _final(spark: SparkSession, rows: list[tuple[Any, ...]],
           ref: list[tuple[Any, ...]] | None = None,
           heads: list[tuple[Any, ...]] | None = None) -> DataFrame:
    reference = None if ref is None else spark.createDataFrame(ref, REFERENCE)
    logs = spark.createDataFrame(rows, LOGS)
    return final_streams(logs, reference,
                         None if heads is None else spark.createDataFrame(heads, HEADS))


def test_final_streams_agree_with_the_checker_on_random_logs(spark: SparkSession) -> None:
    rng = random.Random(16)
    logs: dict[str, tuple[int | None, list[Tuple]]] = {}
    rows: list[tuple[Any, ...]] = []
    ref: list[tuple[Any, ...]] = []
    heads: list[tuple[Any, ...]] = []  # every log, the empty ones too
    for i in range(300):
        after = rng.choice([None, None, 0, rng.randint(1, 5)])
        log = random_log(rng, after or 0)
        logs[f"p{i}"] = (after, log)
        rows += _rows("r", f"p{i}", f"s{i}", after, log)
        heads.append(("r", f"p{i}", f"s{i}", 0 if after is None else 1,
                      "client" if after is None else "replica", after))
        ref += [("r", f"s{i}", k, 10 * k, 10 * k, f"[{k}]") for k in range(1, 8)]
    got: dict[str, list[Any]] = {p: [] for p in logs}
    for r in _final(spark, rows, ref, heads).collect():  # small: a few thousand rows in all
        got[r["process"]].append(r)
    seen = {"valid": 0, "undone-stable": 0, "duplicate": 0, "out-of-order": 0, "undos": 0}
    for p, (after, log) in logs.items():
        prefix = [_t(Kind.STABLE, k) for k in range(1, (after or 0) + 1)]
        kept, violation = apply_undos_checked([*prefix, *log])
        problems = _problems(got[p])
        if violation is not None:
            line, what = _checker_problem(violation)
            assert problems, f"{p}: the checker says {violation!r}; final_streams found nothing"
            assert problems[0] == (line - len(prefix), what), (p, violation, problems, log)
            seen[what] += 1
            continue
        assert problems == [], (p, problems, log)
        in_force = sorted(r["line"] for r in got[p] if r["in_force"])
        assert in_force == [line - len(prefix) for line, _ in kept], (p, log)
        assert all(r["prefix"] == (r["line"] <= 0) for r in got[p])
        seen["valid"] += 1
        seen["undos"] += any(t.kind is Kind.UNDO for t in log)
    # The random logs exercise every branch (a generator that stopped doing so would make
    # this test vacuous).
    assert min(seen.values()) >= 10, seen


def test_the_result_has_its_columns_and_keeps_every_data_row(spark: SparkSession) -> None:
    log = [_t(Kind.STABLE, 1), Tuple(Kind.BOUNDARY, 0, 5, 5, ()), _t(Kind.TENTATIVE, 2),
           _t(Kind.UNDO, 1), _t(Kind.STABLE, 2), _t(Kind.STABLE, 2)]
    df = _final(spark, _rows("r", "c1", "n.out", None, log))
    assert tuple(df.columns) == FINAL_COLUMNS
    rows = {r["line"]: r for r in df.collect()}
    assert sorted(rows) == [1, 3, 5, 6]  # data rows only; the boundary and the UNDO go
    assert (rows[3]["in_force"], rows[3]["undone_line"], rows[3]["undone_to"]) == (False, 4, 1)
    assert [rows[n]["in_force"] for n in (1, 5, 6)] == [True, True, True]
    assert [rows[n]["order"] for n in (1, 3, 5, 6)] == [None, None, None, "duplicate"]


def test_one_slip_is_one_problem_not_a_cascade(spark: SparkSession) -> None:
    # A dropped UNDO(1): the tentative 2, 3 stay in force; only the first correction is
    # out of order (the checker stops there), the next ones follow the row before them.
    dropped = [_t(Kind.STABLE, 1), _t(Kind.TENTATIVE, 2), _t(Kind.TENTATIVE, 3),
               _t(Kind.STABLE, 2), _t(Kind.STABLE, 3), _t(Kind.STABLE, 4)]
    # A stray old tuple between two UNDOs: judged against the last row carried in.
    stray = [_t(Kind.STABLE, 1), _t(Kind.STABLE, 2), _t(Kind.TENTATIVE, 3), _t(Kind.UNDO, 2),
             _t(Kind.STABLE, 1), _t(Kind.STABLE, 3)]
    rows = _final(spark, [*_rows("r", "a", "n.out", None, dropped),
                          *_rows("r", "b", "n.out", None, stray)]).collect()
    assert _problems([r for r in rows if r["process"] == "a"]) == [(4, "out-of-order")]
    assert _problems([r for r in rows if r["process"] == "b"]) == [(5, "out-of-order")]
    assert sorted(r["line"] for r in rows if r["process"] == "a" and r["in_force"]) == [
        1, 2, 3, 4, 5, 6]
    _, violation = apply_undos_checked(dropped)
    assert violation is not None and violation.startswith("row 4: ")


def test_a_recovered_log_is_judged_after_the_restored_prefix(spark: SparkSession) -> None:
    ref = [("r", "n.out", k, 10 * k, 10 * k, f"[{k}]") for k in range(1, 6)]
    # Restored after id 3: an UNDO(2) takes back the restored stable tuple 3; a tuple 3
    # after it repeats nothing in force (3 was taken back), a second one does.
    log = [_t(Kind.STABLE, 4), _t(Kind.UNDO, 2), _t(Kind.STABLE, 3), _t(Kind.STABLE, 3)]
    rows = _final(spark, _rows("r", "n1a", "n.out", 3, log), ref).collect()
    prefix = sorted((r["line"], r["id"]) for r in rows if r["prefix"])
    assert prefix == [(-2, 1), (-1, 2), (0, 3)]
    assert _problems(rows) == [(2, "undone-stable"), (2, "undone-stable"), (4, "duplicate")]
    assert sorted(r["id"] for r in rows if r["in_force"]) == [1, 2, 3, 3]
