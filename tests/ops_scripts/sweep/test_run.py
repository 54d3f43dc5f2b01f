"""``dpc sweep``'s bookkeeping without processes: the estimate of the time left, and a
results file of another experiment refused (ops_scripts/sweep/run.py)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from ops_scripts.errors import SweepError
from ops_scripts.sweep import load_experiment
from ops_scripts.sweep.run import Sweep
from tests.ops_scripts.sweep.test_experiment import GOOD, write


def test_the_time_left_is_each_run_s_failure_plus_the_mean_overhead(tmp_path: Path) -> None:
    exp = load_experiment(write(tmp_path, GOOD))
    sweep = Sweep(exp, tmp_path / "out", io.StringIO())
    point = exp.points()[0]
    sweep.waiting = {("a", 1): 0.5, ("b", 1): 3.0}
    assert sweep.left(point).endswith(" left (a guess)")  # before any run finished
    sweep.overheads = [10.0, 20.0]  # runs done took 15 s besides their failures
    assert sweep.left(point) == "~34 s left"  # (15 + 0.5) + (15 + 3.0), rounded
    sweep.waiting = {(str(k), 1): 60.0 for k in range(3)}
    assert sweep.left(point) == "~3 min 45 s left"


def test_a_results_file_of_another_experiment_is_refused(tmp_path: Path) -> None:
    exp = load_experiment(write(tmp_path, GOOD))
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.csv").write_text("point,key,rep,speed\n0,abc,1,3\n")
    with pytest.raises(SweepError, match="pick another --out"):
        Sweep(exp, out, io.StringIO()).run(1)
