"""Experiment files (ops_scripts/sweep/experiment.py): the grid's points, each a scenario
the scenario loader accepts, and every mistake refused at load with file and key."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from ops_scripts.errors import SweepError
from ops_scripts.sweep import load_experiment

BASIC = Path(__file__).resolve().parents[3] / "examples" / "basic.toml"

GOOD = f"""
[experiment]
name = "t"
clusters = ["{BASIC}"]
repeat = 2
settle = 1.0

[grid]
x = [1.0, 2.0]
up_failure = ["delay", "process"]
"sources.*.attributes.key.n" = [10]

[failure]
durations = [0.5, 3.0]
fault = "partition"
shape = "source"
source = "s3"
cut = "reset"

[[faults]]
at = 1.0
for = 1.0
fault = "stall"
process = "n1a"
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "exp.toml"
    p.write_text(text)
    return p


def test_the_points_are_the_grid_product_each_a_scenario(tmp_path: Path) -> None:
    exp = load_experiment(write(tmp_path, GOOD))
    assert exp.name == "t" and exp.repeat == 2
    assert load_experiment(tmp_path / "exp.toml", repeat=5).repeat == 5  # (--repeat)
    with pytest.raises(SweepError, match="--repeat must be >= 1"):
        load_experiment(tmp_path / "exp.toml", repeat=0)
    points = exp.points()
    assert len(points) == 2 * 2 * 2 and exp.repeat == 2
    assert list(points[0].settings) == ["duration", "x", "up_failure",
                                        "sources.*.attributes.key.n"]
    assert [p.settings["duration"] for p in points[:4]] == [0.5] * 4
    assert len({p.key for p in points}) == len(points)
    scenario = tomllib.loads(points[-1].scenario_text)
    assert scenario["scenario"]["settings"] == {"x": 2.0, "up_failure": "process"}
    assert all(s["attributes"]["key"]["n"] == 10 for s in scenario["sources"].values())
    assert [f["fault"] for f in scenario["faults"]] == ["partition", "stall"]
    assert scenario["faults"][0]["for"] == 3.0
    # Keys depend on the settings only: the same file elsewhere resumes the same runs.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    again = load_experiment(write(elsewhere, GOOD))
    assert [p.key for p in again.points()] == [p.key for p in points]
    # No plots named: each numeric axis against Delay_new and N_tentative.
    assert [(p.x, p.y) for p in exp.plots] == [("duration", ("delay_new_s", "n_tentative")),
                                               ("x", ("delay_new_s", "n_tentative"))]


@pytest.mark.parametrize(("change", "says"), [
    (("x = [1.0, 2.0]", "xx = [1.0]"), "grid.xx"),
    (("x = [1.0, 2.0]", "x = []"), "grid.x"),
    (("x = [1.0, 2.0]", "x = [-1.0]"), "point 0"),
    (('source = "s3"', 'source = "s3"\nbetween = ["s1", "n1a"]'), "failure"),
    (("x = [1.0, 2.0]", 'x = [1.0]\n"nodes.n1.x" = [2.0]'), "overrides every node's own"),
    (('"sources.*.attributes.key.n"', '"sorces.*.rate"'), "nothing at sorces"),
    (("durations = [0.5, 3.0]", "durations = []"), "failure.durations"),
    (('source = "s3"', 'source = "s9"'), "s9"),
    (('process = "n1a"', 'process = "c1"'), "faults[0]: process = 'c1'"),
    (("repeat = 2", "repeat = 0"), "experiment.repeat"),
    (("settle = 1.0", "setle = 1.0"), "experiment.setle"),
    ((f'clusters = ["{BASIC}"]', 'clusters = ["nowhere.toml"]'), "experiment.clusters"),
    ((f'clusters = ["{BASIC}"]', f'clusters = ["{BASIC}", "{BASIC.parent}/./basic.toml"]'),
     "basic twice"),
])
def test_a_mistake_is_refused_at_load_naming_file_and_key(
        tmp_path: Path, change: tuple[str, str], says: str) -> None:
    path = write(tmp_path, GOOD.replace(*change))
    with pytest.raises(SweepError) as e:
        load_experiment(path)
    assert str(path) in str(e.value) and says in str(e.value)


def test_a_joint_axis_moves_its_settings_together_and_paths_reach_array_items(
        tmp_path: Path) -> None:
    text = GOOD.replace('up_failure = ["delay", "process"]',
                        '"up_failure, stabilization" = [["process", "process"], '
                        '["delay", "suspend"]]\n"nodes.n1.operators.3.band" = [200000]')
    exp = load_experiment(write(tmp_path, text))
    assert exp.columns == ["duration", "x", "up_failure", "stabilization",
                           "nodes.n1.operators.3.band", "sources.*.attributes.key.n"]
    assert len(exp.points()) == 2 * 2 * 2
    pairs = {(p.settings["up_failure"], p.settings["stabilization"]) for p in exp.points()}
    assert pairs == {("process", "process"), ("delay", "suspend")}
    scenario = tomllib.loads(exp.points()[0].scenario_text)
    assert scenario["nodes"]["n1"]["operators"][3] == {**scenario["nodes"]["n1"]["operators"][3],
                                                       "type": "join", "band": 200000}
    for bad, says in [('[["delay", "suspend"]]', "arrays of 2 values"),
                      ('"nodes.n1.operators.band" = [1]', "is an array")]:
        wrong = text.replace('["delay", "suspend"]]', '["delay"]]') if "arrays" in says \
            else text.replace('"nodes.n1.operators.3.band" = [200000]', bad)
        with pytest.raises(SweepError, match=says):
            load_experiment(write(tmp_path, wrong))


def test_no_axis_can_share_a_measure_s_column() -> None:
    """The CSV's columns are the axes then the measures: a shared name would be written
    twice (setting keys, the special axes and dotted paths are the only axes)."""
    from ops_scripts.harness.scenario import SETTING_KEYS
    from ops_scripts.sweep.experiment import SPECIAL_KEYS
    from ops_scripts.sweep.measures import MEASURES

    assert not set(MEASURES) & {*SETTING_KEYS, *SPECIAL_KEYS}
    assert not any("." in m for m in MEASURES)
