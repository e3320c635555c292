"""The supervisor's retry policy: backoff with jitter, no retry where a restart cannot help, the guard."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest

from stream_pipelines.core.exit_codes import ExitCode

APP = "raw_archive"


@pytest.fixture
def policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """SupervisorRetryPolicy reading the config the way a worker does: from PIPELINE__ variables."""
    monkeypatch.setenv("AIRFLOW_HOME", os.environ.get("AIRFLOW_HOME", str(tmp_path / "airflow")))
    for key, value in {
        "PATHS__DATA_ROOT": str(tmp_path / "data"),
        "SUPERVISION__RETRY_DELAY": "10 seconds",
        "SUPERVISION__BACKOFF_MULTIPLIER": "2",
        "SUPERVISION__MAX_RETRY_DELAY": "60 seconds",
        "SUPERVISION__MAX_RESTARTS": "3",
    }.items():
        monkeypatch.setenv(f"PIPELINE__{key}", value)
    from stream_pipelines.airflow.supervisor import SupervisorRetryPolicy

    return SupervisorRetryPolicy(APP)


def crash(code: int) -> RuntimeError:
    # What the Spark provider's hook raises: the whole command line, then the exit code.
    return RuntimeError(f"Cannot execute: spark-submit --master local[2] app.py. Error code is: {code}.")


def store(tmp_path: Path):
    from stream_pipelines.control.control_store import ControlStore
    from stream_pipelines.core.config import load_config

    return ControlStore(load_config("local", [f"paths.data_root={tmp_path / 'data'}"], environ={}))


@pytest.mark.parametrize("code", [ExitCode.BAD_CONFIG, ExitCode.CHECKPOINT_REFUSED])
def test_exits_a_restart_cannot_fix_fail_at_once_and_count_nothing(policy, tmp_path, code):
    decision = policy.evaluate(crash(code), try_number=1, max_tries=1000)
    assert decision.action.name == "FAIL"
    assert f"spark-submit exited with code {int(code)}" in decision.reason
    assert store(tmp_path).restarts(APP).total == 0


def test_a_crash_is_retried_after_a_jittered_backoff_and_counted_once(policy, tmp_path):
    decision = policy.evaluate(crash(ExitCode.QUERY_FAILED), try_number=1, max_tries=1000)
    assert decision.action.name == "RETRY"
    assert timedelta(seconds=10) <= decision.retry_delay <= timedelta(seconds=20)
    assert "restart 1 within the window, from its checkpoint" in decision.reason
    assert store(tmp_path).restarts(APP).total == 1


def test_the_backoff_grows_per_restart_within_the_window_and_is_capped(policy):
    delays = [policy.evaluate(crash(3), try_number=n, max_tries=1000).retry_delay for n in (1, 2, 3)]
    assert timedelta(seconds=10) <= delays[0] <= timedelta(seconds=20)
    assert timedelta(seconds=20) <= delays[1] <= timedelta(seconds=40)
    assert timedelta(seconds=40) <= delays[2] <= timedelta(seconds=60)


def test_a_crash_after_a_quiet_spell_waits_the_first_delay_whatever_the_try_number(policy):
    # A supervisor run lasts as long as the app streams, days or months: its try number counts every
    # crash since it began. With no restart within the crash-loop window, this one is a first restart.
    decision = policy.evaluate(crash(3), try_number=9, max_tries=1000)
    assert timedelta(seconds=10) <= decision.retry_delay <= timedelta(seconds=20)


def test_a_driver_killed_by_a_signal_is_restarted_at_once_the_first_time_then_backs_off(policy, tmp_path):
    """A JVM's death (kill -9, the OOM killer) is not mended by waiting, and a failing query was already
    restarted inside its driver: the first restart within the window is at once. A second kill backs off
    as any crash, and both count toward the guard."""
    first = policy.evaluate(crash(-9), try_number=1, max_tries=1000)
    assert first.action.name == "RETRY" and first.retry_delay == timedelta(0)
    assert "killed by signal 9" in first.reason and "in 0s" in first.reason
    second = policy.evaluate(crash(-9), try_number=2, max_tries=1000)
    assert timedelta(seconds=20) <= second.retry_delay <= timedelta(seconds=40)
    assert store(tmp_path).restarts(APP).total == 2


def test_a_jvm_killed_under_spark_submits_shell_is_a_signal_death_too(policy):
    """spark-submit is a shell script: when its JVM is killed, it exits 128 + the signal (`make demo`
    kills the driver's JVM and saw 137)."""
    decision = policy.evaluate(crash(137), try_number=1, max_tries=1000)
    assert decision.retry_delay == timedelta(0) and "killed by signal 9" in decision.reason
    plain = policy.evaluate(crash(1), try_number=2, max_tries=1000)
    assert plain.retry_delay > timedelta(0) and "killed by signal" not in plain.reason


def test_a_query_restarted_inside_the_driver_makes_the_next_kill_a_second_restart(policy, tmp_path):
    store(tmp_path).record_restart(APP, cause="query failed", kind="in-driver")
    decision = policy.evaluate(crash(-9), try_number=1, max_tries=1000)
    assert timedelta(seconds=20) <= decision.retry_delay <= timedelta(seconds=40)


def test_the_guard_stops_restarts_at_the_limit(policy, tmp_path):
    for try_number in (1, 2, 3):
        decision = policy.evaluate(crash(3), try_number=try_number, max_tries=1000)
        assert decision.action.name == "RETRY"
    stopped = policy.evaluate(crash(3), try_number=4, max_tries=1000)
    assert stopped.action.name == "FAIL"
    assert "raw_archive is crash-looping: 3 restarts within 1:00:00 (limit 3)" in stopped.reason
    assert store(tmp_path).crash_loop(APP) is not None
