"""``dpc bench reconcile``: rows per second of ``dpc reconcile`` beside ``dpc check``.

For each size (logged tuples: source rows plus client and replica log lines, as
``ops_scripts/reconcile/generate.py`` counts them) a consistent run directory is generated
(its time printed, not counted), then judged twice:

* **check**: ``dpc check RUN_DIR`` in a child process (its start-up counted: what a user
  waits for; a child so that its memory, all of the run's logs at once, is its own and its
  peak RSS can be read). Sizes above ``--check-max`` are not tried ("-");
* **reconcile**: ``run_reconcile`` in this process, the Spark session's start timed apart
  from the job (the session is built once, at the first size; later sizes reuse it).

The figure that matters is reconcile rows/s over check rows/s on the same run, measured in
the same invocation: the machine is shared, absolute numbers alone prove little. Both must
say valid: a run the generator made is valid by construction, so any other verdict is a
bug somewhere, and the bench exits 1 saying which. Speed is reported, never asserted.
"""

from __future__ import annotations

import io
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ops_scripts.reconcile.generate import DEFAULT_CONFIG, Generated, generate_run

__all__ = ["Measured", "parse_sizes", "run_reconcile_bench"]


@dataclass
class Measured:
    """One size: the run generated, and each judge's seconds and verdict (None: not run)."""

    size: int
    run: Generated
    disk: int  # bytes of the run directory
    check_s: float | None = None
    check_ok: bool | None = None
    check_rss: int | None = None  # bytes, peak of the child (None: not run)
    session_s: float = 0.0
    reconcile_s: float = 0.0
    reconcile_ok: bool = False
    reconcile_disk: int = 0  # bytes of tables, differences and report


def parse_sizes(text: str) -> tuple[int, ...]:
    """``1e6,1e7`` or ``20000`` -> sizes (ValueError naming a bad one; each >= 1)."""
    try:
        sizes = tuple(int(float(s)) for s in text.split(","))
    except ValueError:
        raise ValueError(f"not a comma-separated list of sizes: {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise ValueError(f"sizes must be >= 1: {text!r}")
    return sizes


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _check(run_dir: Path) -> tuple[float, bool, int, str]:
    """``dpc check`` in a child: seconds, valid, the child's peak RSS (bytes), last line."""
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "ops_scripts.cli", "check", str(run_dir)],
                          capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - began
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # the largest so far
    lines = (done.stdout + done.stderr).strip().splitlines()
    return seconds, done.returncode == 0, rss, lines[-1] if lines else "(no output)"


def _reconcile(run_dir: Path, out: Path) -> tuple[float, float, bool, str]:
    """Session start (0 once built), job seconds, valid, the verdict line."""
    from node.spark.session import spark_session
    from ops_scripts.reconcile.run import run_reconcile

    began = time.perf_counter()
    spark_session()
    session = time.perf_counter() - began
    stdout = io.StringIO()
    began = time.perf_counter()
    code = run_reconcile([run_dir], out=out, stdout=stdout, stderr=io.StringIO())
    seconds = time.perf_counter() - began
    lines = stdout.getvalue().strip().splitlines()
    return session, seconds, code == 0, lines[0] if lines else "(no verdict line)"


def _rate(rows: int, seconds: float | None) -> str:
    return "-" if seconds is None else f"{rows / seconds:,.0f}"


def _table(rows: Sequence[Measured]) -> None:
    head = (f"  {'size':>12}{'logged':>12}{'gen s':>8}{'check s':>9}{'check rows/s':>14}"
            f"{'check RSS':>11}{'spark start s':>15}{'reconcile s':>13}"
            f"{'reconcile rows/s':>18}{'rec/check':>11}{'run disk':>10}")
    print(head)
    for m in rows:
        n = m.run.logged
        check_s = "-" if m.check_s is None else f"{m.check_s:.1f}"
        rss = "-" if m.check_rss is None else f"{m.check_rss / 2**30:.2f} GB"
        ratio = "-" if m.check_s is None else f"{m.check_s / m.reconcile_s:.2f}"
        print(f"  {m.size:>12,}{n:>12,}{m.run.wall_seconds:>8.1f}{check_s:>9}"
              f"{_rate(n, m.check_s):>14}{rss:>11}{m.session_s:>15.1f}{m.reconcile_s:>13.1f}"
              f"{_rate(n, m.reconcile_s):>18}{ratio:>11}{m.disk / 2**20:>7,.0f} MB")


def run_reconcile_bench(sizes: Sequence[int] = (10**6, 10**7), *, check_max: int = 10**6,
                        keep: Path | None = None, config: Path = DEFAULT_CONFIG,
                        failures: int = 2, seed: int = 1) -> int:
    """The bench (module docstring). Returns 0 if every verdict was valid, else 1.
    ``keep``: where the runs and reconcile outputs stay (default: a temporary directory,
    deleted at the end)."""
    base = Path(keep) if keep is not None else Path(tempfile.mkdtemp(prefix="dpc-bench-rec-"))
    base.mkdir(parents=True, exist_ok=True)
    print(f"dpc bench reconcile: sizes {', '.join(f'{s:,}' for s in sizes)} logged tuples "
          f"of {config.name}, {failures} failure(s) each; dpc check up to {check_max:,}; "
          f"runs in {base}{'' if keep else ' (deleted after)'}", flush=True)
    done: list[Measured] = []
    problems: list[str] = []
    try:
        for size in sizes:
            run_dir = base / f"run-{size}"
            run = generate_run(config, run_dir, size, seed, failures,
                               progress=lambda line: print(f"  {line}", flush=True))
            m = Measured(size, run, _du(run_dir))
            print(f"  generated {run.logged:,} logged tuples in {run.wall_seconds:.1f} s "
                  f"({m.disk / 2**20:,.0f} MB)", flush=True)
            if size <= check_max:
                m.check_s, m.check_ok, m.check_rss, last = _check(run_dir)
                print(f"  dpc check: {m.check_s:.1f} s: {last}", flush=True)
                if not m.check_ok:
                    problems.append(f"size {size:,}: dpc check: {last}")
            else:
                print(f"  dpc check: not tried ({size:,} > --check-max {check_max:,})")
            m.session_s, m.reconcile_s, m.reconcile_ok, line = _reconcile(
                run_dir, base / f"reconcile-{size}")
            m.reconcile_disk = _du(base / f"reconcile-{size}")
            print(f"  dpc reconcile: {m.reconcile_s:.1f} s (+ {m.session_s:.1f} s Spark "
                  f"start): {line}", flush=True)
            if not m.reconcile_ok:
                problems.append(f"size {size:,}: dpc reconcile: {line}")
            done.append(m)
    finally:
        if keep is None:
            shutil.rmtree(base, ignore_errors=True)
    print()
    _table(done)
    largest = max(done, key=lambda m: m.size)
    disk = largest.disk + largest.reconcile_disk
    print(f"\n  largest size tried: {largest.run.logged:,} logged tuples; its disk: run "
          f"{largest.disk / 2**20:,.0f} MB + reconcile output "
          f"{largest.reconcile_disk / 2**20:,.0f} MB = {disk / 2**20:,.0f} MB "
          f"(free now: {shutil.disk_usage(base if base.exists() else os.getcwd()).free / 2**30:,.0f} GB)")
    print("  rec/check: reconcile rows/s over check rows/s on the same run (> 1: reconcile "
          "faster); Spark start not in reconcile s; check s includes its process start")
    for m in done:
        check = "-" if m.check_ok is None else "valid" if m.check_ok else "NOT VALID"
        rec = "valid" if m.reconcile_ok else "NOT VALID"
        print(f"  verdicts at {m.size:,}: dpc check {check}, dpc reconcile {rec}")
    if problems:
        print("dpc bench reconcile: FAILED: a generated run must be valid:\n  "
              + "\n  ".join(problems), file=sys.stderr)
        return 1
    return 0
