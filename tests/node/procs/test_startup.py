"""A process imports what its role needs: start-up time is a restarted replica's time to
rejoin, and the suite starts hundreds of processes. Since protocol version 9 every process
on the data path imports pyarrow and numpy (a Batch travels as Arrow columns: issue 48;
0.13 s of a replica's imports on this machine, 0.22 -> 0.35 s), but none imports Spark or
matplotlib, and a client no aiohttp (it has no control plane)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

# What ``dpc node CONFIG NAME`` does up to running its event loop (node/procs/entry.py).
BUILD = """
import json, sys
from pathlib import Path
import ops_scripts.cli
from node.config.load import load_config
from node.procs.entry import _component
from node.procs.rundir import RunDir
rd = RunDir(Path(sys.argv[3]))
rd.ensure()
_component(load_config(sys.argv[1]), sys.argv[2], rd, False, None)
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules})))
"""


def loaded(name: str, run_dir: Path) -> set[str]:
    out = subprocess.run([sys.executable, "-c", BUILD, str(EXAMPLES / "basic.toml"), name,
                          str(run_dir)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stdout))


@pytest.mark.parametrize(("name", "absent"), [("n1a", {"pyspark", "matplotlib"}),
                                               ("c1", {"pyspark", "matplotlib", "aiohttp"})])
def test_a_replica_and_a_client_start_without_what_they_do_not_use(
        name: str, absent: set[str], tmp_path: Path) -> None:
    assert not absent & loaded(name, tmp_path)


def test_a_replica_does_load_pyarrow(tmp_path: Path) -> None:
    """The probe sees an import where there is one (the wire is Arrow)."""
    assert "pyarrow" in loaded("n1a", tmp_path)
