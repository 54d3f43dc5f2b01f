"""What ``dpc check`` makes of logs it cannot read (``ops_scripts/check/recorded.py``) and of
its own crashes (``compose.run_check``): an unreadable log is a problem named in the
verdicts that need it, a crash of ours makes the run unknown; neither is ever a pass."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from node.procs.runlog import ARRIVAL_KEY
from ops_scripts.check import compose, recorded
from ops_scripts.check.recorded import History, load_events, load_history

from .world import C1, EC, ND, RC, SU, run, write_run

N1B = "replica n1b (n1.out)"


def test_an_arrow_stream_that_is_no_tuple_log_is_an_unreadable_log(tmp_path: Path) -> None:
    """A record whose framing reads (an Arrow stream, its arrival stamped) but whose batch
    is not the layout of protocol/columns.py: refused by the decoder, never half-read."""
    rd, _, _ = write_run(tmp_path)
    sink = pa.BufferOutputStream()
    schema = pa.schema([("x", pa.int64())], metadata={ARRIVAL_KEY: b"1"})
    with pa.ipc.new_stream(sink, schema) as w:
        w.write_batch(pa.record_batch([pa.array([1, 2])], schema=schema))
    rd.client_log("c1").write_bytes(sink.getvalue().to_pybytes())
    code, _, report = run(rd)
    verdicts = {(v["property"], v["subject"]): v for v in report["verdicts"]}
    assert code == 1
    for name in (ND, SU, EC):
        assert verdicts[name, C1]["status"] == "unknown"
        assert "unreadable log" in verdicts[name, C1]["evidence"]
        assert "c1.arrow, record 1 (from row 1" in verdicts[name, C1]["evidence"]
        assert "expected the columns kind, id, time, tmax first" in verdicts[name, C1]["evidence"]


def test_every_unreadable_log_is_a_problem_never_an_exception(tmp_path: Path) -> None:
    rd, config, _ = write_run(tmp_path)
    rd.source_log("s1").write_bytes(b"not an arrow stream")
    rd.client_log("c1").write_bytes(b"{}\n")
    rd.replica_recoveries("n1b").write_text('{"incarnation": 1, "outputs": {"n1.out": 3}}\n')
    rd.replica_output_before("n1b", "n1.out", 1).write_bytes(b"\xff\n")
    h = load_history(rd, config)
    assert set(h.problems) == {"source s1", C1, N1B}
    assert all("unreadable" in why for why in h.problems.values())
    assert "tuple log" in h.problems["source s1"] and "record 1 (from row 1)" in h.problems[C1]


@pytest.mark.parametrize("content", [b"not json\n", b'{"t": 1, "event": "\xff"}\n'])
def test_an_unreadable_history_gives_no_events_and_a_problem(
    tmp_path: Path, content: bytes
) -> None:
    rd, _, _ = write_run(tmp_path)
    rd.history.write_bytes(content)
    h = History()
    assert load_events(rd, h) == []
    assert h.problems["history"].startswith(f"unreadable history {rd.history}: ")


def test_a_crash_of_ours_while_reading_makes_the_run_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rd, _, _ = write_run(tmp_path)

    def bug(*_: object) -> None:
        raise ZeroDivisionError("kaput")  # not a reading error: must not pass as one

    monkeypatch.setattr(recorded, "read_log", bug)
    code, text, report = run(rd)
    assert code == 1 and "FAIL" in text
    (v,) = report["verdicts"]
    assert (v["property"], v["status"]) == ("run", "unknown")
    assert v["evidence"] == "checker crashed: ZeroDivisionError: kaput"


def test_a_client_that_cannot_be_assessed_is_reported_and_the_check_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rd, _, _ = write_run(tmp_path)
    loaded = load_history

    def short_arrivals(*args: object) -> History:
        h = loaded(*args)  # type: ignore[arg-type]
        h.arrivals["c1"].pop()  # one arrival time fewer than tuples
        return h

    monkeypatch.setattr(compose, "load_history", short_arrivals)
    code, text, report = run(rd)
    assert code == 0  # no history: availability is a report, the verdicts stand
    assert "availability: client c1: cannot assess: ValueError" in text
    assert report["availability"] == [] and report["summary"]["valid"] == 8  # was 5: sources
    assert {v["subject"] for v in report["verdicts"] if v["property"] == RC} == {
        "replica n1a (n1.out)", N1B}
