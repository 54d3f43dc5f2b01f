"""``run_check`` on a run directory (config loaded from examples/basic.toml): a correct run
passes, a corrupted, missing or unreadable log fails, an unusable directory is refused; with
a history it judges availability and writes the figures into check.json."""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from pathlib import Path

from node.procs.rundir import RunDir
from node.procs.runlog import RunLogWriter, read_log
from ops_scripts.check import FIGURE_KEYS, run_check
from ops_scripts.check.availability import new_results
from protocol.tuples import Kind, Tuple
from tests.ops_scripts.check.world import (
    AV,
    C1,
    EC,
    HASHES,
    LV,
    MK,
    ND,
    RC,
    SECOND,
    SU,
    arrivals_for,
    corrected,
    desc,
    digest,
    fault,
    heal,
    link,
    run,
    state,
    write_run,
)
from tests.runlogs import garble_record, write_rows


def test_run_check_passes_a_correct_run(tmp_path: Path) -> None:
    rd, _, _ = write_run(tmp_path)
    code, text, report = run(rd)
    assert code == 0, text
    assert "property" in text and "eventual-consistency" in text and "PASS" in text
    # Changed: three client verdicts (no-duplicates, stable-never-undone, eventual-
    # consistency) where there was one; then eventual consistency of each source's log too;
    # no history, so no availability and no liveness verdict.
    assert report["summary"] == {"valid": 8, "invalid": 0, "unknown": 0, "total": 8, "ok": True}
    keys = {(v["property"], v["subject"]) for v in report["verdicts"]}
    assert keys == {(ND, C1), (SU, C1), (EC, C1), (RC, "replica n1a (n1.out)"),
                    (RC, "replica n1b (n1.out)"), (EC, "source s1"), (EC, "source s2"),
                    (EC, "source s3")}
    assert "liveness: no run history (history.jsonl): no final heal to judge from" in text


def test_run_check_fails_a_corrupted_client_log(tmp_path: Path) -> None:
    rd, _, ref = write_run(tmp_path)
    rows = read_log(rd.client_log("c1"))
    del rows[3]  # a stable tuple lost
    write_rows(rd.client_log("c1"), rows)
    code, text, report = run(rd)
    assert code == 1 and "invalid" in text and "FAIL" in text
    assert report["summary"]["invalid"] == 1
    assert f"expected STABLE({desc(ref[3])})" in text


def test_run_check_missing_or_corrupt_log_is_unknown_and_fails(tmp_path: Path) -> None:
    rd, _, _ = write_run(tmp_path)
    rd.replica_output("n1b", "n1.out").unlink()
    rows = read_log(rd.client_log("c1"))
    write_client(rd, [t for _, t in rows], [a for a, _ in rows])  # a record per row
    garble_record(rd.client_log("c1"), 5)
    code, _, report = run(rd)
    assert code == 1
    verdicts = {(v["property"], v["subject"]): v for v in report["verdicts"]}
    assert verdicts[RC, "replica n1b (n1.out)"]["status"] == "unknown"
    assert "n1b/n1.out.arrow" in verdicts[RC, "replica n1b (n1.out)"]["evidence"]
    for name in (ND, SU, EC):
        assert verdicts[name, C1]["status"] == "unknown"
        assert "c1.arrow, record 5 (from row 5)" in verdicts[name, C1]["evidence"]
    rd.source_log("s2").unlink()
    code, _, report = run(rd)
    # was 3: three client verdicts; then 6: the source's own verdict
    assert code == 1 and report["summary"]["unknown"] == 6


def test_run_check_unusable_run_dir(tmp_path: Path) -> None:
    out = io.StringIO()
    assert run_check(tmp_path / "nope", out=out) == 2 and "no such directory" in out.getvalue()
    rd = RunDir(tmp_path / "run").ensure()
    out = io.StringIO()
    assert run_check(rd.path, out=out) == 2 and "config.toml is missing" in out.getvalue()
    rd.config.write_text("[cluster]\nname = 1\n")
    out = io.StringIO()
    assert run_check(rd.path, out=out) == 2 and "cannot load" in out.getvalue()
    assert not rd.check_json.exists()


def write_client(rd: RunDir, history: Sequence[Tuple], arrivals: Sequence[int]) -> None:
    rd.client_log("c1").unlink(missing_ok=True)
    with RunLogWriter(rd.client_log("c1")) as w:
        for t, arrival in zip(history, arrivals, strict=True):
            w.write([t], arrival)


def test_run_check_with_a_history_judges_availability_and_writes_figures(tmp_path: Path) -> None:
    rd, config, ref = write_run(tmp_path)
    code, text, report = run(rd)  # no history.jsonl: a report, as before
    assert code == 0 and "no run history (history.jsonl): delays are a report" in text
    assert report["figures"]["availability_judged"] is False and report["figures"]["faults"] == 0
    client = corrected(ref)
    arrivals = arrivals_for(client)
    write_client(rd, client, arrivals)
    events = [
        {"t": 0, "event": "start", "config": str(rd.config), "name": "basic"},
        {"t": 0, "event": "ready"},  # up at once: nothing before it to excuse
        state(0, "n1a", "STABLE"), state(0, "n1b", "STABLE"),
        # (after the client's tentative stretch, about 1.7 s: masking, which judges this
        # subset failure, would find it there)
        fault(3 * SECOND, 1, config, **link("n1a", "c1")), heal(3_500_000, 1),
        {"t": 9 * SECOND, "event": "heal_all"},
        digest(10 * SECOND, "n1a", **HASHES), digest(10 * SECOND, "n1b", **HASHES),
        {"t": 11 * SECOND, "event": "end"},
    ]
    rd.history.write_text("".join(json.dumps(e) + "\n" for e in events))
    code, text, report = run(rd)
    assert code == 0, text
    # (was 7: sources, liveness; then 13: masking)
    assert "dpc check: 14 valid, 0 invalid, 0 unknown -> PASS" in text
    assert {v["property"] for v in report["verdicts"]} == {AV, ND, SU, EC, RC, LV, MK}
    figures = report["figures"]
    assert set(figures) == set(FIGURE_KEYS)
    n_data = sum(1 for t in client if t.kind in (Kind.STABLE, Kind.TENTATIVE))
    assert figures["tuples_checked"] == n_data and figures["faults"] == 1
    assert figures["worst_delay_us"] == 50_000 and figures["bound_us"] == 3 * SECOND
    (entry,) = report["availability"]
    assert entry["delays"]["checked"] == figures["new_results_checked"] > 0
    assert entry["delays"]["worst"]["delay"] == 50_000 and entry["delays"]["p50_us"] == 50_000
    assert "availability: c1 new results, 0 excused by 0 outage(s);" in text

    results = new_results(list(zip(arrivals, client, strict=True)))
    r = results[len(results) // 2]
    arrivals[r.row - 1] = r.tmax + 5 * SECOND
    write_client(rd, client, arrivals)
    code, text, report = run(rd)
    assert code == 1 and "dpc check: 13 valid, 1 invalid, 0 unknown -> FAIL" in text
    (v,) = [v for v in report["verdicts"] if v["status"] == "invalid"]
    assert v["property"] == AV and v["subject"] == C1
    assert v["evidence"].startswith(
        f"row {r.row}: {r.kind}(id={r.id}, tmax={r.tmax}) arrived at {r.tmax + 5 * SECOND}, "
        "delay 5.000 s > bound k*X = 3.000 s")
    assert report["figures"]["worst_delay_us"] == 5 * SECOND

    rd.history.write_text(rd.history.read_text() + "not json\n")
    code, _, report = run(rd)
    verdicts = {(v["property"], v["subject"]): v for v in report["verdicts"]}
    assert code == 1 and verdicts[AV, C1]["status"] == "unknown"
    assert "unreadable history" in verdicts[AV, C1]["evidence"]
    assert f"history.jsonl:{len(events) + 1}: not JSON" in verdicts[AV, C1]["evidence"]

