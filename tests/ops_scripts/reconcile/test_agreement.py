"""Every run directory this test session checked gets dpc check's verdicts from dpc reconcile.

The suite makes run directories everywhere: real clusters on loopback (tests/integration:
scenarios, failovers, TLS, launches, benches' runs), torture and soak runs, simulations.
Each that ``dpc check`` judged holds its ``check.json``. This test runs after them
(pytest runs tests/integration and tests/ops_scripts/harness before this directory),
finds every ``check.json`` under the session's temporary root, and reconciles all those
runs (up to :data:`MAX_RUN_BYTES` each) in ONE Spark job (ingest, reference, compare: what
``dpc reconcile`` runs): each run's eventual-consistency and replica-convergence verdicts
must equal the checker's, subject for subject. A run directory changed after its check (a test that then
corrupts a log to see the checker catch it) is left out: check.json no longer speaks for
it; so is a run dpc check could not fully judge (an unknown verdict: a missing or corrupt
log or history, which dpc reconcile's ingest refuses as a broken input by contract).
Run alone, the test judges simulated runs of its own (it then still can fail).

Under pytest-xdist (``make test`` runs the suite on every core) no worker sees the others'
runs, nor knows when they are done: the workers leave this test out (conftest.py), and
``make test`` runs it afterwards with ``DPC_SUITE_RUNS`` naming the finished suite's
``--basetemp``, whose runs it then judges (at least :data:`MIN_REAL_RUNS` real ones).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from node.config.load import load_config
from ops_scripts.harness.simulate import DEFAULT_CLUSTER, simulate_one
from ops_scripts.reconcile.compare import compare
from ops_scripts.reconcile.reference import reference, reference_problems
from ops_scripts.reconcile.tables import ingest, run_bytes, run_labels

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

JUDGED = ("eventual-consistency", "replica-convergence")
#: With the integration tests in the session, at least this many of their runs are found
#: (a guard against the search silently finding nothing: today there are dozens).
MIN_REAL_RUNS = 10
#: Runs larger than this (bytes on disk) are left out: the test is about verdicts over the
#: suite's variety of runs, and the two strategy-combination runs at 3 x 3000 tuples/s
#: (60 MB each) held half its rows and doubled its time; the next (a long log's run,
#: copied, 21 MB; then 10 MB) cost this serial stage (it runs after the suite, alone)
#: seconds that make test's 15 minutes lacked. Size is what ``dpc bench reconcile``
#: measures (README), and test_bench_reconcile.py judges both ways at its tiny sizes.
MAX_RUN_BYTES = 12_000_000
#: The environment variable naming a finished suite's --basetemp (the module docstring).
SUITE_RUNS = "DPC_SUITE_RUNS"


def _untouched(run_dir: Path) -> bool:
    """No file of the run changed, and none was added or removed (its directory's time),
    after its check.json was written (a copy keeps the times: a test that copies a run and
    deletes a log from the copy leaves only its ``clients/`` directory newer)."""
    checked = (run_dir / "check.json").stat().st_mtime
    return all(p.stat().st_mtime <= checked for p in run_dir.rglob("*")
               if p.name != "check.json")


def _fully_judged(run_dir: Path) -> bool:
    """dpc check read every log of the run: no verdict is unknown. (A run with a missing or
    corrupt log or history is a broken input that dpc reconcile's ingest refuses naming
    the file, where dpc check says unknown: test_tables.py holds those refusals.)"""
    verdicts = json.loads((run_dir / "check.json").read_text())["verdicts"]
    return all(v["status"] != "unknown" for v in verdicts)


def _checked_runs(base: Path) -> list[Path]:
    runs = []
    for c in sorted(base.rglob("check.json")):
        d = c.parent
        if (d / "config.toml").is_file() and _untouched(d):
            runs.append(d)
    return runs


def test_every_checked_run_of_the_session_gets_dpc_checks_verdicts(
        spark: SparkSession, tmp_path_factory: pytest.TempPathFactory,
        request: pytest.FixtureRequest) -> None:
    suite = os.environ.get(SUITE_RUNS)
    base = Path(suite) if suite else tmp_path_factory.getbasetemp()
    assert base.is_dir(), f"{SUITE_RUNS}={suite}: not a directory"
    runs = _checked_runs(base)
    broken = [d for d in runs if not _fully_judged(d)]
    large = [d for d in runs if run_bytes(d) > MAX_RUN_BYTES]
    runs = [d for d in runs if d not in broken and d not in large]
    real = [d for d in runs if any((d / "logs").glob("*.log"))]  # processes' own logs: real
    if suite or any(i.nodeid.startswith("tests/integration/") for i in request.session.items):
        assert len(real) >= MIN_REAL_RUNS, f"only {len(real)} checked runs under {base}"
    if not runs:  # run alone: runs of its own
        own = tmp_path_factory.mktemp("agreement")
        config = load_config(DEFAULT_CLUSTER)
        runs = [r.run_dir for seed in (2, 5) if (r := simulate_one(config, seed, own / f"s{seed}"))
                .run_dir is not None]
    labels = run_labels(runs)
    tables = ingest(runs, tmp_path_factory.mktemp("agreement-out"))
    ours, _ = compare(spark, tables, reference(spark, tables),
                      reference_problems=reference_problems(tables))
    disagree = []
    for label, d in labels.items():
        checked = [v for v in json.loads((d / "check.json").read_text())["verdicts"]
                   if v["property"] in JUDGED and v["subject"].split()[0] in ("client", "replica")]
        # A stream whose path promises only a gap (amnesia) is dpc check's alone to judge:
        # dpc reconcile says unknown, naming the promise (compare.py).
        gap = {(v["property"], v["subject"]) for v in checked
               if v["evidence"].startswith(("gap recovery", "not recovered by its end"))
               or "gap recovery, as" in v["evidence"]}
        theirs = {(v["property"], v["subject"]): v["status"] for v in checked}
        theirs = {k: ("unknown" if k in gap else st) for k, st in theirs.items()}
        mine = {(v.property, v.subject): v.status for v in ours if v.run == label}
        if mine != theirs:
            disagree.append(f"{d}: dpc check {theirs} vs dpc reconcile {mine}")
    print(f"dpc reconcile agrees with dpc check on {len(labels) - len(disagree)} of "
          f"{len(labels)} runs ({len(real)} real); {len(broken)} not fully judged by dpc check "
          f"and {len(large)} larger than {MAX_RUN_BYTES / 1e6:g} MB left out")
    assert not disagree, "\n".join(disagree)
