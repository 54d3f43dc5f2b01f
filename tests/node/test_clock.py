"""The clock fault's two ends in a process (issue 47): node/clock.py's offset, and how a
process takes it from its skew file (node/procs/rundir.py, node/procs/entry.py). The
real processes: tests/integration/test_skew.py."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from node import clock
from node.errors import NodeError, RunLogError
from node.procs.entry import _apply_skew, _on_skew_signal
from node.procs.rundir import RunDir


@pytest.fixture(autouse=True)
def true_clock() -> Iterator[None]:
    """Every test leaves the process's clock true and real (the suite shares it)."""
    yield
    clock.use_clock(None)
    clock.set_offset(0)


def wall_us() -> int:
    return time.time_ns() // 1000


def test_an_offset_is_added_to_the_wall_clock_and_taken_back() -> None:
    assert clock.offset_us() == 0
    clock.set_offset(2_000_000)
    before = wall_us()
    now = clock.now_us()
    after = wall_us()
    assert before + 2_000_000 <= now <= after + 2_000_000
    assert clock.offset_us() == 2_000_000
    assert not clock.virtual()  # a skewed wall clock is still the wall clock
    clock.set_offset(-1_500_000)
    before = wall_us()
    assert before - 1_500_000 <= clock.now_us() <= wall_us() - 1_500_000
    clock.set_offset(0)
    before = wall_us()
    assert before <= clock.now_us() <= wall_us()


@pytest.mark.parametrize("bad", [1.5, True, "2"])
def test_an_offset_is_whole_microseconds(bad: object) -> None:
    with pytest.raises(NodeError, match="int of microseconds"):
        clock.set_offset(bad)  # type: ignore[arg-type]
    assert clock.offset_us() == 0


def test_a_virtual_clock_is_never_skewed() -> None:
    clock.use_clock(lambda: 42)
    assert clock.virtual() and clock.now_us() == 42
    with pytest.raises(NodeError, match="skew needs real processes"):
        clock.set_offset(1_000_000)
    assert clock.now_us() == 42 and clock.offset_us() == 0
    clock.use_clock(None)
    clock.set_offset(1_000_000)
    with pytest.raises(NodeError, match="cannot install a virtual clock"):
        clock.use_clock(lambda: 42)
    assert not clock.virtual()
    assert clock.now_us() >= wall_us() + 900_000  # still the skewed wall clock


def test_the_skew_file_reads_zero_when_absent(tmp_path: Path) -> None:
    rd = RunDir(tmp_path)
    assert rd.read_skew("s3") == 0.0
    rd.write_skew("s3", 2)
    assert rd.read_skew("s3") == 2.0
    rd.write_skew("s3", -1.5)
    assert rd.read_skew("s3") == -1.5
    assert rd.skew_file("s3") == rd.status / "s3.skew"


@pytest.mark.parametrize("text", ["", "two", "nan", "inf", "1 2"])
def test_a_bad_skew_file_is_refused_naming_it(tmp_path: Path, text: str) -> None:
    rd = RunDir(tmp_path).ensure()
    rd.skew_file("s3").write_text(text)
    with pytest.raises(RunLogError, match=r"skew file .*s3\.skew: expected seconds"):
        rd.read_skew("s3")


def test_only_finite_seconds_are_written(tmp_path: Path) -> None:
    rd = RunDir(tmp_path)
    for bad in (float("nan"), float("inf"), True):
        with pytest.raises(RunLogError, match="finite number of seconds"):
            rd.write_skew("s3", bad)
    assert not rd.skew_file("s3").exists()


def test_a_process_takes_its_skew_from_its_file_and_logs_it(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rd = RunDir(tmp_path)
    caplog.set_level(logging.INFO, logger="dpc")
    _apply_skew(rd, "s3")  # no file: no skew, nothing said
    assert clock.offset_us() == 0 and not caplog.records
    rd.write_skew("s3", 2.0)
    _apply_skew(rd, "s3")
    assert clock.offset_us() == 2_000_000
    assert "s3: clock skew now +2.000 s" in caplog.text
    caplog.clear()
    _apply_skew(rd, "s3")  # read again (the start and the handler both read): said once
    assert not caplog.records
    rd.write_skew("s3", 0.0)  # the heal
    _apply_skew(rd, "s3")
    assert clock.offset_us() == 0 and "s3: clock skew now +0.000 s" in caplog.text


def test_a_bad_file_on_the_signal_keeps_the_skew_and_says_why(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rd = RunDir(tmp_path).ensure()
    rd.write_skew("n1a", -0.5)
    _on_skew_signal(rd, "n1a")
    assert clock.offset_us() == -500_000
    rd.skew_file("n1a").write_text("soon")
    _on_skew_signal(rd, "n1a")  # a running process does not die of it
    assert clock.offset_us() == -500_000
    assert "n1a: clock skew unchanged (-0.500 s)" in caplog.text
    with pytest.raises(RunLogError):  # at start it is fatal
        _apply_skew(rd, "n1a")
