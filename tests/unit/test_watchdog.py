"""The liveness watchdog's verdicts, on the supervisor's clock: no JVM, no broker."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from stream_pipelines.control.control_store import ControlStore
from stream_pipelines.control.lease import Lease, LeaseRecord
from stream_pipelines.core import store
from stream_pipelines.core.config import load_config
from stream_pipelines.core.registry import app as declared_app
from stream_pipelines.observability.watchdog import Watchdog, WatchdogSettings

QUERY = "raw_archive.archive"
FIXTURE = Path(__file__).parent / "fixtures" / "checkpoints" / "kafka" / "checkpoints" / "raw_archive"
SETTINGS = WatchdogSettings(trigger_s=10, window_s=60, lease_timeout_s=45)


def record(batch_id: int | None, *, heartbeat_age_s: float = 0.0, end: int = 100) -> LeaseRecord:
    now = time.time()
    return LeaseRecord(
        owner="o",
        host="h",
        pid=123,
        started_at=now - 600,
        heartbeat_at=now - heartbeat_age_s,
        queries={QUERY: {"batch_id": batch_id, "end_offsets": {"sensors": {"0": end}}}},
    )


class Broker:
    """What the broker holds: the end offset of partition 0 (None: it does not answer)."""

    def __init__(self, high: int | None) -> None:
        self.high = high

    def __call__(self, _query: str, end_offsets) -> int | None:
        if self.high is None or not end_offsets:
            return None
        return max(self.high - end_offsets["sensors"]["0"], 0)


def test_no_progress_while_offsets_wait_is_stuck_after_the_window_and_says_how_much():
    watchdog = Watchdog(SETTINGS, Broker(high=12_500))
    assert watchdog.look(record(7), True, now=0) is None
    assert watchdog.look(record(7), True, now=59) is None
    verdict = watchdog.look(record(7), True, now=61)
    assert verdict == f"{QUERY}: no progress for 6 triggers (61s, still at batch 7) while 12,400 offsets wait"


def test_a_query_that_moves_is_never_stuck_however_much_waits():
    watchdog = Watchdog(SETTINGS, Broker(high=1_000_000))
    for step in range(20):
        assert watchdog.look(record(step), True, now=step * 30.0) is None


def test_an_idle_source_is_not_a_stall_and_the_clock_starts_when_data_arrives():
    broker = Broker(high=100)  # nothing beyond the last batch
    watchdog = Watchdog(SETTINGS, broker)
    for moment in range(0, 600, 5):
        assert watchdog.look(record(3), True, now=moment) is None
    broker.high = 180  # data arrives after t=595; the batch id has not moved for ten minutes
    assert watchdog.look(record(3), True, now=600) is None
    assert watchdog.look(record(3), True, now=650) is None
    assert "no progress for 6 triggers" in (watchdog.look(record(3), True, now=661) or "")


def test_an_unreachable_broker_says_nothing_about_the_app():
    watchdog = Watchdog(SETTINGS, Broker(high=None))
    for moment in range(0, 600, 5):
        assert watchdog.look(record(3), True, now=moment) is None


def test_a_stale_heartbeat_is_stuck_only_while_the_driver_still_exists():
    stale = record(3, heartbeat_age_s=50)
    verdict = Watchdog(SETTINGS, Broker(100)).look(stale, True, now=0)
    assert verdict is not None
    assert verdict.startswith(
        "heartbeat 50s old (lease timeout 45s) while the driver (pid 123 on h) still exists"
    )
    # Dead: a crash, which the lease reports by itself. On another host: nothing to tell or kill.
    assert Watchdog(SETTINGS, Broker(100)).look(stale, False, now=0) is None
    assert Watchdog(SETTINGS, Broker(100)).look(stale, None, now=0) is None


@pytest.mark.parametrize("outage_s", [60, 40])  # longer, and a little shorter, than the 45 s lease timeout
def test_after_a_store_outage_the_driver_has_a_lease_timeout_to_renew_before_its_heartbeat_is_judged(
    outage_s,
):
    """A store outage (a NameNode restart, S3 not answering) stops the driver's renewals and the
    watchdog's reads alike: the heartbeat read when the store answers again is old because of the store."""
    watchdog = Watchdog(SETTINGS, Broker(high=None))  # the broker says nothing: the heartbeat alone judges
    assert watchdog.look(record(3), True, now=0) is None
    # The read blocked through the outage; what it returns is older than the lease timeout.
    assert watchdog.store_answered(outage_s, now=outage_s)
    assert watchdog.look(record(3, heartbeat_age_s=outage_s + 5), True, now=outage_s) is None
    # The renewal that waited through the outage landed with the heartbeat it was begun with.
    assert watchdog.look(record(3, heartbeat_age_s=outage_s + 7), True, now=outage_s + 2) is None
    # A driver that has not renewed a lease timeout after the store's return is stuck, as ever.
    verdict = watchdog.look(record(3, heartbeat_age_s=outage_s + 50), True, now=outage_s + 46)
    assert verdict is not None and verdict.startswith("heartbeat "), verdict


def test_a_read_as_slow_as_a_heartbeat_is_no_outage_and_a_stale_heartbeat_is_judged_at_once():
    watchdog = Watchdog(SETTINGS, Broker(high=None))
    assert not watchdog.store_answered(2 * SETTINGS.heartbeat_s, now=0)
    verdict = watchdog.look(record(3, heartbeat_age_s=50), True, now=0)
    assert verdict is not None and verdict.startswith("heartbeat "), verdict


def test_a_store_outage_starts_the_stall_clocks_again():
    """No batch can commit while the store is away: that time is not the query's stall."""
    watchdog = Watchdog(SETTINGS, Broker(high=10_000))
    assert watchdog.look(record(3, end=100), True, now=0) is None
    assert watchdog.store_answered(30, now=55)
    assert watchdog.look(record(3, end=100), True, now=55) is None
    assert watchdog.look(record(3, end=100), True, now=100) is None  # 100 s since the first look
    verdict = watchdog.look(record(3, end=100), True, now=116)
    assert verdict is not None and verdict.startswith(f"{QUERY}: no progress"), verdict


def test_a_dead_drivers_lease_before_the_restart_takes_over_is_not_judged():
    """A restarted try reads the dead driver's lease until the new one takes it: never a stall."""
    watchdog = Watchdog(SETTINGS, Broker(high=10_000))
    for moment in range(0, 300, 5):
        assert watchdog.look(record(9), False, now=moment) is None
    # The new owner resumes at the same batch id: its clock starts when it is first seen alive.
    assert watchdog.look(record(9), True, now=300) is None
    assert watchdog.look(record(9), True, now=350) is None


def test_the_window_is_n_triggers_but_never_less_than_the_minimum(tmp_path: Path):
    def settings(*extra: str) -> WatchdogSettings:
        config = load_config("local", [f"paths.data_root={tmp_path}", *extra], environ={})
        return WatchdogSettings.of(config, declared_app("raw_archive"))

    fast = settings("archive.trigger=1 seconds", "supervision.watchdog_triggers=6")
    assert (fast.trigger_s, fast.window_s) == (1, 120)  # the 2-minute floor of conf/local.yaml
    slow = settings("archive.trigger=1 minutes", "supervision.watchdog_triggers=4")
    assert slow.window_s == 240
    short = settings("archive.trigger=2 seconds", "supervision.watchdog_min_window=5 seconds")
    assert short.window_s == 12


def test_a_watchdog_count_below_one_is_a_config_error(tmp_path: Path):
    from stream_pipelines.core.config import ConfigError

    with pytest.raises(ConfigError, match="watchdog_triggers"):
        load_config("local", [f"paths.data_root={tmp_path}", "supervision.watchdog_triggers=0"], environ={})


def test_watchdog_restarts_are_counted_with_the_last_reason(tmp_path: Path):
    store = ControlStore(load_config("local", [f"paths.data_root={tmp_path}"], environ={}))
    assert store.watchdog_restarts("raw_archive") == 0
    store.record_watchdog_restart("raw_archive", "first")
    assert store.record_watchdog_restart("raw_archive", "no progress for 6 triggers") == 2
    assert store.watchdog_restarts("raw_archive") == 2


def test_the_lease_carries_each_querys_kafka_end_offsets_for_the_watchdog():
    """From ``lastProgress`` as PySpark builds it (``fromJson``, whose offsets are Python reprs)."""
    from pyspark.sql.streaming.listener import StreamingQueryProgress

    from stream_pipelines.driver.lifecycle import query_progress

    def source(end: object) -> dict:
        return {
            "description": "a source",
            "startOffset": None,
            "endOffset": end,
            "latestOffset": end,
            "numInputRows": 1,
            "inputRowsPerSecond": 0.0,
            "processedRowsPerSecond": 0.0,
            "metrics": {},
        }

    reported = {
        "id": "8b1ab1d8-7d3c-4b0e-9f55-2f0d7c1c1d11",
        "runId": "5d6b1d2c-0c59-4d4f-8a7c-1d2f3e4a5b6c",
        "name": QUERY,
        "timestamp": "2026-11-24T03:14:32.421Z",
        "batchId": 4,
        "batchDuration": 100,
        "numInputRows": 10,
        "inputRowsPerSecond": 0.0,
        "processedRowsPerSecond": 0.0,
        "durationMs": {},
        "eventTime": {},
        "stateOperators": [],
        "sources": [
            source({"sensors": {"0": 5, "1": 7}}),
            source({"clicks": {"2": 9}}),
            source({"logOffset": 3}),  # a files source: no Kafka offsets
            source(None),
        ],
        "sink": {"description": "a sink", "numOutputRows": 1, "metrics": {}},
        "observedMetrics": {},
    }

    class Query:
        name, isActive = QUERY, True
        lastProgress = StreamingQueryProgress.fromJson(reported)

    progress = query_progress([Query()])  # type: ignore[list-item]
    assert progress[QUERY]["batch_id"] == 4
    assert progress[QUERY]["end_offsets"] == {"sensors": {"0": 5, "1": 7}, "clicks": {"2": 9}}


def stored_fixture_checkpoints(stored_root: list[str]):
    """A config on the given store, with the Kafka fixture's raw_archive checkpoints copied there."""
    config = load_config("local", stored_root, environ={})
    checkpoints = store.location(
        config.spark.extra_conf, config.checkpoint_dir("raw_archive", "archive")
    ).parent
    store.copy_tree(FIXTURE, checkpoints)
    return config, checkpoints / "archive"


def test_a_driver_frozen_before_its_first_progress_reached_the_lease_is_found_stuck(stored_root):
    """Frozen right after a start: the lease has no batch or end offsets for the query yet. What waits
    is then measured from the checkpoint (on the store): its last committed batch's end offsets."""
    from stream_pipelines.observability.watchdog import query_backlog

    config, _checkpoint = stored_fixture_checkpoints(stored_root)
    seen: list[dict] = []

    def broker(end_offsets):
        seen.append(end_offsets)
        return 105 - end_offsets["sensors"]["0"]  # the committed batch 2 ended at offset 5

    watchdog = Watchdog(SETTINGS, query_backlog(config, "raw_archive", broker))
    fresh = LeaseRecord("o", "h", 123, time.time(), time.time(), queries={QUERY: {"batch_id": None}})
    assert watchdog.look(fresh, True, now=0) is None
    assert watchdog.look(fresh, True, now=30) is None
    verdict = watchdog.look(fresh, True, now=61)
    assert verdict == f"{QUERY}: no progress for 6 triggers (61s, still at batch None) while 100 offsets wait"
    assert seen[-1]["sensors"] == {"0": 5, "1": 5, "2": 0}


def test_a_fresh_checkpoint_measures_what_waits_from_the_starting_offsets(stored_root):
    from stream_pipelines.observability.watchdog import checkpoint_end_offsets

    config, checkpoint = stored_fixture_checkpoints(stored_root)
    for log in ("commits", "offsets"):
        store.remove_tree(checkpoint / log)  # planned, nothing committed yet
    assert checkpoint_end_offsets(config, "raw_archive", QUERY)["sensors"] == {"0": 0, "1": 0, "2": 0}
    assert checkpoint_end_offsets(config, "raw_archive", "raw_archive.no_such_query") == {}


def test_a_frozen_drivers_lease_read_back_from_the_store_is_found_stuck(stored_root):
    """The supervisor's view: the lease as read from the store (local or s3a://), whose holder (this
    process, standing in for a frozen JVM) stopped renewing it."""
    config = load_config(
        "local",
        [
            *stored_root,
            "supervision.heartbeat_interval=500 milliseconds",
            "supervision.lease_timeout=1500 milliseconds",
        ],
        environ={},
    )
    held = Lease(config, "raw_archive").acquire(log=print)
    watchdog = Watchdog(WatchdogSettings.of(config, declared_app("raw_archive")), Broker(high=None))
    supervisor_view = Lease(config, "raw_archive")
    assert watchdog.look(supervisor_view.read(), True) is None
    time.sleep(2.0)
    verdict = watchdog.look(supervisor_view.read(), True)
    assert verdict and verdict.startswith("heartbeat ") and f"pid {held.pid}" in verdict
    assert watchdog.look(supervisor_view.read(), False) is None  # once it is gone, a restart takes over


def test_a_jvm_silent_past_its_answer_timeout_is_frozen_at_once_while_the_heartbeat_is_fresh():
    """A SIGSTOP'd JVM: the driver's Python side renews the lease, but its call into the JVM has not
    come back. Found by that silence in seconds, not after a watchdog window, and flagged as unable
    to drain; a shorter silence (a GC pause, a slow call) is nothing."""
    settings = WatchdogSettings(trigger_s=10, window_s=120, lease_timeout_s=45, jvm_answer_timeout_s=15)
    watchdog = Watchdog(settings, Broker(high=10_000))
    silent = record(3)
    silent.jvm_silent_s = 14.0
    assert watchdog.look(silent, True, now=0) is None and not watchdog.frozen
    silent.jvm_silent_s = 16.0
    verdict = watchdog.look(silent, True, now=5)
    assert verdict is not None and watchdog.frozen, verdict
    assert "JVM has not answered for 16s (jvm_answer_timeout 15s)" in verdict and "pid 123" in verdict
    # A stale heartbeat too: the whole driver is stopped, which is the heartbeat rule's case, not this one.
    stale = record(3, heartbeat_age_s=50)
    stale.jvm_silent_s = 40.0
    verdict = watchdog.look(stale, True, now=10)
    assert verdict is not None and verdict.startswith("heartbeat ") and not watchdog.frozen


def test_a_jvm_answer_timeout_shorter_than_two_heartbeats_is_a_config_error(tmp_path: Path):
    from stream_pipelines.core.config import ConfigError

    with pytest.raises(ConfigError, match=r"jvm_answer_timeout .* must be at least 2 heartbeat_intervals"):
        load_config(
            "local", [f"paths.data_root={tmp_path}", "supervision.jvm_answer_timeout=8 seconds"], environ={}
        )


def test_a_silent_jvm_on_another_host_is_not_called_frozen():
    """Neither told apart from its lease nor killable from here: no verdict to act on."""
    settings = WatchdogSettings(trigger_s=10, window_s=120, lease_timeout_s=45, jvm_answer_timeout_s=15)
    watchdog = Watchdog(settings, Broker(high=None))
    elsewhere = record(3)
    elsewhere.jvm_silent_s = 60.0
    assert watchdog.look(elsewhere, None, now=0) is None and not watchdog.frozen
