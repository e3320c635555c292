"""The Prometheus exporter against a real streaming query, scraped over real HTTP.

One watermarked windowed aggregation reads JSON-lines files (one file per micro-batch) that carry the
Kafka coordinates, goes through the real parsing layer and the observe helpers, and the exporter's
answers are compared with the query's own progress after each batch.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from stream_pipelines.control.control_store import ControlStore
from stream_pipelines.core.config import PipelineConfig, load_config
from stream_pipelines.core.registry import app as declared_app
from stream_pipelines.devtools.generator import format_ts
from stream_pipelines.observability.metrics import (
    METRICS,
    MetricsExporter,
    MetricsPortInUseError,
    ProgressRecorder,
    observe_event_time,
    observe_quarantine,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

APP = "sensor_aggregation"
QUERY = f"{APP}.windows"
WATERMARK_DELAY_S = 10
TOPIC = "sensors"
SOURCE_SCHEMA = "topic string, partition int, offset long, kafka_timestamp timestamp, payload string"


# --------------------------------------------------------------------------- fixtures and helpers


def exporter_config(tmp_path: Path, *extra: str) -> PipelineConfig:
    return load_config(
        "local",
        [
            f"paths.data_root={tmp_path}",
            f"metrics.ports.{APP}=0",
            f"sensors.watermark={WATERMARK_DELAY_S} seconds",
            "sensors.trigger=1 second",
            *extra,
        ],
    )


@dataclass
class Scrape:
    """One scrape of /metrics and the wall-clock interval it was taken in."""

    samples: dict[str, list[tuple[dict[str, str], float]]]
    started: float
    finished: float

    def values(self, name: str, **labels: str) -> list[float]:
        return [
            value
            for sample_labels, value in self.samples.get(name, [])
            if all(sample_labels.get(key) == wanted for key, wanted in labels.items())
        ]

    def value(self, name: str, **labels: str) -> float:
        found = self.values(name, **labels)
        assert len(found) == 1, f"expected one {name}{labels} sample, got {found}"
        return found[0]


def scrape(url: str) -> Scrape:
    started = time.time()
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    finished = time.time()
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return Scrape(samples, started, finished)


def wait_until(condition: Callable[[], Any], what: str, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def epoch(timestamp: str) -> float:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def sensor_stream(spark: SparkSession, config: PipelineConfig, source_dir: Path) -> DataFrame:
    """The shape of the sensor app's input: raw Kafka-like rows -> parse -> observe -> watermark."""
    from pyspark.sql import functions as F

    from stream_pipelines.inputs.parsing import SENSOR_READING, parse_events, valid_events

    raw = (
        spark.readStream.schema(SOURCE_SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .json(str(source_dir))
        .select(
            F.lit(None).cast("string").alias("key"),
            F.col("payload").cast("binary").alias("value"),
            "topic",
            "partition",
            "offset",
            "kafka_timestamp",
            F.lit(None).cast("string").alias("source_file"),
        )
    )
    parsed = observe_quarantine(parse_events(raw, SENSOR_READING, config.quality), TOPIC)
    readings = observe_event_time(
        valid_events(parsed, SENSOR_READING),
        TOPIC,
        "ts",
        {TOPIC: 2},
        watermark_delay=config.sensors.watermark,
    )
    return (
        readings.withWatermark("ts", config.sensors.watermark.spark())
        .groupBy(F.window("ts", "10 seconds"), "sensor_id")
        .agg(F.avg("temperature").alias("avg_temperature"))
    )


class BatchWriter:
    """Writes one JSON-lines file per micro-batch; renamed into place so Spark never sees half a file."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.count = 0
        self.offsets: dict[int, int] = {}

    def write(self, events: list[tuple[int, str]]) -> None:
        """``events``: (partition, payload) pairs, stamped as arriving now."""
        lines = []
        arrived = format_ts(datetime.now(UTC))
        for partition, payload in events:
            offset = self.offsets.get(partition, 0)
            self.offsets[partition] = offset + 1
            record = {"topic": TOPIC, "partition": partition, "offset": offset, "kafka_timestamp": arrived}
            lines.append(json.dumps({**record, "payload": payload}))
        temporary = self.folder / f".batch-{self.count:03d}.tmp"
        temporary.write_text("\n".join(lines) + "\n")
        temporary.rename(self.folder / f"batch-{self.count:03d}.jsonl")
        self.count += 1


def reading(sensor: str, moment: datetime, temperature: float = 21.5) -> str:
    return json.dumps(
        {
            "event_id": str(uuid.uuid4()),
            "sensor_id": sensor,
            "temperature": temperature,
            "ts": format_ts(moment),
        }
    )


# --------------------------------------------------------------------------- the scenario


@dataclass
class Phase:
    scrape: Scrape
    progress: dict[str, Any]
    all_progress: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Scenario:
    base: datetime
    phases: dict[str, Phase]
    after_stop: Scrape
    exported_names: set[str]


def settle(query: StreamingQuery, exporter: MetricsExporter) -> Phase:
    """Process what is there, then wait until the exporter has heard of the query's last batch."""
    query.processAllAvailable()
    last = query.lastProgress
    assert last is not None
    url = exporter.url
    assert url is not None

    def caught_up() -> Scrape | None:
        current = scrape(url)
        batch = current.values("pipeline_batch_id", query=QUERY)
        return current if batch == [float(last["batchId"])] else None

    current = wait_until(caught_up, f"the exporter to report batch {last['batchId']}")
    return Phase(current, json.loads(last.json), [json.loads(p.json) for p in query.recentProgress])


@pytest.fixture(scope="module")
def scenario(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    tmp_path = tmp_path_factory.mktemp("exporter")
    config = exporter_config(tmp_path)
    source = tmp_path / "source"
    source.mkdir()
    writer = BatchWriter(source)
    # Event times a few minutes back, so that lags are large enough to compare and far from zero.
    base = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)

    exporter = MetricsExporter(config, declared_app(APP)).start(spark)
    query = (
        sensor_stream(spark, config, source)
        .writeStream.queryName(QUERY)
        .outputMode("append")
        .format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        phases: dict[str, Phase] = {}
        # Only bad records: the query runs, but Spark has no watermark yet (it reports 1970-01-01).
        writer.write([(0, "{not json"), (1, reading("s1", base, temperature=999.0))])
        phases["garbage_only"] = settle(query, exporter)

        # Both partitions at about the same event time; one more bad record.
        writer.write(
            [(0, reading("s1", base + timedelta(seconds=s))) for s in (0, 10, 20)]
            + [(1, reading("s2", base + timedelta(seconds=s))) for s in (5, 15)]
            + [(1, "[1, 2]")]
        )
        phases["flowing"] = settle(query, exporter)

        # Partition 0 moves on; partition 1 only brings an event older than the watermark.
        writer.write(
            [(0, reading("s1", base + timedelta(seconds=s))) for s in (40, 60)]
            + [(1, reading("s2", base - timedelta(seconds=30)))]
        )
        phases["partition_behind"] = settle(query, exporter)
        exported_names = set(phases["partition_behind"].scrape.samples)
        time.sleep(1.0)  # nothing new arrives: the watermark stands still while the clock moves on
    finally:
        query.stop()
    url = exporter.url
    assert url is not None
    after_stop = wait_until(
        lambda: (s := scrape(url)).values("pipeline_query_up", query=QUERY) == [0.0] and s,
        "pipeline_query_up to drop to 0",
    )
    exporter.stop()
    yield Scenario(base, phases, after_stop, exported_names)


# --------------------------------------------------------------------------- against a real query


def test_before_the_first_watermark_no_lag_is_exported(scenario: Scenario) -> None:
    phase = scenario.phases["garbage_only"]
    assert phase.progress["eventTime"]["watermark"].startswith("1970-01-01")
    assert phase.scrape.value("pipeline_watermark_seconds", app=APP, query=QUERY) == 0.0
    # "now - 1970" would be a 56-year lag and page someone.
    assert phase.scrape.values("pipeline_watermark_lag_seconds") == []
    assert phase.scrape.values("pipeline_event_time_lag_seconds") == []
    assert phase.scrape.value("pipeline_query_up", query=QUERY) == 1.0


def test_watermark_and_lag_match_the_progress(scenario: Scenario) -> None:
    phase = scenario.phases["flowing"]
    watermark = epoch(phase.progress["eventTime"]["watermark"])
    expected = scenario.base + timedelta(seconds=20 - WATERMARK_DELAY_S)
    assert watermark == expected.timestamp(), "the scenario should have moved Spark's watermark"

    assert phase.scrape.value("pipeline_watermark_seconds", query=QUERY) == watermark
    lag = phase.scrape.value("pipeline_watermark_lag_seconds", query=QUERY)
    # Computed when scraped, so it lies between the two ends of the scrape.
    assert phase.scrape.started - watermark - 0.01 <= lag <= phase.scrape.finished - watermark + 0.01
    assert phase.scrape.value("pipeline_watermark_delay_seconds", query=QUERY) == WATERMARK_DELAY_S
    assert phase.scrape.value("pipeline_trigger_interval_seconds", query=QUERY) == 1.0
    newest = (scenario.base + timedelta(seconds=20)).timestamp()
    assert phase.scrape.value("pipeline_max_event_time_seconds", query=QUERY) == newest
    event_time_lag = phase.scrape.value("pipeline_event_time_lag_seconds", query=QUERY)
    assert phase.scrape.started - newest - 0.01 <= event_time_lag <= phase.scrape.finished - newest + 0.01


def test_lag_keeps_growing_while_the_watermark_stands_still(scenario: Scenario) -> None:
    first = scenario.phases["partition_behind"].scrape
    later = scenario.after_stop
    assert later.value("pipeline_watermark_seconds", query=QUERY) == first.value(
        "pipeline_watermark_seconds", query=QUERY
    )
    grown = later.value("pipeline_watermark_lag_seconds", query=QUERY) - first.value(
        "pipeline_watermark_lag_seconds", query=QUERY
    )
    # Both lags were computed inside their scrapes, so the growth is bounded by the scrapes' ends.
    assert later.started - first.finished - 0.01 <= grown <= later.finished - first.started + 0.01
    assert grown > 0.5


def test_batch_metrics_match_the_progress(scenario: Scenario) -> None:
    phase = scenario.phases["partition_behind"]
    last = phase.progress
    scraped = phase.scrape
    assert scraped.value("pipeline_batch_id", query=QUERY) == last["batchId"]
    assert (
        scraped.value("pipeline_batch_duration_seconds", query=QUERY)
        == last["durationMs"]["triggerExecution"] / 1000
    )
    assert scraped.value("pipeline_batch_input_rows", query=QUERY) == last["numInputRows"]
    assert scraped.value("pipeline_state_rows", query=QUERY) == sum(
        op["numRowsTotal"] for op in last["stateOperators"]
    )
    assert scraped.value("pipeline_state_memory_bytes", query=QUERY) == sum(
        op["memoryUsedBytes"] for op in last["stateOperators"]
    )
    # 2 + 6 + 3 rows were written; every one was read exactly once.
    assert scraped.value("pipeline_input_rows_total", query=QUERY) == 11
    assert scraped.value("pipeline_input_rows_total", query=QUERY) == sum(
        p["numInputRows"] for p in phase.all_progress
    )
    finished = epoch(last["timestamp"]) + last["durationMs"]["triggerExecution"] / 1000
    assert scraped.value("pipeline_last_progress_timestamp_seconds", query=QUERY) >= finished


def test_late_rows_dropped_by_the_watermark_are_counted(scenario: Scenario) -> None:
    before = scenario.phases["flowing"].scrape.value("pipeline_late_rows_dropped_total", query=QUERY)
    phase = scenario.phases["partition_behind"]
    dropped_in_progress = sum(
        op["numRowsDroppedByWatermark"] for p in phase.all_progress for op in p["stateOperators"]
    )
    assert before == 0
    assert dropped_in_progress >= 1, "the scenario should have made Spark drop the late event"
    assert phase.scrape.value("pipeline_late_rows_dropped_total", query=QUERY) == dropped_in_progress


def test_quarantined_rows_are_counted(scenario: Scenario) -> None:
    assert scenario.phases["garbage_only"].scrape.value("pipeline_quarantined_rows_total", query=QUERY) == 2
    assert scenario.phases["flowing"].scrape.value("pipeline_quarantined_rows_total", query=QUERY) == 3
    assert (
        scenario.phases["partition_behind"].scrape.value("pipeline_quarantined_rows_total", query=QUERY) == 3
    )


def test_a_partition_falling_behind_shows(scenario: Scenario) -> None:
    base = scenario.base
    flowing = scenario.phases["flowing"].scrape
    behind = scenario.phases["partition_behind"].scrape

    def partition_max(scraped: Scrape, partition: int) -> float:
        return scraped.value(
            "pipeline_partition_max_event_time_seconds", query=QUERY, topic=TOPIC, partition=str(partition)
        )

    assert partition_max(flowing, 0) == (base + timedelta(seconds=20)).timestamp()
    assert partition_max(flowing, 1) == (base + timedelta(seconds=15)).timestamp()
    # The late event of partition 1 does not move it back; partition 0 runs 45 s ahead of it.
    assert partition_max(behind, 0) == (base + timedelta(seconds=60)).timestamp()
    assert partition_max(behind, 1) == (base + timedelta(seconds=15)).timestamp()
    assert behind.value("pipeline_max_event_time_seconds", query=QUERY) == partition_max(behind, 0)
    assert behind.value("pipeline_stream_watermark_seconds", query=QUERY, stream=TOPIC) == (
        partition_max(behind, 0) - WATERMARK_DELAY_S
    )


def test_query_is_down_after_it_stops(scenario: Scenario) -> None:
    assert scenario.after_stop.value("pipeline_query_up", app=APP, query=QUERY) == 0.0


def test_everything_exported_is_declared(scenario: Scenario) -> None:
    declared = set(METRICS)
    exported = scenario.exported_names
    assert exported <= declared, f"undeclared metrics: {exported - declared}"
    # Only the Kafka-offset metrics need a Kafka source and restarts need a supervisor.
    missing = declared - exported - {"pipeline_source_lag_offsets", "pipeline_source_lag_seconds"}
    assert missing == set(), f"declared but not exported by a running watermarked query: {missing}"


# --------------------------------------------------------------------------- exporter lifecycle


def test_start_is_idempotent_and_stop_frees_the_port(spark: SparkSession, tmp_path: Path) -> None:
    exporter = MetricsExporter(exporter_config(tmp_path), declared_app(APP))
    try:
        assert exporter.start(spark) is exporter
        port = exporter.port
        exporter.start(spark)
        assert exporter.port == port
        assert "pipeline_restarts_total" in scrape(exporter.url or "").samples
    finally:
        exporter.stop()
        exporter.stop()
    assert exporter.port is None
    # The port is free again for the next run of the app (as after a supervised restart).
    again = MetricsExporter(exporter_config(tmp_path, f"metrics.ports.{APP}={port}"), declared_app(APP))
    try:
        assert again.start(spark).port == port
    finally:
        again.stop()


def test_a_taken_port_is_a_clear_error(spark: SparkSession, tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        exporter = MetricsExporter(
            exporter_config(tmp_path, f"metrics.ports.{APP}={port}"), declared_app(APP)
        )
        with pytest.raises(MetricsPortInUseError, match=rf"127\.0\.0\.1:{port}.*metrics\.ports\.{APP}"):
            exporter.start(spark)
        exporter.stop()


def test_disabled_metrics_start_nothing(spark: SparkSession, tmp_path: Path) -> None:
    exporter = MetricsExporter(exporter_config(tmp_path, "metrics.enabled=false"), declared_app(APP)).start(
        spark
    )
    assert exporter.port is None
    assert exporter.url is None
    exporter.stop()


# --------------------------------------------------------------------------- restarts


def test_restarts_survive_in_a_file_and_are_exported(spark: SparkSession, tmp_path: Path) -> None:
    config = exporter_config(tmp_path)
    store = ControlStore(config)
    assert store.restarts(APP).total == 0
    threads = [
        threading.Thread(target=store.record_restart, args=(APP,), kwargs={"cause": "test"}) for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert store.record_restart(APP, cause="test") == 9
    assert store.restarts_path(APP).name == f"{APP}.restarts.json"

    # A new exporter (as after a restart of the app) reports the persisted count.
    with MetricsExporter(config, declared_app(APP)).start(spark) as exporter:
        assert scrape(exporter.url or "").value("pipeline_restarts_total", app=APP) == 9
        store.record_restart(APP, cause="test")
        assert scrape(exporter.url or "").value("pipeline_restarts_total", app=APP) == 10
        assert scrape(exporter.url or "").value("pipeline_watchdog_restarts_total", app=APP) == 0
        store.record_watchdog_restart(APP, "no progress for 6 triggers while 400 offsets wait")
        assert scrape(exporter.url or "").value("pipeline_watchdog_restarts_total", app=APP) == 1
        # A query restarted inside its driver is a restart too, and counted apart as well.
        assert scrape(exporter.url or "").value("pipeline_in_driver_restarts_total", app=APP) == 0
        store.record_restart(APP, cause="query failed: IOException", kind="in-driver")
        scraped = scrape(exporter.url or "")
        assert scraped.value("pipeline_in_driver_restarts_total", app=APP) == 1
        assert scraped.value("pipeline_restarts_total", app=APP) == 11


# --------------------------------------------------------------------------- Kafka sources


def kafka_progress(
    *, batch: int, end: dict[str, int], latest: dict[str, int], kafka_ts: dict[str, float | None]
) -> Any:
    """A progress event shaped like Spark's for a Kafka source (offset JSON and observed metrics)."""
    from pyspark.sql.streaming.listener import StreamingQueryProgress

    def as_json(offsets: dict[str, int]) -> str:
        return json.dumps({TOPIC: offsets})

    observed: dict[str, Any] = {"max_event_time": None}
    for partition, seconds in kafka_ts.items():
        observed[f"max_event_time:{TOPIC}:{partition}"] = None
        observed[f"max_kafka_timestamp:{TOPIC}:{partition}"] = None if seconds is None else int(seconds * 1e6)
    return StreamingQueryProgress.fromJson(
        {
            "id": "00000000-0000-0000-0000-000000000001",
            "runId": str(uuid.uuid4()),
            "name": "raw_archive.archive",
            "timestamp": "2026-01-01T00:00:00.000Z",
            "batchId": batch,
            "batchDuration": 1000,
            "durationMs": {"triggerExecution": 900},
            "eventTime": {},
            "stateOperators": [],
            "sources": [
                {
                    "description": f"KafkaV2[Subscribe[{TOPIC}]]",
                    "startOffset": None,
                    "endOffset": as_json(end),
                    "latestOffset": as_json(latest),
                    "numInputRows": 10,
                    "inputRowsPerSecond": 5.0,
                    "processedRowsPerSecond": 11.1,
                    "metrics": {},
                }
            ],
            "sink": {"description": "noop", "numOutputRows": 10},
            "numInputRows": 10,
            "inputRowsPerSecond": 5.0,
            "processedRowsPerSecond": 11.1,
            "observedMetrics": {f"event_time.{TOPIC}": observed},
        }
    )


def test_kafka_source_lag_per_partition(tmp_path: Path) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    now = 1_800_000_000.0
    recorder = ProgressRecorder(exporter_config(tmp_path), declared_app("raw_archive"), clock=lambda: now)
    registry = CollectorRegistry()
    registry.register(recorder)

    def exported() -> Scrape:
        text = generate_latest(registry).decode()
        samples: dict[str, list[tuple[dict[str, str], float]]] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                samples.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
        return Scrape(samples, now, now)

    recorder.query_progress(
        kafka_progress(
            batch=7,
            end={"0": 100, "1": 50, "2": 0},
            latest={"0": 100, "1": 80, "2": 5},
            kafka_ts={"0": now - 3, "1": now - 42.5, "2": None},
        )
    )
    scraped = exported()
    lag_offsets = {
        labels["partition"]: value for labels, value in scraped.samples["pipeline_source_lag_offsets"]
    }
    lag_seconds = {
        labels["partition"]: value for labels, value in scraped.samples["pipeline_source_lag_seconds"]
    }
    assert lag_offsets == {"0": 0, "1": 30, "2": 5}
    # Caught up: 0; behind: age of the newest record read; behind but nothing read yet: unknown.
    assert lag_seconds == {"0": 0.0, "1": 42.5}
    # A query without a watermark exports neither watermark nor lag nor configured delay.
    assert scraped.values("pipeline_watermark_seconds") == []
    assert scraped.values("pipeline_watermark_delay_seconds") == []

    recorder.query_progress(
        kafka_progress(
            batch=8,
            end={"0": 100, "1": 80, "2": 5},
            latest={"0": 100, "1": 80, "2": 5},
            kafka_ts={"0": None, "1": now - 1, "2": now - 1},
        )
    )
    scraped = exported()
    assert {labels["partition"]: v for labels, v in scraped.samples["pipeline_source_lag_seconds"]} == {
        "0": 0.0,
        "1": 0.0,
        "2": 0.0,
    }
    assert scraped.value("pipeline_input_rows_total", query="raw_archive.archive") == 20


def test_queries_of_other_apps_and_unnamed_queries_are_ignored(tmp_path: Path) -> None:
    recorder = ProgressRecorder(exporter_config(tmp_path), declared_app(APP))
    recorder.query_started(uuid.uuid4(), None)
    recorder.query_started(uuid.uuid4(), "ad_matching.matches")
    recorder.query_progress(
        kafka_progress(batch=1, end={"0": 1}, latest={"0": 1}, kafka_ts={"0": None})
    )  # named raw_archive.archive
    names = {
        labels.get("query") for family in recorder.collect() for labels in (s.labels for s in family.samples)
    }
    assert names == {None}, "only the app-level restart counter should be exported"
