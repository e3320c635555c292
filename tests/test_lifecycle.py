"""The app lifecycle: truthful exits (only a drain in which every query stopped cleanly is a stop) and
start-up checks that find a missing topic before any producer times out."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from stream_pipelines.control import ControlStore
from stream_pipelines.exit_codes import ExitCode
from stream_pipelines.lifecycle import run_streams
from stream_pipelines.runtime import StreamSink, read_raw
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
        target=lambda: outcome.setdefault("exit", run_streams(config, APP, sinks, "processing")), daemon=True
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
    from stream_pipelines.lifecycle import run_app
    from stream_pipelines.topics import ensure_topics

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

    from stream_pipelines.lease import Lease
    from stream_pipelines.topics import ensure_topics
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
