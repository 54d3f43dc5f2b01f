"""``dpc bench throughput`` as a real process, with tiny settings: it starts a replica
process, measures both figures and their ratio, stops what it started, exits 0. No speed
is asserted (shared machines): only that the measurement completed and was reported."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ops_scripts.bench.throughput import Step, _next_rate
from tests.paths import ROOT

DPC = shutil.which("dpc", path=str(Path(sys.executable).parent)) or "dpc"


def test_bench_throughput_reports_raw_replica_and_ratio() -> None:
    r = subprocess.run(
        [DPC, "bench", "throughput", "--seconds", "1", "--start-rate", "2000", "--max-rate", "4000",
         "--config", str(ROOT / "examples" / "basic.toml")],
        capture_output=True, text=True, timeout=60, check=False, cwd=ROOT,
    )
    out = r.stdout
    assert r.returncode == 0, out + r.stderr
    assert "query measured: the config's, unchanged" in out
    raw = re.search(r"raw: encode \+ loopback TCP \+ decode\s+([\d,]+)", out)
    rep = re.search(r"replica n1a sustained \(STABLE\)\s+([\d,]+)\s+([\d.]+|nan)\s+([\d.]+|nan)", out)
    assert raw and rep, out
    assert int(raw.group(1).replace(",", "")) > 0
    assert re.search(r"replica / raw = \d+\.\d{3}", out), out
    assert re.search(r"aim >= 100,000: (met|NOT met)", out), out
    # Both offered rates were measured (never above --max-rate), each with a verdict.
    rows = re.findall(r"^\s+\d+\s+([\d,]+)\s+[\d,]+\s+[\d,]+\s+\S+\s+\S+\s+(sustained|NOT sustained)", out, re.M)
    assert rows and all(int(rate.replace(",", "")) <= 4000 for rate, _ in rows), out


def test_bench_throughput_refuses_nonsense() -> None:
    r = subprocess.run([DPC, "bench", "throughput", "--seconds", "0"], capture_output=True, text=True,
                       timeout=30, check=False, cwd=ROOT)
    assert r.returncode == 2
    assert "--seconds" in r.stdout + r.stderr


@pytest.mark.parametrize(
    ("history", "expected"),
    [
        ([], 12_500),
        ([(12_500, True), (25_000, True)], 50_000),
        ([(12_500, True), (25_000, False)], 18_800),  # bisect, rounded to 100
        ([(100_000, True), (105_000, False)], None),  # within 10%: done
        ([(400_000, True)], None),  # --max-rate reached
        ([(12_500, False)], 6_200),  # below the start: halve
    ],
)
def test_search_doubles_then_bisects(history: list[tuple[float, bool]], expected: float | None) -> None:
    steps = [Step(rate, failure="" if ok else "x") for rate, ok in history]
    assert _next_rate(steps, 12_500, 400_000) == expected
