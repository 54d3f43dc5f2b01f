"""``dpc advise CLUSTER.toml --max-delay D [--failures SPEC|FILE] [--sweep DIR]
[--validate]``: the I/O half of the advice (``advise.py`` is the model).

The curves come from ``--sweep DIR`` (a finished ``dpc sweep`` whose grid has
``up_failure``, ``stabilization`` and a failure), or from a sweep it runs itself into
``sweeps/advise-<cluster>-D<D>`` (resumable like any sweep; a second call reuses it):
X = D / k, alpha 0.5 and 0.9, the six strategy combinations, the first node's last input
cut for the failure distribution's median, 90th and 99th percentile lengths (capped at
30 s: a run per point, about a quarter of an hour on the basic example). It prints the
candidates ranked, the recommendation per node with its expected Delay_new and
N_tentative, and writes it as a config overlay (``[nodes.NAME]`` tables of settings: merge
them into the cluster config; each overrides ``[defaults]``). ``--validate`` runs the
cluster with the overlay on real processes under three failures drawn from the
distribution (seeded, capped at 60 s) and reports whether every new result stayed within
D and the run was valid (exit 1 if not).
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any, TextIO

import tomli_w

from node.config.load import load_config
from node.config.model import ClusterConfig, NodeConfig
from ops_scripts.errors import SweepError
from ops_scripts.harness.runner import default_run_dir, play_scenario
from ops_scripts.harness.scenario import load_scenario

from .advise import Advice, Failures, advise, curves_of
from .experiment import load_scenario_cluster
from .measures import measure_run
from .report import read_results
from .run import run_sweep

__all__ = ["failures_from", "path_nodes", "run_advise"]

ALPHAS = (0.5, 0.9)
SWEEP_CAP = 30.0  # seconds: the longest failure the advice's own sweep runs
VALIDATE_CAP = 60.0
VALIDATE_FAILURES = 3
GAP = 2.0  # seconds between a heal and the next failure when validating


def path_nodes(config: ClusterConfig) -> int:
    """k: the most nodes on a path from a source to a client's stream."""
    memo: dict[str, int] = {}

    def depth(node: NodeConfig) -> int:
        if node.name not in memo:
            memo[node.name] = 1 + max(
                (depth(p) for s in node.inputs
                 if isinstance(p := config.producer_of(s), NodeConfig)), default=0)
        return memo[node.name]

    return max((depth(p) for c in config.clients.values()
                if isinstance(p := config.producer_of(c.stream), NodeConfig)), default=1)


def failures_from(spec: str | None) -> Failures:
    """``--failures``: a named distribution (``kind:key=value,...``), or a file of lengths
    in seconds (one per line, ``#`` comments), or the default."""
    if spec is None:
        return Failures.parse(Failures.DEFAULT)
    path = Path(spec)
    if ":" in spec and not path.exists():
        return Failures.parse(spec)
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise SweepError(f"--failures {spec}: neither a distribution (e.g. "
                         f"{Failures.DEFAULT}) nor a readable file: {e}") from None
    lengths = []
    for n, line in enumerate(lines, 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        try:
            lengths.append(float(text))
        except ValueError:
            raise SweepError(f"{path}:{n}: expected a failure length in seconds, got "
                             f"{text!r}") from None
    return Failures.of_lengths(str(path), lengths)


def _cut_source(config: ClusterConfig) -> str:
    node = next(iter(config.nodes.values()))
    source = next((s for s in reversed(node.inputs) if s in config.sources), None)
    if source is None:
        raise SweepError(f"{config.path}: the first node {node.name!r} reads no source to cut")
    return source


def _own_sweep(cluster: Path, config: ClusterConfig, failures: Failures, bound: float,
               k: int, out: TextIO) -> Path | None:
    lengths = sorted({round(min(SWEEP_CAP, failures.quantile(q)), 1) for q in (0.5, 0.9, 0.99)})
    name = f"advise-{config.name}-D{bound:g}"
    out_dir = Path("sweeps") / name
    out_dir.mkdir(parents=True, exist_ok=True)
    text = tomli_w.dumps({
        "experiment": {"name": name, "clusters": [str(cluster.resolve())], "repeat": 1,
                       "settle": 2.0, "quiet": 3.0},
        "grid": {"x": [round(bound / k, 6)], "alpha": list(ALPHAS),
                 "up_failure": ["delay", "process"],
                 "stabilization": ["suspend", "delay", "process"]},
        "failure": {"durations": lengths, "fault": "partition", "shape": "source",
                    "source": _cut_source(config), "cut": "reset"},
        "plots": [{"x": "duration", "y": ["delay_new_s", "n_tentative"],
                   "series": ["alpha_x_s", "up_failure", "stabilization"],
                   "line": "bound_s"}]})
    path = out_dir.with_suffix(".toml")
    path.write_text("# Written by dpc advise: the curves its advice reads.\n" + text)
    print(f"dpc advise: measuring the curves: {path} (failures of "
          f"{', '.join(f'{d:g}' for d in lengths)} s)", file=out, flush=True)
    code = run_sweep(path, out_dir, out=out)
    if code == 130:
        return None
    return out_dir


def overlay_of(config: ClusterConfig, advice: Advice) -> dict[str, Any]:
    """The recommendation as ``[nodes.NAME]`` tables (every node the same settings)."""
    best = advice.best
    if best is None:
        raise SweepError("no candidate keeps Delay_new within D: nothing to write")
    c = best.curve.candidate
    settings = {"x": c.x, "alpha": c.alpha, "up_failure": c.up_failure,
                "stabilization": c.stabilization}
    return {"nodes": {n: dict(settings) for n in config.nodes}}


def run_advise(cluster: Path, bound: float, failures_spec: str | None = None,
               sweep_dir: Path | None = None, validate: bool = False,
               overlay_file: Path | None = None, seed: int = 1,
               out: TextIO | None = None) -> int:
    out = sys.stdout if out is None else out
    if bound <= 0:
        raise SweepError(f"--max-delay must be > 0 seconds, got {bound:g}")
    config = load_config(cluster)
    k = path_nodes(config)
    failures = failures_from(failures_spec)
    print(f"dpc advise: {cluster}: end-to-end bound D = {bound:g} s over a longest path of "
          f"{k} node(s): X = D/k = {bound / k:g} s per node\n  failures: "
          f"{failures.describe()}", file=out, flush=True)
    if sweep_dir is None:
        sweep_dir = _own_sweep(cluster, config, failures, bound, k, out)
        if sweep_dir is None:
            return 130
    csv_path = sweep_dir / "results.csv"
    if not csv_path.exists():
        raise SweepError(f"--sweep {sweep_dir}: no results.csv (not a dpc sweep output)")
    curves = curves_of(read_results(csv_path))
    if not curves:
        raise SweepError(f"{csv_path}: no valid run to read curves from")
    advice = advise(curves, failures, bound, k)
    _print_ranking(advice, out)
    best = advice.best
    if best is None:
        print(f"dpc advise: no measured candidate keeps Delay_new within {bound:g} s; "
              "measure larger alpha*X margins or allow a larger D", file=out)
        return 1
    c = best.curve.candidate
    print(f"\nrecommendation (from {csv_path}):\n  {'node':<8}{'X s':>6}{'alpha':>7}"
          f"{'up_failure':>12}{'stabilization':>15}{'E[Delay_new] s':>16}"
          f"{'E[N_tentative]':>16}", file=out)
    for n in config.nodes:
        print(f"  {n:<8}{c.x:>6g}{c.alpha:>7g}{c.up_failure:>12}{c.stabilization:>15}"
              f"{best.expected_delay:>16.2f}{best.expected_tentative:>16.0f}", file=out)
    overlay = overlay_of(config, advice)
    overlay_file = overlay_file or Path(f"advice-{config.name}-D{bound:g}.toml")
    overlay_file.write_text(
        f"# dpc advise {cluster} --max-delay {bound:g}: merge these tables into the cluster "
        f"config\n# (each [nodes.NAME] key overrides [defaults]). Failures: "
        f"{failures.text}.\n" + tomli_w.dumps(overlay))
    print(f"  overlay written to {overlay_file}", file=out, flush=True)
    if not validate:
        return 0
    return _validate(cluster, config, overlay, failures, bound, seed, out)


def _print_ranking(advice: Advice, out: TextIO) -> None:
    print(f"\n  {'candidate':<42}{'E[N_tentative]':>15}{'E[Delay_new] s':>16}"
          f"{'worst s':>9}  within D", file=out)
    for r in advice.ranked:
        print(f"  {r.curve.candidate.describe():<42}{r.expected_tentative:>15.0f}"
              f"{r.expected_delay:>16.2f}{r.worst_delay:>9.2f}  "
              f"{'yes' if r.feasible else 'no: ' + r.why}", file=out)


def _validate(cluster: Path, config: ClusterConfig, overlay: dict[str, Any],
              failures: Failures, bound: float, seed: int, out: TextIO) -> int:
    rng = random.Random(seed)
    lengths = [round(min(VALIDATE_CAP, failures.quantile(rng.random())), 2)
               for _ in range(VALIDATE_FAILURES)]
    source = _cut_source(config)
    raw = load_scenario_cluster(cluster.resolve())
    for node, settings in overlay["nodes"].items():
        raw["nodes"][node].update(settings)
    faults, at = [], 0.0
    for d in lengths:
        faults.append({"at": at, "for": d, "fault": "partition", "shape": "source",
                       "source": source, "cut": "reset"})
        at += d + GAP
    name = f"advise-validate-{config.name}-D{bound:g}"
    run_dir = default_run_dir(f"{name}-seed{seed}")
    run_dir.mkdir(parents=True)
    (run_dir / "scenario.toml").write_text(tomli_w.dumps(
        {"scenario": {"name": name, "settle": 1.0, "quiet": 3.0}, **raw, "faults": faults}))
    print(f"\ndpc advise --validate: the overlay under failures of "
          f"{', '.join(f'{d:g}' for d in lengths)} s (seed {seed}) in {run_dir}",
          file=out, flush=True)
    with (run_dir.parent / f"{run_dir.name}.log").open("w") as log:
        outcome = play_scenario(load_scenario(run_dir / "scenario.toml"), run_dir, log)
    if outcome.code == 130:
        return 130
    m = measure_run(run_dir, outcome.verdict) if outcome.verdict != "not checked" else {}
    worst = m.get("delay_new_s")
    held = outcome.code == 0 and worst is not None and worst <= bound
    print(f"  run {outcome.verdict}; worst Delay_new {worst if worst is None else f'{worst:.2f}'}"
          f" s vs D = {bound:g} s; {m.get('n_tentative')} tentative: the bound "
          f"{'HELD' if held else 'did NOT hold'}", file=out)
    for p in outcome.problems:
        print(f"  problem: {p}", file=out)
    return 0 if held else 1
