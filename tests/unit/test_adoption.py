"""The supervisor adopts a live owner: it follows the lease and ends as a supervised run would."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from stream_pipelines.config import load_config
from stream_pipelines.control import ControlStore
from stream_pipelines.lease import Lease

APP = "raw_archive"
SETTINGS = ["supervision.heartbeat_interval=0.2 seconds", "supervision.lease_timeout=1 seconds"]


@pytest.fixture
def operator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("AIRFLOW_HOME", os.environ.get("AIRFLOW_HOME", str(tmp_path / "airflow")))
    from stream_pipelines.orchestration import StreamingAppOperator

    return StreamingAppOperator(task_id="run_app", app=APP)


def owned_elsewhere(config, *, until: threading.Event) -> tuple[Lease, threading.Thread]:
    """A driver that owns the app and renews its lease until told to stop."""
    lease = Lease(config, APP)
    record = lease.acquire(log=print)

    def renew() -> None:
        batch = 0
        while not until.is_set():
            batch += 1
            record.queries = {f"{APP}.archive": {"batch_id": batch, "input_rows": 10, "watermark": None}}
            lease.renew(record)
            time.sleep(0.1)

    keeper = threading.Thread(target=renew, daemon=True)
    keeper.start()
    return lease, keeper


def test_a_graceful_stop_of_the_adopted_driver_ends_the_try_in_success(operator, tmp_path):
    config = load_config("local", [f"paths.data_root={tmp_path}", *SETTINGS], environ={})
    stop = threading.Event()
    lease, keeper = owned_elsewhere(config, until=stop)

    def stop_gracefully() -> None:
        time.sleep(1.5)
        stop.set()
        keeper.join()
        ControlStore(config).record_exit(APP, "stopped", "deliberate stop")
        lease.release()

    threading.Thread(target=stop_gracefully, daemon=True).start()
    operator._adopt(config, lease, lease.read())  # returns: success


def test_an_adopted_driver_that_stops_renewing_fails_the_try(operator, tmp_path):
    from airflow.sdk.exceptions import AirflowException

    config = load_config("local", [f"paths.data_root={tmp_path}", *SETTINGS], environ={})
    stop = threading.Event()
    lease, _keeper = owned_elsewhere(config, until=stop)
    threading.Timer(1.0, stop.set).start()  # frozen: the lease stays, its heartbeat ages
    with pytest.raises(AirflowException, match="stopped renewing its lease"):
        operator._adopt(config, Lease(config, APP), lease.read())


def test_an_adopted_driver_that_fails_fails_the_try(operator, tmp_path):
    from airflow.sdk.exceptions import AirflowException

    config = load_config("local", [f"paths.data_root={tmp_path}", *SETTINGS], environ={})
    stop = threading.Event()
    lease, keeper = owned_elsewhere(config, until=stop)

    def fail() -> None:
        time.sleep(0.5)
        stop.set()
        keeper.join()
        ControlStore(config).record_exit(APP, "failed", "query raw_archive.archive failed: boom")
        lease.release()

    threading.Thread(target=fail, daemon=True).start()
    with pytest.raises(AirflowException, match="ended without a graceful stop: failed query raw_archive"):
        operator._adopt(config, Lease(config, APP), lease.read())
