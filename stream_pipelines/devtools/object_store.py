"""An S3-compatible object store on 127.0.0.1 (moto's server, from PyPI), for tests and local rehearsals.

It speaks the S3 REST API that both Spark's S3A connector and s3fs use, conditional PUTs included
(``If-None-Match: *``, ``If-Match``). It keeps objects in memory: a restart of the server loses them,
which no test needs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

from stream_pipelines.devtools.processes import free_port, stop_process_group

# moto accepts any credentials; both the JVM's AWS SDK and botocore read them from the environment.
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "pipeline-test", "AWS_SECRET_ACCESS_KEY": "pipeline-test-secret"}
REGION = "us-east-1"


class ObjectStoreServer:
    def __init__(self, log_dir: Path, port: int | None = None) -> None:
        self.port = port or free_port()
        self.log_path = log_dir / "object-store.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def settings(self) -> list[str]:
        """Config overrides that point Spark's S3A connector and the project's file layer at this server."""
        s3a = "spark.extra_conf.spark.hadoop.fs.s3a"
        return [
            f"{s3a}.endpoint={self.endpoint}",
            f'{s3a}.endpoint.region="{REGION}"',
            f'{s3a}.path.style.access="true"',
            f'{s3a}.connection.ssl.enabled="false"',
            # Fail fast on loopback instead of the SDK's minutes of retries against a stopped server.
            f'{s3a}.attempts.maximum="3"',
            f'{s3a}.retry.limit="3"',
        ]

    def start(self, timeout_s: float = 60.0) -> ObjectStoreServer:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, **CREDENTIALS},
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"the object store exited with {self._process.returncode}; see {self.log_path}:\n"
                    + self.log_path.read_text()[-2000:]
                )
            try:
                urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=2).close()
                return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"the object store did not answer on {self.endpoint} within {timeout_s:.0f}s")

    def create_bucket(self, name: str) -> str:
        """Create a bucket (idempotent) and return its s3a:// URL."""
        import s3fs  # deferred: only object-store runs need it

        filesystem = s3fs.S3FileSystem(
            key=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            secret=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            endpoint_url=self.endpoint,
            skip_instance_cache=True,
        )
        if not filesystem.exists(name):
            filesystem.mkdir(name)  # no region given: us-east-1, which takes no location constraint
        return f"s3a://{name}"

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            stop_process_group(self._process.pid)
            self._process.wait(timeout=10)
        self._process = None

    def __enter__(self) -> ObjectStoreServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()
