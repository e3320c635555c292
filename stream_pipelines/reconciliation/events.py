"""From the raw archive to typed deliveries of one event day, with their Kafka coordinates.

A *delivery* is one archived record (one Kafka offset, or one line of a replay file). The same event
(event_id) may have several deliveries; the stream sees them all, the exact recompute keeps one.
"""

from __future__ import annotations

from datetime import date
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from stream_pipelines.core import registry
from stream_pipelines.inputs.parsing import EventType, parse_events, quarantined_events, valid_events
from stream_pipelines.tables.day_reader import read_dataset_day

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pyspark.sql import SparkSession

    from stream_pipelines.core.config import PipelineConfig, TopicSettings


def read_archive(spark: SparkSession, config: PipelineConfig, day: date) -> DataFrame:
    """The archived records that arrived between D-1 and D + horizon (an empty frame if none).

    No archive yet (a new deployment) is an empty day, not a crash.
    """
    cutoff = registry.arrival_cutoff(day, config.reconciliation.late_horizon)
    return read_dataset_day(spark, config, registry.ARCHIVE, day).where(
        F.col("kafka_timestamp").isNull() | (F.col("kafka_timestamp") < F.lit(cutoff))
    )


def deliveries(archive: DataFrame, topic: str, event_type: EventType, config: PipelineConfig) -> DataFrame:
    """Valid, typed deliveries of one topic, with coordinates and the arrival delay in milliseconds.

    ``delivery_rank`` is 1 for the delivery the exact recompute keeps for each event_id (the first to
    arrive), higher for duplicates.
    """
    raw = archive.where(F.col("topic") == topic).select(
        "key", "value", "topic", "partition", "offset", "kafka_timestamp", "source_file"
    )
    valid = valid_events(parse_events(raw, event_type, config.quality), event_type)
    event_time = F.col(event_type.time_field)
    first_arrival = Window.partitionBy("event_id").orderBy(
        F.col("kafka_timestamp").asc_nulls_last(), "partition", "offset", "source_file"
    )
    return (
        valid.withColumn("source_file", normalised_path(F.col("source_file")))
        .withColumn("event_time", event_time)
        .withColumn("event_date", F.to_date(event_time).cast("string"))
        .withColumn("delay_ms", _millis(F.col("kafka_timestamp")) - _millis(event_time))
        .withColumn("delivery_rank", F.row_number().over(first_arrival))
    )


def quarantine_counts(
    archive: DataFrame, typed_topics: Sequence[tuple[TopicSettings, EventType]], config: PipelineConfig
) -> dict[str, dict[str, int]]:
    """Topic -> reason category -> how many archived records parsing quarantines (one Spark job)."""
    return count_rejections(
        rejections(archive, typed_topics, config), [topic.name for topic, _ in typed_topics]
    )


def rejections(
    archive: DataFrame, typed_topics: Sequence[tuple[TopicSettings, EventType]], config: PipelineConfig
) -> DataFrame | None:
    """How many archived records parsing quarantines, per topic and reason category (None: no topics)."""
    rejected = None
    for topic, event_type in typed_topics:
        raw = archive.where(F.col("topic") == topic.name).select(
            "key", "value", "topic", "partition", "offset", "kafka_timestamp", "source_file"
        )
        frame = quarantined_events(parse_events(raw, event_type, config.quality), event_type).select(
            "topic", F.split(F.col("reason"), ":").getItem(0).alias("reason")
        )
        rejected = frame if rejected is None else rejected.unionByName(frame)
    return rejected.groupBy("topic", "reason").count() if rejected is not None else None


def count_rejections(rejected: DataFrame | None, topics: Sequence[str]) -> dict[str, dict[str, int]]:
    """``rejections`` collected: topic -> reason category -> count, every topic present."""
    counts: dict[str, dict[str, int]] = {topic: {} for topic in topics}
    if rejected is not None:
        for row in rejected.collect():
            counts[row["topic"]][row["reason"]] = int(row["count"])
    return counts


def of_day(frame: DataFrame, day: date) -> DataFrame:
    return frame.where(F.col("event_date") == day.isoformat())


def first_deliveries(frame: DataFrame) -> DataFrame:
    return frame.where(F.col("delivery_rank") == 1)


def normalised_path(path: F.Column) -> F.Column:
    """The same spelling as checkpoint.format.normalise_path: file:/x, file:///x and /x all become /x."""
    return F.regexp_replace(path, r"^file:/+", "/")


def _millis(timestamp: F.Column) -> F.Column:
    return F.floor(F.unix_micros(timestamp) / F.lit(1000)).cast("long")
