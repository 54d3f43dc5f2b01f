"""``dpc bench flux``: the Flux paper's Fig. 8 on real processes (Shah, Hellerstein, Brewer,
ICDE 2004, section 5.4; docs/flux.md "The paper's Fig. 8").

The cluster, generated here (every port a free one): one source, the paper's ingress (a click
stream: ``session`` numbered 1, 2, ..., ``user`` one of :data:`USERS`, ``value``) -> node g1,
the paper's first group-by simulated as a stateless map that stamps each click with a
duration and projects the session out (4 partitions by ``session``, ``ha = "flux"``) -> node
g2, the second group-by: per user, a tumbling window's count, longest and mean duration (4
partitions by ``user``, flux) -> node egress (a flux pair merging g2's partitions; never
killed, the paper's egress on its own machine) -> client c1; and the controller.

The replicas sit on four "machines" 0..3 by chained declustering: machine k holds replica a
(the primary) of g1's and g2's partition k and replica b (the secondary) of partition k - 1.
Machine :data:`VICTIM`'s four processes are killed at one phase (10 s at the full size); the
killed g1 replicas restart (``--recover``: catch-up from the partner) at two phases, the g2
ones at three; the run ends at four. That is a ``dpc run`` scenario
(ops_scripts/harness/runner.py ``play_scenario``), checked by ``dpc check`` afterwards.

Meanwhile a thread samples each g1 replica's ``GET /status`` every ``sample_s``: the tuples
its publisher sent to each subscriber (``outputs`` -> ``g1_pK.out`` -> ``subscribers`` ->
``sent``: data tuples and the boundaries every subscriber gets, 10 a second; counted per
connection, so the sum is kept per subscriber and peer address: a new connection, a
restarted process's among them, counts from 0). Their differences are each F-Prod's output
rate over time; each g1 replica's line is labelled as the paper labels its lines:

* ``dead``: the killed g1 primary (partition k's replica a) until its kill;
* ``standby``: the same replica from its kill on: 0 until it restarted and caught up;
* ``loaded``: the g1 primary whose secondary died (partition k - 1's replica a): it feeds
  the consumers of both ranks;
* ``replicated``: the unaffected primaries (partitions k + 1, k + 2);

and the lines of the secondary dataflow, which the paper does not draw: ``took over``
(partition k's replica b, the new primary), ``dead (b)`` / ``standby (b)`` (partition
k - 1's replica b) and ``replicated (b)``.

Written to ``--out``: the cluster and the scenario (``flux-fig8.toml``,
``flux-fig8.scenario.toml``), the run's output with the checker's table (``run.log``),
``samples.csv`` (one row per sample and replica), ``rates.csv`` (each line's rate per
interval), ``phases.csv`` (each line's mean rate per phase), ``client.csv`` (per phase: the
results the client received and its longest wait for one), ``verdicts.csv`` (the
checker's), ``events.csv`` (the kills and restarts) and ``fig8.png``
(ops_scripts/bench/flux_plots.py). :func:`judge_claims` judges the paper's claims on the
CSVs. The run directory (default ``runs/flux-bench-TIME``) keeps every log.
"""

from __future__ import annotations

import io
import itertools
import json
import statistics
import threading
import time
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

from node.config.load import load_config
from node.net.ports import free_port
from node.procs.rundir import RunDir
from node.procs.runlog import read_log
from ops_scripts.bench.ha import Claim, write_rows
from ops_scripts.bench.plotting import read_rows
from ops_scripts.check.history import read_history
from ops_scripts.cluster.status import fetch_status
from ops_scripts.errors import BenchFailed
from ops_scripts.harness.runner import default_run_dir, play_scenario
from ops_scripts.harness.scenario import Scenario, move_to_free_ports
from ops_scripts.harness.schedule import parse_faults
from protocol.errors import DPCError
from protocol.tuples import DATA_KINDS

__all__ = [
    "LABELS", "MACHINES", "PHASES", "RATE_CLAIMS", "SIZES", "USERS", "VICTIM", "Size",
    "cluster_toml", "count_sent", "judge_claims", "line_labels", "max_gaps", "placement",
    "run_flux_bench", "write_cluster",
]

MACHINES = 4  # and partitions of g1 and g2
USERS = 5000  # the paper's 10,000 unique user ids, halved for a 2-core machine
VICTIM = 1  # the machine killed
PHASES = 4  # before the kill, after it, after g1's catch-up, after g2's
EGRESS = ("egress_a", "egress_b")
CLIENT = "c1"
MAX_GAP_S = 1.0  # "output never stops": the longest wait for the client's next result
#: "rises": the loaded producer's mean rate after the kill at least this times before;
#: "dips": the replicated ones' at most this times before (the paper draws no numbers: its
#: figure rises by about half, and dips by about a quarter).
RISE, DIP = 1.25, 0.9
TOLERANCE = 0.15  # "approaches", "returns": within 15 % of the line compared with


@dataclass(frozen=True)
class Size:
    phase_s: float  # the paper's 10 s: the kill, two catch-ups, the end, one phase apart
    rate: float  # clicks/s of the source
    settle_s: float  # fault-free running before the schedule's time 0 (after start-up)
    sample_s: float  # between two samples of the g1 replicas' /status
    window_s: float  # g2's tumbling window


SIZES = {"tiny": Size(phase_s=2.5, rate=200.0, settle_s=1.0, sample_s=0.25, window_s=0.5),
         "full": Size(phase_s=10.0, rate=800.0, settle_s=2.0, sample_s=0.25, window_s=0.5)}


# ---------------------------------------------------------------- the cluster
def replica_name(node: str, partition: int, rank: str) -> str:
    return f"{node}p{partition}{rank}"


def placement() -> dict[str, int]:
    """Each g1 and g2 replica's machine: chained declustering (the paper's [16]): partition
    k's primary on machine k, its secondary on the next one."""
    out = {}
    for node in ("g1", "g2"):
        for k in range(MACHINES):
            out[replica_name(node, k, "a")] = k
            out[replica_name(node, k, "b")] = (k + 1) % MACHINES
    return out


def victims() -> list[str]:
    """The processes of machine :data:`VICTIM`, g1's first."""
    return [r for r, m in placement().items() if m == VICTIM]


def _replicas(node: str) -> list[dict[str, Any]]:
    # The first replica of each partition starts as its primary.
    return [{"name": replica_name(node, k, rank), "partition": k, "data_port": 0,
             "control_port": 0} for k in range(MACHINES) for rank in "ab"]


def cluster_toml(size: Size) -> str:
    """The cluster, every port 0 (:func:`write_cluster` moves them to free ones)."""
    window = round(size.window_s * 1_000_000)  # operator parameters are in µs
    g1 = {"inputs": ["clicks"], "partitions": MACHINES, "partition_by": ["session"],
          "ha": "flux", "operators": [
              {"name": "u", "type": "sunion", "inputs": ["clicks"]},
              # A "random" duration, a function of the click (both replicas stamp alike).
              {"name": "stamp", "type": "map", "inputs": ["u"],
               "fields": {"user": "user", "duration": "(session * 7919 + value) % 1800 + 1"}},
              {"name": "out", "type": "soutput", "inputs": ["stamp"]}],
          "replicas": _replicas("g1")}
    g2 = {"inputs": ["g1.out"], "partitions": MACHINES, "partition_by": ["user"], "ha": "flux",
          "operators": [
              {"name": "u", "type": "sunion", "inputs": ["g1.out"]},
              {"name": "per_user", "type": "aggregate", "inputs": ["u"], "window": window,
               "group_by": ["user"],
               "aggregates": [{"fn": "count", "as": "n"},
                              {"fn": "max", "attr": "duration", "as": "longest"},
                              {"fn": "avg", "attr": "duration", "as": "mean"}]},
              {"name": "out", "type": "soutput", "inputs": ["per_user"]}],
          "replicas": _replicas("g2")}
    egress = {"inputs": ["g2.out"], "ha": "flux", "operators": [
        {"name": "u", "type": "sunion", "inputs": ["g2.out"]},
        {"name": "out", "type": "soutput", "inputs": ["u"]}],
        "replicas": [{"name": r, "data_port": 0, "control_port": 0} for r in EGRESS]}
    clicks = {"schema": ["session", "user", "value"], "port": 0, "rate": size.rate,
              "boundary_interval": 0.1, "seed": 8,
              "attributes": {"session": {"kind": "seq"},
                             "user": {"kind": "key", "n": USERS, "dist": "uniform"},
                             "value": {"kind": "int", "min": 0, "max": 999}}}
    raw = {"cluster": {"name": "flux-fig8", "token": "change-me", "control_host": "127.0.0.1"},
           "controller": {"control_port": 0},
           "defaults": {"x": 1.0, "alpha": 0.7, "bucket": 0.1, "heartbeat_interval": 0.1,
                        "heartbeat_misses": 3, "checkpoint_interval": 0.2,
                        "reconciliation": "checkpoint", "up_failure": "process",
                        "stabilization": "process"},
           "sources": {"clicks": clicks},
           "nodes": {"g1": g1, "g2": g2, "egress": egress},
           "clients": {CLIENT: {"stream": "egress.out"}}}
    return tomli_w.dumps(raw)


def write_cluster(size: Size, path: Path) -> None:
    """The cluster written to ``path``, every port a free one. (``play_scenario`` moves the
    replicas' and the source's again, into the run's config; not the controller's.)"""
    raw = tomllib.loads(cluster_toml(size))
    move_to_free_ports(raw)
    raw["controller"]["control_port"] = free_port(raw["cluster"]["control_host"])
    path.write_text(tomli_w.dumps(raw), encoding="utf-8")


def scenario(size: Size, out: Path) -> Scenario:
    """The paper's timeline as a scenario around the cluster, both written into ``out``
    (``dpc run OUT/flux-fig8.scenario.toml`` plays it again): machine :data:`VICTIM`'s
    processes killed at one phase, its g1 replicas restarted one phase later, its g2
    replicas two; the drain at four."""
    cluster = out / "flux-fig8.toml"
    write_cluster(size, cluster)
    p = size.phase_s
    raw = [{"at": p, "for": p if r.startswith("g1") else 2 * p, "fault": "kill", "process": r}
           for r in victims()]
    faults = parse_faults(raw, load_config(cluster))
    s = Scenario.of_cluster(cluster, name="flux-fig8", faults=faults, settle=size.settle_s,
                            quiet=p)
    s.path.write_text(s.dump(inline=False), encoding="utf-8")
    return s


# ---------------------------------------------------------------- sampling
def count_sent(seen: Mapping[tuple[str, str, str], int], outputs: Mapping[str, Any]
               ) -> tuple[int, dict[tuple[str, str, str], int]]:
    """The tuples a publisher sent since the sample that gave ``seen``, from its ``/status``
    ``outputs``; and what to pass next time. Counts are per subscription (stream,
    subscriber, peer address): a new connection counts from 0, a closed one is gone."""
    now: dict[tuple[str, str, str], int] = {}
    sent = 0
    for stream, st in outputs.items():
        for name, sub in st["subscribers"].items():
            key = (stream, name, str(sub["peer"]))
            n = int(sub["sent"])
            before = seen.get(key, 0)
            sent += n - before if n >= before else n
            now[key] = n
    return sent, now


class _Sampler(threading.Thread):
    """Samples every g1 replica's ``/status`` every ``every`` s while the scenario plays:
    rows of (wall s, replica, up, role, subscribers, tuples sent so far)."""

    def __init__(self, rd: RunDir, every: float) -> None:
        super().__init__(name="flux-bench sampler", daemon=True)
        self.rd, self.every = rd, every
        self.halt = threading.Event()
        self.rows: list[dict[str, Any]] = []
        self.error: Exception | None = None

    def run(self) -> None:
        try:
            self._run()
        except (DPCError, KeyError, TypeError, ValueError) as e:  # a status we misread
            self.error = e

    def _run(self) -> None:
        # play_scenario writes the run's config, then opens its history.
        while not self.rd.history.exists():
            if self.halt.wait(0.05):
                return
        config = load_config(self.rd.config)
        names = [r.name for p in range(MACHINES) for r in config.nodes[f"g1_p{p}"].replicas]
        seen: dict[str, dict[tuple[str, str, str], int]] = {r: {} for r in names}
        total = dict.fromkeys(names, 0)
        due = time.monotonic()
        while not self.halt.wait(max(0.0, due - time.monotonic())):
            due += self.every
            for r in names:
                st = fetch_status(config, r, timeout=max(self.every, 0.5))
                at = time.time()
                if st is None:  # down, or slow to answer: its connections' counts are kept
                    self.rows.append({"wall": at, "replica": r, "up": 0, "role": "",
                                      "subscribers": 0, "sent": total[r]})
                    continue
                n, seen[r] = count_sent(seen[r], st["outputs"])
                total[r] += n
                pair = st.get("pair") or {}
                self.rows.append({"wall": at, "replica": r, "up": 1, "role": pair.get("role", ""),
                                  "subscribers": len(seen[r]), "sent": total[r]})


class _Lines(io.StringIO):
    """``play_scenario``'s output: kept whole (``run.log``), its timeline lines echoed."""

    def __init__(self) -> None:
        super().__init__()
        self.cut = 0

    def write(self, s: str) -> int:
        n = super().write(s)
        text = self.getvalue()
        end = text.rfind("\n") + 1
        for line in text[self.cut:end].splitlines():
            progress = "| clients:" in line or line.endswith(": equal")
            if line.startswith(("  t=", "dpc run:", "dpc check:")) and not progress:
                print(f"    {line.strip()}", flush=True)
        self.cut = max(self.cut, end)
        return n


# ---------------------------------------------------------------- reading the run
#: The lines' labels: the paper's four, then the secondary dataflow's.
LABELS = ("dead", "standby", "loaded", "replicated", "took over", "dead (b)", "standby (b)",
          "replicated (b)")


def line_labels() -> dict[str, tuple[str, str | None]]:
    """Each g1 replica's line labels: until its kill, and from its kill on (None: never
    killed). The paper draws the first four: dead, standby, loaded, replicated."""
    before = (VICTIM - 1) % MACHINES
    out: dict[str, tuple[str, str | None]] = {}
    for k in range(MACHINES):
        a, b = replica_name("g1", k, "a"), replica_name("g1", k, "b")
        if k == VICTIM:
            out[a], out[b] = ("dead", "standby"), ("took over", None)
        elif k == before:
            out[a], out[b] = ("loaded", None), ("dead (b)", "standby (b)")
        else:
            out[a], out[b] = ("replicated", None), ("replicated (b)", None)
    return out


def _events(rd: RunDir) -> tuple[float, list[dict[str, Any]]]:
    """The schedule's time 0 (wall s) and the kills and restarts at schedule times."""
    history = read_history(rd.history)
    t0 = next((e["t"] / 1e6 for e in history if e["event"] == "schedule"), None)
    if t0 is None:
        raise BenchFailed(f"{rd.history}: no schedule event: the scenario did not start")
    ids: dict[int, str] = {}
    out = []
    for e in history:
        if e["event"] == "fault":
            ids[e["id"]] = e["fault"]["process"]
            out.append({"t": round(e["t"] / 1e6 - t0, 3), "event": "kill",
                        "process": ids[e["id"]]})
        elif e["event"] == "heal" and e["id"] in ids:
            out.append({"t": round(e["t"] / 1e6 - t0, 3), "event": "restart",
                        "process": ids[e["id"]]})
    return t0, out


def _rates(samples: Sequence[dict[str, Any]], t0: float, events: Sequence[dict[str, Any]]
           ) -> list[dict[str, Any]]:
    """Each line's rate per sample interval, at the interval's middle (schedule s). A killed
    replica's first line (dead) holds its rates until its kill, its second (standby) those
    from then on: 0 until it restarted (its heal is recorded once it is up, when it may
    have sent already)."""
    killed = {e["process"]: e["t"] for e in events if e["event"] == "kill"}
    machine = placement()
    out = []
    for r, (first, second) in line_labels().items():
        mine = sorted((s for s in samples if s["replica"] == r), key=lambda s: s["wall"])
        for a, b in itertools.pairwise(mine):
            t = (a["wall"] + b["wall"]) / 2 - t0
            rate = (b["sent"] - a["sent"]) / (b["wall"] - a["wall"])
            later = r in killed and t >= killed[r]
            for label in (first, second):
                if label is None:
                    continue
                on = (label == second) == later
                out.append({"t": round(t, 3), "label": label, "replica": r,
                            "machine": machine[r], "rate": round(rate if on else 0.0, 1)})
    return out


def _phase(t: float, phase_s: float) -> int | None:
    """The phase (1..PHASES) of schedule time ``t``; None: before or after them."""
    i = int(t // phase_s) + 1 if t >= 0 else 0
    return i if 1 <= i <= PHASES else None


def _phase_means(rates: Sequence[dict[str, Any]], phase_s: float) -> list[dict[str, Any]]:
    lines: dict[tuple[str, str], dict[int, list[float]]] = {}
    machine: dict[str, int] = {}
    for r in rates:
        lines.setdefault((r["label"], r["replica"]), {})
        machine[r["replica"]] = r["machine"]
        if (i := _phase(float(r["t"]), phase_s)) is not None:
            lines[r["label"], r["replica"]].setdefault(i, []).append(float(r["rate"]))
    return [{"label": label, "replica": rep, "machine": machine[rep],
             **{f"phase{i}": round(statistics.fmean(by.get(i, [0.0])), 1)
                for i in range(1, PHASES + 1)}}
            for (label, rep), by in sorted(lines.items(),
                                           key=lambda kv: (LABELS.index(kv[0][0]), kv[0][1]))]


def client_arrivals(rd: RunDir) -> list[float]:
    """When each data tuple reached the client (wall s), from its tuple log."""
    return [arrival / 1e6 for arrival, t in read_log(rd.client_log(CLIENT))
            if t.kind in DATA_KINDS]


def max_gaps(arrivals: Sequence[float], phase_s: float) -> list[dict[str, Any]]:
    """Per phase (schedule s), and over all of them: the results that arrived, and the
    longest wait for the next one (from the phase's start, to its end)."""
    out = []
    for i in (*range(1, PHASES + 1), 0):
        lo, hi = ((i - 1) * phase_s, i * phase_s) if i else (0.0, PHASES * phase_s)
        inside = sorted(a for a in arrivals if lo <= a < hi)
        marks = [lo, *inside, hi]
        gap, at = max((b - a, a) for a, b in itertools.pairwise(marks))
        out.append({"phase": i or "all", "from_s": lo, "to_s": hi, "results": len(inside),
                    "max_gap_s": round(gap, 3), "gap_from_s": round(at, 3)})
    return out


def _verdicts(rd: RunDir) -> list[dict[str, Any]]:
    try:
        report = json.loads(rd.check_json.read_text())
    except (OSError, ValueError) as e:
        raise BenchFailed(f"no checker report at {rd.check_json}: {e}") from None
    return [{k: v[k] for k in ("property", "subject", "status")} for v in report["verdicts"]]


def analyse(rd: RunDir, samples: Sequence[dict[str, Any]], size: Size, out: Path) -> None:
    """The run's CSVs into ``out``: samples, rates, phases, client, verdicts, events."""
    t0, events = _events(rd)
    if not samples:
        raise BenchFailed("no sample of the g1 replicas' /status was taken")
    write_rows(out / "samples.csv", [{"t": round(s["wall"] - t0, 3), **s} for s in samples])
    rates = _rates(samples, t0, events)
    write_rows(out / "rates.csv", rates)
    write_rows(out / "phases.csv", _phase_means(rates, size.phase_s))
    write_rows(out / "client.csv",
               max_gaps([a - t0 for a in client_arrivals(rd)], size.phase_s))
    write_rows(out / "verdicts.csv", _verdicts(rd))
    write_rows(out / "events.csv", events or [{"t": "", "event": "", "process": ""}])


# ---------------------------------------------------------------- claims
#: The claims about rates and time (not judged on a tiny run: noise on a shared machine).
RATE_CLAIMS = ("never_stops", "loaded_rises", "replicated_dip", "g1_catch_up", "g2_catch_up")


def _mean(rows: Sequence[dict[str, str]], label: str, phase: int) -> float:
    vals = [float(r[f"phase{phase}"]) for r in rows if r["label"] == label]
    return statistics.fmean(vals) if vals else 0.0


def _near(x: float, y: float) -> bool:
    return abs(x - y) <= TOLERANCE * max(y, 1e-9)


def judge_claims(out: Path) -> list[Claim]:
    """The paper's claims, judged on ``out``'s CSVs (tolerances in the texts)."""
    phases, client = read_rows(out / "phases.csv"), read_rows(out / "client.csv")
    verdicts = read_rows(out / "verdicts.csv")
    found = []
    every = next(r for r in client if r["phase"] == "all")
    quiet = [r for r in client if r["phase"] != "all" and int(r["results"]) == 0]
    found.append(Claim(
        "never_stops", f"output never stops: results reach the client in every phase, never "
        f"more than {MAX_GAP_S:g} s apart", not quiet and float(every["max_gap_s"]) <= MAX_GAP_S,
        ", ".join(f"phase {r['phase']}: {r['results']} results, longest wait "
                  f"{float(r['max_gap_s']):.2f} s (from {float(r['gap_from_s']):.1f} s)"
                  for r in client if r["phase"] != "all")))

    def m(label: str, phase: int) -> float:
        return _mean(phases, label, phase)

    found.append(Claim(
        "loaded_rises", f"the loaded producer's rate rises after the kill (phase 2 at least "
        f"{RISE:g}x phase 1)", m("loaded", 2) >= RISE * m("loaded", 1),
        f"{m('loaded', 1):.0f} -> {m('loaded', 2):.0f} tuples/s "
        f"({m('loaded', 2) / max(m('loaded', 1), 1e-9):.2f}x)"))
    found.append(Claim(
        "replicated_dip", f"the replicated producers' rate dips after the kill (phase 2 at most "
        f"{DIP:g}x phase 1)", m("replicated", 2) <= DIP * m("replicated", 1),
        f"{m('replicated', 1):.0f} -> {m('replicated', 2):.0f} tuples/s "
        f"({m('replicated', 2) / max(m('replicated', 1), 1e-9):.2f}x)"))
    found.append(Claim(
        "g1_catch_up", f"after g1's catch-up (phase 3) the loaded and standby producers' rates "
        f"approach the replicated ones' (within {TOLERANCE:.0%})",
        _near(m("loaded", 3), m("replicated", 3)) and _near(m("standby", 3), m("replicated", 3)),
        f"loaded {m('loaded', 3):.0f}, standby {m('standby', 3):.0f}, replicated "
        f"{m('replicated', 3):.0f} tuples/s"))
    before = statistics.fmean(float(r["phase1"]) for r in phases
                              if r["label"] in ("dead", "loaded", "replicated"))
    last = {label: m(label, 4) for label in ("standby", "loaded", "replicated")}
    found.append(Claim(
        "g2_catch_up", f"after g2's catch-up (phase 4) the rates return to their level before "
        f"the failure (each within {TOLERANCE:.0%} of the primaries' mean before the kill)",
        all(_near(v, before) for v in last.values()),
        f"before {before:.0f}; after " + ", ".join(f"{k} {v:.0f}" for k, v in last.items())
        + " tuples/s"))
    once = [v for v in verdicts if v["property"] == "exactly-once"]
    found.append(Claim(
        "exactly_once", f"no loss, no duplicate: dpc check's exactly-once valid at {CLIENT}",
        bool(once) and all(v["status"] == "valid" for v in once),
        "; ".join(f"{v['subject']}: {v['status']}" for v in once) or "no exactly-once verdict"))
    bad = [v for v in verdicts if v["status"] != "valid"]
    found.append(Claim(
        "all_valid", "every verdict of dpc check valid", bool(verdicts) and not bad,
        f"{len(verdicts) - len(bad)} of {len(verdicts)} valid"
        + ("; not: " + ", ".join(f"{v['property']} {v['subject']} {v['status']}" for v in bad)
           if bad else "")))
    return found


# ---------------------------------------------------------------- the command
def _table(out: Path, size: Size) -> str:
    rows = read_rows(out / "phases.csv")
    p = size.phase_s
    heads = [f"{i}: {(i - 1) * p:g}-{i * p:g} s" for i in range(1, PHASES + 1)]
    lines = [f"{'line':<16}{'replica':<8}{'machine':>8}" + "".join(f"{h:>13}" for h in heads)]
    for r in rows:
        lines.append(f"{r['label']:<16}{r['replica']:<8}{r['machine']:>8}"
                     + "".join(f"{float(r[f'phase{i}']):>13.0f}" for i in range(1, PHASES + 1)))
    return "\n".join(lines)


def run_flux_bench(out: Path, size: str = "full", run_dir: Path | None = None) -> int:
    """``dpc bench flux``: the run, its CSVs and plot into ``out``, the claims. 0 when every
    claim holds (tiny size: the claims about correctness; its rates are noise); 1 when one
    does not, or the run could not be made."""
    from ops_scripts.bench.flux_plots import plot_fig8

    sz = SIZES[size]
    out.mkdir(parents=True, exist_ok=True)
    rd = RunDir(run_dir or default_run_dir("flux-bench"))
    began = time.monotonic()
    print(f"dpc bench flux ({size}): {2 * MACHINES} g1 and {2 * MACHINES} g2 replicas on "
          f"{MACHINES} machines, {sz.rate:g} clicks/s; machine {VICTIM} ({', '.join(victims())}"
          f") killed at {sz.phase_s:g} s, g1 caught up at {2 * sz.phase_s:g} s, g2 at "
          f"{3 * sz.phase_s:g} s, end at {PHASES * sz.phase_s:g} s; run dir {rd.path}",
          flush=True)
    s = scenario(sz, out)
    sampler = _Sampler(rd, sz.sample_s)
    log = _Lines()
    sampler.start()
    try:
        outcome = play_scenario(s, rd.path, log)
    finally:
        sampler.halt.set()
        sampler.join()
        (out / "run.log").write_text(log.getvalue(), encoding="utf-8")
    if sampler.error is not None:
        print(f"dpc bench flux: FAILED: the sampler stopped: {sampler.error!r}")
        return 1
    if outcome.code == 130:
        return 130
    try:
        analyse(rd, sampler.rows, sz, out)
    except BenchFailed as e:
        print(f"dpc bench flux: FAILED: {e}")
        return 1
    plot_fig8(out, sz.phase_s)
    print(f"\nmean output rate per phase (tuples/s sent by each g1 replica to g2):\n"
          f"{_table(out, sz)}")
    claims = judge_claims(out)
    print(f"\n{'claim':<15}{'holds':<7}evidence")
    for c in claims:
        judged = size == "full" or c.key not in RATE_CLAIMS
        mark = ("yes" if c.holds else "NO") if judged else ("(yes)" if c.holds else "(no)")
        print(f"{c.key:<15}{mark:<7}{c.text}: {c.evidence}")
    counted = [c for c in claims if size == "full" or c.key not in RATE_CLAIMS]
    held = sum(c.holds for c in counted)
    for p in outcome.problems:
        print(f"dpc bench flux: run problem: {p}")
    note = "" if size == "full" else " (tiny: the rate claims in brackets are not judged)"
    print(f"\ndpc bench flux: {held} of {len(counted)} claims hold{note}; "
          f"{time.monotonic() - began:.0f} s; CSVs and fig8.png in {out}, run dir {rd.path}")
    return 0 if held == len(counted) and not outcome.problems else 1
