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
