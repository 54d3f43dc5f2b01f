"""``dpc bench replay`` at a tiny size: every engine (per tuple, vectorized, Spark) replays the
same failure and emits the same tuples (the bench compares digests), the table says so,
and the crossovers are stored where replicas read them. No speed is asserted."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from node.config.crossovers import read_crossovers, thresholds
from node.config.load import load_config
from ops_scripts.bench.replay import crossover, replay_once
from ops_scripts.cli import main
from tests.paths import EXAMPLES


def test_tiny_sizes_print_every_engine_the_same_tuples_and_store_the_crossovers(
        spark: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    monkeypatch.setenv("DPC_CROSSOVERS", str(tmp_path / "crossovers.json"))
    assert main(["bench", "replay", "--sizes", "3000,20000", "--step", "7",
                 "--spark-step", "40"]) == 0
    out = capsys.readouterr().out
    rows = re.findall(r"^\s+([\d,]+)\s+(inproc|vectorized|spark|spark cold)\s+[\d.]+\s+"
                      r"[\d,]+\s+([\d,]+)", out, re.M)
    assert [r[1] for r in rows] == ["inproc", "vectorized", "spark", "spark cold"] * 2
    # Each row's GC seconds, the last column, are a part of its replay's seconds.
    timed = re.findall(r"^\s+[\d,]+\s+(?:inproc|vectorized|spark|spark cold)\s+([\d.]+)\s+.*"
                       r"x\s+([\d.]+)$", out, re.M)
    assert len(timed) == 8 and all(float(g) <= float(s) for s, g in timed), out
    assert len({r[2] for r in rows[:4]}) == 1 and len({r[2] for r in rows[4:]}) == 1
    assert rows[4][2] != "0"
    assert "every engine (inproc, vectorized, spark) emitted the same tuples" in out
    # Stored where a replica reads them (whatever was measured: no speed is asserted).
    stored = read_crossovers()
    assert stored is not None and "sizes 3000,20000" in stored.measured
    assert f"crossovers stored in {tmp_path / 'crossovers.json'}" in out
    assert thresholds(None, None, {}, stored)[0] == (
        stored.vectorized_from if stored.vectorized_from is not None else 1_000_000)


def test_crossover_is_where_an_engine_stays_faster() -> None:
    sizes = [1, 2, 3, 4]
    assert crossover(sizes, {1: 1, 2: 3, 3: 1, 4: 3}, dict.fromkeys(sizes, 2)) == 4
    assert crossover(sizes, {1: 3, 2: 3, 3: 3, 4: 3}, dict.fromkeys(sizes, 2)) == 1
    assert crossover(sizes, dict.fromkeys(sizes, 1), dict.fromkeys(sizes, 2)) is None


def test_the_replay_spills_and_the_engines_agree(tmp_path: Path) -> None:
    """With a tiny buffer_memory the failure's input is spilled, and the vectorized replay
    (reading it as Arrow) emits what the per-tuple one does."""
    config = load_config(EXAMPLES / "basic.toml")
    node = config.nodes["n1"]
    node = replace(node, settings=replace(node.settings, buffer_memory=64 * 1024))
    runs = [replay_once(config, node, engine, 5000, 10, tmp_path / engine)
            for engine in ("inproc", "vectorized")]
    assert runs[0].digest == runs[1].digest and runs[0].outputs > 0
    assert min(r.spilled for r in runs) > 1000


def test_an_unknown_node_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "replay", "--sizes", "100", "--node", "n9", "--no-store"]) == 2
    err = capsys.readouterr().err
    assert "no node 'n9'" in err and "(nodes: n1)" in err
