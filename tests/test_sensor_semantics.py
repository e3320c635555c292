"""Late-data semantics through the real sensor_aggregation app (files source, one file per batch).

Spark's rule, pinned here: a row is dropped from window W only when W's end <= the watermark in
effect for the batch that reads it. Per window, not per raw event time. "In effect" has a precise
meaning in Spark 4: the late-row filter of batch N uses the watermark batch N-1 ran with
(offsets/N-1 batchWatermarkMs), while emission in batch N uses offsets/N. A batch that only carries
a malformed record (FILLER) lets the watermark settle so each step below is unambiguous.
Config: tumbling 5 minutes, sliding 10 every 5, watermark delay 2 minutes.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from stream_pipelines.apps import sensor_aggregation
from tests.conftest import (
    Replay,
    batch_watermarks,
    committed_batches_of_files,
    create_topic,
    files_source_overrides,
    make_overrides_config,
    run_in_process,
)

pytestmark = pytest.mark.broker


def reading(minute: int, second: int, temperature: float, sensor: str = "sensor-0001") -> dict:
    return {
        "event_id": f"{sensor}-{minute:02d}{second:02d}-{temperature}",
        "sensor_id": sensor,
        "temperature": temperature,
        "ts": f"2026-01-01T00:{minute:02d}:{second:02d}.000Z",
    }


FILLER = ["{not json: a batch that moves no watermark"]


def at(minute: int) -> datetime:
    return datetime(2026, 1, 1, 0, minute)


@pytest.fixture
def sensor_config(broker, make_overrides, tmp_path):
    sliding_topic = f"sliding-{uuid.uuid4().hex[:8]}"
    create_topic(broker, sliding_topic, 1)
    replay = Replay(tmp_path / "replay")
    overrides = make_overrides(
        *files_source_overrides(replay.root), f"kafka.topics.sliding_averages.name={sliding_topic}"
    )
    return make_overrides_config(overrides), replay


def sliding_latest(config) -> dict[tuple[str, datetime], dict]:
    """The live sliding output as a dashboard reads it: the latest value per key."""
    topic = config.kafka.topics.sliding_averages.name
    consumer = Consumer(
        {**config.kafka_client_config(), "group.id": f"t-{uuid.uuid4().hex}", "enable.auto.commit": False}
    )
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    consumer.assign([TopicPartition(topic, 0, low)])
    latest = {}
    read = low
    while read < high:
        message = consumer.poll(10)
        assert message is not None, "the sliding topic ended early"
        read = message.offset() + 1
        value = json.loads(message.value())
        latest[(value["sensor_id"], datetime.fromisoformat(value["window_start"]).replace(tzinfo=None))] = (
            value
        )
    consumer.close()
    return latest


def test_tumbling_windows_follow_the_per_window_late_rule(spark, sensor_config):
    config, replay = sensor_config
    replay.batch("sensors", [reading(0, 30, 10.0), reading(6, 10, 20.0)])  # watermark -> 00:04:10
    replay.batch("sensors", FILLER)
    # 00:04:00 is behind the watermark (00:04:10), but its window [00:00, 00:05) is still open.
    replay.batch("sensors", [reading(4, 0, 30.0), reading(11, 30, 40.0)])  # watermark -> 00:09:30
    replay.batch("sensors", FILLER)
    # 00:09:00 is behind 00:09:30 but [00:05, 00:10) is open: counted. 00:04:30's window closed: dropped.
    replay.batch("sensors", [reading(9, 0, 50.0), reading(4, 30, 60.0)])
    replay.batch("sensors", [reading(30, 0, 70.0)])  # watermark -> 00:28:00: the early windows close

    code, queries = run_in_process(spark, config, sensor_aggregation)
    assert code == 0

    tumbling = queries["tumbling"]
    dropped = sum(
        op["numRowsDroppedByWatermark"] for p in tumbling.recentProgress for op in p["stateOperators"]
    )
    assert dropped == 1, "exactly the 00:04:30 reading, whose window had closed, is dropped"

    output = Path(config.output_dir("sensor_windows"))
    rows = spark.read.parquet(str(output)).orderBy("window_start").collect()
    got = [
        (
            r["window_start"],
            r["reading_count"],
            r["avg_temperature"],
            r["max_temperature"],
            r["min_temperature"],
        )
        for r in rows
    ]
    assert got == [
        (at(0), 2, 20.0, 30.0, 10.0),  # 10 and the late-but-open 30
        (at(5), 2, 35.0, 50.0, 20.0),  # 20 and the late-but-open 50
        (at(10), 1, 40.0, 40.0, 40.0),
    ], "each closed window once, with the right stats; [00:30, 00:35) is still open"
    assert all(r["known_sensor"] and r["location"] for r in rows)

    # Each window was written by a batch whose watermark had passed the window's end.
    owners = committed_batches_of_files(output)
    marks = batch_watermarks(Path(config.checkpoint_dir("sensor_aggregation", "tumbling")))
    for part in output.glob("*.parquet"):
        if part.name not in owners:
            continue
        for row in spark.read.parquet(str(part)).collect():
            window_end_ms = int((row["window_end"] - datetime(1970, 1, 1)).total_seconds() * 1000)
            assert window_end_ms <= marks[owners[part.name]], (
                f"{row['window_start']} emitted before its end passed"
            )


def test_sliding_windows_drop_an_event_from_one_window_and_count_it_in_another(spark, sensor_config):
    config, replay = sensor_config
    replay.batch("sensors", [reading(12, 30, 10.0)])  # watermark -> 00:10:30
    replay.batch("sensors", FILLER)
    # 00:06:00 belongs to [00:00, 00:10) (closed: 00:10 <= 00:10:30) and [00:05, 00:15) (open).
    replay.batch("sensors", [reading(6, 0, 20.0)])
    replay.batch("sensors", [reading(40, 0, 30.0)])

    code, queries = run_in_process(spark, config, sensor_aggregation)
    assert code == 0
    sliding = queries["sliding"]
    dropped = sum(
        op["numRowsDroppedByWatermark"] for p in sliding.recentProgress for op in p["stateOperators"]
    )
    assert dropped == 1, "the (00:06:00, [00:00, 00:10)) pair, and only it"

    latest = sliding_latest(config)
    windows = {start: (v["reading_count"], v["avg_temperature"]) for (_, start), v in latest.items()}
    assert at(0) not in windows, "the closed window never received the late event"
    assert windows[at(5)] == (2, 15.0), "the open window counted it"
    assert windows[at(10)] == (1, 10.0)
    assert windows[at(35)] == (1, 30.0) and windows[at(40)] == (1, 30.0)
    # Each accepted event contributes to window/slide = 2 windows, less the one dropped pair.
    assert sum(count for count, _ in windows.values()) == 3 * 2 - 1
    assert all(v["known_sensor"] for v in latest.values())


def test_unknown_sensors_are_kept_and_flagged_and_bad_records_quarantined(spark, sensor_config):
    config, replay = sensor_config
    replay.batch(
        "sensors",
        [
            reading(1, 0, 21.0, sensor="sensor-9001"),
            reading(1, 0, 22.0),
            json.dumps({**reading(1, 0, 0.0), "event_id": "x", "temperature": "hot"}),
            "{broken",
        ],
    )
    replay.batch("sensors", [reading(20, 0, 23.0)])
    code, _ = run_in_process(spark, config, sensor_aggregation)
    assert code == 0
    rows = {r["sensor_id"]: r for r in spark.read.parquet(config.output_dir("sensor_windows")).collect()}
    assert rows["sensor-9001"]["known_sensor"] is False and rows["sensor-9001"]["location"] is None
    assert rows["sensor-0001"]["known_sensor"] is True
    quarantine = spark.read.parquet(f"{config.data_path('quarantine')}/sensor_aggregation").collect()
    assert sorted(r["reason"].split(":")[0] for r in quarantine) == ["broken_json", "wrong_type"]
    assert all(r["source_file"] for r in quarantine)


def test_late_filter_uses_the_previous_batch_watermark(spark, sensor_config):
    """Without a settling batch, a reading for an already-passed window still gets in."""
    config, replay = sensor_config
    replay.batch("sensors", [reading(0, 30, 10.0), reading(11, 30, 40.0)])  # watermark -> 00:09:30
    # Batch 1 emits with 00:09:30 but filters late rows with batch 0's watermark (none yet).
    replay.batch("sensors", [reading(4, 30, 60.0)])
    replay.batch("sensors", [reading(30, 0, 70.0)])
    code, _ = run_in_process(spark, config, sensor_aggregation)
    assert code == 0
    marks = batch_watermarks(Path(config.checkpoint_dir("sensor_aggregation", "tumbling")))
    assert marks[1] == int((at(9) - datetime(1970, 1, 1)).total_seconds() * 1000) + 30_000
    first = spark.read.parquet(config.output_dir("sensor_windows")).where(
        "window_start = '2026-01-01 00:00:00'"
    )
    assert [(r["reading_count"], r["max_temperature"]) for r in first.collect()] == [(2, 60.0)]
