"""Scenario files: a cluster, the settings to run it with, and a fault schedule.

Role: what ``dpc run`` plays (``runner.py``), what ``dpc torture`` writes for every random
run (``torture.py``) and what the deterministic simulation prints for a failing seed, so
that ``dpc run`` replays it on real processes. :func:`load_scenario` reads and validates a
file once; :meth:`Scenario.effective_config_text` is the cluster config a run uses;
:func:`dump_scenario` writes a scenario (``load_scenario`` reads it back to the same one).

The format (times in seconds)::

    [scenario]
    name = "isolate-a-replica"   # optional; default: the file's name without .toml
    cluster = "../basic.toml"    # a cluster config, relative to this file (or see below)
    settle = 2.0                 # fault-free running before schedule time 0 (default 2.0)
    quiet = 4.0                  # after the final heal of everything, before the drain (4.0)
    source_rate = 300.0          # optional: every source's rate, tuples/s
    seed = 7                     # optional: the seed that drew the schedule (dpc torture)
    [scenario.settings]          # optional: [defaults] keys (x, alpha, reconciliation, ...)
    x = 1.0
    alpha = 0.7

    [[faults]]                   # ops_scripts/harness/schedule.py's format; `at` counts from time 0
    at = 1.0
    for = 2.5
    fault = "partition"
    shape = "isolate"
    process = "n1a"
    cut = "reset"

**A self-contained scenario** leaves ``cluster`` out and holds the cluster config's own
tables (``[cluster]``, ``[defaults]``, ``[sources.*]``, ``[nodes.*]``, ``[clients.*]``) at
the top level of the same file, exactly as in a cluster file. That is what
:func:`dump_scenario` writes with ``inline=True`` and what every run directory keeps as
``scenario.toml``: one file to mail, to commit, or to replay with ``dpc run`` from anywhere
(a source data file is then named by its absolute path).

Invariants:

* Everything is checked at load, and every error is a :class:`ScenarioError` that names the
  scenario file and the key (``scenario.settle``, ``scenario.settings.alpah``,
  ``faults[2].process``); a bad cluster is reported with the cluster file's own message.
* ``settings`` override ``[defaults]`` *and* every node's own value of the same key: a
  scenario's ``x = 1.0`` is every node's X. ``source_rate`` is every source's rate.
* Faults are validated against the cluster (``schedule.parse_faults``), and each must
  touch a connection: a partition that cuts no replica's link, or a delay or bandwidth
  limit on a link with no replica end, is refused (only replicas make cuts and shapes).
* ``load_scenario(f)`` of ``dump_scenario(...)`` gives back the same name, settle, quiet,
  source rate, settings, seed, faults and cluster tables.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import tomli_w

from node.config.load import CLUSTER_TABLES, parse_config
from node.config.model import ClusterConfig, NodeSettings
from node.config.read import Table
from node.config.text import self_contained
from node.errors import ConfigError
from node.net.ports import free_port, is_local_address
from ops_scripts.errors import ScenarioError, ScheduleError
from ops_scripts.harness.schedule import Fault, cut_pairs, dump_faults, parse_faults, replica_rules

__all__ = [
    "CLUSTER_TABLES",
    "SETTING_KEYS",
    "Scenario",
    "dump_scenario",
    "load_scenario",
    "move_to_free_ports",
]

#: The top-level tables of a cluster config (inline in a self-contained scenario).
#: What ``[scenario.settings]`` may set: the keys of a cluster's ``[defaults]``.
SETTING_KEYS = tuple(f.name for f in dataclasses.fields(NodeSettings))
DEFAULT_SETTLE = 2.0
DEFAULT_QUIET = 4.0


@dataclass(frozen=True)
class Scenario:
    """A loaded, validated scenario. ``cluster`` holds the cluster config's tables as parsed
    (data-file paths made absolute); ``cluster_file`` is where they came from (None: inline
    in the scenario file)."""

    path: Path
    name: str
    cluster: Mapping[str, Any]
    cluster_file: Path | None
    faults: tuple[Fault, ...]
    settle: float = DEFAULT_SETTLE
    quiet: float = DEFAULT_QUIET
    source_rate: float | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    seed: int | None = None

    @classmethod
    def of_cluster(cls, cluster: str | os.PathLike[str], *, name: str,
                   faults: Sequence[Fault] = (), settle: float = DEFAULT_SETTLE,
                   quiet: float = DEFAULT_QUIET, source_rate: float | None = None,
                   settings: Mapping[str, Any] | None = None, seed: int | None = None,
                   ) -> Scenario:
        """A scenario built in memory around the cluster config at ``cluster`` (checked,
        with the settings applied; ``faults`` are taken as given): what ``dpc torture``
        draws schedules for and dumps."""
        file = Path(cluster).resolve()
        raw = _read_toml(file, "cluster config")
        s = cls(file.with_name(f"{name}.scenario.toml"), name,
                self_contained(raw, file.parent), file, tuple(faults), float(settle),
                float(quiet), source_rate, dict(settings or {}), seed)
        try:
            parse_config(raw, file)
            s.config()
        except ConfigError as e:
            raise ScenarioError(str(e)) from None
        return s

    @property
    def schedule_length(self) -> float:
        """Seconds from schedule time 0 to the last heal (0.0 without faults)."""
        return max((f.heal_at for f in self.faults), default=0.0)

    def effective_raw(self, ports: Literal["free", "keep"] = "keep") -> dict[str, Any]:
        """The cluster's tables with the settings and source rate applied and, with
        ``ports="free"``, every listening port (sources, replica data and control ports)
        moved to a free one (``node/net/ports.py``)."""
        raw: dict[str, Any] = copy.deepcopy(dict(self.cluster))
        if self.settings:
            raw.setdefault("defaults", {}).update(self.settings)
            for node in raw.get("nodes", {}).values():
                for key in self.settings:
                    node.pop(key, None)
        sources = raw.get("sources", {})
        if self.source_rate is not None:
            for src in sources.values():
                src["rate"] = float(self.source_rate)
        if ports == "free":
            move_to_free_ports(raw)
        return raw

    def effective_config_text(self, ports: Literal["free", "keep"] = "free") -> str:
        """The cluster config a run of this scenario uses, as TOML (``config.toml`` of the
        run directory)."""
        head = (f"# The cluster of scenario {self.name!r} ({self.path}) with its settings "
                f"applied{' and free ports' if ports == 'free' else ''}.\n")
        return head + tomli_w.dumps(self.effective_raw(ports))

    def config(self) -> ClusterConfig:
        """The effective cluster config (ports as in the cluster file)."""
        return parse_config(self.effective_raw("keep"), self.path)

    def dump(self, *, inline: bool | None = None) -> str:
        """This scenario as TOML; ``inline`` (default: as it was loaded) embeds the cluster,
        else the cluster file is named relative to this scenario's directory."""
        inline = self.cluster_file is None if inline is None else inline
        cluster: Path | Mapping[str, Any] = (
            self.cluster if inline or self.cluster_file is None else self.cluster_file)
        return dump_scenario(
            name=self.name, cluster=cluster, faults=self.faults, settle=self.settle,
            quiet=self.quiet, source_rate=self.source_rate, settings=self.settings,
            seed=self.seed, inline=inline, base=self.path.parent)


def move_to_free_ports(raw: dict[str, Any]) -> None:
    """Move every listening port of a cluster's tables (sources, replica data and control
    ports, the controller's) on this machine to a free one (``node/net/ports.py``), in
    place: other runs on this machine may hold the file's ports. A port on a host that is
    not this machine's (a host of its own: ``--hosts netns|ssh``) is left as the file says:
    nothing else of this machine listens there."""
    default_control = raw.get("cluster", {}).get("control_host")

    def moved(host: str, port: Any) -> Any:
        return free_port(host) if is_local_address(host) else port

    for src in raw.get("sources", {}).values():
        src["port"] = moved(src.get("host", "127.0.0.1"), src.get("port"))
    for node in raw.get("nodes", {}).values():
        for r in node.get("replicas", []):
            r["data_port"] = moved(r.get("host", "127.0.0.1"), r.get("data_port"))
            r["control_port"] = moved(r.get("control_host") or default_control
                                      or r.get("host", "127.0.0.1"), r.get("control_port"))
    controller = raw.get("controller")
    if isinstance(controller, dict):  # the Flux controller's (docs/flux.md)
        controller["control_port"] = moved(controller.get("control_host") or default_control
                                           or controller.get("host", "127.0.0.1"),
                                           controller.get("control_port"))


# ---------------------------------------------------------------- loading
def _read_toml(path: Path, what: str) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise ScenarioError(f"{path}: cannot read the {what}: {e}") from None
    except tomllib.TOMLDecodeError as e:
        raise ScenarioError(f"{path}: not valid TOML: {e}") from None


def _header(path: Path, raw: Mapping[str, Any]) -> dict[str, Any]:
    """The [scenario] table's values, checked (ConfigError naming file and key)."""
    root = Table(path, "", raw)
    sc = root.table("scenario", required=True)
    seconds = "a number of seconds >= 0"
    h: dict[str, Any] = {
        "name": sc.string("name", path.stem.removesuffix(".scenario"), nonempty=True),
        "cluster": sc.string("cluster", nonempty=True) if sc.has("cluster") else None,
        "settle": float(sc.number("settle", DEFAULT_SETTLE, lambda v: v >= 0, seconds)),
        "quiet": float(sc.number("quiet", DEFAULT_QUIET, lambda v: v >= 0, seconds)),
        "source_rate": (float(sc.number("source_rate", None, lambda v: v > 0, "tuples/s > 0"))
                        if sc.has("source_rate") else None),
        "seed": sc.integer("seed") if sc.has("seed") else None,
    }
    settings = sc.table("settings")
    settings.allow(*SETTING_KEYS)
    settings.finish()
    h["settings"] = dict(settings.raw)
    sc.finish()
    h["faults"] = root.array("faults")
    root.allow(*CLUSTER_TABLES)
    root.finish()
    return h


def _cluster(path: Path, h: Mapping[str, Any], raw: Mapping[str, Any],
             ) -> tuple[dict[str, Any], Path | None]:
    inline = {k: raw[k] for k in CLUSTER_TABLES if k in raw}
    if h["cluster"] is None:
        if not inline:
            raise ScenarioError(
                f"{path}: scenario.cluster: missing: name a cluster config (relative to this "
                "file), or put the cluster's tables ([cluster], [sources.*], [nodes.*], "
                "[clients.*]) in this file")
        return self_contained(inline, path.parent), None
    if inline:
        raise ScenarioError(
            f"{path}: scenario.cluster: the cluster is named ({h['cluster']!r}) and also "
            f"given inline ([{'], ['.join(inline)}]): keep one")
    file = (path.parent / h["cluster"]).resolve()
    if not file.is_file():
        raise ScenarioError(f"{path}: scenario.cluster: no cluster config at {file} "
                            f"({h['cluster']!r} is relative to the scenario file)")
    cluster = _read_toml(file, "cluster config")
    try:
        parse_config(cluster, file)
    except ConfigError as e:
        raise ScenarioError(f"{path}: scenario.cluster: {e}") from None
    return self_contained(cluster, file.parent), file


def _check_connections(path: Path, raw_faults: Sequence[Any], config: ClusterConfig) -> None:
    """Every fault touches a link that a replica can cut or shape (raw order: faults[i])."""
    replicas = {r.name for n in config.nodes.values() for r in n.replicas}
    for i, raw in enumerate(raw_faults):
        (f,) = parse_faults([raw], config)
        if f.kind == "partition" and not replica_rules(cut_pairs(f, config), config):
            raise ScenarioError(
                f"{path}: faults[{i}]: {f.describe()} cuts no connection: every link of a "
                "cluster has a replica at one end, and this cuts none")
        if f.kind in ("delay", "bandwidth") and not set(f.params["between"]) & replicas:
            a, b = f.params["between"]
            raise ScenarioError(
                f"{path}: faults[{i}].between: a {f.kind} is made at a replica end of the "
                f"link, and neither {a} nor {b} is a replica")


def load_scenario(path: str | os.PathLike[str]) -> Scenario:
    """Read and validate the scenario at ``path`` (see the module docstring)."""
    p = Path(path)
    raw = _read_toml(p, "scenario")
    try:
        h = _header(p, raw)
    except ConfigError as e:
        raise ScenarioError(str(e)) from None
    cluster, cluster_file = _cluster(p, h, raw)
    s = Scenario(p, h["name"], cluster, cluster_file, (), h["settle"], h["quiet"],
                 h["source_rate"], h["settings"], h["seed"])
    try:
        config = s.config()
    except ConfigError as e:
        raise ScenarioError(f"{p}: scenario.settings (or source_rate) make the cluster "
                            f"invalid: {e}") from None
    try:
        faults = parse_faults(h["faults"], config)
        _check_connections(p, h["faults"], config)
    except ScheduleError as e:
        raise ScenarioError(f"{p}: {e}") from None
    return dataclasses.replace(s, faults=tuple(faults))


# ---------------------------------------------------------------- writing
def dump_scenario(
    *,
    name: str,
    cluster: str | os.PathLike[str] | ClusterConfig | Mapping[str, Any],
    faults: Sequence[Fault],
    settle: float = DEFAULT_SETTLE,
    quiet: float = DEFAULT_QUIET,
    source_rate: float | None = None,
    settings: Mapping[str, Any] | None = None,
    seed: int | None = None,
    inline: bool = False,
    base: str | os.PathLike[str] | None = None,
) -> str:
    """A scenario file's text. ``cluster`` is a cluster config's path, a loaded
    :class:`ClusterConfig`, or its parsed tables (always inline). With ``inline`` the
    cluster's tables are embedded (a self-contained file: source data files named by
    absolute path); else the file is named by its path, relative to ``base`` (the directory
    the scenario will be written to) if given, else absolute."""
    head: dict[str, Any] = {"name": name}
    file: Path | None = None  # the cluster file, if the cluster has one
    tables: Mapping[str, Any] | None = None  # the cluster's tables, if inline
    if isinstance(cluster, Mapping):
        tables = cluster  # parsed tables have no file: always inline
    else:
        path = cluster.path if isinstance(cluster, ClusterConfig) else Path(cluster)
        file = path.resolve()
        if not inline:
            head["cluster"] = os.path.relpath(file, Path(base).resolve()) if base else str(file)
        elif isinstance(cluster, ClusterConfig):
            tables = self_contained(cluster.raw, path.parent)
        else:
            tables = self_contained(_read_toml(file, "cluster config"), file.parent)
    head |= {"settle": float(settle), "quiet": float(quiet)}
    if source_rate is not None:
        head["source_rate"] = float(source_rate)
    if seed is not None:
        head["seed"] = int(seed)
    if settings:
        head["settings"] = dict(settings)
    parts = [f"# Scenario {name!r}: play it with `dpc run THIS_FILE`.\n",
             tomli_w.dumps({"scenario": head})]
    if faults:
        parts.append("\n" + dump_faults(faults))
    if tables is not None:
        parts.append(f"\n# The cluster config{f' (from {file})' if file else ''}, inline.\n")
        parts.append(tomli_w.dumps({k: tables[k] for k in CLUSTER_TABLES if k in tables}))
    return "".join(parts)
