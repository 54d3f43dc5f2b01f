"""``dpc bench replay`` at a tiny size: both engines replay the same failure, emit the same
tuples (the bench compares digests), and the table says so. No speed is asserted."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from node.config.load import load_config
from ops_scripts.bench.replay import replay_once
from ops_scripts.cli import main
from tests.paths import EXAMPLES


def test_tiny_sizes_print_both_engines_and_the_same_tuples(capsys: pytest.CaptureFixture[str]
                                                           ) -> None:
    assert main(["bench", "replay", "--sizes", "3000,20000", "--step", "7"]) == 0
    out = capsys.readouterr().out
    rows = re.findall(r"^\s+([\d,]+)\s+(inproc|vectorized)\s+[\d.]+\s+[\d,]+\s+([\d,]+)", out,
                      re.M)
    assert [r[1] for r in rows] == ["inproc", "vectorized"] * 2
    assert rows[0][2] == rows[1][2] and rows[2][2] == rows[3][2] and rows[2][2] != "0"
    assert "both engines emitted the same tuples at every size" in out


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
    assert main(["bench", "replay", "--sizes", "100", "--node", "n9"]) == 2
    err = capsys.readouterr().err
    assert "no node 'n9'" in err and "(nodes: n1)" in err
