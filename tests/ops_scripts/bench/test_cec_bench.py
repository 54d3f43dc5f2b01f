"""``dpc bench cec`` at its tiny size: the CSVs and plots are written, and the CEC paper's
claims that are counts (records per result, G_checks against U and CP, the replay within U,
the extent against the open parts and the state) hold on them. The claims about time are
the full bench's (docs/cec.md), not a test's: this machine is shared."""

from __future__ import annotations

from pathlib import Path

from ops_scripts.bench.cec import judge_claims, run_cec_bench


def test_the_cec_bench_writes_its_figures_and_its_count_claims_hold(tmp_path: Path) -> None:
    assert run_cec_bench(tmp_path, "tiny", reps=1, timing=False) == 0
    for name in ("throughput", "targets", "periods"):
        assert (tmp_path / f"{name}.csv").stat().st_size > 0
        assert (tmp_path / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    claims = judge_claims(tmp_path, timing=False)
    assert len(claims) >= 6 and all(ok for _, ok, _ in claims), claims
