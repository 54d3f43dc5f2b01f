"""``dpc soak`` without a cluster (ops_scripts/harness/soak.py, soakreport.py): its fault
schedule and scenario, its options, sampling real processes by their pid files, the
report and the plot from a written soak.jsonl and history."""

from __future__ import annotations

import io
import itertools
import json
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from node.config.load import load_config
from node.procs.rundir import RunDir
from ops_scripts.cli import main
from ops_scripts.cluster.processes import read_rss
from ops_scripts.harness.growth import MIB
from ops_scripts.harness.soak import (
    SOAK_KINDS,
    Sampler,
    SoakOptions,
    progress_line,
    run_soak,
    soak_scenario,
    soak_schedule,
)
from ops_scripts.harness.soakreport import fault_intervals, print_report
from tests.integration.test_cluster import wait_for
from tests.paths import ROOT

BASIC = ROOT / "examples" / "basic.toml"


# ------------------------------------------------------------------ the schedule
def test_one_fault_every_interval_each_healed_before_the_next() -> None:
    config = load_config(BASIC)
    faults = soak_schedule(config, random.Random(3), seconds=600, every=60)
    assert [f.at for f in faults] == [60.0 * k for k in range(1, 10)]
    assert {f.kind for f in faults} <= set(SOAK_KINDS)
    assert all(f.duration <= 3 * 3.0 for f in faults)  # 3 X of basic (X = 3 s)
    assert all(a.heal_at <= b.at for a, b in itertools.pairwise(faults))
    assert faults == soak_schedule(config, random.Random(3), seconds=600, every=60)
    # A short interval bounds the faults' length: half of it.
    short = soak_schedule(config, random.Random(3), seconds=120, every=4)
    assert short and all(f.duration <= 2.0 for f in short)
    assert max(f.heal_at for f in short) <= 120


def test_the_kinds_drawn_over_many_seeds_are_the_soak_kinds() -> None:
    config = load_config(BASIC)
    kinds = {f.kind for seed in range(20)
             for f in soak_schedule(config, random.Random(seed), seconds=600, every=60)}
    assert kinds == set(SOAK_KINDS)


def test_the_scenario_runs_the_sources_at_the_rate_and_lasts_the_soak() -> None:
    opts = SoakOptions(cluster=BASIC, minutes=3, fault_every=30, rate=250.0, seed=5)
    s = soak_scenario(opts)
    assert s.settle == 0 and s.seed == 5 and len(s.faults) >= 4
    assert s.schedule_length + s.quiet > opts.seconds
    assert {src.rate for src in s.config().sources.values()} == {250.0}
    assert {src.rate for src in soak_scenario(SoakOptions(cluster=BASIC, minutes=3))
            .config().sources.values()} == {1000.0}


def test_bad_options_are_refused_with_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert SoakOptions(cluster=BASIC).problems() == []
    assert SoakOptions(cluster=BASIC, minutes=30).warmup_minutes == 5.0
    assert SoakOptions(cluster=BASIC, minutes=2).warmup_minutes == pytest.approx(2 / 3)
    for bad, what in ((dict(minutes=0), "--minutes"), (dict(minutes=2, warmup=2), "--warmup"),
                      (dict(fault_every=0.5), "--fault-every"), (dict(sample=0), "--sample"),
                      (dict(rate=-1), "--rate")):
        assert run_soak(SoakOptions(cluster=BASIC, **bad)) == 2  # type: ignore[arg-type]
        assert what in capsys.readouterr().err
    assert main(["soak", str(ROOT / "examples" / "missing.toml"), "--minutes", "1"]) == 2
    assert "missing.toml" in capsys.readouterr().err


# ------------------------------------------------------------------ sampling
def test_read_rss_of_a_live_and_of_a_gone_process() -> None:
    import os

    assert (read_rss(os.getpid()) or 0) > MIB
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    assert read_rss(p.pid) is None


class Sleepers:
    """Stand-ins for a run's processes: each runs ``... node NAME --run-dir RD`` (so the
    sampler takes its pid file for it), sleeping, with its pid file and ready marker."""

    def __init__(self, rd: RunDir) -> None:
        self.rd = rd
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.gone: list[subprocess.Popen[bytes]] = []

    def start(self, name: str) -> int:
        self.procs[name] = p = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(60)", "node", name, "--run-dir",
             str(self.rd.path)])
        self.rd.write_pid(name, p.pid)
        self.rd.mark_ready(name)
        return p.pid

    def kill(self, name: str) -> None:
        p = self.procs.pop(name)
        p.kill()
        p.wait()

    def close(self) -> None:
        for name in list(self.procs):
            self.kill(name)


@pytest.fixture
def sleepers(tmp_path: Path) -> Iterator[Sleepers]:
    rd = RunDir(tmp_path / "run").ensure()
    rd.config.write_text(BASIC.read_text())
    world = Sleepers(rd)
    for name in ("s1", "s2", "s3", "n1a", "n1b", "c1"):
        world.start(name)
    yield world
    world.close()


def test_the_sampler_follows_pid_files_and_skips_what_is_down(sleepers: Sleepers) -> None:
    rd = sleepers.rd
    sampler = Sampler(rd, load_config(BASIC), SoakOptions(cluster=BASIC, sample=1.0),
                      io.StringIO())
    first = sampler.sample(0.0)
    assert set(first["rss"]) == {"s1", "s2", "s3", "n1a", "n1b", "c1"}
    assert first["rss"]["n1a"]["pid"] == sleepers.procs["n1a"].pid
    assert all(r["bytes"] > MIB for r in first["rss"].values())
    assert first["buffers"] == {}  # no control plane answers: absent, not zero
    old = sleepers.procs["n1a"].pid
    sleepers.kill("n1a")
    assert "n1a" not in sampler.sample(1.0)["rss"]  # killed, not restarted yet
    new = sleepers.start("n1a")
    # A process that has just started may miss a sample, as a down one does (a fresh clone's
    # suite saw it once, loaded): the sampler follows the pid file once the process is seen.
    wait_for(lambda: "n1a" in sampler.sample(2.0)["rss"], what="the restarted n1a sampled")
    assert sampler.sample(2.0)["rss"]["n1a"]["pid"] == new != old
    rd.pid_file("c1").write_text(f"{sleepers.procs['s1'].pid}\n")  # a stranger's pid
    assert "c1" not in sampler.sample(3.0)["rss"]


def test_the_sampler_thread_writes_soak_jsonl_and_progress(sleepers: Sleepers) -> None:
    rd = sleepers.rd
    out = io.StringIO()
    opts = SoakOptions(cluster=BASIC, minutes=0.05, sample=1.0)  # 3 s: samples at 0..3 s
    sampler = Sampler(rd, load_config(BASIC), opts, out)
    sampler.start()
    sampler.join(timeout=60)
    sampler.finish()
    lines = [json.loads(x) for x in (rd.path / "soak.jsonl").read_text().splitlines()]
    assert lines[0]["soak"]["sample"] == 1.0 and lines[0]["soak"]["t0_us"] > 0
    assert len(lines) == 5 and [x["t"] for x in lines[1:]] == sorted(x["t"] for x in lines[1:])
    assert all(set(x["rss"]) == set(sleepers.procs) for x in lines[1:])
    assert sampler.samples == 4 and out.getvalue().count("  soak ") == 4
    assert "RSS MiB s1 " in out.getvalue() and "/0:03" in out.getvalue()


def test_a_failing_sampler_raises_in_the_caller(tmp_path: Path) -> None:
    rd = RunDir(tmp_path / "run").ensure()
    for name in ("s1", "s2", "s3", "n1a", "n1b", "c1"):
        rd.mark_ready(name)
    rd.config.write_text("not = [valid")  # the run's config cannot be read
    sampler = Sampler(rd, load_config(BASIC), SoakOptions(cluster=BASIC), io.StringIO())
    sampler.start()
    sampler.join(timeout=30)
    with pytest.raises(Exception, match="config"):
        sampler.finish()


def test_progress_line() -> None:
    record = {"t": 80.0, "rss": {"s1": {"pid": 1, "bytes": 61 * MIB},
                                 "n1a": {"pid": 2, "bytes": 104 * MIB}},
              "buffers": {"n1a": {"pid": 2, "streams": {"n1.out": {"buffered": 12, "out": 5}}}}}
    assert progress_line(record, 1800) == (
        "  soak 1:20/30:00  RSS MiB s1 61 n1a 104 (total 165)  |  buffered n1a 12")


# ------------------------------------------------------------------ the report
def write_soak(rd: RunDir, leak: bool) -> None:
    """Three minutes of samples every 10 s: flat processes, n1a restarted at 1:00; n1b's
    buffer leaks 300 tuples a minute if ``leak``; faults in the history."""
    t0 = 1_000_000_000
    lines = [{"soak": {"minutes": 3, "sample": 10, "t0_us": t0}}]
    for i in range(19):
        t = i * 10.0
        pid = 10 if t < 60 else 11
        lines.append({"t": t, "rss": {"s1": {"pid": 1, "bytes": 90 * MIB},
                                      "n1a": {"pid": pid, "bytes": 100 * MIB}},
                      "buffers": {"n1a": {"pid": pid, "streams": {"n1.out": {
                          "buffered": 5, "out": 100 * t}}},
                                  "n1b": {"pid": 2, "streams": {"n1.out": {
                                      "buffered": 20 + (5 * t if leak else 0), "out": 100 * t}}}}})
    (rd.path / "soak.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    events = [(55, "fault", {"id": 0, "describe": "kill n1a for 4 s"}),
              (61, "heal", {"id": 0}), (120, "fault", {"id": 1, "describe": "pause s1 for 2 s"}),
              (121, "heal_all", {})]
    rd.history.write_text("".join(
        json.dumps({"t": t0 + int(s * 1e6), "event": e, **f}) + "\n" for s, e, f in events))


def test_the_report_judges_every_series_and_draws_them(tmp_path: Path) -> None:
    rd = RunDir(tmp_path).ensure()
    write_soak(rd, leak=False)
    out = io.StringIO()
    assert print_report(rd, 30.0, out, faults_injected=2)
    text = out.getvalue()
    assert "the rule: each series" in text and "ignores its first 0.5 min" in text
    assert "dpc soak: memory (RSS): PASS: 3 series judged" in text
    assert "dpc soak: buffers: PASS: 3 series judged" in text
    assert "RSS n1a #2" in text and "buffer n1b n1.out" in text
    svg = (rd.path / "soak.svg").read_text()
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    assert "kill n1a for 4 s" in svg and "n1a #2: PASS" in svg


def test_the_report_fails_a_leaking_buffer(tmp_path: Path) -> None:
    rd = RunDir(tmp_path).ensure()
    write_soak(rd, leak=True)
    out = io.StringIO()
    assert not print_report(rd, 30.0, out, faults_injected=2)
    assert "dpc soak: memory (RSS): PASS" in out.getvalue()
    assert "dpc soak: buffers: FAIL: grows steadily: n1b n1.out +750" in out.getvalue()
    row = next(x for x in out.getvalue().splitlines() if "buffer n1b n1.out" in x)
    assert row.rstrip().endswith("FAIL") and "+300" in row  # per minute


def test_fault_intervals_from_the_history(tmp_path: Path) -> None:
    rd = RunDir(tmp_path).ensure()
    write_soak(rd, leak=False)
    assert fault_intervals(rd, 1_000_000_000, 180.0) == [
        (55.0, 61.0, "kill n1a for 4 s"), (120.0, 121.0, "pause s1 for 2 s")]
