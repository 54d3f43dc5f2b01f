"""One Spark session for the whole suite (tests/spark.py: building one starts a JVM, seconds;
the suite's JVMs told to compile less), and the agreement test left out of pytest-xdist's workers
(test_agreement.py says why)."""

from __future__ import annotations

import os

import pytest

from tests.spark import spark  # noqa: F401  (the suite's one session)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    out = [i for i in items if i.path.name == "test_agreement.py"]
    if out:
        items[:] = [i for i in items if i not in out]
        config.hook.pytest_deselected(items=out)
