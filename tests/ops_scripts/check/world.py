"""The hand-built world of the ``dpc check`` tests (test_check_*.py, test_availability.py,
test_recorded.py): a cluster config (s1, s2 -> n1 -> client c1, optionally -> n2 -> c2),
synthetic source logs, a correct history of a stream, history events as the harness writes
them, and a run directory for examples/basic.toml whose logs are all correct. The ``world``
fixture (config, sources, reference output of n1) is in conftest.py."""

from __future__ import annotations

import io
import json
import random
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from node.config.model import (
    ClientConfig,
    ClusterConfig,
    NodeConfig,
    NodeSettings,
    ReplicaConfig,
    SourceConfig,
)
from node.procs.rundir import RunDir
from node.procs.runlog import RunLogWriter
from operators.spec import NetworkSpec
from ops_scripts.check import Verdict, reference_outputs, run_check
from ops_scripts.harness.history import fault_effects
from ops_scripts.harness.schedule import parse_faults
from protocol.tuples import Kind, Tuple, boundary, make_tuple, rec_done, undo
from state.tuplelog import TupleLogWriter
from tests.paths import EXAMPLES

BUCKET = 100_000
SECOND = 1_000_000
C1 = "client c1 (n1.out)"
N1 = "node n1 (state digests)"
AV, ND, SU = "availability", "no-duplicates", "stable-never-undone"
EC, RC, LV = "eventual-consistency", "replica-convergence", "liveness"
MK = "masking"
HASHES = {"u": "1f", "agg": "2e", "out": "3d"}

World = tuple[ClusterConfig, dict[str, list[Tuple]], list[Tuple]]


# ---------------------------------------------------------------- factories
def settings() -> NodeSettings:
    return NodeSettings(
        x=3 * SECOND,
        alpha=0.9,
        bucket=BUCKET,
        heartbeat_interval=BUCKET,
        heartbeat_misses=3,
        checkpoint_interval=200_000,
        reconciliation="checkpoint",
        up_failure="process",
        stabilization="process",
    )


def sunion(inputs: list[str], wait: int = 2_700_000) -> dict[str, object]:
    return {
        "name": "u",
        "type": "sunion",
        "inputs": inputs,
        "bucket": BUCKET,
        "wait": wait,
        "mode": "process",
        "recovery": "checkpoint",
    }


def make_config(*, chain: bool = False, wait: int = 2_700_000) -> ClusterConfig:
    """s1, s2 -> n1: sunion -> per-key 1 s count/sum -> soutput -> client c1 (and with
    ``chain``, n1.out -> n2: sunion -> filter -> soutput -> client c2)."""
    schema = ("key", "value")
    n1 = NetworkSpec.from_dict(
        {
            "inputs": {"s1": list(schema), "s2": list(schema)},
            "operators": [
                sunion(["s1", "s2"], wait),
                {
                    "name": "agg",
                    "type": "aggregate",
                    "inputs": ["u"],
                    "window": SECOND,
                    "group_by": ["key"],
                    "aggregates": [
                        {"fn": "count", "as": "n"},
                        {"fn": "sum", "attr": "value", "as": "total"},
                    ],
                },
                {"name": "out", "type": "soutput", "inputs": ["agg"]},
            ],
            "outputs": ["out"],
        }
    )

    def replicas(node: str) -> tuple[ReplicaConfig, ...]:
        return tuple(ReplicaConfig(f"{node}{x}", node, "127.0.0.1", 0, 0) for x in "ab")

    nodes = {
        "n1": NodeConfig("n1", ("s1", "s2"), n1, {"n1.out": "out"}, replicas("n1"), settings())
    }
    clients = {"c1": ClientConfig("c1", "n1.out")}
    streams = {"s1": schema, "s2": schema, "n1.out": ("key", "n", "total")}
    if chain:
        n2 = NetworkSpec.from_dict(
            {
                "inputs": {"n1.out": ["key", "n", "total"]},
                "operators": [
                    sunion(["n1.out"], wait),
                    {"name": "big", "type": "filter", "inputs": ["u"], "where": "n >= 3"},
                    {"name": "out", "type": "soutput", "inputs": ["big"]},
                ],
                "outputs": ["out"],
            }
        )
        nodes["n2"] = NodeConfig(
            "n2", ("n1.out",), n2, {"n2.out": "out"}, replicas("n2"), settings()
        )
        clients["c2"] = ClientConfig("c2", "n2.out")
        streams["n2.out"] = streams["n1.out"]
    sources = {
        s: SourceConfig(s, schema, "127.0.0.1", 0, 100.0, BUCKET, "synthetic") for s in ("s1", "s2")
    }
    return ClusterConfig(
        Path("hand-built.toml"), "t", "tok", "127.0.0.1", sources, nodes, clients, streams
    )


def synth_sources(config: ClusterConfig, n: int = 300, seed: int = 3) -> dict[str, list[Tuple]]:
    """Each source: ``n`` tuples 20 ms apart (offset per source), tmax = time."""
    rng = random.Random(seed)
    logs: dict[str, list[Tuple]] = {}
    for k, (name, src) in enumerate(config.sources.items()):
        logs[name] = [
            make_tuple(
                Kind.STABLE,
                i,
                20_000 * i + 1_000 * k,
                20_000 * i + 1_000 * k,
                tuple(rng.randrange(5) if a == "key" else rng.randrange(100) for a in src.schema),
            )
            for i in range(1, n + 1)
        ]
    return logs


def corrected(ref: Sequence[Tuple]) -> list[Tuple]:
    """A correct history of a stream whose failure-free data is ``ref``: half stable, a
    tentative suffix (different values), UNDO of it, the stable corrections, REC_DONE."""
    k = len(ref) // 2
    out: list[Tuple] = [*ref[:k], boundary(ref[k - 1].time)]
    out += [t._replace(kind=Kind.TENTATIVE, values=(*t.values[:-1], -1)) for t in ref[k : k + 4]]
    out += [undo(ref[k - 1].id), *ref[k:], rec_done()]
    return out


def stable_lines(history: Sequence[Tuple]) -> list[int]:
    return [i for i, t in enumerate(history) if t.kind is Kind.STABLE]


def desc(t: Tuple) -> str:
    return f"id={t.id}, time={t.time}, tmax={t.tmax}, values={list(t.values)}"


# ---------------------------------------------------------------- history events
def fault(t: int, fid: int, config: ClusterConfig, **raw: object) -> dict[str, Any]:
    """A history ``fault`` event as the harness writes it (effects resolved)."""
    (f,) = parse_faults([{"at": 0, "for": 1, **raw}], config)
    return {"t": t, "event": "fault", "id": fid, "fault": raw, "describe": f.describe(),
            **fault_effects(f, config)}


def heal(t: int, fid: int) -> dict[str, Any]:
    return {"t": t, "event": "heal", "id": fid}


def state(t: int, process: str, name: str) -> dict[str, Any]:
    return {"t": t, "event": "state", "process": process, "state": name}


def link(a: str, b: str, *, one_way: bool = False) -> dict[str, Any]:
    return {"fault": "partition", "shape": "link", "between": [a, b], "one_way": one_way}


def digest(t: int, process: str, **hashes: str) -> dict[str, Any]:
    return {"t": t, "event": "digest", "process": process, "node": process[:-1],
            "state": "STABLE", "hashes": hashes}


def arrivals_for(history: Sequence[Tuple], lag: int = 50_000) -> list[int]:
    """Arrival times of a client log: each data tuple ``lag`` after its tmax, never before
    the tuple ahead of it (corrections arrive with the newest); control tuples with it."""
    out, last = [], 0
    for t in history:
        if t.kind in (Kind.STABLE, Kind.TENTATIVE):
            last = max(last, t.tmax + lag)
        out.append(last)
    return out


def keyed(verdicts: Sequence[Verdict]) -> dict[tuple[str, str], Verdict]:
    """Verdicts by (property, subject): a client has several verdicts."""
    out = {(v.name, v.subject): v for v in verdicts}
    assert len(out) == len(verdicts), "two verdicts for one property and subject"
    return out


# ---------------------------------------------------------------- a run directory
def write_run(tmp_path: Path) -> tuple[RunDir, ClusterConfig, list[Tuple]]:
    """A run directory for examples/basic.toml whose logs are all correct."""
    from node.config.load import load_config

    rd = RunDir(tmp_path / "run").ensure()
    shutil.copyfile(EXAMPLES / "basic.toml", rd.config)
    config = load_config(rd.config)
    sources = synth_sources(config, n=200)
    for name, tuples in sources.items():
        with TupleLogWriter(rd.source_log(name), config.sources[name].schema) as w:
            w.append(tuples)
    (stream,) = config.nodes["n1"].outputs
    ref = reference_outputs(config, sources)[stream]
    assert len(ref) > 10
    for path, history in [
        (rd.client_log("c1"), corrected(ref)),
        (rd.replica_output("n1a", stream), corrected(ref)),
        (rd.replica_output("n1b", stream), [*ref, boundary(2**62)]),
    ]:
        write_log(path, history)
    return rd, config, ref


def write_log(path: Path, history: Sequence[Tuple], every: int = 7) -> None:
    """``history`` as a tuple log, a record of ``every`` tuples at a time (arrival: the
    index of its first)."""
    with RunLogWriter(path) as w:
        for i in range(0, len(history), every):
            w.write(history[i : i + every], i)



def run(rd: RunDir) -> tuple[int, str, dict[str, Any]]:
    out = io.StringIO()
    code = run_check(rd.path, out=out)
    report = json.loads(rd.check_json.read_text()) if rd.check_json.exists() else {}
    return code, out.getvalue(), report
