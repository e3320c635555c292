"""Found by `make chaos`: an adopted driver whose lease goes stale while its process lives on.

Before the watchdog followed adopted drivers, the adopting try failed at once and the retry (seconds
later) found no live owner and started a second spark-submit beside the first: two drivers of one app
until the old one's next renewal found the lease taken. Seen in a chaos run under load:
supervise_sensor_aggregation, adopting since a task-runner kill, failed with "adopted
sensor_aggregation stopped renewing its lease (..., heartbeat 11s ago)" during a broker restart while
the driver kept running. Now the stale owner is stopped (graceful stop, drain timeout, its process
group killed) before the try fails.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import time
from pathlib import Path

import pytest

from stream_pipelines.control.lease import Lease
from stream_pipelines.core.config import load_config

APP = "raw_archive"
SETTINGS = [
    "supervision.heartbeat_interval=0.2 seconds",
    "supervision.lease_timeout=1 seconds",
    "supervision.drain_timeout=1 seconds",
]


@pytest.fixture
def adopt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A supervisor task's adoption of a live owner, on this worker."""
    monkeypatch.setenv("AIRFLOW_HOME", os.environ.get("AIRFLOW_HOME", str(tmp_path / "airflow")))
    from stream_pipelines.airflow.drivers import OnThisWorker
    from stream_pipelines.core.registry import app

    return lambda config, owner: OnThisWorker(config, app(APP), logging.getLogger("supervisor")).adopt(owner)


def test_a_stale_adopted_driver_that_still_runs_is_stopped_before_the_try_fails(adopt, tmp_path):
    from airflow.sdk.exceptions import AirflowException

    config = load_config("local", [f"paths.data_root={tmp_path}", *SETTINGS], environ={})
    # The frozen driver: alive, in a process group of its own (as spark-submit), never renewing.
    driver = subprocess.Popen(["sleep", "120"], start_new_session=True)
    try:
        lease = Lease(config, APP)
        lease.path.parent.mkdir(parents=True, exist_ok=True)
        now = time.time()
        record = {
            "owner": "frozen",
            "host": lease.host,
            "pid": driver.pid,
            "started_at": now,
            "heartbeat_at": now,
        }
        lease.path.write_text(json.dumps(record))
        with pytest.raises(AirflowException, match=f"adopted {APP}"):
            adopt(config, lease.read())
        # Before the try fails, the frozen owner is gone: the retry must not start a second driver beside it.
        try:
            driver.wait(5)
        except subprocess.TimeoutExpired:
            pytest.fail("the stale owner still runs while the supervisor gives up on it")
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, 9)
            driver.wait()
