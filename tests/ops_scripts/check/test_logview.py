"""``dpc log RUN_DIR NAME`` (ops_scripts/check/logview.py) on the logs of a real small run:
one line per row as the readers read it, heads and tails, JSON, counts, a replica's
incarnations under headings, and the errors that name what is there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from node.config.load import load_config
from node.procs.rundir import RunDir
from node.procs.runlog import count_rows, read_log
from ops_scripts.cli import main
from ops_scripts.harness.simulate import DEFAULT_CLUSTER, simulate_one
from tests.paths import ROOT
from tests.runlogs import garble_record


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A simulated run of examples/sim.toml (the processes' own code writes its logs) whose
    seed restarts replicas: n1b has an earlier incarnation's log."""
    path = tmp_path_factory.mktemp("log") / "run"
    assert simulate_one(load_config(DEFAULT_CLUSTER), 4, path).ok
    assert RunDir(path).replica_output_before("n1b", "n1.out", 1).exists()
    return path


def dpc_log(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["log", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def line(row: int, arrival: int, t: object) -> str:
    kind, i, time, tmax, values = t  # type: ignore[misc]
    return (f"row {row}  {kind.name:<10} id={i} time={time} tmax={tmax} "
            f"values={orjson.dumps(list(values)).decode()} arrival={arrival}")


def test_a_client_log_is_printed_a_row_per_line(run: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    rows = read_log(RunDir(run).client_log("c1"))
    assert len(rows) > 50
    code, out, err = dpc_log(capsys, run, "c1")
    assert code == 0 and err == ""
    assert out.splitlines() == [line(n, a, t) for n, (a, t) in enumerate(rows, start=1)]
    code, out, _ = dpc_log(capsys, run, "c1", "--tail", 5)
    assert out.splitlines() == [line(n, a, t) for n, (a, t) in
                                enumerate(rows, start=1)][-5:]
    code, out, _ = dpc_log(capsys, run, "c1", "--head", 3, "--json")
    assert [orjson.loads(x) for x in out.splitlines()] == [
        {"log": "clients/c1.arrow", "row": n, "kind": t.kind.name, "id": t.id, "time": t.time,
         "tmax": t.tmax, "values": list(t.values), "arrival": a}
        for n, (a, t) in enumerate(rows[:3], start=1)]
    assert dpc_log(capsys, run, "c1", "--count")[1] == f"{len(rows)}\n"


def test_a_replica_prints_each_log_under_a_heading(run: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    rd = RunDir(run)
    earlier, current = rd.replica_output_before("n1b", "n1.out", 1), rd.replica_output("n1b", "n1.out")
    code, out, _ = dpc_log(capsys, run, "n1b", "--tail", 2)
    assert code == 0
    text = out.splitlines()
    assert text[0] == ("== n1b n1.out (incarnation 1, before a restart): "
                       "replicas/n1b/n1.out.incarnation-1.arrow ==")
    assert text[3:5] == ["", "== n1b n1.out: replicas/n1b/n1.out.arrow =="]
    n = count_rows(current)
    assert text[5].startswith(f"row {n - 1}  ") and text[6].startswith(f"row {n}  ")
    code, out, _ = dpc_log(capsys, run, "n1b", "--stream", "n1.out", "--count")
    assert out == (f"n1b n1.out (incarnation 1, before a restart): {count_rows(earlier)}\n"
                   f"n1b n1.out: {n}\n")
    code, out, _ = dpc_log(capsys, run, "n1a", "--head", 1)  # one log: no heading
    assert code == 0 and out.startswith("row 1  ") and len(out.splitlines()) == 1


def test_unknown_names_streams_and_directories_say_what_there_is(
        run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = dpc_log(capsys, run, "n9")
    assert code == 2 and (f"no client or replica named 'n9' logged in {run}; clients: c1; "
                          "replicas: n1a, n1b, n1c, n2a, n2b") in err
    code, _, err = dpc_log(capsys, run, "n1b", "--stream", "n2.out")
    assert code == 2 and "replica n1b logged no stream 'n2.out'; its streams: n1.out" in err
    code, _, err = dpc_log(capsys, run, "c1", "--stream", "n2.out")
    assert code == 2 and "c1 is a client: it has one log" in err
    code, _, err = dpc_log(capsys, tmp_path / "nope", "c1")
    assert code == 2 and f"no run directory {tmp_path / 'nope'}" in err


def test_a_corrupt_log_prints_what_precedes_the_bad_record_then_fails(
        run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rd = RunDir(tmp_path / "run")
    rd.clients.mkdir(parents=True)
    rd.client_log("c1").write_bytes(RunDir(run).client_log("c1").read_bytes())
    garble_record(rd.client_log("c1"), 2)
    code, out, err = dpc_log(capsys, rd.path, "c1")
    first = read_log(RunDir(run).client_log("c1"))[0]
    assert code == 1 and out.splitlines()[0] == line(1, *first)
    assert f"dpc log: error: tuple log {rd.client_log('c1')}, record 2 (from row " in err


def test_dpc_log_runs_as_a_command(run: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "ops_scripts.cli", "log", str(run), "c1",
                           "--tail", "1"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    rows = read_log(RunDir(run).client_log("c1"))
    assert done.stdout == line(len(rows), *rows[-1]) + "\n"
