"""What every test process shares: the replay engines' thresholds are the config's and the
defaults, never the crossovers ``dpc bench replay`` stored on the developer's machine
(node/config/crossovers.py): the suite behaves the same on every machine, and the replicas
it starts inherit this."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

os.environ["DPC_CROSSOVERS"] = str(Path(tempfile.gettempdir()) /
                                   f"dpc-suite-{os.getpid()}-no-crossovers.json")


_RECONCILE = Path(__file__).resolve().parent / "ops_scripts" / "reconcile"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Spark's tests are real processes too (a JVM per session, ``dpc reconcile`` runs, a
    standalone master and worker): marked ``slow`` with tests/integration/'s, so that
    ``make fast`` (``-m "not slow"``) stays a quick loop; ``make test`` runs them all."""
    for item in items:
        path = Path(str(item.path)).resolve()
        if "spark" in getattr(item, "fixturenames", ()) or _RECONCILE in path.parents:
            item.add_marker(pytest.mark.slow)
