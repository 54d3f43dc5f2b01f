"""``dpc bench reconcile`` at a tiny size (ops_scripts/bench/reconcile.py): it generates,
judges with both checkers, prints the table and the verdicts, and fails loudly when a
verdict is not valid. Speed is never asserted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from node.procs.runlog import read_log
from ops_scripts.bench import reconcile as bench
from ops_scripts.bench.reconcile import parse_sizes, run_reconcile_bench
from ops_scripts.cli import main
from ops_scripts.reconcile.generate import generate_run
from protocol.tuples import Kind
from tests.runlogs import write_rows


def test_tiny_sizes_print_the_table_and_both_verdicts(spark: Any, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    code = run_reconcile_bench((5_000, 10_000), check_max=5_000, keep=tmp_path / "b",
                               failures=0)
    out = capsys.readouterr().out
    assert code == 0, out
    table = out[out.index("  " + " " * 8 + "size"):].splitlines()
    rows = [ln.split() for ln in table[1:3]]
    assert [r[0] for r in rows] == ["5,000", "10,000"]
    assert rows[0][3] != "-" and rows[1][3] == "-"  # check s: tried, then above --check-max
    assert "verdicts at 5,000: dpc check valid, dpc reconcile valid" in out
    assert "verdicts at 10,000: dpc check -, dpc reconcile valid" in out
    assert "largest size tried: " in out
    assert (tmp_path / "b" / "run-10000" / "history.jsonl").is_file()  # --keep keeps


def test_a_run_that_is_not_valid_fails_the_bench(spark: Any, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A generator that loses a client tuple (a real broken run, judged for real)."""
    def lossy(*args: Any, **kwargs: Any) -> Any:
        done = generate_run(*args, **kwargs)
        log = done.run_dir / "clients" / "c1.arrow"
        rows = read_log(log)
        i = next(k for k, (_, t) in enumerate(rows) if t.kind is Kind.STABLE)
        write_rows(log, rows[:i] + rows[i + 1:])
        return done

    monkeypatch.setattr(bench, "generate_run", lossy)
    assert run_reconcile_bench((5_000,), check_max=5_000, failures=0) == 1
    captured = capsys.readouterr()
    assert "dpc check NOT VALID, dpc reconcile NOT VALID" in captured.out
    assert "FAILED: a generated run must be valid" in captured.err


def test_sizes_parse_and_bad_ones_are_usage_errors() -> None:
    assert parse_sizes("1e6,1e7") == (1_000_000, 10_000_000)
    assert parse_sizes("20000") == (20_000,)
    for bad in ("", "1e6,x", "0"):
        with pytest.raises(ValueError, match="size"):
            parse_sizes(bad)
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "reconcile", "--sizes", "lots"])
    assert exit_.value.code == 2
