"""In-driver recovery's decisions: when a failed query is restarted inside its driver, after how long,
counted where, and when the driver gives up for its supervisor to start a new one. No JVM."""

from __future__ import annotations

from pathlib import Path

import pytest

from stream_pipelines.control.control_store import ControlStore
from stream_pipelines.core.config import load_config
from stream_pipelines.driver.recovery import QueryRecovery

APP = "ad_matching"
QUERY = "ad_matching.matches"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Keeper:
    """Stands in for the LeaseKeeper: whether the lease is surely this driver's."""

    def __init__(self) -> None:
        self.sure = True

    def held_surely(self) -> bool:
        return self.sure


def recovery(tmp_path: Path, *settings: str, stopped: bool = False, keeper: Keeper | None = None):
    config = load_config(
        "local",
        [
            f"paths.data_root={tmp_path}",
            "supervision.retry_delay=2 seconds",
            "supervision.backoff_multiplier=3",
            "supervision.max_retry_delay=30 seconds",
            *settings,
        ],
        environ={},
    )
    clock = Clock()
    decider = QueryRecovery(config, APP, lambda: stopped, keeper, clock=clock)
    return decider, clock, ControlStore(config)


def test_a_failed_query_is_restarted_with_the_supervisors_backoff_unjittered_and_counted_once_as_in_driver(
    tmp_path,
):
    decider, clock, control = recovery(tmp_path, "supervision.in_driver_restarts=3")
    first = decider.decide(QUERY, "IOException: Connection reset")
    assert first.restart and first.delay_s == 2.0
    assert first.why == "restart 1 of ad_matching within the window, the query's 1 of 3 in this driver"
    clock.now += 60
    second = decider.decide(QUERY, "IOException: Connection reset")
    assert second.restart and second.delay_s == 6.0  # the crash-loop window's count drives the backoff
    restarts = control.restarts(APP)
    assert (restarts.total, restarts.in_driver, len(restarts.recent)) == (2, 2, 2)
    assert (
        restarts.last_kind == "in-driver" and "ad_matching.matches failed: IOException" in restarts.last_cause
    )
    assert restarts.describe_last().startswith("query restarted inside the driver at ")


def test_a_query_that_keeps_failing_in_this_driver_ends_it(tmp_path):
    decider, clock, control = recovery(tmp_path, "supervision.in_driver_restarts=2")
    assert decider.decide(QUERY, "boom").restart
    assert decider.decide(QUERY, "boom").restart
    gave_up = decider.decide(QUERY, "boom")
    assert not gave_up.restart and "already restarted 2 times in this driver" in gave_up.why
    assert control.restarts(APP).total == 2, "giving up is not a restart: the supervisor counts its own"
    # Another query of the app has its own count; and outside the window the query may restart again.
    assert decider.decide("ad_matching.quarantine", "boom").restart
    clock.now += 3601
    assert decider.decide(QUERY, "boom").restart


@pytest.mark.parametrize(
    "error, stopped, expected",
    [
        (
            "java.lang.OutOfMemoryError: Java heap space",
            False,
            "the JVM is unhealthy (java.lang.OutOfMemoryError)",
        ),
        ("java.lang.StackOverflowError", False, "the JVM is unhealthy (java.lang.StackOverflowError)"),
        ("IOException: Connection reset", True, "the SparkContext is stopped"),
    ],
)
def test_an_unhealthy_jvm_is_not_trusted_with_a_restart(tmp_path, error, stopped, expected):
    decider, _clock, control = recovery(tmp_path, stopped=stopped)
    decision = decider.decide(QUERY, error)
    assert not decision.restart and decision.why.startswith(expected), decision.why
    assert control.restarts(APP).total == 0


def test_no_restart_unless_the_lease_is_surely_this_drivers(tmp_path):
    keeper = Keeper()
    decider, _clock, _control = recovery(tmp_path, keeper=keeper)
    keeper.sure = False
    decision = decider.decide(QUERY, "boom")
    assert not decision.restart and "lease is not surely this driver's" in decision.why
    assert not decider.may_start()
    keeper.sure = True
    assert decider.decide(QUERY, "boom").restart and decider.may_start()


def test_the_crash_loop_guard_that_stops_the_supervisor_stops_in_driver_restarts_too(tmp_path):
    decider, _clock, control = recovery(
        tmp_path, "supervision.max_restarts=2", "supervision.in_driver_restarts=5"
    )
    control.record_restart(APP, cause="an earlier driver crash")  # the supervisor's, same window
    assert decider.decide(QUERY, "boom").restart
    tripped = decider.decide(QUERY, "boom")
    assert not tripped.restart and "crash-looping" in tripped.why
    assert control.crash_loop(APP) is not None


def test_in_driver_recovery_can_be_turned_off(tmp_path):
    decider, _clock, _control = recovery(tmp_path, "supervision.in_driver_restarts=0")
    decision = decider.decide(QUERY, "boom")
    assert not decision.restart and "off" in decision.why


def test_a_store_error_recording_the_restart_or_a_silent_gateway_gives_up_instead_of_crashing(tmp_path):
    """The control store sits on the store whose outage may have failed the query: a restart that cannot
    be recorded is not made, and the driver exits for its supervisor, with the reason, not a traceback."""
    decider, _clock, control = recovery(tmp_path)
    control.restarts_path(APP).parent.mkdir(parents=True, exist_ok=True)
    control.restarts_path(APP).mkdir()  # a folder where the record goes: every write of it fails
    decision = decider.decide(QUERY, "IOException: Connection reset")
    assert not decision.restart and decision.why.startswith("the restart could not be recorded"), decision.why

    def gateway_gone() -> bool:
        raise ConnectionRefusedError("py4j gateway")

    config = decider.config
    silent = QueryRecovery(config, APP, gateway_gone, None)
    decision = silent.decide(QUERY, "boom")
    assert not decision.restart and "the JVM did not answer (ConnectionRefusedError)" in decision.why


def test_only_the_jvms_own_errors_count_as_unhealthy_not_a_stores_internal_error(tmp_path):
    decider, _clock, _control = recovery(tmp_path)
    s3 = "AWSStatus500Exception: ... Status Code: 500, Error Code: InternalError, Request ID: 1"
    assert decider.decide(QUERY, s3).restart


def test_the_wait_inside_the_driver_stays_under_half_the_watchdogs_shortest_window(tmp_path):
    """While a query waits, its last batch stands still in the lease: a longer wait would be a stall."""
    decider, _clock, _control = recovery(
        tmp_path,
        "supervision.retry_delay=50 seconds",
        "supervision.max_retry_delay=10 minutes",
        "supervision.watchdog_min_window=2 minutes",
    )
    assert decider.decide(QUERY, "boom").delay_s == 50.0
    assert decider.decide(QUERY, "boom").delay_s == 60.0  # 150 s by the backoff
