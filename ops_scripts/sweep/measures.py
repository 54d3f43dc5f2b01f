"""What one run of a sweep measured: the CSV row's figures, from its run directory.

Role: pure reading of a finished run (``dpc run``'s layout: ``history.jsonl``, the clients'
logs, ``check.json``), no clock. The columns (times in seconds):

================== ===========================================================================
column             meaning
================== ===========================================================================
valid              the checker judged every property valid (an invalid run is never plotted)
verdict            valid / INVALID / unusable / not checked (the harness failed)
nodes              nodes in the cluster (a chain's length)
delay_new_s        the paper's Delay_new: the largest delay (arrival - tmax) of a *new*
                   result (ops_scripts/check/availability.py: corrections left out) that
                   arrived after schedule time 0 (start-up is not the experiment)
latency_mean_s     the mean, median and 99th percentile of those delays
latency_p50_s
latency_p99_s
n_tentative        TENTATIVE tuples the clients received (the paper's N_tentative)
n_undo             UNDO tuples the clients received
received           data tuples the clients received after time 0
throughput         STABLE tuples the clients received per second after time 0
bound_s            the bound k*X on the clients' streams (the longest path's sum of X)
x_s, alpha_x_s     the first node's X and alpha*X as the run used them
switch_s           from the failure to the first replica entering UP_FAILURE
reconciliation_s   the longest STABILIZATION of a replica (entry to STABLE again) after the
                   failure began
recovery_s         the longest time a restarted replica was RECOVERING (from its start to
                   its rejoin: a partner's state or its own CEC log, and the catch-up)
stable_after_heal_s from the heal to the last replica STABLE again
cpu_s              the replicas' CPU seconds in all (Linux; empty elsewhere)
================== ===========================================================================

A figure that does not apply is empty (no failure: no switch or reconciliation).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from node.config.load import load_config
from node.config.model import ClusterConfig
from node.procs.rundir import RunDir
from node.procs.runlog import read_log
from ops_scripts.check.availability import bound_for, new_results
from ops_scripts.check.history import read_history
from protocol.tuples import Kind

__all__ = ["MEASURES", "measure_run"]

MEASURES = ("valid", "verdict", "nodes", "delay_new_s", "latency_mean_s", "latency_p50_s",
            "latency_p99_s", "n_tentative", "n_undo", "received", "throughput", "bound_s",
            "x_s", "alpha_x_s", "switch_s", "reconciliation_s", "recovery_s",
            "stable_after_heal_s", "cpu_s")

US = 1e6


def measure_run(run_dir: Path, verdict: str) -> dict[str, Any]:
    """The measures of the run in ``run_dir`` whose checker said ``verdict``."""
    rd = RunDir(run_dir)
    config = load_config(rd.config)
    events = read_history(rd.history)
    row: dict[str, Any] = dict.fromkeys(MEASURES)
    row["verdict"], row["valid"] = verdict, verdict == "valid"
    node = next(iter(config.nodes.values()))
    row["nodes"] = len(config.nodes)
    row["x_s"] = node.settings.x / US
    row["alpha_x_s"] = round(node.settings.x * node.settings.alpha / US, 6)
    row["bound_s"] = max(bound_for(config, c.stream) for c in config.clients.values()) / US
    t0 = _schedule_start(events)
    row.update(_client_figures(config, rd, t0))
    row.update(_state_figures(events))
    cpu = [e.get("cpu_s") for e in events if e["event"] == "digest"]
    if cpu and all(isinstance(c, int | float) for c in cpu):
        row["cpu_s"] = round(sum(float(c) for c in cpu if c is not None), 3)
    return row


def _schedule_start(events: Sequence[Mapping[str, Any]]) -> int:
    """Schedule time 0: the ``schedule`` event, else a fault's time less its ``at``, else
    the cluster's ``ready``."""
    for e in events:
        if e["event"] == "schedule":
            return int(e["t"])
    for e in events:
        if e["event"] == "fault":
            return int(e["t"] - float(e["fault"].get("at", 0.0)) * US)
    return next((int(e["t"]) for e in events if e["event"] == "ready"), 0)


def _client_figures(config: ClusterConfig, rd: RunDir, t0: int) -> dict[str, Any]:
    delays: list[int] = []
    tentative = undo = received = stable = 0
    first = last = None
    for c in config.clients:
        rows = read_log(rd.client_log(c))
        delays += [r.delay for r in new_results(rows) if r.arrival >= t0]
        for arrival, t in rows:
            if arrival < t0:
                continue
            first = arrival if first is None else min(first, arrival)
            last = arrival if last is None else max(last, arrival)
            if t.kind is Kind.TENTATIVE:
                tentative += 1
            elif t.kind is Kind.UNDO:
                undo += 1
            if t.kind in (Kind.STABLE, Kind.TENTATIVE):
                received += 1
                stable += t.kind is Kind.STABLE
    out: dict[str, Any] = {"n_tentative": tentative, "n_undo": undo, "received": received}
    if delays:
        delays.sort()
        out["delay_new_s"] = delays[-1] / US
        out["latency_mean_s"] = round(statistics.fmean(delays) / US, 6)
        out["latency_p50_s"] = delays[len(delays) // 2] / US
        out["latency_p99_s"] = delays[min(len(delays) - 1, int(0.99 * len(delays)))] / US
    if first is not None and last is not None and last > first:
        out["throughput"] = round(stable / ((last - first) / US), 1)
    return out


def _state_figures(events: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    faults = [e["t"] for e in events if e["event"] == "fault"]
    heals = [e["t"] for e in events if e["event"] in ("heal", "heal_all")]
    if not faults:
        return {}
    fault = min(faults)
    states = [e for e in events if e["event"] == "state" and e["t"] >= fault]
    out: dict[str, Any] = {}
    up = [e["t"] for e in states if e["state"] == "UP_FAILURE"]
    if up:
        out["switch_s"] = (min(up) - fault) / US
    longest = 0
    began: dict[str, int] = {}
    for e in states:
        if e["state"] == "STABILIZATION":
            began.setdefault(e["process"], e["t"])
        elif e["state"] == "STABLE" and e["process"] in began:
            longest = max(longest, e["t"] - began.pop(e["process"]))
    if longest:
        out["reconciliation_s"] = longest / US
    recovering: dict[str, int] = {}
    longest = 0
    for e in states:
        if e["state"] == "RECOVERING":
            recovering.setdefault(e["process"], e["t"])
        elif e["process"] in recovering:
            longest = max(longest, e["t"] - recovering.pop(e["process"]))
    if longest:
        out["recovery_s"] = longest / US
    if heals:
        heal = min(heals)
        stable = [e["t"] for e in states if e["state"] == "STABLE" and e["t"] >= heal]
        if stable:
            out["stable_after_heal_s"] = (max(stable) - heal) / US
    return out
