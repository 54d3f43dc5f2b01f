"""The suite's order: its longest modules first.

``make test`` runs the suite on every core (pytest-xdist), and its last minute had one core
idle while the other ran a long test alone (the standalone Spark cluster's, the random
simulations'): xdist hands out tests in collection order. The modules holding the tests of
25 s or more go first (whole modules: their module-scoped fixtures stay shared), so that
the short tests fill the end.
"""

from __future__ import annotations

import pytest

#: The modules with a test of 25 s or more on 2 cores (make test's --durations), longest
#: first; tests/integration/ comes first in collection order anyway.
LONG_FIRST = (
    "tests/ops_scripts/reconcile/test_standalone.py",
    "tests/ops_scripts/harness/test_simulate.py",
    "tests/integration/test_soak.py",
    "tests/integration/test_adversary.py",
    "tests/ops_scripts/reconcile/test_spark_expr.py",
    "tests/ops_scripts/reconcile/test_bench_reconcile.py",
    "tests/ops_scripts/reconcile/test_plans.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {path: i for i, path in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(LONG_FIRST)))
