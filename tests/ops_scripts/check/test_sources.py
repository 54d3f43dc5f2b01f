"""Source logs are evidence, not truth (ops_scripts/check/sources.py): a whole log with a
matching end record is valid; a gap, a repeated id, a decreasing time, an end record whose
last_id is not the log's, a stream ended before its limit or its file, a malformed or
unreadable record are invalid, each with the line or the field; ``dpc check`` reads the end
records and counts a file source's rows."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest

from node.config.model import SourceConfig
from ops_scripts.check.recorded import load_history
from ops_scripts.check.sources import check_source_log
from protocol.tuples import Kind, Tuple, make_tuple
from tests.ops_scripts.check.world import EC, run, write_run

SRC = SourceConfig("s1", ("key", "value"), "127.0.0.1", 0, 1000.0, 100_000, "synthetic")


def log(n: int = 10) -> list[Tuple]:
    return [make_tuple(Kind.STABLE, i, 1_000 * i, 1_000 * i, (i % 3, i)) for i in range(1, n + 1)]


def end(reason: str = "request", last_id: int = 10, t: int = 99_000) -> dict[str, Any]:
    return {"t": t, "reason": reason, "last_id": last_id}


def test_a_whole_log_is_valid_with_or_without_an_end_record() -> None:
    v = check_source_log(SRC, log(), None)
    assert v.status == "valid" and v.name == EC and v.subject == "source s1"
    assert v.evidence == ("10 tuples, ids 1..10 without a gap or a repeat, times never "
                          "decreasing, at most 1000 per second; no end record: the stream never ended")
    v = check_source_log(SRC, log(), end())
    assert v.status == "valid" and v.evidence.endswith("ended by request at t=99000, last_id 10")
    limited = dataclasses.replace(SRC, limit=10)
    assert check_source_log(limited, log(), end("limit")).status == "valid"
    assert check_source_log(SRC, [], end(last_id=0)).status == "valid"  # ended before a tuple


@pytest.mark.parametrize(("change", "expected"), [
    (lambda ts: [*ts[:4], *ts[5:]], "row 5: STABLE(id=6, time=6000, tmax=6000, values=[0, 6]) "
                                    "after id 4: id(s) 5 missing (a gap)"),
    (lambda ts: [*ts[:4], *ts[7:]], "row 5: STABLE(id=8, time=8000, tmax=8000, values=[2, 8]) "
                                    "after id 4: id(s) 5..7 missing (a gap)"),
    (lambda ts: [*ts[:5], ts[4], *ts[5:]], "row 6: STABLE(id=5, time=5000, tmax=5000, "
                                           "values=[2, 5]) repeats id 5 of row 5"),
    (lambda ts: [*ts[:5], ts[5]._replace(id=5, values=(9, 9)), *ts[6:]],
     "row 6: STABLE(id=5, time=6000, tmax=6000, values=[9, 9]) repeats id 5 of row 5"),
    (lambda ts: ts[1:], "row 1: STABLE(id=2, time=2000, tmax=2000, values=[2, 2]) after id 0: "
                        "id(s) 1 missing (a gap)"),
    (lambda ts: [*ts[:3], ts[4], ts[3], *ts[5:]], "row 4: STABLE(id=5"),
    (lambda ts: [*ts[:6], ts[6]._replace(time=10), *ts[7:]],
     "row 7: STABLE(id=7, time=10, tmax=7000, values=[1, 7]): its time is below that of row 6 "
     "(6000); tuple times never decrease"),
    (lambda ts: [*ts[:2], ts[2]._replace(kind=Kind.TENTATIVE), *ts[3:]],
     "row 3: TENTATIVE(id=3, time=3000, tmax=3000, values=[0, 3]): a source logs STABLE data "
     "tuples only"),
])
def test_a_broken_log_is_invalid_with_the_line_and_id(change: Any, expected: str) -> None:
    v = check_source_log(SRC, change(log()), None)
    assert v.status == "invalid" and v.evidence.startswith(f"source log: {expected}"), v.evidence


def test_a_wall_clock_source_whose_tuples_are_squeezed_together_is_invalid() -> None:
    """A stall's backlog stamped with one instant (dpc torture seed 3 before the fix: a
    5.8 s pause at 2,500 tuples/s, then 14,600 tuples with one time) breaks the pace."""
    squeezed = [*log(5), *(t._replace(time=6_000, tmax=6_000) for t in log()[5:])]
    v = check_source_log(SRC, squeezed, None)
    assert v.status == "invalid"
    assert v.evidence.startswith("source log: row 7: STABLE(id=7, time=6000, tmax=6000, "
                                 "values=[1, 7]): 0 µs after row 6, less than 1/rate = 1000 µs")
    assert check_source_log(dataclasses.replace(SRC, rate=500.0), log(), None).status == "invalid"
    event_time = dataclasses.replace(SRC, time_column="t", speedup=1.0)  # its data's own pace
    assert check_source_log(event_time, squeezed, None).status == "valid"


def test_an_end_record_that_disagrees_with_the_log_or_the_config_is_invalid() -> None:
    seen = ("10 tuples, ids 1..10 without a gap or a repeat, times never decreasing, at most "
            "1000 per second; ")
    cases = [
        (SRC, end(last_id=12), "the end record says last_id 12 (request), the log's last id is 10"),
        (SRC, end(last_id=9), "the end record says last_id 9 (request), the log's last id is 10"),
        (dataclasses.replace(SRC, limit=50), end("limit"),
         "ended by its limit at id 10, but the config says limit 50: ended early"),
        (SRC, end("limit"), "ended by its limit at id 10, but the config says no limit: ended early"),
        (SRC, end("file"), "ended because its file ran out at id 10, but it is a synthetic source: "
                           "ended early"),
        (SRC, end("tired"), "malformed end record"),
        (SRC, {"reason": "request", "last_id": 10}, "malformed end record"),
        (SRC, end(last_id=True), "malformed end record"),  # type: ignore[arg-type]
    ]
    for src, record, expected in cases:
        v = check_source_log(src, log(), record)
        assert v.status == "invalid" and v.evidence.startswith(seen + expected), (record, v)
    v = check_source_log(SRC, log(), None, end_problem="sources/s1.end.json: not JSON")
    assert v.status == "invalid" and "unreadable end record: sources/s1.end.json" in v.evidence
    v = check_source_log(dataclasses.replace(SRC, limit=8), log(), None)
    assert v.status == "invalid" and v.evidence == "source log: 10 tuples, beyond its limit 8"


def test_a_file_source_must_have_ended_at_its_files_last_row(tmp_path: Path) -> None:
    src = dataclasses.replace(SRC, generator="file", file=tmp_path / "data.csv")
    v = check_source_log(src, log(), end("file"), file_rows=10)
    assert v.status == "valid" and v.evidence.endswith(f"last_id 10 = the rows of {src.file}")
    v = check_source_log(src, log(), end("file"), file_rows=25)
    assert v.status == "invalid"
    assert v.evidence.endswith(f"ended because its file ran out at id 10, but {src.file} has 25 "
                               "rows: ended early")
    v = check_source_log(src, log(), end("file"), file_problem="no such file")
    assert v.status == "valid" and "not counted: no such file" in v.evidence


def test_dpc_check_reads_the_end_records_and_judges_each_source(tmp_path: Path) -> None:
    rd, config, _ = write_run(tmp_path)  # three sources of 200 tuples, no end record
    code, text, report = run(rd)
    assert code == 0, text
    by = {v["subject"]: v for v in report["verdicts"] if v["property"] == EC}
    assert {by[f"source {s}"]["status"] for s in ("s1", "s2", "s3")} == {"valid"}
    rd.source_end("s1").write_text(json.dumps(end(last_id=200)))
    rd.source_end("s2").write_text(json.dumps(end(last_id=150)))
    rd.source_end("s3").write_text("{torn")
    h = load_history(rd, config)
    assert h.source_ends["s1"] == end(last_id=200) and "s3" in h.end_problems
    code, text, report = run(rd)
    by = {v["subject"]: v for v in report["verdicts"] if v["property"] == EC}
    assert code == 1 and "FAIL" in text
    assert by["source s1"]["status"] == "valid"
    assert by["source s2"]["status"] == "invalid"
    assert "the end record says last_id 150 (request), the log's last id is 200" in (
        by["source s2"]["evidence"])
    assert by["source s3"]["status"] == "invalid" and "s3.end.json" in by["source s3"]["evidence"]
    assert by["client c1 (n1.out)"]["status"] == "valid"  # the reference still stands


def test_dpc_check_counts_the_rows_of_a_file_source_that_ran_out(tmp_path: Path) -> None:
    rd, _, _ = write_run(tmp_path)
    data = tmp_path / "s1.csv"
    data.write_text("key,value\n" + "".join(f"{i % 7},{i}\n" for i in range(230)))
    text = rd.config.read_text().replace(
        "[sources.s1]", f'[sources.s1]\ngenerator = "file"\nfile = "{data}"')
    rd.config.write_text(re.sub(r"  \[sources\.s1\.attributes\]\n(  .*\n)+", "", text))
    rd.source_end("s1").write_text(json.dumps(end("file", last_id=200)))
    code, _, report = run(rd)
    (v,) = [v for v in report["verdicts"] if v["subject"] == "source s1"]
    assert code == 1 and v["status"] == "invalid"
    assert v["evidence"].endswith(f"but {data} has 230 rows: ended early")
