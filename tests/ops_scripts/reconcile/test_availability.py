"""Availability in Spark against a plain-Python reading of the same simulated runs' logs.

Seeds: 1 (a kill of s1: tentative results, one UNDO and its REC_DONE), 5 (an UNDO with no
REC_DONE), 9 (three UNDOs, two REC_DONEs), and a run played with no fault at all."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from node.config.load import load_config
from node.procs.rundir import RunDir
from node.procs.runlog import read_log, read_tuples
from ops_scripts.check import availability as checker
from ops_scripts.check.history import read_history
from ops_scripts.check.paths import fault_spans
from ops_scripts.harness.simulate import DEFAULT_CLUSTER, simulate_one
from ops_scripts.reconcile.availability import failures, new_results, per_failure
from ops_scripts.reconcile.model import Availability
from ops_scripts.reconcile.tables import Tables, ingest
from protocol.tuples import Kind, Tuple

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SEEDS = (1, 5, 9)


@dataclass(frozen=True)
class Runs:
    dirs: dict[str, Path]  # label -> run directory
    tables: Tables


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    root = tmp_path_factory.mktemp("availability")
    config = load_config(DEFAULT_CLUSTER)
    dirs = {}
    for seed in SEEDS:
        simulate_one(config, seed, root / "runs" / f"s{seed}")
        dirs[f"s{seed}"] = root / "runs" / f"s{seed}"
    simulate_one(config, 2, root / "runs" / "calm", faults=[])
    dirs["calm"] = root / "runs" / "calm"
    shutil.copytree(dirs["s1"], root / "runs" / "nohistory")  # faults, but no history kept
    (root / "runs" / "nohistory" / "history.jsonl").unlink()
    dirs["nohistory"] = root / "runs" / "nohistory"
    yield Runs(dirs, ingest(list(dirs.values()), root / "out"))


@pytest.fixture(scope="module")
def found(spark: SparkSession, runs: Runs) -> list[Availability]:
    return per_failure(spark, runs.tables)


# ---------------------------------------------------------------- the plain-Python reading
Mark = tuple[int, int]  # (line, arrival)
Rows = list[tuple[int, tuple[int, Tuple]]]  # (line, (arrival, tuple))


def first(rows: Rows, kind: Kind, began: int, after: int | None,
          until: int | None) -> Mark | None:
    """The first row of ``kind`` arriving at or after ``began``, after line ``after``,
    before ``until`` (None: no bound)."""
    for line, (arrival, t) in rows:
        if (t.kind is kind and arrival >= began and (after is None or line > after)
                and (until is None or arrival < until)):
            return line, arrival
    return None


def expected(label: str, run_dir: Path) -> list[Availability]:
    """The module docstring's rules, row by row over the logs read by the checker's readers."""
    rd = RunDir(run_dir)
    if not rd.history.exists():
        return []
    spans = fault_spans(read_history(rd.history))
    out = []
    for f in spans:
        began = f.span.start
        until = min((g.span.start for g in spans if g.span.start > began), default=None)
        for client in sorted(load_config(rd.config).clients):
            rows = list(enumerate(read_log(rd.client_log(client)), start=1))
            ft = first(rows, Kind.TENTATIVE, began, None, until)
            reach = None if ft else until  # a failure with a tentative: its correction anywhere
            undo = first(rows, Kind.UNDO, began, ft[0] if ft else None, reach)
            anchor = undo or ft
            rec = first(rows, Kind.REC_DONE, began, anchor[0] if anchor else None, reach)
            span = {line for line, (arrival, _) in rows
                    if arrival >= began and (line < rec[0] if rec else
                                             until is None or arrival < until)}
            n_tent = sum(1 for line, (_, t) in rows if t.kind is Kind.TENTATIVE and line in span)
            delays = sorted(r.delay for r in checker.new_results(r for _, r in rows)
                            if r.row in span)
            ms = [None if m is None else (m[1] - began) / 1000 for m in (ft, undo, rec)]
            out.append(Availability(
                run=label, client=client, failure=f.describe, began_us=began,
                healed_us=f.span.end, first_tentative_ms=ms[0], undo_ms=ms[1],
                rec_done_ms=ms[2], n_tentative=n_tent,
                delays_ms=(checker.percentile(delays, 50) / 1000,
                           checker.percentile(delays, 99) / 1000, delays[-1] / 1000)
                if delays else None))
    return out


# ---------------------------------------------------------------- new results
def test_new_results_equal_the_checkers_row_for_row(spark: SparkSession, runs: Runs) -> None:
    got = new_results(spark, runs.tables).orderBy("run", "client", "line").collect()
    want = []
    for label, d in sorted(runs.dirs.items()):
        rd = RunDir(d)
        for client in sorted(load_config(rd.config).clients):
            want += [(label, client, r.row, r.kind, r.id, r.tmax, r.arrival, r.delay)
                     for r in checker.new_results(read_log(rd.client_log(client)))]
    assert [tuple(r) for r in got] == want
    assert len(want) > 100


# ---------------------------------------------------------------- per failure
def test_per_failure_equals_the_plain_reading(found: list[Availability], runs: Runs) -> None:
    got = found
    want = [a for label, d in sorted(runs.dirs.items()) for a in expected(label, d)]
    assert got == sorted(want, key=lambda a: (a.run, a.began_us, a.client))
    # The seeds were chosen for what they exercise: make sure they still do.
    assert any(a.first_tentative_ms is not None and a.undo_ms is not None
               and a.rec_done_ms is not None for a in got if a.run == "s1")
    assert any(a.undo_ms is not None and a.rec_done_ms is None for a in got if a.run == "s5")
    assert sum(a.n_tentative for a in got) > 0
    assert any(a.delays_ms is not None for a in got)


def test_seed_1_kill_of_s1_in_detail(found: list[Availability], runs: Runs) -> None:
    """The kill of s1: tentatives come after the fault, the UNDO and the REC_DONE after the
    heal, the tentatives all counted, delays in ms and ordered."""
    kill = next(a for a in found if a.run == "s1" and a.failure.startswith("kill s1"))
    assert kill.healed_us is not None and kill.healed_us > kill.began_us
    assert kill.first_tentative_ms is not None and kill.undo_ms is not None
    assert kill.rec_done_ms is not None
    assert 0 < kill.first_tentative_ms < kill.undo_ms <= kill.rec_done_ms
    assert kill.undo_ms >= (kill.healed_us - kill.began_us) / 1000
    kinds = [t.kind for t in read_tuples(runs.dirs["s1"] / "clients" / "c1.arrow")]
    assert kill.n_tentative == kinds.count(Kind.TENTATIVE)
    assert kill.delays_ms is not None
    p50, p99, top = kill.delays_ms
    assert 0 < p50 <= p99 <= top


def test_runs_without_faults_or_history_give_none(found: list[Availability],
                                                   runs: Runs) -> None:
    got = found
    assert {a.run for a in got} == {f"s{s}" for s in SEEDS}
    n_faults = sum(1 for e in read_history(RunDir(runs.dirs["s9"]).history)
                   if e["event"] == "fault")
    assert sum(1 for a in got if a.run == "s9") == n_faults  # one client (c1)


def test_segments_end_where_a_later_fault_begins() -> None:
    events = [
        {"t": 10, "event": "fault", "id": 0, "cut": [], "down": [], "impaired": [],
         "describe": "a"},
        {"t": 10, "event": "fault", "id": 1, "cut": [], "down": [], "impaired": [],
         "describe": "b"},
        {"t": 20, "event": "fault", "id": 2, "cut": [], "down": [], "impaired": [],
         "describe": "c"},
        {"t": 25, "event": "heal", "id": 0},
        {"t": 30, "event": "heal_all"},
    ]
    got = [(f.describe, f.began, f.healed, f.until) for f in failures("r", events)]
    assert got[0] == ("a", 10, 25, 20)
    assert got[1] == ("b", 10, 30, 20)  # same start: the same segment
    assert got[2][:3] == ("c", 20, 30) and got[2][3] > 2**62
