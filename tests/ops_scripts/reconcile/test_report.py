"""The report: verdict lines, report.md and its PNGs for simulated runs, the down-sampling."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from matplotlib.image import imread

from node.config.load import load_config
from ops_scripts.harness.simulate import DEFAULT_CLUSTER, simulate_one
from ops_scripts.reconcile.availability import new_results, per_failure
from ops_scripts.reconcile.model import Availability, RunResult, Verdict
from ops_scripts.reconcile.report import (
    LINE_MAX,
    plot_file,
    sample_delays,
    verdict_line,
    write_report,
)
from ops_scripts.reconcile.tables import ingest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
BROKEN = Verdict("b/s9", "eventual-consistency", "client c1", "invalid",
                 "1 missing (id 42), first at line 17: [\"k1\", 3]")


def availability(run: str, failure: str, began: int, delays: tuple[float, float, float] | None,
                 client: str = "c1") -> Availability:
    return Availability(run, client, failure, began, began + 2_000_000, 1400.0, 2500.0,
                        2500.0, 20, delays)


@dataclass
class Reported:
    out: Path
    results: list[RunResult]
    text: str


@pytest.fixture(scope="module")
def reported(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reported]:
    """Two simulated runs labelled "a/s1" and "b/s9" (a '/' in each label); the second one
    made invalid by an added verdict."""
    root = tmp_path_factory.mktemp("report")
    config = load_config(DEFAULT_CLUSTER)
    dirs = [root / "runs" / "a" / "s1", root / "runs" / "b" / "s9"]
    for seed, d in zip((1, 9), dirs, strict=True):
        simulate_one(config, seed, d)
    tables = ingest(dirs, root / "out")
    found = per_failure(spark, tables)
    results = []
    for label, d in tables.runs.items():
        check = json.loads((d / "check.json").read_text())
        verdicts = [Verdict(label, v["property"], v["subject"], v["status"], v["evidence"])
                    for v in check["verdicts"]]
        results.append(RunResult(label, verdicts, [a for a in found if a.run == label]))
    results[1].verdicts.append(BROKEN)
    results[1].differences = 3
    differences = root / "out" / "differences"
    path = write_report(root / "out", results, new_results(spark, tables), master="local[2]",
                        differences_path=differences, tolerance_note="Values compared exactly.")
    yield Reported(root / "out", results, path.read_text())


def test_the_report_names_each_run_and_its_verdicts(reported: Reported) -> None:
    text = reported.text
    assert text.startswith("# `dpc reconcile` report")
    assert "Spark master: `local[2]`. Values compared exactly." in text
    assert "2 runs: 1 valid, 1 not." in text
    for r in reported.results:
        assert f"## Run `{r.run}`" in text
        assert verdict_line(r) in text
        for v in r.verdicts:
            assert f"| {v.property} | {v.subject} | {v.status} |" in text
        assert f"![delay of new results over time, run {r.run}]({plot_file(r.run)})" in text
    assert "run a/s1: valid (" in text
    assert "run b/s9: INVALID: eventual-consistency client c1: 1 missing (id 42)" in text
    assert "3 rows in [the differences table](differences)" in text
    kill = next(a for a in reported.results[0].availability if a.failure.startswith("kill s1"))
    assert f"| {kill.failure} | c1 |" in text


def test_each_run_has_a_real_png(reported: Reported) -> None:
    for r in reported.results:
        path = reported.out / plot_file(r.run)
        data = path.read_bytes()
        assert data.startswith(PNG_MAGIC), path
        assert len(data) > 20_000, (path, len(data))  # axes, a series, shading: not blank
        pixels = imread(path)
        assert pixels.shape[:2] == (400, 1000)
        assert pixels.std() > 0.05  # not one flat colour
    assert sorted(p.name for p in reported.out.glob("*.png")) == sorted(
        plot_file(r.run) for r in reported.results)


def test_a_valid_verdict_line() -> None:
    r = RunResult("r1", [Verdict("r1", "eventual-consistency", f"client c{i}", "valid", "")
                         for i in range(4)],
                  [availability("r1", "kill s1 for 2 s", 10, (100.0, 700.0, 812.4)),
                   availability("r1", "kill s1 for 2 s", 10, None, client="c2"),
                   availability("r1", "partition n1a", 50, (90.0, 95.0, 96.0))])
    assert verdict_line(r) == "run r1: valid (4 verdicts, 2 failures, Delay_new max 812 ms)"
    calm = RunResult("r2", [Verdict("r2", "replica-convergence", "replica n1a, stream n1.out",
                                    "valid", "")])
    assert verdict_line(calm) == "run r2: valid (1 verdict, 0 failures)"


def test_an_invalid_verdict_line_names_the_property_and_the_subject() -> None:
    ok = Verdict("r1", "eventual-consistency", "client c2", "valid", "")
    long = Verdict("r1", "replica-convergence", "replica n1a, stream n1.out", "invalid",
                   "ids 5..900 differ:\n" + "x" * 500)
    r = RunResult("r1", [ok, BROKEN, long])
    line = verdict_line(r)
    assert line.startswith("run r1: INVALID: eventual-consistency client c1: 1 missing (id 42)")
    assert line.endswith(" (+1 more)")
    r = RunResult("r1", [ok, long])
    line = verdict_line(r)
    assert line.startswith("run r1: INVALID: replica-convergence replica n1a, stream n1.out: ")
    assert "\n" not in line and len(line) <= LINE_MAX and line.endswith("...")
    unknown = Verdict("r1", "eventual-consistency", "client c1", "unknown", "no log")
    assert verdict_line(RunResult("r1", [ok, unknown])) == (
        "run r1: UNKNOWN: eventual-consistency client c1: no log")
    assert verdict_line(RunResult("r1")) == "run r1: UNKNOWN: no verdict"


def test_plot_files_are_safe_and_distinct() -> None:
    names = {plot_file(label) for label in ("a/b", "a_b", "a\\b", "../x", "s1")}
    assert len(names) == 5
    assert plot_file("s1") == "run-s1.png"
    assert all("/" not in n and "\\" not in n and n.endswith(".png") for n in names)


def test_down_sampling_keeps_the_max_delay_of_each_bucket(spark: SparkSession) -> None:
    rng = random.Random(7)
    rows = []
    for run, span in (("r1", 10_000_000), ("r2", 3_000)):
        for client in ("c1", "c2"):
            arrivals = sorted(rng.randrange(1_000, 1_000 + span) for _ in range(3_000))
            rows += [(run, client, t, rng.randrange(0, 1_000)) for t in arrivals]
    rows[1234] = (*rows[1234][:3], 10**9)  # one spike
    max_points = 50
    got = sample_delays(spark.createDataFrame(
        rows, "run string, client string, arrival long, delay long"), max_points).collect()
    expect: dict[tuple[str, str, int], int] = {}
    bounds = {}
    for run in ("r1", "r2"):
        times = [t for r, _, t, _ in rows if r == run]
        bounds[run] = (min(times), (max(times) - min(times)) // max_points + 1)
    for run, client, t, d in rows:
        t0, width = bounds[run]
        key = (run, client, (t - t0) // width)
        expect[key] = max(expect.get(key, -1), d)
    assert len(got) == len(expect)
    real = set(rows)
    for g in got:
        t0, width = bounds[g["run"]]
        assert g["t0"] == t0
        assert g["delay"] == expect[(g["run"], g["client"], (g["arrival"] - t0) // width)]
        assert (g["run"], g["client"], g["arrival"], g["delay"]) in real  # a real result
    for run in ("r1", "r2"):
        for client in ("c1", "c2"):
            assert 0 < sum(1 for g in got if (g["run"], g["client"]) == (run, client)) <= max_points
    assert max(g["delay"] for g in got) == 10**9


def test_without_delays_the_report_has_no_plot(tmp_path: Path) -> None:
    r = RunResult("r1", [BROKEN], [availability("r1", "kill s1 for 2 s", 5_000_000, None)])
    text = write_report(tmp_path, [r], None, master="local[*]", differences_path=None,
                        tolerance_note="").read_text()
    assert "| kill s1 for 2 s | c1 | 0.00 | 2.00 | 1400 | 2500 | 2500 | 20 | - |" in text
    assert "![" not in text and not list(tmp_path.glob("*.png"))
    assert "None: every final stream equals the reference." in text
