"""The supervisor adopts a live owner: it follows the lease and ends as a supervised run would."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import threading
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from stream_pipelines.control.control_store import ControlStore
from stream_pipelines.control.lease import Lease, LeaseRecord
from stream_pipelines.core.config import load_config

APP = "raw_archive"
SETTINGS = ["supervision.heartbeat_interval=0.2 seconds", "supervision.lease_timeout=1 seconds"]


@pytest.fixture
def adopt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A supervisor task's adoption of a live owner, on this worker."""
    monkeypatch.setenv("AIRFLOW_HOME", os.environ.get("AIRFLOW_HOME", str(tmp_path / "airflow")))
    from stream_pipelines.airflow.drivers import OnThisWorker
    from stream_pipelines.core.registry import app

    return lambda config, owner: OnThisWorker(config, app(APP), logging.getLogger("supervisor")).adopt(owner)


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


def test_a_graceful_stop_of_the_adopted_driver_ends_the_try_in_success(adopt, tmp_path):
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
    adopt(config, lease.read())  # returns: success


def test_an_adopted_driver_on_another_host_that_stops_renewing_fails_the_try(adopt, tmp_path):
    from airflow.sdk.exceptions import AirflowException

    config = load_config("local", [f"paths.data_root={tmp_path}", *SETTINGS], environ={})
    lease = Lease(config, APP)
    write_lease(lease, pid=os.getpid(), host="another-host", heartbeat_age_s=0)
    with pytest.raises(AirflowException, match="stopped renewing its lease"):
        adopt(config, lease.read())


def test_a_frozen_adopted_driver_here_is_stopped_then_killed_by_the_watchdog(adopt, tmp_path):
    """A heartbeat gone stale while the driver's process still exists: the watchdog asks it to stop,
    waits the drain timeout, kills its process group, and only then the try fails so it restarts. The
    driver must be dead when the try fails: the task process exits right after, and its watchdog
    thread with it (a chaos run's frozen driver outlived the watchdog's verdict that way)."""
    from airflow.sdk.exceptions import AirflowException

    config = load_config(
        "local", [f"paths.data_root={tmp_path}", *SETTINGS, "supervision.drain_timeout=3 seconds"], environ={}
    )
    # A driver in a session of its own (as spark-submit is started), frozen: it never renews.
    frozen = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        lease = Lease(config, APP)
        write_lease(lease, pid=frozen.pid, host=lease.host, heartbeat_age_s=0)
        with pytest.raises(
            AirflowException, match=r"watchdog: adopted raw_archive was stuck: heartbeat \d+s old"
        ):
            adopt(config, lease.read())
        assert frozen.wait(timeout=1) == -signal.SIGKILL, "the try failed while the driver still ran"
        store = ControlStore(config)
        assert store.stop_marker(APP).exists(), "it was asked to stop before it was killed"
        assert store.watchdog_restarts(APP) == 1
    finally:
        if frozen.poll() is None:
            frozen.kill()
            frozen.wait()


def write_lease(lease: Lease, *, pid: int, host: str, heartbeat_age_s: float) -> None:
    now = time.time()
    record = LeaseRecord("elsewhere", host, pid, now - 60, now - heartbeat_age_s)
    lease.path.parent.mkdir(parents=True, exist_ok=True)
    lease.path.write_text(json.dumps(asdict(record)))


def test_an_adopted_driver_that_fails_fails_the_try(adopt, tmp_path):
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
        adopt(config, lease.read())


def test_a_driver_group_whose_processes_exited_unreaped_has_ended_by_itself(zombie):
    """Under a PID 1 that reaps orphans late (as on CI), an adopted driver that drained and exited stays a
    zombie in its group: the watchdog must see it ended, not wait out the drain timeout and kill it."""
    from stream_pipelines.airflow.drivers import _end_group

    assert _end_group(zombie, drain_timeout_s=5) is True, "an exited group was killed as stuck"
