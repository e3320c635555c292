"""Found by `make chaos`: an adopted driver whose lease goes stale while its process lives on.

The adopting try fails at once, and the retry (a few seconds later, by the retry policy) finds no live
owner and starts a second spark-submit while the first driver still runs: two drivers of one app until
the old one's next renewal finds the lease taken. The non-adopted path (the watchdog) stops the driver
first: graceful stop, drain_timeout, then its process group killed. The adopted path should too.

Seen in a chaos run under load: supervise_sensor_aggregation, adopting since a task-runner kill, failed
with "adopted sensor_aggregation stopped renewing its lease (..., heartbeat 11s ago)" during a broker
restart while the driver (pid 12325) kept running; a restart was recorded, and only because the next
try came 70 s later did it find the same driver live again and re-adopt it.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from stream_pipelines.config import load_config
from stream_pipelines.devtools.processes import alive
from stream_pipelines.lease import Lease

APP = "raw_archive"
SETTINGS = [
    "supervision.heartbeat_interval=0.2 seconds",
    "supervision.lease_timeout=1 seconds",
    "supervision.drain_timeout=1 seconds",
]


@pytest.fixture
def operator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("AIRFLOW_HOME", os.environ.get("AIRFLOW_HOME", str(tmp_path / "airflow")))
    from stream_pipelines.orchestration import StreamingAppOperator

    return StreamingAppOperator(task_id="run_app", app=APP)


@pytest.mark.xfail(strict=True, reason="the adopted path fails the try without stopping the stale owner")
def test_a_stale_adopted_driver_that_still_runs_is_stopped_before_the_try_fails(operator, tmp_path):
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
        with pytest.raises(AirflowException, match="stopped renewing its lease"):
            operator._adopt(config, Lease(config, APP), lease.read())
        # Before the try fails, the frozen owner is gone: the retry must not start a second driver beside it.
        driver.poll()
        assert not alive(driver.pid), "the stale owner still runs while the supervisor gives up on it"
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, 9)
            driver.wait()
