"""The control store: operator actions, the records the apps and the supervisor share, restart counts."""

from __future__ import annotations

import json
import os
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from stream_pipelines.control.control_store import (
    ControlStore,
    CrashLoopError,
    app_status,
    apply_action,
    should_run,
)
from stream_pipelines.core.config import load_config
from stream_pipelines.core.registry import app as declared_app

APP = "sensor_aggregation"


@pytest.fixture
def config(tmp_path: Path):
    return load_config("local", [f"paths.data_root={tmp_path}"], environ={})


def test_stop_records_who_and_why_and_asks_the_app_to_drain(config):
    said = apply_action(config, declared_app(APP), "stop", by="alice", reason="maintenance")
    store = ControlStore(config)
    assert "asked to stop after its current batch" in said
    assert store.stop_marker(APP).exists()
    assert store.desired(APP)["desired"] == "stopped"
    wanted, why = should_run(config, APP)
    assert not wanted
    assert "stopped by alice" in why and "(maintenance)" in why and "action=start" in why


def test_start_after_a_stop_lets_the_supervisor_run_it_again(config):
    apply_action(config, declared_app(APP), "stop", by="alice")
    apply_action(config, declared_app(APP), "start", by="bob")
    assert should_run(config, APP) == (True, f"{APP} should run")


def test_restart_keeps_it_wanted_but_drains_the_running_one(config):
    apply_action(config, declared_app(APP), "restart", by="alice")
    store = ControlStore(config)
    assert store.desired(APP)["desired"] == "running"
    assert store.stop_marker(APP).exists()
    assert store.clear_stop(APP) is True
    assert store.clear_stop(APP) is False, "the marker is gone after the first clear"


def test_pause_stops_supervision_and_resume_restores_it(config):
    apply_action(config, declared_app(APP), "pause", by="alice", reason="upgrade")
    wanted, why = should_run(config, APP)
    assert not wanted and "paused" in why and "action=resume" in why
    apply_action(config, declared_app(APP), "resume", by="alice")
    assert should_run(config, APP)[0]


def test_unknown_app_and_action_are_named(config):
    with pytest.raises(ValueError, match="unknown app 'nope'; the apps are: raw_archive"):
        apply_action(config, declared_app("nope"), "stop", by="alice")
    with pytest.raises(ValueError, match="unknown action 'explode'"):
        apply_action(config, declared_app(APP), "explode", by="alice")  # type: ignore[arg-type]


def test_restarts_are_counted_once_each_even_from_concurrent_supervisors(config):
    store = ControlStore(config)
    threads = [
        threading.Thread(target=store.record_restart, args=(APP,), kwargs={"cause": "crash"})
        for _ in range(16)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert store.restarts(APP).total == 16
    assert len(store.restarts(APP).recent) == 16


def test_the_crash_loop_guard_trips_at_the_limit_within_the_window(config):
    store = ControlStore(config)
    window = timedelta(hours=1)
    assert store.record_restart(APP, cause="boom", limit=2, window=window) == 1
    assert store.record_restart(APP, cause="boom", limit=2, window=window) == 2
    with pytest.raises(CrashLoopError, match="2 restarts within 1:00:00 \\(limit 2\\); last failure: boom"):
        store.record_restart(APP, cause="boom", limit=2, window=window)
    assert "Restarts stopped" in store.crash_loop(APP)["reason"]
    assert store.restarts(APP).total == 2, "the refused restart is not counted"
    wanted, why = should_run(config, APP)
    assert not wanted and "crash-looping" in why
    assert app_status(config, APP).state == "crash-looping"
    apply_action(config, declared_app(APP), "start", by="alice")
    assert store.crash_loop(APP) is None, "a start clears the guard"


def test_restarts_older_than_the_window_do_not_count_toward_the_guard(config):
    store = ControlStore(config)
    old = (datetime.now(UTC) - timedelta(hours=2)).isoformat()
    store.restarts_path(APP).parent.mkdir(parents=True, exist_ok=True)
    store.restarts_path(APP).write_text(json.dumps({"total": 5, "recent": [old, old, old]}))
    assert store.record_restart(APP, cause="boom", limit=2, window=timedelta(hours=1)) == 1
    assert store.restarts(APP).total == 6, "the total keeps every restart for the metric"


def test_status_follows_the_records(config):
    store = ControlStore(config)
    assert app_status(config, APP).detail == "last exit: never ran"
    store.mark_running(APP)
    status = app_status(config, APP)
    assert status.state == "running" and str(os.getpid()) in status.detail
    store.mark_not_running(APP)
    store.record_exit(APP, "failed", "query sensor_aggregation.tumbling failed")
    status = app_status(config, APP)
    assert status.state == "failed" and "tumbling failed" in status.detail
    assert store.exit_recorded_at(APP) is not None


def test_a_dead_drivers_record_is_not_running(config):
    store = ControlStore(config)
    store.root.mkdir(parents=True, exist_ok=True)
    (store.root / f"{APP}.running.json").write_text(json.dumps({"pid": 2**22 + 12345}))
    assert store.running_pids(APP) == []


def test_an_unreadable_record_is_reported_not_a_crash(config):
    store = ControlStore(config)
    store.root.mkdir(parents=True, exist_ok=True)
    (store.root / f"{APP}.exit.json").write_text("{half a record")
    assert store.last_exit(APP) == {"unreadable": str(store.root / f"{APP}.exit.json")}
    assert app_status(config, APP).state == "not running"


def test_records_are_written_whole(config):
    store = ControlStore(config)
    store.record_exit(APP, "stopped", "deliberate stop")
    leftovers = [p.name for p in store.root.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []
    assert store.last_exit(APP)["status"] == "stopped"


def test_status_says_starting_from_launch_until_the_queries_run(config):
    store = ControlStore(config)
    store.mark_starting(APP)
    status = app_status(config, APP)
    assert status.state == "starting" and f"launched by pid {os.getpid()}" in status.detail
    store.mark_running(APP)
    assert app_status(config, APP).state == "running"
    assert store.starting(APP) is None, "running supersedes starting"


def test_a_launch_whose_launcher_died_is_not_starting(config):
    store = ControlStore(config)
    store.root.mkdir(parents=True, exist_ok=True)
    (store.root / f"{APP}.starting.json").write_text(json.dumps({"pid": 2**22 + 12345, "at": "then"}))
    assert app_status(config, APP).state == "not running"


def test_a_record_from_another_host_names_no_process_of_this_one(config):
    """A driver in a YARN container elsewhere wrote its pid: that pid here is some other process (this
    test's own), which status must not call the driver and `make down` must not signal."""
    store = ControlStore(config)
    store.root.mkdir(parents=True, exist_ok=True)
    record = {"pid": os.getpid(), "host": "node-7.cluster.example", "started_at": "2026-01-01T00:00:00+00:00"}
    (store.root / "raw_archive.running.json").write_text(json.dumps(record))
    assert store.running_pids("raw_archive") == []
    store.mark_running("raw_archive")  # this process, on this host
    assert store.running_pids("raw_archive") == [os.getpid()]


def test_a_driver_that_died_while_no_supervisor_followed_it_is_a_restart_not_yet_counted(config):
    """Its running record stays (no clean exit) and no driver restart was counted since it started: the
    next start is a restart, which the supervisor counts. One counted after its start (the retry policy
    of the try that followed it) is not counted twice; an in-driver restart does not count for it."""
    store = ControlStore(config)
    assert store.uncounted_death(APP) is None  # never ran
    store.mark_running(APP)
    store.record_restart(APP, cause="a query failed", kind="in-driver")
    death = store.uncounted_death(APP)
    assert death is not None and f"pid {os.getpid()}" in death and "no supervisor followed it" in death
    store.record_restart(APP, cause="spark-submit exited with code 137", kind="driver")
    assert store.uncounted_death(APP) is None
    store.mark_not_running(APP)  # a clean exit
    assert store.uncounted_death(APP) is None
