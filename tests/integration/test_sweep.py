"""``dpc sweep`` on real processes: a small sweep's CSV, plots and report, its resumption,
and the shapes the paper claims, read from its CSV (issue 18; docs/experiments.md).

Two small experiments on the basic query at 300 tuples/s per source, alpha = 0.5, one
source cut from the node:

* on one node of one replica (examples/experiments/single.toml: the client never switches
  between replicas, whose tentative streams differ), X = 3 s, failures of 1 s and 3 s,
  UP_FAILURE ``delay`` vs ``process``: a failure shorter than alpha*X = 1.5 s gives no
  tentative tuple; ``delay`` gives fewer tentative tuples than ``process`` (it holds each
  bucket alpha*X before releasing it tentative, so the last alpha*X of the failure is
  never released tentative);
* on the basic example's two replicas, X = 1 s, a 2 s failure whose reconciliations are
  held 2.5 s by a ``stall`` of both replicas: with STABILIZATION ``suspend`` new results
  wait for the reconciliation and Delay_new exceeds X; with ``process`` the replicas
  reconcile in turn, one keeps answering, and Delay_new stays below X.

Tolerances, not times: the comparisons are between runs of the same sweep.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from matplotlib.image import imread

from ops_scripts.sweep import load_experiment, read_results, run_sweep
from ops_scripts.sweep.advise_run import run_advise
from ops_scripts.sweep.run import sweep_columns

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

HEAD = """
[experiment]
clusters = ["CLUSTER"]
repeat = 1
settle = 1.0
quiet = 2.0
source_rate = 300.0

[failure]
fault = "partition"
shape = "source"
source = "s3"
cut = "reset"
"""

MASKING = HEAD.replace("CLUSTER", str(EXAMPLES / "experiments" / "single.toml")) + """
durations = [1.0, 3.0]

[grid]
x = [3.0]
alpha = [0.5]
up_failure = ["delay", "process"]

[[plots]]
x = "duration"
y = ["delay_new_s", "n_tentative"]
series = "up_failure"
line = "bound_s"
"""

STALLED = HEAD.replace("CLUSTER", str(EXAMPLES / "basic.toml")) + """
durations = [2.0]

[grid]
x = [1.0]
alpha = [0.5]
stabilization = ["suspend", "process"]

[[faults]]
at = 1.5
for = 2.5
fault = "stall"
process = "n1a"

[[faults]]
at = 1.5
for = 2.5
fault = "stall"
process = "n1b"
"""


def sweep(tmp_path: Path, name: str, text: str) -> tuple[int, str, Path]:
    path = tmp_path / f"{name}.toml"
    path.write_text(text.replace("[experiment]", f'[experiment]\nname = "{name}"'))
    out, log = tmp_path / name, io.StringIO()
    code = run_sweep(path, out, out=log)
    return code, log.getvalue(), out


def test_a_small_sweep_writes_its_csv_plots_and_report_and_resumes(tmp_path: Path) -> None:
    """The sweep resumes one that was interrupted: its CSV holds the 1 s ``delay`` run
    (done before; its figures are the earlier run's, kept as they are) and the 3 s
    ``process`` run had begun (its run dir exists, its row does not)."""
    path = tmp_path / "masking.toml"
    path.write_text(MASKING.replace("[experiment]", '[experiment]\nname = "masking"'))
    exp, out = load_experiment(path), tmp_path / "masking"
    done, begun = (next(p for p in exp.points() if (p.settings["duration"],
                                                      p.settings["up_failure"]) == key)
                   for key in ((1.0, "delay"), (3.0, "process")))
    earlier = {"point": done.index, "key": done.key, "rep": 1, **done.settings, "valid": True,
               "verdict": "valid", "nodes": 1, "delay_new_s": 1.0, "n_tentative": 0,
               "bound_s": 3.0, "run_dir": f"runs/p{done.index:03d}-{done.key}-r1"}
    (out / "runs" / f"p{begun.index:03d}-{begun.key}-r1").mkdir(parents=True)
    (out / "runs" / f"p{begun.index:03d}-{begun.key}-r1" / "leftover").write_text("x")
    with (out / "results.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, sweep_columns(exp))
        w.writeheader()
        w.writerow(earlier)
    code, log, _ = sweep(tmp_path, "masking", MASKING)
    assert code == 0, log
    assert "1 done before, 3 to run" in log and "left" in log
    rows = read_results(out / "results.csv")
    assert len(rows) == 4 and all(r["valid"] for r in rows), rows
    assert {k: v for k, v in rows[0].items() if v is not None} == earlier
    assert not (out / "runs" / f"p{begun.index:03d}-{begun.key}-r1" / "leftover").exists()
    by = {(r["duration"], r["up_failure"]): r for r in rows}
    # No tentative tuple for a failure below alpha*X, even when processing at once.
    assert by[(1.0, "process")]["n_tentative"] == 0
    # Delay in UP_FAILURE: fewer tentative tuples than process, on one node (measured:
    # about 0.6 times as many; the expectation is (3 - 1.5) / 3).
    delay, process = by[(3.0, "delay")]["n_tentative"], by[(3.0, "process")]["n_tentative"]
    assert 0 < delay <= 0.85 * process, (delay, process)
    assert all(r["delay_new_s"] <= r["bound_s"] for r in rows), rows
    # The plot is a PNG that opens, and the report shows it, every run and the file.
    (png,) = (out / "plots").glob("*.png")
    assert imread(png).shape[0] > 100
    report = (out / "report.html").read_text()
    assert f"plots/{png.name}" in report and report.count("<tr") == 5
    assert 'up_failure = ["delay", "process"]' in report
    # Run again: every run is in the CSV, nothing is redone.
    code, log, _ = sweep(tmp_path, "masking", MASKING)
    assert code == 0 and "4 done before, 0 to run" in log, log
    assert read_results(out / "results.csv") == rows


def test_suspend_breaks_x_once_reconciliation_is_long_and_process_does_not(
        tmp_path: Path) -> None:
    code, log, out = sweep(tmp_path, "stalled", STALLED)
    assert code == 0, log
    rows = {r["stabilization"]: r for r in read_results(out / "results.csv")}
    assert all(r["valid"] for r in rows.values()), rows
    suspend, process = rows["suspend"], rows["process"]
    assert suspend["reconciliation_s"] > 1.0 and process["reconciliation_s"] > 1.0
    assert suspend["delay_new_s"] > suspend["x_s"], suspend
    assert process["delay_new_s"] < process["x_s"], process


def test_advise_validate_holds_the_bound_on_the_basic_example(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``dpc advise ... --validate`` from a (synthetic) curve set: the recommendation,
    process & process at X = 1 s, alpha 0.5, runs on real processes under three sampled
    failures of the given length, and every new result stays within D = 1 s."""
    from tests.ops_scripts.sweep.test_advise import rows, write_csv

    monkeypatch.chdir(tmp_path)  # (the validation's run dir goes to ./runs)
    write_csv(tmp_path / "sweep", [r for r in rows(invalid_too=False)
                                   if (r["x_s"], r["alpha_x_s"], r["stabilization"])
                                   == (1.0, 0.5, "process")])
    out = io.StringIO()
    code = run_advise(EXAMPLES / "basic.toml", 1.0, "fixed:seconds=1", tmp_path / "sweep",
                      validate=True, overlay_file=tmp_path / "advice.toml", out=out)
    text = out.getvalue()
    assert code == 0, text
    assert "n1           1    0.5     process        process" in text
    assert "failures of 1, 1, 1 s" in text and "run valid" in text
    assert "the bound HELD" in text
