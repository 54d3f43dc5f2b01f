"""A long failure's input beyond ``buffer_memory`` waits on disk, on real processes.

Both replicas of the basic example lose source s2 for 3 s (alpha*X = 0.7 s): they go on
tentatively and keep everything their SUnion releases for the replay after the heal, about
2,000 tuples, while ``buffer_memory`` is 48 KiB (about 150 of them). The test watches
each replica's ``/status`` while the scenario plays: the kept tuples in memory never exceed
the bound, segments are written (the SUnion's kept input and the output buffer's tentative
tuples), and once the replicas reconciled (the replay reads the segments back, the UNDO and
the client's acks remove the rest) fewer are held than at the peak, and none once the
replicas stopped; the run is valid (``dpc check``, identical digests). It runs with the
per-tuple replay on both replicas, and with the two bulk engines side by side: n1a replays
``vectorized`` (the spilled segments read back as Arrow tables), n1b on ``spark`` (a local
session, warmed while the failure lasts, whose task reads the same kind of segments):
each replica's status and log name its engine, and the digests agree.
"""

from __future__ import annotations

import io
import json
import threading
import time
from pathlib import Path

import pytest

from node.config.load import load_config
from node.procs.rundir import RunDir
from ops_scripts.check.history import read_history
from ops_scripts.cluster.status import fetch_status
from ops_scripts.harness.runner import RunOutcome, play_scenario
from ops_scripts.harness.scenario import load_scenario
from tests.paths import EXAMPLES

pytestmark = pytest.mark.slow

SCENARIO = """
[scenario]
name = "spill"
cluster = "CLUSTER"
settle = 1.5
quiet = 3.0
source_rate = 300.0

[scenario.settings]
x = 1.0
alpha = 0.7
buffer_memory = 0.046875   # MiB: 48 KiB

[[faults]]
at = 0.0
for = 3.0
fault = "partition"
shape = "source"
source = "s2"
cut = "reset"
"""


def cluster(tmp_path: Path, engines: dict[str, str]) -> Path:
    """The basic example, each replica with its own replay engine."""
    text = (EXAMPLES / "basic.toml").read_text()
    for replica, engine in engines.items():
        line = f'name = "{replica}"\n'
        assert line in text
        text = text.replace(line, f'{line}  replay_engine = "{engine}"\n')
    path = tmp_path / "basic.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("engines", [{"n1a": "inproc", "n1b": "inproc"},
                                     {"n1a": "vectorized", "n1b": "spark"}],
                         ids=["inproc", "vectorized-spark"])
def test_a_failure_beyond_buffer_memory_spills_and_reconciles_valid(
        tmp_path: Path, engines: dict[str, str]) -> None:
    path = tmp_path / "spill.toml"
    path.write_text(SCENARIO.replace("CLUSTER", str(cluster(tmp_path, engines))))
    run = tmp_path / "run"
    out = io.StringIO()
    outcome: list[RunOutcome] = []
    player = threading.Thread(
        target=lambda: outcome.append(play_scenario(load_scenario(path), run, out)))
    player.start()
    seen: dict[str, dict[str, int]] = {}
    rd = RunDir(run)
    try:
        while not rd.config.exists() and player.is_alive():
            time.sleep(0.05)
        config = load_config(rd.config)
        while player.is_alive():  # sample every replica's gauges for as long as it runs
            for r in ("n1a", "n1b"):
                st = fetch_status(config, r, timeout=0.5) or {}
                g = st.get("gauges")
                if not g:
                    continue
                s = seen.setdefault(r, {"segments": 0, "spilled": 0, "over": 0, "limit": 0})
                last = st["consistency"]["last_reconciliation"]
                if last:
                    s["engine"] = last["engine"]
                    s["vectorized_runs"] = g["replay_vectorized_runs"]
                    s["spark"] = st["consistency"]["replay"]["spark"]
                    s["spark_gauges"] = (g["replay_spark"], g["spark_session_ready"],
                                         g["spark_jobs"])
                s["segments"] = max(s["segments"], g["spill_segments"])
                s["last_segments"] = g["spill_segments"]
                s["spilled"] = max(s["spilled"], g["spilled_tuples"])
                s["limit"] = max(s["limit"], g["kept_memory_limit_tuples"])
                if g["kept_memory_limit_tuples"]:
                    s["over"] = max(s["over"],
                                    g["kept_memory_tuples"] - g["kept_memory_limit_tuples"])
            time.sleep(0.05)
    finally:
        player.join()
    log = out.getvalue()
    assert outcome and outcome[0].code == 0 and not outcome[0].problems, log
    for r, engine in engines.items():
        s = seen[r]
        assert s["spilled"] > 500 and s["segments"] >= 1, (r, s)  # the failure went to disk
        # Reconciled: the replay's input went away while the replica ran (what its output
        # buffer holds goes as the client's acks reach it: some may be left at the end).
        assert s["last_segments"] < s["segments"], (r, s)
        assert s["over"] <= 0, f"{r}: kept tuples in memory exceeded the bound: {s}"
        assert 50 < s["limit"] < 1000, (r, s)  # 48 KiB of tuples of a few hundred bytes
        assert s.get("engine") == engine, (r, s)  # it reconciled, with that engine
        # The SUnion's release and the filters and join below it, in every replay step.
        assert (s["vectorized_runs"] >= 4) == (engine != "inproc"), (r, s)
        if engine == "spark":  # its session started during the failure, and ran jobs
            assert s["spark"]["session"] == "ready" and s["spark"]["jobs"] >= 1, (r, s)
            assert s["spark"]["tuples"] > 0, (r, s)
            assert s["spark_gauges"][:2] == (1, 1) and s["spark_gauges"][2] >= 1, (r, s)
        else:
            assert s["spark"] is None and s["spark_gauges"] == (0, 0, 0), (r, s)
        assert f"engine {engine}: " in rd.process_log(r).read_text(), r
        left = [p for p in rd.replica_spill(r).rglob("*") if p.is_file()]
        assert not left, f"{r} stopped and left segments behind: {left}"
    digests = [e for e in read_history(rd.history) if e["event"] == "digest"]
    assert {e["process"] for e in digests} == {"n1a", "n1b"}
    assert len({json.dumps(e["hashes"], sort_keys=True) for e in digests}) == 1, digests
    print(seen)
