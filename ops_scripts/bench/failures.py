"""``dpc bench replay --failures 10,60,600``: a real replica's reconciliation after failures
of those lengths, end to end.

For each length D, the cluster (default: the basic example) runs on real processes, as
``dpc run`` runs a scenario: ``settle`` seconds, then the first node's last input source
partitioned away from it for D seconds (its replicas go on tentatively and keep everything
for the replay), then ``quiet`` seconds and the drain; ``dpc check`` judges the run (an
invalid run fails the bench: its figures would be of a wrong result). From the run's
history and the replicas' logs, per replica: the engine its reconciliation after the heal
used (``replay_engine``: the config's, ``auto`` by default), the input tuples it replayed
and how long that took, when it was STABLE again after the heal, and the failure's length
over that time (issue 17's aim: at least 10 for a 600 s failure).
"""

from __future__ import annotations

import io
import re
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from node.config.load import load_config
from node.procs.rundir import RunDir
from ops_scripts.check.history import read_history
from ops_scripts.errors import BenchFailed
from ops_scripts.harness.runner import play_scenario
from ops_scripts.harness.scenario import load_scenario

__all__ = ["run_failure_bench"]

_RECONCILED = re.compile(r"reconciled by \w+/redo, engine (\w+): (\d+) input tuples replayed in "
                         r"\d+ steps, ([\d.]+) ms")
_SETTLE, _QUIET = 2.0, 3.0


def run_failure_bench(durations: Sequence[float], config_path: Path,
                      rate: float | None = None, keep: Path | None = None) -> int:
    config = load_config(config_path)
    node = next(iter(config.nodes.values()))
    source = next((s for s in reversed(node.inputs) if s in config.sources), None)
    if source is None:
        raise BenchFailed(f"node {node.name!r} of {config_path} reads no source to cut")
    print(f"dpc bench replay --failures: node {node.name!r} of {config_path}, source "
          f"{source!r} cut for each length, "
          f"{f'{rate:g} tuples/s per source' if rate else 'sources at their rates'}")
    print(f"  {'failure s':>10}{'replica':>9}{'engine':>12}{'replayed':>12}{'replay s':>10}"
          f"{'STABLE after heal s':>21}{'failure/that':>14}")
    base = Path(tempfile.mkdtemp(prefix="dpc-bench-failures-")) if keep is None else keep
    for d in durations:
        run = base / f"failure-{d:g}s"
        scenario = base / f"failure-{d:g}s.toml"
        scenario.parent.mkdir(parents=True, exist_ok=True)
        scenario.write_text(_scenario(config_path, source, d, rate))
        began = time.monotonic()
        log = io.StringIO()  # the run's own progress lines: shown if it fails
        outcome = play_scenario(load_scenario(scenario), run, log)
        if outcome.code != 0:
            print(log.getvalue()[-6000:])
            raise BenchFailed(f"the {d:g} s failure run was not valid ({outcome.verdict}; "
                              f"problems: {outcome.problems or 'none'}): see {run}")
        for replica, row in _rows(RunDir(run), [r.name for r in node.replicas]).items():
            if row is None:
                print(f"  {d:>10g}{replica:>9}  no reconciliation: nothing was tentative "
                      f"(alpha*X is {node.settings.wait / 1e6:g} s)")
                continue
            engine, tuples, replay_s, stable_s = row
            print(f"  {d:>10g}{replica:>9}{engine:>12}{tuples:>12,}{replay_s:>10.2f}"
                  f"{stable_s:>21.2f}{d / max(stable_s, 1e-3):>13.1f}x", flush=True)
        print(f"  ({d:g} s failure: run valid, {time.monotonic() - began:.0f} s in all, "
              f"in {run})", flush=True)
    return 0


def _scenario(config_path: Path, source: str, seconds: float, rate: float | None) -> str:
    return "\n".join([
        "[scenario]", f'name = "failure-{seconds:g}s"', f"cluster = {str(config_path)!r}",
        f"settle = {_SETTLE}", f"quiet = {_QUIET}",
        *([f"source_rate = {rate}"] if rate else []),
        "", "[[faults]]", "at = 0.0", f"for = {seconds}", 'fault = "partition"',
        'shape = "source"', f'source = "{source}"', 'cut = "reset"', ""])


def _rows(rd: RunDir, replicas: list[str]) -> dict[str, tuple[str, int, float, float] | None]:
    """Per replica: (engine, tuples, replay s) of its largest reconciliation, and the
    seconds from the heal to its last entry into STABLE (None: it never reconciled)."""
    history = read_history(rd.history)
    heals = [e["t"] for e in history if e["event"] == "heal"]
    if not heals:
        raise BenchFailed(f"{rd.path}: the run's history has no heal")
    heal = heals[0]
    rows: dict[str, tuple[str, int, float, float] | None] = {}
    for r in replicas:
        found = [(int(m[2]), m[1], float(m[3]) / 1000)
                 for m in _RECONCILED.finditer(rd.process_log(r).read_text())]
        if not found:
            rows[r] = None
            continue
        tuples, engine, seconds = max(found)
        stable = [e["t"] for e in history if e["event"] == "state" and e.get("process") == r
                  and e["state"] == "STABLE" and e["t"] >= heal]
        rows[r] = (engine, tuples, seconds, (max(stable) - heal) / 1e6 if stable else -1.0)
    return rows
