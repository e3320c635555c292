"""The app lifecycle: truthful exits (only a drain in which every query stopped cleanly is a stop) and
start-up checks that find a missing topic before any producer times out."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from stream_pipelines.control.control_store import ControlStore
from stream_pipelines.core.exit_codes import ExitCode
from stream_pipelines.core.registry import app as declared_app
from stream_pipelines.driver.lifecycle import run_streams
from stream_pipelines.driver.runtime import StreamSink, read_raw
from tests.conftest import Replay, files_source_overrides, make_overrides_config, wait_for

APP = "raw_archive"


def test_a_query_that_fails_while_draining_makes_the_app_fail(spark, make_overrides, tmp_path: Path):
    replay = Replay(tmp_path / "replay")
    config = make_overrides_config(
        make_overrides(*files_source_overrides(replay.root), "archive.trigger=1 seconds")
    )
    store = ControlStore(config)
    batches_seen: list[int] = []
    second_in_flight = threading.Event()

    def sink_that_fails_in_the_batch_a_stop_drains(batch, batch_id: int) -> None:
        # The failure the issue saw: the batch a graceful stop waits for fails (a sink topic went away).
        batches_seen.append(batch_id)
        if len(batches_seen) == 1:
            return
        second_in_flight.set()
        wait_for(store.stop_marker(APP).exists, 120, "the stop request")
        # Fail only once the app is draining: it polls for the stop every second (poll_s).
        time.sleep(5)
        raise RuntimeError("sink unavailable: Topic sensor_sliding_avg not present in metadata")

    replay.batch("sensors", ['{"event_id": "a"}'])
    raw = read_raw(spark, config, [config.kafka.topics.sensors])
    sinks = [StreamSink(name="archive", frame=raw, foreach_batch=sink_that_fails_in_the_batch_a_stop_drains)]
    outcome: dict = {}
    runner = threading.Thread(
        target=lambda: outcome.setdefault(
            "exit", run_streams(config, declared_app(APP), sinks, "processing")
        ),
        daemon=True,
    )
    runner.start()
    wait_for(lambda: len(batches_seen) == 1, 300, "the first batch")
    replay.batch("sensors", ['{"event_id": "b"}'])
    wait_for(second_in_flight.is_set, 300, "the second batch to be in flight")
    store.request_stop(APP)
    runner.join(300)
    assert not runner.is_alive(), "the app did not end after the stop request"

    ended = outcome["exit"]
    assert ended.code == ExitCode.QUERY_FAILED
    recorded = store.last_exit(APP)
    assert recorded["status"] == "failed"
    assert f"{APP}.archive" in recorded["detail"] and "sink unavailable" in recorded["detail"]


@pytest.mark.broker
def test_a_missing_sink_topic_is_refused_at_start_up_with_the_topic_named(broker, make_overrides, capsys):
    from stream_pipelines.driver.lifecycle import run_app
    from stream_pipelines.kafka.topics import ensure_topics

    ensure_topics(make_overrides_config(make_overrides()))
    overrides = make_overrides("kafka.topics.sliding_averages.name=no-such-sliding-topic")
    argv = [arg for override in overrides for arg in ("--set", override)]
    started = time.monotonic()
    assert run_app("sensor_aggregation", argv) == ExitCode.BAD_CONFIG
    assert time.monotonic() - started < 30, "found by a look-up, not by a producer time-out"
    message = capsys.readouterr().err
    assert "no-such-sliding-topic" in message and "pipelinectl topics" in message


@pytest.mark.broker
@pytest.mark.slow
def test_a_second_run_of_a_running_app_refuses_and_the_first_is_unaffected(broker, make_overrides, tmp_path):
    import subprocess

    from stream_pipelines.control.lease import Lease
    from stream_pipelines.kafka.topics import ensure_topics
    from tests.conftest import private_source_topics, produce, run_app

    overrides = make_overrides("archive.trigger=1 seconds", *private_source_topics())
    config = make_overrides_config(overrides)
    ensure_topics(config)
    topic = config.kafka.topics.sensors.name
    produce(config, topic, [(None, b'{"n": 1}')] * 20)
    checkpoint = Path(config.checkpoint_dir(APP, "archive"))
    first = run_app(APP, "processing", overrides)
    try:
        wait_for(lambda: (checkpoint / "commits" / "0").exists(), 300, "the first app's first batch")
        owner = Lease(config, APP).read()
        assert owner is not None and owner.pid != first.pid  # the driver, under spark-submit
        # spark-submit hands the Python driver's stderr on through its own stdout.
        second = run_app(
            APP, "processing", overrides, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        errors, _ = second.communicate(timeout=300)
        assert second.returncode == ExitCode.OWNED_ELSEWHERE, errors[-2000:]
        assert f"{APP} is already running: owner {owner.owner}" in errors
        assert "heartbeat" in errors
        committed = len(list((checkpoint / "commits").glob("[0-9]*")))
        for _ in range(3):
            produce(config, topic, [(None, b'{"n": 2}')] * 5)
            time.sleep(2)
        wait_for(
            lambda: len(list((checkpoint / "commits").glob("[0-9]*"))) > committed + 1,
            120,
            "the first app to go on committing",
        )
        assert first.poll() is None, "the first app is unaffected"
        assert Lease(config, APP).read().owner == owner.owner
    finally:
        ControlStore(config).request_stop(APP)
        first.wait(180)
    assert first.returncode == 0
    assert Lease(config, APP).read() is None, "a graceful stop releases the lease"


def test_a_failed_query_restarts_inside_the_driver_while_the_others_run_on_until_it_keeps_failing(
    spark, make_overrides, tmp_path: Path
):
    """In-driver recovery, on the real Spark session: a query whose batch fails is restarted from its
    checkpoint in the same driver (the batch redone, nothing lost), counted once as an in-driver
    restart, while the app's other query runs on untouched; once it keeps failing past
    supervision.in_driver_restarts, the driver gives up and exits QUERY_FAILED saying why."""
    from stream_pipelines.driver.recovery import QueryRecovery

    replay = Replay(tmp_path / "replay")
    config = make_overrides_config(
        make_overrides(
            *files_source_overrides(replay.root),
            "archive.trigger=1 seconds",
            "supervision.retry_delay=1 seconds",
            "supervision.in_driver_restarts=2",
            "supervision.max_restarts=10",
        )
    )
    store = ControlStore(config)
    calls: list[tuple[int, list[str], str]] = []
    other_rows: list[str] = []
    fail_always = threading.Event()

    def ids(batch) -> list[str]:
        return sorted(row.value.decode() for row in batch.select("value").collect())

    def failing_sink(batch, batch_id: int) -> None:
        first_try_of_batch_1 = batch_id == 1 and not any(b == 1 for b, _, _ in calls)
        failed = first_try_of_batch_1 or fail_always.is_set()
        calls.append((batch_id, ids(batch), "failed" if failed else "ok"))
        if failed:
            raise RuntimeError(f"storage refused the write of batch {batch_id}")

    def other_sink(batch, _batch_id: int) -> None:
        other_rows.extend(ids(batch))

    replay.batch("sensors", ['{"event_id": "a"}'])
    raw = read_raw(spark, config, [config.kafka.topics.sensors])
    sinks = [
        StreamSink(name="archive", frame=raw, foreach_batch=failing_sink),
        StreamSink(name="copy", frame=raw, foreach_batch=other_sink),
    ]
    live: list = []
    outcome: dict = {}
    recovery = QueryRecovery.of(config, APP, spark, None)

    def run() -> None:
        outcome["exit"] = run_streams(
            config, declared_app(APP), sinks, "processing", on_started=live.append, recovery=recovery
        )

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    try:
        wait_for(lambda: any(b == 0 and s == "ok" for b, _, s in calls), 300, "the first batch")
        archive, copy = live[0]
        copy_run = copy.runId
        replay.batch("sensors", ['{"event_id": "b"}'])
        wait_for(lambda: any(b == 1 and s == "ok" for b, _, s in calls), 120, "batch 1 redone in the driver")
        assert [(b, rows, s) for b, rows, s in calls if b == 1] == [
            (1, ['{"event_id": "b"}'], "failed"),
            (1, ['{"event_id": "b"}'], "ok"),
        ]
        restarted = live[0][0]
        assert restarted is not archive and restarted.isActive and restarted.id == archive.id
        assert copy.isActive and copy.runId == copy_run and copy.exception() is None, "the other query ran on"
        restarts = store.restarts(APP)
        assert (restarts.total, restarts.in_driver, restarts.last_kind) == (1, 1, "in-driver")
        assert "storage refused the write of batch 1" in restarts.last_cause

        fail_always.set()
        replay.batch("sensors", ['{"event_id": "c"}'])
        runner.join(180)
        assert not runner.is_alive(), "the driver did not give up on a query that keeps failing"
    finally:
        if runner.is_alive():
            store.request_stop(APP)
            runner.join(120)
    ended = outcome["exit"]
    assert ended.code == ExitCode.QUERY_FAILED
    assert "not restarted in the driver" in ended.detail and "already restarted 2 times" in ended.detail
    assert [s for b, _, s in calls if b == 2] == ["failed", "failed"]
    assert store.restarts(APP).in_driver == 2
    assert store.last_exit(APP)["status"] == "failed"
    assert sorted(set(other_rows)) == sorted(other_rows) and {
        '{"event_id": "a"}',
        '{"event_id": "b"}',
        '{"event_id": "c"}',
    } <= set(other_rows)
