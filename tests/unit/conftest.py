"""Unit tests: no JVM, no broker, no Airflow. A test that starts Spark fails here, so they stay fast."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def no_spark_started() -> Iterator[None]:
    from pyspark import SparkContext

    before = SparkContext._active_spark_context
    yield
    assert SparkContext._active_spark_context is before, "a unit test started a SparkContext"


@pytest.fixture(params=["local", "s3"])
def stored_root(request: pytest.FixtureRequest, tmp_path) -> list[str]:
    """Overrides that put the data root in a local folder, or in a bucket on the loopback S3 server (the
    local scratch folder stays local): a test that takes it runs once on each store."""
    if request.param == "s3":
        return [*request.getfixturevalue("s3_root")(), f"paths.scratch={tmp_path}/scratch"]
    return [f"paths.data_root={tmp_path}"]


@pytest.fixture
def zombie() -> Iterator[int]:
    """The pid of a process that has exited but is not reaped yet, in a process group of its own: what a
    kill -9'd driver stays under a PID 1 that reaps orphans late (as on CI). Reaped at teardown."""
    from stream_pipelines.control import proc_stat

    exited = subprocess.Popen(["true"], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while proc_stat(exited.pid)[:1] != ["Z"]:
            assert time.monotonic() < deadline, f"pid {exited.pid} never became a zombie"
            time.sleep(0.01)
        yield exited.pid
    finally:
        exited.wait()
