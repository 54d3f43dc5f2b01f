"""The clock fault in the harness (issue 47), without a cluster: the ``skew`` fault of a
schedule (parse, refusals, never drawn at random, refused by the simulation), ``dpc
inject``'s OFFSET, and the nemesis writing the skew file and signalling a process that
reads it. Real clusters: tests/integration/test_skew.py."""

from __future__ import annotations

import argparse
import io
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from node.config.load import load_config
from node.config.model import ClusterConfig
from node.procs.rundir import RunDir
from ops_scripts.cli import _parser
from ops_scripts.cli import main as dpc
from ops_scripts.cluster.launch import Launched
from ops_scripts.errors import InjectError, ScheduleError
from ops_scripts.harness.inject import _table, parse_offset
from ops_scripts.harness.nemesis import Nemesis
from ops_scripts.harness.schedule import (
    KINDS,
    RANDOM_KINDS,
    dump_faults,
    parse_faults,
    random_faults,
)
from ops_scripts.harness.simulate import SimOptions, simulate_one
from tests.paths import EXAMPLES, ROOT


@pytest.fixture(scope="module")
def config() -> ClusterConfig:
    return load_config(EXAMPLES / "basic.toml")


def skew(**kw: object) -> dict[str, object]:
    return {"at": 5.0, "for": 8.0, "fault": "skew", "process": "s3", "seconds": 2.0, **kw}


# ------------------------------------------------------------------ the schedule
def test_a_skew_parses_describes_and_dumps_back(config: ClusterConfig) -> None:
    (f,) = parse_faults([skew()], config)
    assert (f.kind, dict(f.params), f.at, f.duration) == (
        "skew", {"process": "s3", "seconds": 2.0}, 5.0, 8.0)
    assert f.describe() == "skew s3 +2 s for 8 s"
    behind = parse_faults([skew(seconds=-1.5, process="n1a"), skew(process="c1", seconds=3)],
                          config)
    assert [g.describe() for g in behind] == ["skew n1a -1.5 s for 8 s", "skew c1 +3 s for 8 s"]
    assert behind[1].params["seconds"] == 3.0  # an int in TOML is seconds too
    text = dump_faults([f, *behind])
    import tomllib

    assert parse_faults(tomllib.loads(text)["faults"], config) == [f, *behind]


@pytest.mark.parametrize("bad, message", [
    ({"seconds": 0}, "seconds must be a clock offset, a non-zero number of seconds"),
    ({"seconds": 0.0}, "non-zero"),
    ({"seconds": "2s"}, "got '2s'"),
    ({"seconds": True}, "got True"),
    ({"seconds": float("nan")}, "got nan"),
    ({"seconds": float("inf")}, "got inf"),
    ({"process": "s9"}, "process = 's9' is not a process; known: s1, s2, s3, n1a, n1b, c1"),
    ({"process": "controller"}, "is not a process"),
    ({"between": ["s3", "n1a"]}, "unknown key(s) ['between'] for skew"),
])
def test_a_bad_skew_is_refused_naming_the_key(config: ClusterConfig, bad: dict[str, object],
                                              message: str) -> None:
    with pytest.raises(ScheduleError, match=r"^faults\[0\]: ") as info:
        parse_faults([skew(**bad)], config)
    assert message in str(info.value)


def test_a_skew_needs_its_seconds(config: ClusterConfig) -> None:
    raw = skew()
    del raw["seconds"]
    with pytest.raises(ScheduleError, match=r"skew: missing key\(s\) \['seconds'\]"):
        parse_faults([raw], config)


def test_one_process_has_one_skew_at_a_time(config: ClusterConfig) -> None:
    with pytest.raises(ScheduleError, match="s3 is skewed already when the second skew starts"):
        parse_faults([skew(), skew(at=12.0, seconds=-1.0)], config)
    # after the first one's heal, or of another process, or with other faults: fine
    assert len(parse_faults([skew(), skew(at=13.0), skew(process="s2"),
                             {"at": 6.0, "for": 1.0, "fault": "kill", "process": "s3"}],
                            config)) == 4


def test_random_schedules_never_draw_a_skew(config: ClusterConfig) -> None:
    assert "skew" in KINDS and "skew" not in RANDOM_KINDS
    assert set(KINDS) - set(RANDOM_KINDS) == {"skew"}
    drawn = {f.kind for seed in range(40)
             for f in random_faults(config, random.Random(seed), duration=6.0, count=4)}
    assert "skew" not in drawn and len(drawn) > 3
    with pytest.raises(ScheduleError, match=r"random schedules draw .*; not \['skew'\]"):
        random_faults(config, random.Random(1), duration=6.0, count=4, kinds=KINDS)


def test_the_simulation_refuses_a_skew(config: ClusterConfig, tmp_path: Path) -> None:
    faults = parse_faults([skew()], config)
    with pytest.raises(ScheduleError, match=r"skew needs real processes \(dpc run\)"):
        simulate_one(config, 0, tmp_path / "sim", faults=faults)
    with pytest.raises(ScheduleError, match=r"skew needs real processes \(dpc run\)"):
        simulate_one(config, 0, tmp_path / "sim", SimOptions(kinds=("partition", "skew")))
    assert not (tmp_path / "sim").exists()  # refused before anything ran


# ------------------------------------------------------------------ dpc inject's OFFSET
def inject_args(*argv: str) -> argparse.Namespace:
    return _parser().parse_args(["inject", "RUN", *argv])


@pytest.mark.parametrize("offset, seconds", [
    ("+2s", 2.0), ("-1.5s", -1.5), ("2", 2.0), ("-2", -2.0), (".5s", 0.5), ("3.", 3.0)])
def test_an_offset_is_signed_seconds(offset: str, seconds: float) -> None:
    assert parse_offset([offset]) == seconds
    # "-1.5s" is the OFFSET, not an option
    assert _table(inject_args("skew", "s3", offset)) == {
        "fault": "skew", "process": "s3", "seconds": seconds}


@pytest.mark.parametrize("words, message", [
    (["2x"], "OFFSET is seconds like +2s, -1.5s or 2; got '2x'"),
    (["+"], "got '+'"),
    (["2ms"], "got '2ms'"),
    (["s"], "got 's'"),
    ([], "got 'nothing'"),
    (["+2s", "n1a"], "got '+2s n1a'"),
    (["0"], "an offset of 0 is no skew"),
    (["-0.0s"], "an offset of 0 is no skew"),
])
def test_a_bad_offset_is_refused(words: list[str], message: str) -> None:
    with pytest.raises(InjectError) as info:
        parse_offset(words)
    assert message in str(info.value)


def test_inject_skew_needs_a_run_dir_and_a_good_offset(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = EXAMPLES / "basic.toml"
    assert dpc(["inject", str(cluster), "skew", "s3", "+2s"]) == 2
    assert "skew needs a RUN_DIR" in capsys.readouterr().err
    rd = RunDir(tmp_path / "run").ensure()
    rd.config.write_text(cluster.read_text())
    assert dpc(["inject", str(rd.path), "skew", "s3", "2 s"]) == 2
    assert "dpc inject: error: skew NAME OFFSET: OFFSET is seconds" in capsys.readouterr().err
    assert dpc(["inject", str(rd.path), "skew", "s9", "+2s"]) == 2
    assert "process = 's9' is not a process" in capsys.readouterr().err
    assert dpc(["inject", str(rd.path), "skew", "s3", "+2s"]) == 2  # nothing runs here
    assert "s3 is not up (no " in capsys.readouterr().err
    assert rd.read_skew("s3") == 0.0


# ------------------------------------------------------------------ the nemesis
#: A stand-in process with the entry point's SIGUSR2 contract (node/procs/entry.py): on the
#: signal it reads its skew file into its clock, then reports the clock's offset.
_CHILD = """
import signal, sys, time
from pathlib import Path
from node import clock
from node.procs.entry import _on_skew_signal
from node.procs.rundir import RunDir
rd, out = RunDir(sys.argv[1]), Path(sys.argv[2])
def on_usr2(*_):
    _on_skew_signal(rd, "s3")
    with out.open("a") as f:
        f.write(f"{clock.offset_us()}\\n")
signal.signal(signal.SIGUSR2, on_usr2)
rd.mark_ready("s3")
while True:
    signal.pause()  # until a signal: SIGUSR2 is handled, SIGTERM ends it
"""


def wait_for(cond: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.fixture
def child(tmp_path: Path) -> Iterator[tuple[RunDir, subprocess.Popen[bytes], Path]]:
    rd = RunDir(tmp_path / "run").ensure()
    out = tmp_path / "offsets"
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(rd.path), str(out)], cwd=ROOT)
    try:
        wait_for(lambda: rd.is_ready("s3"), "the stand-in to handle SIGUSR2")
        yield rd, proc, out
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def offsets(out: Path) -> list[int]:
    return [int(x) for x in out.read_text().split()] if out.exists() else []


def test_the_nemesis_skews_a_process_and_heals_it(
        config: ClusterConfig, child: tuple[RunDir, subprocess.Popen[bytes], Path]) -> None:
    rd, proc, out = child
    nemesis = Nemesis(config, rd, [Launched("s3", "source", proc)], io.StringIO())
    ahead, behind = parse_faults([skew(at=0.0), skew(at=9.0, seconds=-1.5)], config)
    nemesis.inject(0, ahead)
    assert rd.read_skew("s3") == 2.0
    wait_for(lambda: offsets(out) == [2_000_000], "the process to take +2 s")
    nemesis.heal(0)
    assert rd.read_skew("s3") == 0.0
    wait_for(lambda: offsets(out) == [2_000_000, 0], "the process to take 0")
    nemesis.inject(1, behind)
    wait_for(lambda: offsets(out)[-1:] == [-1_500_000], "the process to take -1.5 s")
    problems = nemesis.heal_all()  # the replicas' control planes do not answer here
    assert all("control plane unreachable" in p for p in problems), problems
    assert rd.read_skew("s3") == 0.0
    wait_for(lambda: offsets(out)[-1:] == [0], "heal_all to set the clock true")
    assert proc.poll() is None  # SIGUSR2 never killed it
