"""``dpc soak`` as a user runs it: a half-minute soak of examples/basic.toml (three sources
at 300 tuples/s, two replicas, a client: real processes) with a random fault every 7.5 s,
sampled every half second, then its report, its samples, its plot, and ``dpc check`` on its run.
(A tiny soak: the 30-minute soaks are ``dpc soak`` commands, README "Soak"; this one keeps
the command, its rule and its report honest within the suite's time.)

What is asserted of the verdicts: the whole soak passes (exit 0): memory (RSS) and every
output buffer stay flat, including the buffers of the replica the client does not read
(issue 13, defect 4: they grew for the whole run before acks rode on the heartbeats).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from node.config.load import load_config
from node.procs.rundir import RunDir
from ops_scripts.check.compose import run_check
from ops_scripts.check.history import count_events, read_history
from ops_scripts.harness.growth import MIN_POINTS
from tests.paths import EXAMPLES, ROOT

SOAK = ["--minutes", "0.5", "--warmup", "0.1", "--fault-every", "7.5", "--sample", "0.5",
        "--rate", "300"]


def test_a_half_minute_soak_reports_flat_memory(tmp_path: Path) -> None:
    run = tmp_path / "soak"
    done = subprocess.run(
        [sys.executable, "-m", "ops_scripts.cli", "soak", str(EXAMPLES / "basic.toml"), *SOAK,
         "--run-dir", str(run)],
        cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    out = done.stdout
    print(out[-6000:], done.stderr[-3000:])
    assert done.returncode == 0, (out[-3000:], done.stderr)

    # The report: the rule, a row per series, a verdict per kind, the overall verdict.
    assert "the rule: each series" in out
    verdicts = [line for line in out.splitlines() if line.startswith("dpc soak: ")]
    assert "dpc soak: memory (RSS): PASS" in out, verdicts
    assert "dpc soak: buffers: PASS" in out, verdicts
    assert "dpc soak: live heap: PASS" in out, verdicts
    assert "harness problem" not in out
    assert verdicts[-1].startswith("dpc soak: PASS"), verdicts

    # Samples of every process (under each incarnation's pid) and of every replica's buffer.
    config = load_config(run / "config.toml")
    records = [json.loads(line) for line in (run / "soak.jsonl").read_text().splitlines()]
    header, samples = records[0]["soak"], records[1:]
    assert header["rate"] == 300.0 and header["warmup_minutes"] == 0.1
    processes = [*config.sources, *(r.name for n in config.nodes.values() for r in n.replicas),
                 *config.clients]
    for name in processes:
        assert sum(name in s["rss"] for s in samples) >= MIN_POINTS, name
    for node in config.nodes.values():
        for r in node.replicas:
            assert any(r.name in s["buffers"] for s in samples), r.name
            # Its live heap too, as its /status reports it, under the same pid as its RSS.
            heaps = [s for s in samples if r.name in s["heap"]]
            assert heaps and all(s["heap"][r.name]["blocks"] > 0 for s in heaps), r.name
            assert all(s["heap"][r.name]["pid"] == s["rss"][r.name]["pid"]
                       for s in heaps if r.name in s["rss"]), r.name
    svg = (run / "soak.svg").read_text()
    assert all(f">{name}" in svg for name in processes)

    # The faults are in the run's history, as dpc run records them, and dpc check judges it.
    events = read_history(RunDir(run).history)
    assert count_events(events, "fault") == 3 and count_events(events, "heal") == 3
    kinds = [e["event"] for e in events]
    assert kinds[0] == "start" and kinds.index("ready") < kinds.index("fault")
    # A killed process (seed 1's schedule kills a process) is sampled again once
    # restarted, under its new pid.
    killed = {e["fault"]["process"] for e in events
              if e["event"] == "fault" and e["fault"]["fault"] == "kill"}
    assert killed
    for name in killed:
        assert len({s["rss"][name]["pid"] for s in samples if name in s["rss"]}) == 2, name
    assert run_check(run) in (0, 1)
    report = json.loads((run / "check.json").read_text())
    assert report["verdicts"] and all(v["status"] != "unknown" for v in report["verdicts"])
