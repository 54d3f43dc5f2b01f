"""Experiment files: a cluster, a grid of settings, a failure, and what to plot.

Role: what ``dpc sweep`` runs (``ops_scripts/sweep/run.py``). :func:`load_experiment` reads
and validates a file once, including every point of its grid (each point's scenario is
built and checked by the scenario loader before anything runs: a typo fails at once, not
an hour in); :meth:`Experiment.points` gives them in order, each with its self-contained
scenario (``ops_scripts/harness/scenario.py``), which the runner plays like ``dpc run``.

The format (times in seconds)::

    [experiment]
    name = "alpha-x"                  # optional; default: the file's name
    clusters = ["../basic.toml"]      # one or more cluster configs, relative to this file;
                                      # several make an axis "cluster" (e.g. chain lengths)
    repeat = 3                        # runs per point (default 3; --repeat overrides)
    settle = 2.0                      # as a scenario's: fault-free running before time 0
    quiet = 4.0                       # after the heal, before the drain
    source_rate = 300.0               # optional: every source's rate (or a grid axis)

    [grid]                            # every combination of these values is one point
    x = [1.0, 2.0, 3.0]               # any [defaults] key of a cluster config
    up_failure = ["delay", "process"]
    source_rate = [300.0, 600.0]      # every source's rate
    "sources.*.attributes.key.n" = [10, 100]   # a path into the cluster config ("*": each;
                                      #   a number: an array's item, e.g. operators.3.band)
    "up_failure, stabilization" = [["process", "process"], ["delay", "delay"]]
                                      # a joint axis: its settings move together

    [failure]                         # one fault, of a scenario's [[faults]] format
    durations = [5.0]                 # a `duration` axis (omit the table: no failure)
    at = 0.0                          # from time 0 (default 0)
    fault = "partition"
    shape = "source"
    source = "s3"
    cut = "reset"

    [[faults]]                        # optional: more faults, as a scenario's, in every
    at = 1.5                          #   run (here: the replicas' reconciliations held,
    for = 2.0                         #   which makes them last as long as the hold)
    fault = "stall"
    process = "n1a"

    [[plots]]                         # optional; default: each numeric axis against the
    x = "alpha_x_s"                   #   measures delay_new_s and n_tentative
    y = ["delay_new_s", "n_tentative"]  # a panel each (CSV columns: ops_scripts/sweep/measures.py)
    series = "up_failure"             # optional: one line per value of this column (or
                                      #   per combination of an array of columns)
    line = "bound_s"                  # optional: a column drawn dashed (e.g. the bound k*X)
                                      #   on the panels of its unit (*_s: seconds)
    title = "Delay vs process"        # optional

Invariants: every error is a :class:`SweepError` naming the file and the key (a bad
point's message names the point's settings too); the points are the grid's product in the
file's order of axes and values, and a point's ``key`` depends only on its settings (the
runner resumes by it).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import itertools
import json
import re
import tempfile
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from node.config.read import Table
from node.errors import ConfigError
from ops_scripts.errors import ScenarioError, SweepError
from ops_scripts.harness.scenario import (
    CLUSTER_TABLES,
    DEFAULT_QUIET,
    DEFAULT_SETTLE,
    SETTING_KEYS,
    Scenario,
    load_scenario,
)

__all__ = ["Experiment", "PlotSpec", "Point", "load_experiment"]

DEFAULT_REPEAT = 3
#: Grid keys that are not [defaults] keys or config paths.
SPECIAL_KEYS = ("source_rate", "duration", "cluster")
#: What a plot plots when the file names no plot.
DEFAULT_MEASURES = ("delay_new_s", "n_tentative")


@dataclass(frozen=True)
class PlotSpec:
    x: str
    y: tuple[str, ...]
    series: tuple[str, ...] = ()  # one line per combination of these columns' values
    line: str | None = None
    title: str | None = None


@dataclass(frozen=True)
class Point:
    """One combination of the grid: ``settings`` (axis -> value, in the file's order),
    ``key`` (a digest of them: a run's identity for resuming) and the scenario a run of it
    plays (self-contained TOML text)."""

    index: int
    settings: Mapping[str, Any]
    key: str
    scenario_text: str

    def label(self) -> str:
        return " ".join(f"{k}={_show(v)}" for k, v in self.settings.items()) or "(one point)"


@dataclass(frozen=True)
class Experiment:
    path: Path
    name: str
    text: str  # the file as written (the report shows it)
    clusters: tuple[Path, ...]
    grid: Mapping[str, tuple[Any, ...]]  # axis -> values, in the file's order
    failure: Mapping[str, Any] | None  # the fault table without `durations` (None: none)
    faults: tuple[Mapping[str, Any], ...]  # more faults, in every run
    repeat: int
    settle: float
    quiet: float
    source_rate: float | None
    plots: tuple[PlotSpec, ...]
    _points: tuple[Point, ...] = field(default=(), repr=False)

    def points(self) -> tuple[Point, ...]:
        return self._points

    @property
    def columns(self) -> list[str]:
        """The settings each point sets, in order (a joint axis's names one by one)."""
        return [n for axis in self.grid for n in axis_names(axis)]

    def seconds_per_run(self, point: Point) -> float:
        """A first guess of one run's wall time (before any run measured it): start-up,
        settle, the failure, quiet, drain and check."""
        return 12.0 + self.settle + self.quiet + float(point.settings.get("duration", 0.0))


def load_experiment(path: str | Path, repeat: int | None = None) -> Experiment:
    """Read and validate the experiment at ``path`` and every point of its grid."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
        raw = tomllib.loads(text)
    except (OSError, UnicodeDecodeError) as e:
        raise SweepError(f"{p}: cannot read the experiment: {e}") from None
    except tomllib.TOMLDecodeError as e:
        raise SweepError(f"{p}: not valid TOML: {e}") from None
    try:
        exp = _parse(p, text, raw, repeat)
    except ConfigError as e:
        raise SweepError(str(e)) from None
    return exp


def _parse(p: Path, text: str, raw: Mapping[str, Any], repeat: int | None) -> Experiment:
    root = Table(p, "", raw)
    e = root.table("experiment", required=True)
    name = e.string("name", p.stem, nonempty=True)
    clusters = tuple((p.parent / c).resolve() for c in e.names("clusters"))
    for i, c in enumerate(clusters):
        if not c.is_file():
            raise e.fail_text("clusters", "cluster config files (relative to the experiment)",
                              f"no file at {c} (item {i})")
    stems = [c.stem for c in clusters]
    if len(set(stems)) != len(stems):  # (the `cluster` axis names a config by its stem)
        raise e.fail_text("clusters", "configs of distinct file names",
                          f"{', '.join(sorted({s for s in stems if stems.count(s) > 1}))} twice")
    reps = e.integer("repeat", DEFAULT_REPEAT, lo=1)
    reps = reps if repeat is None else repeat  # (--repeat)
    if reps < 1:
        raise SweepError(f"--repeat must be >= 1, got {reps}")
    seconds = "a number of seconds >= 0"
    settle = float(e.number("settle", DEFAULT_SETTLE, lambda v: v >= 0, seconds))
    quiet = float(e.number("quiet", DEFAULT_QUIET, lambda v: v >= 0, seconds))
    rate = (float(e.number("source_rate", None, lambda v: v > 0, "tuples/s > 0"))
            if e.has("source_rate") else None)
    e.finish()

    grid = _grid(root.table("grid"))

    failure: dict[str, Any] | None = None
    if root.has("failure"):
        f = root.table("failure")
        durations = f.raw.get("durations")
        if (not isinstance(durations, list) or not durations
                or not all(isinstance(d, int | float) and not isinstance(d, bool) and d > 0
                           for d in durations)):
            raise f.fail("durations", "a non-empty array of seconds > 0", durations)
        failure = {k: v for k, v in f.raw.items() if k != "durations"}
        failure.setdefault("at", 0.0)
        if "for" in failure:
            raise f.fail_text("for", "no `for` (each of `durations` is one)", "a `for`")
        grid = {"duration": tuple(float(d) for d in durations), **grid}
    if len(clusters) > 1:
        grid = {"cluster": tuple(c.stem for c in clusters), **grid}

    faults = tuple(root.array("faults"))  # (checked with each point's scenario)
    plots = tuple(_plot(t) for t in root.tables("plots"))
    root.finish()
    exp = Experiment(p, name, text, clusters, grid, failure, faults, reps, settle, quiet,
                     rate, plots or _default_plots(grid))
    return dataclasses.replace(exp, _points=_points(exp))


def _columns(t: Table, key: str, required: bool) -> tuple[str, ...]:
    """A column name or an array of them."""
    v = t.raw.get(key)
    names = (v,) if isinstance(v, str) else tuple(v) if isinstance(v, list) else ()
    if (v is not None or required) and (
            not names or not all(isinstance(n, str) and n for n in names)):
        raise t.fail(key, "a column name or an array of them", v)
    t.allow(key)
    return names


def _grid(g: Table) -> dict[str, tuple[Any, ...]]:
    """The [grid] table: axis key -> values, each key's settings checked."""
    grid: dict[str, tuple[Any, ...]] = {}
    for key, values in g.raw.items():
        g.allow(key)
        names = axis_names(key)
        for name in names:
            if name == "duration" or name == "cluster":
                raise g.fail_text(key, "a settings axis", f"{name!r}, which comes from "
                                  + ("[failure].durations" if name == "duration"
                                     else "[experiment].clusters"))
            if name not in SETTING_KEYS and name not in SPECIAL_KEYS and "." not in name:
                raise g.fail_text(key, "a [defaults] key of a cluster config ("
                                  + ", ".join(SETTING_KEYS) + "), source_rate, or a dotted "
                                  "path into the cluster config", repr(name))
        if not isinstance(values, list) or not values:
            raise g.fail(key, "a non-empty array of values", values)
        if len(names) > 1 and not all(isinstance(v, list) and len(v) == len(names)
                                      for v in values):
            raise g.fail(key, f"an array of arrays of {len(names)} values (one per name)",
                         values)
        grid[key] = tuple(values)
    settings_axes = {n for key in grid for n in axis_names(key) if n in SETTING_KEYS}
    for key in grid:
        for setting in axis_names(key):
            parts = setting.split(".")
            if parts[0] == "nodes" and parts[-1] in settings_axes:
                raise g.fail_text(key, "a node's setting not also on a settings axis",
                                  f"{setting!r} beside the axis {parts[-1]!r}, which "
                                  "overrides every node's own value")
    g.finish()
    return grid


def _plot(t: Table) -> PlotSpec:
    spec = PlotSpec(t.string("x", nonempty=True), _columns(t, "y", True),
                    _columns(t, "series", False),
                    t.string("line", nonempty=True) if t.has("line") else None,
                    t.string("title", nonempty=True) if t.has("title") else None)
    t.finish()
    return spec


def _default_plots(grid: Mapping[str, Sequence[Any]]) -> tuple[PlotSpec, ...]:
    varying = [k for k, v in grid.items() if len(v) > 1]
    numeric = [k for k in varying if len(axis_names(k)) == 1
               and all(isinstance(v, int | float) for v in grid[k])]
    plots = []
    for k in numeric:
        series = tuple(n for s in varying if s != k for n in axis_names(s))
        plots.append(PlotSpec(k, DEFAULT_MEASURES, series))
    return tuple(plots)


def axis_names(key: str) -> list[str]:
    """The settings a grid key names: ``"bucket, sources.*.boundary_interval"`` is a joint
    axis (its values move together), any other key one setting."""
    return [n.strip() for n in key.split(",")]


def _points(exp: Experiment) -> tuple[Point, ...]:
    axes = list(exp.grid)
    points = []
    clusters = {c.stem: load_scenario_cluster(c) for c in exp.clusters}
    with tempfile.TemporaryDirectory(prefix="dpc-sweep-check-") as tmp:
        for index, combo in enumerate(itertools.product(*(exp.grid[a] for a in axes))):
            settings: dict[str, Any] = {}
            for axis, value in zip(axes, combo, strict=True):
                names = axis_names(axis)
                settings.update(zip(names, value if len(names) > 1 else [value],
                                    strict=True))
            key = hashlib.sha1(json.dumps([exp.name, settings], sort_keys=True,
                                          default=str).encode()).hexdigest()[:12]
            text = _scenario_text(exp, settings, f"{exp.name}-{index}", clusters)
            check = Path(tmp) / f"point-{index}.toml"
            check.write_text(text)
            try:
                load_scenario(check)
            except ScenarioError as e:
                where = str(e).replace(str(check), f"{exp.path} (point {index}: "
                                       f"{Point(index, settings, key, text).label()})")
                raise SweepError(_fault_names(where, exp.failure is not None)) from None
            points.append(Point(index, settings, key, text))
    return tuple(points)


def _scenario_text(exp: Experiment, settings: Mapping[str, Any], name: str,
                   clusters: Mapping[str, dict[str, Any]]) -> str:
    """The self-contained scenario of one point (``dpc run`` plays it as it is)."""
    cluster = copy.deepcopy(clusters[settings.get("cluster", exp.clusters[0].stem)])
    head: dict[str, Any] = {"name": name, "settle": exp.settle, "quiet": exp.quiet}
    if exp.source_rate is not None:
        head["source_rate"] = exp.source_rate
    node_settings: dict[str, Any] = {}
    for key, value in settings.items():
        if key in SETTING_KEYS:
            node_settings[key] = value
        elif key == "source_rate":
            head["source_rate"] = float(value)
        elif "." in key:
            _set_path(cluster, key, value, exp.path)
    if node_settings:
        head["settings"] = node_settings
    doc: dict[str, Any] = {"scenario": head, **cluster}
    faults = [dict(f) for f in exp.faults]
    if exp.failure is not None:
        faults.insert(0, {**exp.failure, "for": float(settings["duration"])})
    if faults:
        doc["faults"] = faults
    return tomli_w.dumps(doc)


def _fault_names(message: str, failure: bool) -> str:
    """A scenario's ``faults[i]`` as the experiment names it: its failure is the
    scenario's first fault, ``[[faults]]`` come after."""
    if not failure:
        return message

    def name(m: re.Match[str]) -> str:
        i = int(m[1])
        return "failure" if i == 0 else f"faults[{i - 1}]"

    return re.sub(r"\bfaults\[(\d+)\]", name, message)


def load_scenario_cluster(file: Path) -> dict[str, Any]:
    """A cluster config's tables as a self-contained scenario embeds them (data files by
    absolute path): read through a scenario naming it, so that both agree."""
    with tempfile.TemporaryDirectory(prefix="dpc-sweep-") as tmp:
        probe = Path(tmp) / "probe.toml"
        probe.write_text(tomli_w.dumps({"scenario": {"cluster": str(file)}}))
        try:
            s: Scenario = load_scenario(probe)
        except ScenarioError as e:
            raise SweepError(str(e).replace(str(probe), f"cluster {file}")) from None
    return {k: copy.deepcopy(v) for k, v in s.cluster.items() if k in CLUSTER_TABLES}


def _set_path(cluster: dict[str, Any], path: str, value: Any, exp_path: Path) -> None:
    """Set ``value`` at the dotted ``path`` of the cluster's tables: a name is a table's
    key, a number an array's item (``nodes.n1.operators.3.band``), ``*`` every key or
    item at that place. The parents must exist (a typo is an error)."""
    parts = path.split(".")
    places: list[Any] = [cluster]
    for i, part in enumerate(parts[:-1]):
        nxt: list[Any] = []
        for t in places:
            if part == "*":
                nxt += list(t.values()) if isinstance(t, dict) else list(t)
            elif isinstance(t, dict) and part in t:
                nxt.append(t[part])
            elif isinstance(t, list) and part.isdigit() and int(part) < len(t):
                nxt.append(t[int(part)])
        nxt = [c for c in nxt if isinstance(c, dict | list)]
        if not nxt:
            raise SweepError(f"{exp_path}: grid: {path!r}: the cluster config has nothing at "
                             f"{'.'.join(parts[:i + 1])}")
        places = nxt
    for t in places:
        if not isinstance(t, dict):
            raise SweepError(f"{exp_path}: grid: {path!r}: {parts[-2]} is an array, not a "
                             "table: name an item (a number) or * before the key")
        t[parts[-1]] = value


def _show(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)
