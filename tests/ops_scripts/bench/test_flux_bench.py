"""``dpc bench flux``: its tiny size on real processes writes the CSVs and the plot, labels
every F-Prod line as the paper does, and the checker finds the client's results exactly once.
No claim about rates or time: a tiny run on a shared machine is noise (the full run's are in
docs/flux.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ops_scripts.bench.flux import LABELS, PHASES, judge_claims, run_flux_bench
from ops_scripts.bench.plotting import read_rows

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_the_tiny_flux_bench_labels_every_line_and_loses_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    run_flux_bench(out, "tiny", tmp_path / "run")
    assert (out / "fig8.png").read_bytes()[:8] == PNG
    phases = read_rows(out / "phases.csv")
    assert {r["label"] for r in phases} == set(LABELS)
    assert all(f"phase{i}" in phases[0] for i in range(1, PHASES + 1))
    assert {r["replica"] for r in read_rows(out / "rates.csv")} == {
        f"g1p{k}{rank}" for k in range(4) for rank in "ab"}
    assert [r["phase"] for r in read_rows(out / "client.csv")] == ["1", "2", "3", "4", "all"]
    kills = {e["process"] for e in read_rows(out / "events.csv") if e["event"] == "kill"}
    assert kills == {"g1p1a", "g1p0b", "g2p1a", "g2p0b"}
    claims = {c.key: c for c in judge_claims(out)}
    assert claims["exactly_once"].holds, claims["exactly_once"]
