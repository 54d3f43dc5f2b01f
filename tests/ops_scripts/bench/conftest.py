"""The suite's one Spark session (tests/spark.py)."""

from tests.spark import spark  # noqa: F401
