"""The ``dpc`` console script, run as a real process (what a user types)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import EXAMPLES

DPC = shutil.which("dpc", path=str(Path(sys.executable).parent)) or "dpc"


def dpc(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DPC, *args], capture_output=True, text=True, timeout=timeout, check=False)


@pytest.mark.parametrize("method", ["checkpoint", "undo"])
def test_demo_shows_failure_tentative_results_and_correction(method: str) -> None:
    r = dpc("demo", "--simulated-only", "--method", method)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "UP_FAILURE" in out and "STABILIZATION" in out
    n_tent = int(re.search(r"tentative tuples \(N_tentative\)\s+(\d+)", out).group(1))  # type: ignore[union-attr]
    assert n_tent > 0
    assert re.search(r"UNDOs\s+1\b", out) and re.search(r"REC_DONEs\s+1\b", out)
    assert "eventual consistency: OK" in out
    assert "X = 3.0 s: kept" in out


def test_bench_core_prints_both_rates_and_their_ratio() -> None:
    r = dpc("bench", "core", "--tuples", "6000", "--repeat", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    bare = re.search(r"bare: decode \+ iterate\s+([\d,]+)\s+[\d.]+\s+([\d,]+)", r.stdout)
    chain = re.search(r"chain: decode \+ 4 operators\s+([\d,]+)\s+[\d.]+\s+([\d,]+)", r.stdout)
    assert bare and chain, r.stdout
    assert bare.group(1) == chain.group(1)  # same tuples through both loops
    assert re.search(r"chain / bare = \d+\.\d{3}", r.stdout)
    # The chain fed columns ran the same tuples and emitted the same output (else exit 1).
    cols = re.search(r"chain in columns\s+([\d,]+)\s+[\d.]+\s+([\d,]+)", r.stdout)
    assert cols and cols.group(1) == chain.group(1), r.stdout
    assert re.search(r"columns / tuples = \d+\.\d\d   \(the same output", r.stdout), r.stdout


def test_bench_refuses_nonsense_sizes() -> None:
    r = dpc("bench", "core", "--tuples", "5", "--frame", "100")
    assert r.returncode == 2
    assert "--tuples" in r.stdout + r.stderr


def test_unknown_command_is_a_usage_error() -> None:
    r = dpc("frobnicate")
    assert r.returncode == 2
    assert "invalid choice" in r.stderr


def test_fault_names_a_wrong_replica_and_an_unreachable_control_plane(tmp_path: Path) -> None:
    from tests.integration.test_cluster import small

    example = str(small("basic.toml", tmp_path))  # free ports: nothing listens there
    r = dpc("fault", example, "n9z", "cut", "s3")
    assert r.returncode == 2 and "no replica 'n9z'" in r.stderr and "n1a, n1b" in r.stderr
    r = dpc("fault", example, "n1a", "cut")
    assert r.returncode == 2 and "cut needs at least one process name" in r.stderr
    r = dpc("fault", example, "n1a", "heal")  # nothing runs: its control plane is not there
    assert r.returncode == 2 and "control plane unreachable" in r.stderr, r.stderr


def test_recover_refuses_what_it_cannot_rebuild(tmp_path: Path) -> None:
    one = tmp_path / "one.toml"  # basic.toml with n1's second replica left out
    text = (EXAMPLES / "basic.toml").read_text()
    start = text.index("[[nodes.n1.replicas]]", text.index("[[nodes.n1.replicas]]") + 1)
    end = text.index("\n[", start + 1)
    one.write_text(text[:start] + text[end:])
    r = dpc("node", str(one), "n1a", "--run-dir", str(tmp_path / "run"), "--recover", timeout=60)
    assert r.returncode == 2 and "node 'n1' has no other replica to rebuild from" in r.stderr, r
    r = dpc("node", str(EXAMPLES / "basic.toml"), "s1", "--run-dir", str(tmp_path / "run"),
            "--recover", timeout=60)
    assert r.returncode == 2 and "only a node replica can --recover" in r.stderr, r


@pytest.mark.parametrize("jobs", [1, 2])
def test_ctrl_c_stops_a_simulation_with_the_figures_of_the_runs_done(tmp_path: Path,
                                                                      jobs: int) -> None:
    """Ctrl-C (SIGINT to the whole process group: the workers get it too) ends `dpc
    simulate` with exit 130 and a summary of the runs that finished, and no traceback."""
    from tests.integration.test_cluster import interruptible

    proc = subprocess.Popen([DPC, "simulate", "--runs", "60", "--jobs", str(jobs),
                             "--run-dir", str(tmp_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=interruptible)
    try:
        assert proc.stdout is not None
        head = [proc.stdout.readline() for _ in range(2)]  # the banner, the first progress
        assert re.match(r"  3/60 runs, 0 failed", head[1]), head
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, out + err
    done = re.search(r"interrupted \(Ctrl-C\) after (\d+)/60 runs", out)
    assert done and 3 <= int(done.group(1)) < 60, out
    assert f"dpc simulate: {done.group(1)} runs, {done.group(1)} valid, 0 failed" in out, out
    assert f"interrupted, {60 - int(done.group(1))} of 60 runs not done" in out
    assert "Traceback" not in err and "Task was destroyed" not in err, err
