"""Sensor readings in event-time windows: tumbling stats for compliance, sliding averages live.

Queries (each with its own checkpoint under checkpoints/sensor_aggregation/<name>):
- ``tumbling``: avg/max/min/count of temperature per sensor per tumbling window, enriched with the
  sensor metadata, appended to Parquet once the watermark passes the window's end. Each window is
  written exactly once (file sink + checkpoint); this is the output compliance relies on.
- ``sliding``: average per sensor per sliding window in update mode, to a compacted Kafka topic keyed
  by sensor and window. Kafka is the live sink because it takes update mode natively, any dashboard or
  service can consume it, and keyed upserts make a replayed batch after a crash harmless (the same key
  gets the same value; compaction keeps the latest).
- ``quarantine``: readings that fail parsing or range checks, with the reason and coordinates.

Duplicates are not dropped here: Spark's deduplication filters late rows by their own event time,
which would drop late readings from windows that are still open. Duplicate deliveries are counted by
the stream and corrected by the nightly reconciliation (exact recompute with one row per event_id).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from stream_pipelines.core.config import Duration
from stream_pipelines.core.registry import SENSOR_AGGREGATION
from stream_pipelines.driver.runtime import file_sink, kafka_sink, read_raw
from stream_pipelines.inputs.parsing import SENSOR_READING, parse_events, quarantined_events, valid_events
from stream_pipelines.inputs.sensor_metadata import sensor_metadata_frame
from stream_pipelines.observability.metrics import observe_event_time, observe_quarantine, topic_partitions

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from stream_pipelines.core.config import PipelineConfig
    from stream_pipelines.driver.runtime import StreamSink

APP = SENSOR_AGGREGATION.name
METADATA_COLUMNS = ("location", "building", "floor")


def tumbling_window_stats(readings: DataFrame, window: Duration) -> DataFrame:
    """avg/max/min/count of temperature per sensor per tumbling window (stream or batch)."""
    return _per_sensor_window(
        readings,
        F.window("ts", window.spark()),
        F.avg("temperature").alias("avg_temperature"),
        F.max("temperature").alias("max_temperature"),
        F.min("temperature").alias("min_temperature"),
    )


def sliding_window_averages(readings: DataFrame, window: Duration, slide: Duration) -> DataFrame:
    """Average temperature per sensor per sliding window; each reading counts in window/slide windows."""
    return _per_sensor_window(
        readings, F.window("ts", window.spark(), slide.spark()), F.avg("temperature").alias("avg_temperature")
    )


def _per_sensor_window(readings: DataFrame, window: Column, *statistics: Column) -> DataFrame:
    """The statistics and the reading count per sensor per window, with the window as two columns."""
    counted = readings.groupBy(window.alias("window"), "sensor_id").agg(
        *statistics, F.count(F.lit(1)).alias("reading_count")
    )
    names = [column for column in counted.columns if column not in ("window", "sensor_id")]
    return counted.select(
        F.col("window.start").alias("window_start"),
        F.col("window.end").alias("window_end"),
        "sensor_id",
        *names,
    )


def enrich_with_metadata(windows: DataFrame, metadata: DataFrame) -> DataFrame:
    """Left join to the metadata; sensors it does not know are kept and flagged."""
    marked = metadata.withColumn("known_sensor", F.lit(True))
    joined = windows.join(marked, on="sensor_id", how="left")
    return joined.select(
        *windows.columns,
        *METADATA_COLUMNS,
        F.coalesce(F.col("known_sensor"), F.lit(False)).alias("known_sensor"),
        "metadata_problem",
    )


def sliding_to_kafka_records(averages: DataFrame) -> DataFrame:
    """key = sensor_id|window_start (one compacted entry per window), value = the row as JSON."""
    key = F.concat_ws("|", "sensor_id", F.date_format("window_start", "yyyy-MM-dd'T'HH:mm:ss'Z'"))
    return averages.select(key.alias("key"), F.to_json(F.struct(*averages.columns)).alias("value"))


def readings_with_watermark(readings: DataFrame, delay: Duration) -> DataFrame:
    return readings.withWatermark("ts", delay.spark())


def build_sinks(spark: SparkSession, config: PipelineConfig) -> list[StreamSink]:
    settings, topics = config.sensors, config.kafka.topics
    metadata = sensor_metadata_frame(spark, config.project_path(settings.metadata_path))

    def parsed() -> DataFrame:
        return parse_events(read_raw(spark, config, [topics.sensors]), SENSOR_READING, config.quality)

    def readings() -> DataFrame:
        valid = observe_event_time(
            valid_events(parsed(), SENSOR_READING),
            "sensors",
            "ts",
            topic_partitions([topics.sensors]),
            watermark_delay=settings.watermark,
        )
        return readings_with_watermark(valid, settings.watermark)

    tumbling = enrich_with_metadata(tumbling_window_stats(readings(), settings.window), metadata)
    sliding = enrich_with_metadata(
        sliding_window_averages(readings(), settings.sliding_window, settings.slide), metadata
    )
    query = SENSOR_AGGREGATION.query
    return [
        file_sink(config, query("tumbling"), tumbling),
        kafka_sink(config, query("sliding"), sliding_to_kafka_records(sliding), output_mode="update"),
        file_sink(
            config,
            query("quarantine"),
            quarantined_events(observe_quarantine(parsed(), "sensors"), SENSOR_READING),
        ),
    ]
