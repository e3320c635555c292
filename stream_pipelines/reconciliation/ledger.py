"""The late-event ledger: exactly which deliveries the stream's watermark kept out of which windows.

Not a guess from timestamps: each archived delivery is matched, through the batch log, to the
micro-batch that read it (Kafka offset inside the batch's range, or the replay file the batch listed),
and that batch's late-filter watermark (the previous batch's) decides, per window the event belongs
to, whether Spark dropped it: dropped iff window_end <= late-filter watermark.
A delivery no logged batch read is *pending* (the stream has not reached it), never dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType

from stream_pipelines.core.config import Duration
from stream_pipelines.core.registry import struct_type
from stream_pipelines.driver.batch_log import BatchRecord
from stream_pipelines.inputs.local_rows import frame_of_rows

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

KAFKA_BATCH_SCHEMA = struct_type(
    "range_topic string, range_partition int, start_offset bigint, end_offset bigint, batch_id bigint, "
    "late_filter_watermark_ms bigint, committed boolean"
)
# The batch ranges are cut into buckets of offsets so that each delivery meets only the one or two
# ranges around its own offset (an equi-join), not every range of its partition: a day of 10 s
# triggers is ~8,640 ranges per partition. The width keeps the bucket table at about this many rows.
MAX_RANGE_BUCKETS = 200_000
FILE_BATCH_SCHEMA = StructType(
    [
        StructField("batch_file", StringType()),
        StructField("file_batch_id", LongType()),
        StructField("file_late_filter_watermark_ms", LongType()),
        StructField("file_committed", BooleanType()),
    ]
)

# Ledger statuses of one (delivery, window) pair.
DROPPED = "dropped_by_watermark"
ACCEPTED = "accepted"
PENDING = "pending_not_read"  # no logged batch read it yet
UNKNOWN = "unknown_batch_log_gap"  # read by a batch whose predecessor is missing from the log


def with_batches(spark: SparkSession, deliveries: DataFrame, batches: Sequence[BatchRecord]) -> DataFrame:
    """Deliveries plus batch_id, late_filter_watermark_ms and committed of the batch that read them."""
    kafka_rows = [
        (topic, partition, start, end, b.batch_id, b.late_filter_watermark_ms, b.committed)
        for b in batches
        for (topic, partition), (start, end) in b.kafka_ranges.items()
        # An empty range (a batch with nothing new in that partition) holds no offset.
        if end > start
    ]
    file_rows = [
        (path, b.batch_id, b.late_filter_watermark_ms, b.committed) for b in batches for path in b.files
    ]
    width = range_bucket_width([end - start for _, _, start, end, *_ in kafka_rows])
    kafka_batches = F.broadcast(
        frame_of_rows(spark, kafka_rows, KAFKA_BATCH_SCHEMA).withColumn(
            "range_bucket",
            F.explode(
                F.sequence(F.floor(F.col("start_offset") / width), F.floor((F.col("end_offset") - 1) / width))
            ),
        )
    )
    file_batches = F.broadcast(frame_of_rows(spark, file_rows, FILE_BATCH_SCHEMA))
    in_range = (
        (F.col("topic") == F.col("range_topic"))
        & (F.col("partition") == F.col("range_partition"))
        & (F.floor(F.col("offset") / width) == F.col("range_bucket"))
        & (F.col("offset") >= F.col("start_offset"))
        & (F.col("offset") < F.col("end_offset"))
    )
    joined = deliveries.join(kafka_batches, in_range, "left").join(
        file_batches, F.col("source_file") == F.col("batch_file"), "left"
    )
    return joined.select(
        *deliveries.columns,
        F.coalesce("batch_id", "file_batch_id").alias("batch_id"),
        F.coalesce("late_filter_watermark_ms", "file_late_filter_watermark_ms").alias(
            "late_filter_watermark_ms"
        ),
        F.coalesce("committed", "file_committed", F.lit(False)).alias("committed"),
    )


def range_bucket_width(range_lengths: Sequence[int]) -> int:
    """Offsets per bucket: about one typical range, wide enough that all ranges make few buckets."""
    if not range_lengths:
        return 1
    typical = sorted(range_lengths)[len(range_lengths) // 2]
    return max(typical, -(-sum(range_lengths) // MAX_RANGE_BUCKETS), 1)


def windowed(assigned: DataFrame, window: Duration, slide: Duration | None = None) -> DataFrame:
    """One row per (delivery, window it belongs to), with the ledger status of that pair."""
    spark_window = (
        F.window("event_time", window.spark(), slide.spark())
        if slide is not None
        else F.window("event_time", window.spark())
    )
    rows = assigned.withColumn("_window", spark_window)
    window_end_ms = F.unix_millis(F.col("_window.end"))
    status = (
        F.when(F.col("batch_id").isNull(), F.lit(PENDING))
        .when(F.col("late_filter_watermark_ms").isNull(), F.lit(UNKNOWN))
        .when(window_end_ms <= F.col("late_filter_watermark_ms"), F.lit(DROPPED))
        .otherwise(F.lit(ACCEPTED))
    )
    return rows.select(
        "*",
        F.col("_window.start").alias("window_start"),
        F.col("_window.end").alias("window_end"),
        status.alias("ledger_status"),
    ).drop("_window")


def ledger_rows(windowed_deliveries: DataFrame, query: str) -> DataFrame:
    """The ledger proper: every (delivery, window) pair the watermark excluded, with its evidence."""
    return windowed_deliveries.where(F.col("ledger_status") == DROPPED).select(
        F.lit(query).alias("query"),
        "event_id",
        "sensor_id",
        "event_time",
        "temperature",
        "window_start",
        "window_end",
        (F.col("delay_ms") / 1000).alias("arrival_delay_s"),
        "topic",
        "partition",
        "offset",
        "kafka_timestamp",
        "source_file",
        "batch_id",
        F.timestamp_millis("late_filter_watermark_ms").alias("late_filter_watermark"),
        "event_date",
    )


def archived_eviction_watermark_ms(
    batches: Sequence[BatchRecord], archived_ends: dict[tuple[str, int], int]
) -> int | None:
    """The watermark the last committed batch emitted with, among the batches before the first one that
    read an offset the archive read does not hold.

    While the apps run, the stream can read events the archive app has not written yet (or that the
    job's archive read missed); a window emitted after such a read cannot be checked against the
    archive until a later run. ``archived_ends`` is, per (topic, partition), one past the highest
    archived offset; a partition the archive read has no row of constrains nothing (the stream's reads
    of it are then from before the archive read's arrival days).
    """
    verified = None
    for batch in sorted(batches, key=lambda b: b.batch_id):
        if any(
            coordinate in archived_ends and end > archived_ends[coordinate]
            for coordinate, (_, end) in batch.kafka_ranges.items()
        ):
            break
        if batch.committed:
            verified = max(batch.eviction_watermark_ms, verified or batch.eviction_watermark_ms)
    return verified


def final_eviction_watermark_ms(batches: Sequence[BatchRecord]) -> int | None:
    """The watermark the last committed batch emitted with: windows ending at or before it are final."""
    committed = [b.eviction_watermark_ms for b in batches if b.committed]
    return max(committed) if committed else None
