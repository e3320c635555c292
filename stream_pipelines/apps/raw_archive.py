"""Raw-event archive: every record of every topic to Parquet, exactly as it arrived, exactly once.

Kept as received (value bytes, key, Kafka coordinates, Kafka timestamp) plus the archive time,
malformed records included. Partitioned by topic and arrival date, so the nightly job for event day D
reads only arrival days D-1 .. D+horizon. Exactly-once comes from the Parquet file sink's commit log
together with the checkpointed offsets: after any crash, each (topic, partition, offset) is present once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from stream_pipelines.core.registry import RAW_ARCHIVE
from stream_pipelines.driver.runtime import file_sink, read_raw

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from stream_pipelines.core.config import PipelineConfig
    from stream_pipelines.driver.runtime import StreamSink

APP = RAW_ARCHIVE.name


def archive_rows(raw: DataFrame) -> DataFrame:
    """Raw records as archive rows: unchanged payload and coordinates, plus archive time and arrival date."""
    return raw.select(
        "topic",
        "partition",
        "offset",
        "key",
        "value",
        "kafka_timestamp",
        "source_file",
        F.current_timestamp().alias("archived_at"),
        F.to_date(F.coalesce(F.col("kafka_timestamp"), F.current_timestamp()))
        .cast("string")
        .alias("arrival_date"),
    )


def build_sinks(spark: SparkSession, config: PipelineConfig) -> list[StreamSink]:
    raw = read_raw(spark, config, config.kafka.topics.inputs())
    return [file_sink(config, RAW_ARCHIVE.query("archive"), archive_rows(raw))]
