"""Unit tests: no JVM, no broker, no Airflow. A test that starts Spark fails here, so they stay fast."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def no_spark_started() -> Iterator[None]:
    from pyspark import SparkContext

    before = SparkContext._active_spark_context
    yield
    assert SparkContext._active_spark_context is before, "a unit test started a SparkContext"
