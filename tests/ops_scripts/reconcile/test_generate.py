"""The run generator (ops_scripts/reconcile/generate.py): its runs are valid for both
``dpc check`` and ``dpc reconcile``, and one lost client tuple makes them invalid for both;
its streamed outputs are the reference run's; it counts what it wrote."""

from __future__ import annotations

import io
import shutil
from pathlib import Path
from typing import Any

import pytest

from node.config.load import load_config
from node.procs.rundir import RunDir, read_source_log
from node.procs.runlog import count_rows, read_log, read_tuples
from ops_scripts.check.compose import run_check
from ops_scripts.check.reference import reference_outputs
from ops_scripts.errors import GenerateError
from ops_scripts.reconcile.generate import DEFAULT_CONFIG, generate_run
from ops_scripts.reconcile.run import run_reconcile
from protocol.tuples import Kind
from tests.runlogs import write_rows


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small generated run with one failure episode (about 60,000 logged tuples)."""
    out = tmp_path_factory.mktemp("gen") / "run"
    generate_run(DEFAULT_CONFIG, out, 20_000, seed=3, failures=1, progress=None)
    return out


def _check(run_dir: Path) -> tuple[int, str]:
    out = io.StringIO()
    return run_check(run_dir, out=out), out.getvalue()


def test_a_generated_run_is_valid_for_dpc_check_with_its_failure(run: Path) -> None:
    code, text = _check(run)
    assert code == 0, text
    assert "0 invalid, 0 unknown -> PASS" in text
    client = read_tuples(RunDir(run).client_log("c1"))
    kinds = [t.kind for t in client]
    assert kinds.count(Kind.UNDO) == 1 and kinds.count(Kind.REC_DONE) == 1
    assert kinds.count(Kind.TENTATIVE) > 100  # the failure shows, and was corrected
    assert "1 UNDO(s), each taking back tentative tuples only" in text


def test_a_generated_run_is_valid_for_dpc_reconcile(spark: Any, run: Path,
                                                    tmp_path: Path) -> None:
    out = io.StringIO()
    code = run_reconcile([run], out=tmp_path / "rec", stdout=out, stderr=io.StringIO())
    assert code == 0, out.getvalue()
    assert out.getvalue().startswith("run run: valid ("), out.getvalue()


def test_one_client_tuple_deleted_is_invalid_for_both(spark: Any, run: Path,
                                                      tmp_path: Path) -> None:
    broken = shutil.copytree(run, tmp_path / "broken")
    log = broken / "clients" / "c1.arrow"
    rows = read_log(log)
    victim = len(rows) // 2 + next(i for i, (_, t) in enumerate(rows[len(rows) // 2:])
                                   if t.kind is Kind.STABLE)
    gone = rows.pop(victim)[1].id
    write_rows(log, rows)
    code, text = _check(broken)
    assert code == 1 and "eventual-consistency  client c1 (n1.out)    invalid" in text, text
    assert f"id={gone}" in text
    out = io.StringIO()
    assert run_reconcile([broken], out=tmp_path / "rec", stdout=out,
                         stderr=io.StringIO()) == 1
    assert out.getvalue().startswith("run broken: INVALID: eventual-consistency client c1"), \
        out.getvalue()


def test_streamed_outputs_equal_the_reference_run(tmp_path: Path) -> None:
    """The generator pushes a second at a time with boundaries; the checkers push each
    whole log then END_OF_STREAM: the stable results must be the same, on two configs
    (examples/sim.toml has two nodes in a chain and an aggregate)."""
    for path in (DEFAULT_CONFIG, DEFAULT_CONFIG.with_name("sim.toml")):
        config = load_config(path)
        rd = RunDir(tmp_path / path.stem)
        generate_run(config, rd.path, 8_000, seed=1, progress=None)
        ref = reference_outputs(config, {s: read_source_log(rd, s) for s in config.sources})
        for node in config.nodes.values():
            for r in node.replicas:
                for stream in node.outputs:
                    got = [t for t in read_tuples(rd.replica_output(r.name, stream))
                           if t.kind is Kind.STABLE]
                    assert got == ref[stream] and got, (path.name, r.name, stream)


def test_it_counts_what_it_wrote_near_the_size_asked(tmp_path: Path) -> None:
    done = generate_run(DEFAULT_CONFIG, tmp_path / "run", 30_000, seed=1, progress=None)
    rd = RunDir(done.run_dir)
    rows = sum(count_rows(p) for p in (*rd.replicas.rglob("*.arrow"), *rd.clients.glob("*.arrow")))
    sources = sum(len(read_source_log(rd, s)) for s in ("s1", "s2", "s3"))
    assert (done.source_rows, done.log_rows) == (sources, rows)
    assert done.logged == sum(done.per_log.values())
    assert 0.8 * 30_000 <= done.logged <= 1.2 * 30_000, done.logged
    assert done.tentative == 0 and done.failures == 0


def test_it_never_overwrites_and_refuses_file_sources(tmp_path: Path) -> None:
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("mine")
    with pytest.raises(GenerateError, match="not empty"):
        generate_run(DEFAULT_CONFIG, tmp_path / "full", 1_000, seed=1, progress=None)
    with pytest.raises(GenerateError, match="only synthetic sources"):
        generate_run(DEFAULT_CONFIG.with_name("weather.toml"), tmp_path / "new", 1_000,
                     seed=1, progress=None)
