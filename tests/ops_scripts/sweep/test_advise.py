"""``dpc advise``'s model (ops_scripts/sweep/advise.py) on a synthetic curve set whose
optimum is known, its failure distributions, and the command on a CSV (no processes)."""

from __future__ import annotations

import csv
import io
import math
import tomllib
from pathlib import Path

import pytest

from node.config.load import load_config
from ops_scripts.errors import SweepError
from ops_scripts.sweep.advise import Failures, advise, curves_of
from ops_scripts.sweep.advise_run import failures_from, path_nodes, run_advise

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

# (x, alpha, up_failure, stabilization) -> Delay_new at each length, tentative per second
# of failure. With D = 1 on one node: the x = 2 candidate is out (X > D/k), process &
# suspend (the fewest) breaks D at 10 s, and among the rest delay & delay at alpha 0.9
# has the fewest; for failures shorter than 10 s, process & suspend wins.
CURVES = {
    (1.0, 0.5, "process", "process"): ({2: 0.55, 5: 0.55, 10: 0.55}, 100),
    (1.0, 0.5, "delay", "delay"): ({2: 0.6, 5: 0.6, 10: 0.6}, 60),
    (1.0, 0.5, "process", "suspend"): ({2: 0.5, 5: 0.6, 10: 1.5}, 20),
    (1.0, 0.9, "delay", "delay"): ({2: 0.95, 5: 0.95, 10: 0.97}, 30),
    (2.0, 0.9, "delay", "delay"): ({2: 1.9, 5: 1.9, 10: 1.9}, 10),
}


def rows(invalid_too: bool = True) -> list[dict]:
    out = []
    for (x, alpha, up, stab), (delays, per_s) in CURVES.items():
        for d, delay in delays.items():
            for rep, jitter in ((1, -1), (2, 1)):  # two runs a point: their mean counts
                out.append({"valid": True, "up_failure": up, "stabilization": stab,
                            "duration": float(d), "x_s": x, "alpha_x_s": x * alpha,
                            "delay_new_s": delay, "n_tentative": per_s * d + jitter,
                            "rep": rep})
    if invalid_too:  # an invalid run is never a curve's point
        out.append({**out[0], "valid": False, "n_tentative": 0, "delay_new_s": 99.0})
    return out


def test_the_known_optimum_is_recommended() -> None:
    lengths = Failures.of_lengths("f", [2.0, 5.0, 10.0])
    advice = advise(curves_of(rows()), lengths, 1.0, 1)
    best = advice.best
    assert best is not None
    assert (best.curve.candidate.x, best.curve.candidate.alpha, best.curve.candidate.up_failure,
            best.curve.candidate.stabilization) == (1.0, 0.9, "delay", "delay")
    assert best.expected_tentative == pytest.approx(170, abs=0.5) and best.worst_delay == 0.97
    why = {(r.curve.candidate.up_failure, r.curve.candidate.stabilization,
            r.curve.candidate.x): r.why for r in advice.ranked}
    assert "Delay_new 1.50 s > D" in why[("process", "suspend", 1.0)]
    assert "more than D/k" in why[("delay", "delay", 2.0)]
    # A bound of 2 s over a path of two nodes: X = 1 s per node again (the x = 2 curve is
    # still out), but the end-to-end delays are judged against 2 s: suspend is in, and wins.
    two = advise(curves_of(rows()), lengths, 2.0, 2)
    assert two.best is not None and two.best.curve.candidate.stabilization == "suspend"
    assert not next(r for r in two.ranked if r.curve.candidate.x == 2.0).feasible
    # Only short failures (below where suspend breaks D): process & suspend wins.
    short = advise(curves_of(rows()), Failures.of_lengths("f", [2.0, 3.0]), 1.0, 1)
    assert short.best is not None and short.best.curve.candidate.stabilization == "suspend"


def test_curves_interpolate_and_extrapolate_never_downwards() -> None:
    (curve,) = [c for c in curves_of(rows()) if c.candidate.stabilization == "suspend"]
    assert curve.tentative_at(1.0) == pytest.approx(20)  # from none at length 0
    assert curve.tentative_at(7.5) == pytest.approx(150)
    assert curve.delay_at(20.0) == pytest.approx(1.5 + 0.18 * 10)
    assert curve.delay_at(1.0) == 0.5  # below the shortest: flat


def test_failure_distributions() -> None:
    pareto = Failures.parse(Failures.DEFAULT)
    assert pareto.quantile(0.5) == pytest.approx(2 ** (1 / 1.2))
    assert pareto.quantile(0.99) == pytest.approx(100 ** (1 / 1.2))
    assert Failures.parse("exponential:mean=10").quantile(0.5) == pytest.approx(10 * math.log(2))
    assert Failures.parse("lognormal:median=5,sigma=1").quantile(0.5) == pytest.approx(5)
    assert set(Failures.parse("fixed:seconds=3").quantiles(10)) == {3.0}
    for bad in ("pareto:shape=1.2", "normal:mean=1", "exponential:mean=-1", "fixed:seconds=x"):
        with pytest.raises(SweepError, match="failure distribution"):
            Failures.parse(bad)


def test_failures_from_a_file(tmp_path: Path) -> None:
    f = tmp_path / "lengths.txt"
    f.write_text("# seconds\n1\n2.5\n\n10  # a long one\n")
    assert sorted(set(failures_from(str(f)).quantiles(30))) == [1.0, 2.5, 10.0]
    f.write_text("1\nsoon\n")
    with pytest.raises(SweepError, match=r"lengths\.txt:2"):
        failures_from(str(f))


def test_the_longest_path_counts_nodes() -> None:
    assert path_nodes(load_config(EXAMPLES / "basic.toml")) == 1
    assert path_nodes(load_config(EXAMPLES / "chain4.toml")) == 4
    assert path_nodes(load_config(EXAMPLES / "sim.toml")) == 2


def write_csv(path: Path, data: list[dict]) -> None:
    path.mkdir(parents=True)
    with (path / "results.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, list(data[0]))
        w.writeheader()
        w.writerows(data)


def test_the_command_prints_the_table_and_writes_the_overlay(tmp_path: Path) -> None:
    write_csv(tmp_path / "sweep", rows())
    out, overlay = io.StringIO(), tmp_path / "advice.toml"
    (tmp_path / "lengths").write_text("2\n5\n10\n")
    code = run_advise(EXAMPLES / "basic.toml", 1.0, str(tmp_path / "lengths"), tmp_path / "sweep",
                      overlay_file=overlay, out=out)
    assert code == 0, out.getvalue()
    assert "X = D/k = 1 s per node" in out.getvalue()
    assert "n1           1    0.9       delay          delay" in out.getvalue()
    assert tomllib.loads(overlay.read_text()) == {"nodes": {"n1": {
        "x": 1.0, "alpha": 0.9, "up_failure": "delay", "stabilization": "delay"}}}
    # Nothing within D: said, exit 1.
    out = io.StringIO()
    assert run_advise(EXAMPLES / "basic.toml", 0.4, "fixed:seconds=5", tmp_path / "sweep",
                      overlay_file=overlay, out=out) == 1
    assert "no measured candidate keeps Delay_new within 0.4 s" in out.getvalue()
    with pytest.raises(SweepError, match=r"no results\.csv"):
        run_advise(EXAMPLES / "basic.toml", 1.0, None, tmp_path, out=io.StringIO())
