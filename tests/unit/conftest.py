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


class _BucketsThroughOneClient:
    """The session's S3 server, whose ``create_bucket`` goes through one S3 client for the whole session.

    ``ObjectStoreServer.create_bucket`` builds a new client per bucket, and a botocore client costs
    0.1-0.3 s to set up on this machine: about 30 tests of this tier run on S3, each in a bucket of its
    own. Everything else is the server's own."""

    def __init__(self, server) -> None:
        self._server = server
        self._client = None

    def __getattr__(self, name: str):
        return getattr(self._server, name)

    def create_bucket(self, name: str) -> str:
        if self._client is None:
            import s3fs

            from stream_pipelines.devtools.object_store import CREDENTIALS

            self._client = s3fs.S3FileSystem(
                key=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                secret=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                endpoint_url=self._server.endpoint,
                skip_instance_cache=True,
            )
        if not self._client.exists(name):
            self._client.mkdir(name)  # no region given: us-east-1, which takes no location constraint
        return f"s3a://{name}"


@pytest.fixture(scope="session")
def object_store(object_store):
    """tests/conftest.py's S3 server (``s3_root`` takes it from here in this tier), one client for buckets."""
    return _BucketsThroughOneClient(object_store)


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
    from stream_pipelines.core.procfs import proc_stat

    exited = subprocess.Popen(["true"], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while proc_stat(exited.pid)[:1] != ["Z"]:
            assert time.monotonic() < deadline, f"pid {exited.pid} never became a zombie"
            time.sleep(0.01)
        yield exited.pid
    finally:
        exited.wait()
