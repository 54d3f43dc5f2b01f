"""``dpc reconcile`` end to end (ops_scripts/reconcile/run.py): run directories in, one
verdict line per run, a report, the differences, the exit code; and its usage errors."""

from __future__ import annotations

import io
import shutil
from pathlib import Path
from typing import Any

import pytest

from node.config.load import load_config
from node.procs.runlog import read_log
from ops_scripts.cli import main
from ops_scripts.harness.simulate import DEFAULT_CLUSTER, simulate_one
from ops_scripts.reconcile.run import config_settings, default_out, parse_conf, run_reconcile
from protocol.tuples import Kind
from tests.runlogs import write_rows


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    base = tmp_path_factory.mktemp("runs")
    config = load_config(DEFAULT_CLUSTER)
    out = []
    for seed in (1, 4):  # seed 4: replicas killed and recovered
        result = simulate_one(config, seed, base / f"seed{seed}")
        assert result.ok and result.run_dir is not None, result.failures
        out.append(result.run_dir)
    return out


def test_valid_runs_pass_with_a_report(spark: Any, runs: list[Path], tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    code = run_reconcile(runs, out=tmp_path / "rec", stdout=out, stderr=err)
    lines = out.getvalue().splitlines()
    assert code == 0, out.getvalue() + err.getvalue()
    assert [ln.split(":")[0] for ln in lines[:2]] == ["run seed1", "run seed4"]
    assert all(": valid (" in ln for ln in lines[:2]), lines
    assert "2 of 2 run(s) valid -> PASS" in lines[-1]
    report = (tmp_path / "rec" / "report.md").read_text()
    assert "seed1" in report and "seed4" in report
    assert spark.read.parquet(str(tmp_path / "rec" / "differences")).count() == 0
    assert "reference:" in err.getvalue()  # progress goes to stderr


def test_a_client_missing_one_stable_tuple_fails_naming_it(spark: Any, runs: list[Path],
                                                           tmp_path: Path) -> None:
    run = shutil.copytree(runs[0], tmp_path / "broken")
    log = run / "clients" / "c1.arrow"
    rows = read_log(log)
    victim = next(i for i, (_, t) in enumerate(rows) if t.kind is Kind.STABLE)
    gone = rows.pop(victim)[1].id
    write_rows(log, rows)
    out = io.StringIO()
    assert run_reconcile([run], out=tmp_path / "rec", stdout=out, stderr=io.StringIO()) == 1
    line = out.getvalue().splitlines()[0]
    assert line.startswith("run broken: INVALID: eventual-consistency client c1 ("), line
    diffs = spark.read.parquet(str(tmp_path / "rec" / "differences")).collect()
    assert [(d["what"], d["id"]) for d in diffs] == [("missing", gone)]


def test_usage_errors_exit_2_saying_why(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    assert main(["reconcile", str(tmp_path)]) == 2
    assert "no config.toml" in capsys.readouterr().err
    assert main(["reconcile", str(tmp_path), "--conf", "spark.executor.memory"]) == 2
    assert "expected KEY=VALUE" in capsys.readouterr().err
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    assert main(["reconcile", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Spark needs Java 17 or newer" in err


def test_conf_and_default_out() -> None:
    assert parse_conf(["spark.a=1", "spark.b=x=y"]) == {"spark.a": "1", "spark.b": "x=y"}
    assert default_out([Path("/r/one")]) == Path("/r/one/reconcile")
    assert default_out([Path("/r/a/x"), Path("/r/b/y")]) == Path("/r/reconcile")


def test_the_runs_spark_sections_merge_and_a_conflict_is_a_usage_error(
        runs: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``[spark]`` of each run's config: merged; --conf over them; two runs that disagree
    on a key --conf does not set stop the command (exit 2) naming both files."""
    a, b = (shutil.copytree(r, tmp_path / r.name) for r in runs)
    for d, memory in ((a, "1g"), (b, "2g")):
        with (d / "config.toml").open("a", encoding="utf-8") as f:
            f.write(f'\n[spark]\n"spark.executor.memory" = "{memory}"\nspark.app.id = "x"\n')
    assert config_settings([a]) == {"spark.executor.memory": "1g", "spark.app.id": "x"}
    assert config_settings([a, b], given={"spark.executor.memory"}) == {"spark.app.id": "x"}
    with pytest.raises(ValueError, match=r"spark.executor.memory is '1g' in .*seed1/config.toml "
                                         r"but '2g' in .*seed4/config.toml"):
        config_settings([a, b])
    assert main(["reconcile", str(a), str(b)]) == 2
    assert "say which with --conf spark.executor.memory=VALUE" in capsys.readouterr().err


def test_the_runs_spark_master_is_the_master_asked_for(spark: Any, runs: list[Path],
                                                       tmp_path: Path) -> None:
    """``"spark.master"`` in a run's ``[spark]`` names where the job runs when no --master
    does. This process holds the suite's local session, and a process holds one: asking
    for another master says so, naming the run's (the standalone test runs a job there)."""
    run = shutil.copytree(runs[0], tmp_path / "run")
    with (run / "config.toml").open("a", encoding="utf-8") as f:
        f.write('\n[spark]\n"spark.master" = "spark://127.0.0.1:9"\n')
    with pytest.raises(ValueError, match=r"stop it before asking for one on spark://127\.0\.0\.1:9"):
        run_reconcile([run], out=tmp_path / "rec", stdout=io.StringIO(), stderr=io.StringIO())
    # --master over the section: the suite's own session, and a verdict.
    assert run_reconcile([run], master=spark.sparkContext.master, out=tmp_path / "rec2",
                         stdout=io.StringIO(), stderr=io.StringIO()) == 0
