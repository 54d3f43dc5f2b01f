"""Real-process tests: whole clusters of `dpc node` processes on loopback, and the `dpc`
command itself. Every test here is marked ``slow``, so that ``make fast``
(``pytest -m "not slow"``) runs everything else alone; ``make test`` runs both."""

from __future__ import annotations

from pathlib import Path

import pytest

import tests.spark  # noqa: F401  (the JVM options: replicas may start Spark sessions)

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.slow)
