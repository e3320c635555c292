"""Reconciliation benchmark: the nightly job over one day of N generated raw events, rows/s and peak memory.

One run, under a private data root (data/bench/reconcile-data by default, cleaned at the start):

  generate   a child process synthesizes, with Spark alone (spark.range and SQL functions, no Python per
             row), what a day of streaming leaves behind:
               - the raw archive, in the raw_archive app's exact layout (registry.ARCHIVE, partitioned by
                 topic and arrival_date): sensor readings over event day D (plus a margin either side)
                 from the sensors in the metadata table, Kafka timestamps = event time + a delay mix
                 (mostly seconds, some within the watermark, some beyond it, a few hours), ~0.5%
                 duplicate deliveries and ~0.5% malformed payloads, 3 partitions with offsets rising
                 with arrival time;
               - the sensor app's batch log (offsets/N, commits/N, sources/0/0 for the tumbling and the
                 sliding query): one batch per --batch-seconds of arrival time plus the trailing
                 no-data batch, with Spark's watermark rule (see stream_pipelines/driver/batch_log.py);
               - the tumbling output (outputs/sensor_windows) the stream would have written with that
                 batch log: every delivery a batch read and its late filter kept, duplicates included,
                 in the windows the final watermark closed, through the app's own parse, aggregation
                 and enrichment.
  reconcile  this process times ``run_reconciliation`` (what the DAG and ``pipelinectl reconcile`` run)
             for D in one Spark session built like the apps' (runtime.get_spark).

Memory: a thread samples the RSS of the whole process tree (this Python driver, the JVM PySpark starts,
its Python workers; the generation child while it runs) from /proc every 0.2 s; the JVM's heap use is
sampled through JMX alongside. Generation runs in a child process so that its JVM's footprint cannot
inflate the reconciliation's. Results: a table on stdout and JSON in data/bench/reconcile.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql.types import LongType, StructField, StructType

from stream_pipelines.core.config import PROJECT_ROOT, PipelineConfig
from stream_pipelines.core.store import STORED_PATHS
from stream_pipelines.devtools.benchmarks.common import (
    BenchmarkError,
    Interrupts,
    add_results_argument,
    benchmark_parser,
    derive_config,
    load_average,
    log,
    machine_info,
    own_spark_jvm,
    positive_int,
    run_main,
    write_results,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from stream_pipelines.reconciliation.job import ReconciliationResult

APP = "bench_reconcile"
DEFAULT_OUT = PROJECT_ROOT / "data" / "bench" / "reconcile.json"
DEFAULT_DATA_ROOT = PROJECT_ROOT / "data" / "bench" / "reconcile-data"
DEFAULT_EVENTS = 10_000_000
DEFAULT_DAY = date(2026, 11, 20)
DEFAULT_BATCH_SECONDS = 60
SEED = 20261120

# Only a folder holding this marker (or an empty or missing one) is ever deleted: --data-root could
# otherwise point at a user's real data.
MARKER = ".reconcile-benchmark"
MANIFEST = "manifest.json"
# What the job writes; removed before a run on reused data, so every run writes from scratch.
JOB_OUTPUTS = ("reports", "compliance")

PHASE_GENERATE = "generate"
PHASE_SESSION = "session start"
PHASE_RECONCILE = "reconcile"
PHASE_ALL = "all"

# --------------------------------------------------------------------------- the synthetic day

PARTITIONS = 3
DUPLICATE_SHARE = 0.005
MALFORMED_SHARE = 0.005
# Event times run this far past both ends of D: the margin before moves the watermark the way the end
# of D-1 would, the one after lets the stream's watermark pass D's last window, as the next day's
# readings would; without it D's last windows would stay pending.
DAY_MARGIN_S = 15 * 60
# (name, share of readings, shortest and longest arrival delay in seconds). With the default 2-minute
# watermark the first two stay in, the third is dropped whenever its window closed meanwhile, the
# fourth always. Shares add up to 1.
DELAY_MIX: tuple[tuple[str, float, float, float], ...] = (
    ("seconds", 0.900, 0.0, 5.0),
    ("within_watermark", 0.070, 5.0, 90.0),
    ("beyond_watermark", 0.025, 150.0, 900.0),
    ("hours", 0.005, 3_600.0, 6 * 3_600.0),
)
# A producer retry resends the same record a little later, at a later offset.
DUPLICATE_RESEND_S = (1.0, 30.0)
# Malformed records are produced on time; their reason is picked round-robin by row.
MALFORMED_DELAY_MAX_S = 5.0
MALFORMED_REASONS = ("broken_json", "missing_field", "wrong_type")
# The archive app runs on a 10-second trigger: a record is archived about one trigger after it arrived.
ARCHIVE_LAG_MS = 10_000
# Temperature: a daily-looking sine per sensor (phase by sensor) plus noise, well inside the quality range.
BASE_TEMPERATURE_C = 21.0
SWING_C = 1.5
NOISE_C = 0.5
PHASE_STEP = 0.7
SECONDS_PER_DAY = 86_400
MS_PER_DAY = SECONDS_PER_DAY * 1000
# The payload's ts exactly as the generator writes it (generator.format_ts): milliseconds and a Z.
TS_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"
# Draws come from hashing (salt, number): a duplicate recomputes its original's values from the same
# number, and the data does not depend on how Spark splits the range into tasks.
HASH_RANGE = 2**52
ORIGINAL, DUPLICATE, MALFORMED = "original", "duplicate", "malformed"
# Extra sensors beyond the metadata table (--sensors larger than it) get ids it cannot know.
UNKNOWN_SENSOR_PREFIX = "bench-sensor-"

# The late-filter watermark of each synthetic batch, by the arrival bucket it read.
LATE_FILTER_SCHEMA = StructType(
    [StructField("batch_key", LongType()), StructField("late_filter_watermark_ms", LongType())]
)

# --------------------------------------------------------------------------- memory sampling

SAMPLE_INTERVAL_S = 0.2
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
GIB = 1024**3


# =========================================================================== the data plan


@dataclass(frozen=True)
class DataPlan:
    """Everything that determines the generated data; a reused data root must have the same plan."""

    events: int  # raw records in the archive: originals + duplicates + malformed
    day: str
    sensor_ids: tuple[str, ...]
    batch_seconds: int
    watermark_ms: int
    window: str
    seed: int = SEED

    @property
    def duplicates(self) -> int:
        return round(self.events * DUPLICATE_SHARE)

    @property
    def malformed(self) -> int:
        return round(self.events * MALFORMED_SHARE)

    @property
    def originals(self) -> int:
        return self.events - self.duplicates - self.malformed

    @property
    def day_start_ms(self) -> int:
        return int(
            datetime.combine(date.fromisoformat(self.day), datetime.min.time(), UTC).timestamp() * 1000
        )

    @property
    def start_ms(self) -> int:
        return self.day_start_ms - DAY_MARGIN_S * 1000

    @property
    def span_ms(self) -> int:
        return (SECONDS_PER_DAY + 2 * DAY_MARGIN_S) * 1000

    @property
    def batch_ms(self) -> int:
        return self.batch_seconds * 1000


def sensor_ids_for(metadata_ids: Sequence[str], count: int | None) -> tuple[str, ...]:
    """The metadata table's sensors (all of them by default), then ids it cannot know if more are asked."""
    known = tuple(sorted(metadata_ids))
    wanted = len(known) if count is None else count
    if wanted <= len(known):
        return known[:wanted]
    return known + tuple(f"{UNKNOWN_SENSOR_PREFIX}{n:05d}" for n in range(wanted - len(known)))


def uniform(number: Column, salt: str) -> Column:
    """A reproducible draw in [0, 1) per value of ``number``."""
    from pyspark.sql import functions as F

    return F.pmod(F.xxhash64(number, F.lit(salt)), F.lit(HASH_RANGE)) / F.lit(float(HASH_RANGE))


def mixed_delay_ms(category_draw: Column, size_draw: Column) -> Column:
    """An arrival delay drawn from DELAY_MIX: the first draw picks the row, the second the length."""
    from pyspark.sql import functions as F

    delay: Column | None = None
    upper = 0.0
    for index, (_name, share, low_s, high_s) in enumerate(DELAY_MIX):
        upper += share
        length = F.floor((F.lit(low_s) + size_draw * F.lit(high_s - low_s)) * 1000).cast("long")
        if delay is None:
            delay = F.when(category_draw < F.lit(upper), length)
        elif index < len(DELAY_MIX) - 1:
            delay = delay.when(category_draw < F.lit(upper), length)
        else:
            delay = delay.otherwise(length)
    assert delay is not None
    return delay


def delivery_rows(spark: SparkSession, plan: DataPlan) -> DataFrame:
    """Every raw record of the synthetic day, before Kafka offsets are assigned.

    Columns: row_id, kind, event_number, sensor_id, partition, event_ms, arrival_ms, value (binary).
    Reading ``event_number`` is the event_number-th reading of the day in event-time order; a
    duplicate or a malformed record borrows an original's number (sensor, time) by hash.
    """
    from pyspark.sql import functions as F

    originals = spark.range(plan.originals).select(
        F.col("id").alias("row_id"), F.col("id").alias("event_number"), F.lit(ORIGINAL).alias("kind")
    )
    duplicates = spark.range(plan.duplicates).select(
        (F.col("id") + F.lit(plan.originals)).alias("row_id"),
        F.pmod(F.xxhash64("id", F.lit(f"{plan.seed}/duplicate-of")), F.lit(plan.originals)).alias(
            "event_number"
        ),
        F.lit(DUPLICATE).alias("kind"),
    )
    malformed = spark.range(plan.malformed).select(
        (F.col("id") + F.lit(plan.originals + plan.duplicates)).alias("row_id"),
        F.pmod(F.xxhash64("id", F.lit(f"{plan.seed}/malformed-of")), F.lit(plan.originals)).alias(
            "event_number"
        ),
        F.lit(MALFORMED).alias("kind"),
    )
    rows = originals.unionByName(duplicates).unionByName(malformed)

    number, row, kind = F.col("event_number"), F.col("row_id"), F.col("kind")
    sensor_index = F.pmod(number, F.lit(len(plan.sensor_ids)))
    # Evenly spread over the span like the generator's steady schedule, each jittered within its share.
    event_ms = F.lit(plan.start_ms) + F.floor(
        (number.cast("double") + uniform(number, f"{plan.seed}/jitter"))
        * F.lit(plan.span_ms / max(plan.originals, 1))
    ).cast("long")
    temperature = F.round(
        F.lit(BASE_TEMPERATURE_C)
        + F.lit(SWING_C)
        * F.sin(F.lit(2 * math.pi) * F.col("event_ms") / F.lit(MS_PER_DAY) + sensor_index * PHASE_STEP)
        + (uniform(number, f"{plan.seed}/noise") - F.lit(0.5)) * F.lit(2 * NOISE_C),
        2,
    )
    own_delay = mixed_delay_ms(
        uniform(number, f"{plan.seed}/delay-kind"), uniform(number, f"{plan.seed}/delay")
    )
    low, high = DUPLICATE_RESEND_S
    resend = F.floor((F.lit(low) + uniform(row, f"{plan.seed}/resend") * F.lit(high - low)) * 1000).cast(
        "long"
    )
    malformed_delay = F.floor(
        uniform(row, f"{plan.seed}/malformed-delay") * F.lit(MALFORMED_DELAY_MAX_S * 1000)
    )
    delay = (
        F.when(kind == F.lit(MALFORMED), malformed_delay)
        .when(kind == F.lit(DUPLICATE), own_delay + resend)
        .otherwise(own_delay)
    )
    event_id = F.when(kind == F.lit(MALFORMED), F.format_string("malformed-%010d", row)).otherwise(
        F.format_string("reading-%010d", number)
    )
    ts = F.date_format(F.timestamp_millis("event_ms"), TS_FORMAT)
    reading = F.to_json(F.struct(F.col("event_id"), F.col("sensor_id"), F.col("temperature"), ts.alias("ts")))
    # Three kinds of bad payload the parser must quarantine: truncated JSON, a missing field, a wrong type.
    reason = F.pmod(row, F.lit(len(MALFORMED_REASONS)))
    broken = reading.substr(F.lit(1), F.length(reading) - F.lit(1) - F.pmod(row, F.lit(7)))
    missing = F.to_json(F.struct(F.col("event_id"), F.col("sensor_id"), ts.alias("ts")))
    wrong = F.to_json(
        F.struct(F.col("event_id"), F.col("sensor_id"), F.lit("hot").alias("temperature"), ts.alias("ts"))
    )
    payload = (
        F.when(kind != F.lit(MALFORMED), reading)
        .when(reason == F.lit(0), broken)
        .when(reason == F.lit(1), missing)
        .otherwise(wrong)
    )
    sensor_ids = F.array(*[F.lit(sensor) for sensor in plan.sensor_ids])
    return (
        rows.withColumn("sensor_id", F.element_at(sensor_ids, (sensor_index + 1).cast("int")))
        # Keyed by sensor like the generator's records, so a sensor's readings share a partition.
        .withColumn("partition", F.pmod(sensor_index, F.lit(PARTITIONS)).cast("int"))
        .withColumn("event_ms", event_ms)
        .withColumn("temperature", temperature)
        .withColumn("arrival_ms", F.col("event_ms") + delay.cast("long"))
        .withColumn("event_id", event_id)
        .withColumn("value", payload.cast("binary"))
        .select("row_id", "kind", "event_number", "sensor_id", "partition", "event_ms", "arrival_ms", "value")
    )


def per_second_counts(rows: DataFrame, plan: DataPlan, horizon_cutoff_ms: int) -> DataFrame:
    """Per (partition, arrival second): records, newest valid event time, and the figures the job's
    own counts are checked against. Small (at most partitions x seconds); offsets are derived from it."""
    from pyspark.sql import functions as F

    valid = F.col("kind") != F.lit(MALFORMED)
    on_day = (F.col("event_ms") >= F.lit(plan.day_start_ms)) & (
        F.col("event_ms") < F.lit(plan.day_start_ms + MS_PER_DAY)
    )
    within = F.col("arrival_ms") < F.lit(horizon_cutoff_ms)
    return rows.groupBy("partition", F.floor(F.col("arrival_ms") / 1000).alias("arrival_s")).agg(
        F.count(F.lit(1)).alias("records"),
        # The stream's watermark moves with valid readings only: malformed ones never reach it.
        F.max(F.when(valid, F.col("event_ms"))).alias("max_event_ms"),
        F.count(F.when(within, 1)).alias("within_horizon"),
        F.count(F.when(valid & on_day & within, 1)).alias("day_deliveries"),
        F.count(F.when((F.col("kind") == F.lit(ORIGINAL)) & on_day & within, 1)).alias("day_events"),
        F.count(F.when(~valid & within, 1)).alias("malformed_within_horizon"),
    )


def first_offsets(per_second: DataFrame) -> DataFrame:
    """The offset of each (partition, arrival second)'s first record: the records before it, counted."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    before = Window.partitionBy("partition").orderBy("arrival_s").rowsBetween(Window.unboundedPreceding, -1)
    return per_second.select(
        "partition",
        "arrival_s",
        F.coalesce(F.sum("records").over(before), F.lit(0)).cast("long").alias("first"),
    )


def archive_frame(rows: DataFrame, offsets: DataFrame, topic: str) -> DataFrame:
    """The raw archive rows, columns and types exactly as raw_archive.archive_rows writes them.

    Offsets are contiguous per partition and rise with arrival time (ties by row id), as a single
    producer per key would leave them.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    in_second = Window.partitionBy("partition", "arrival_s").orderBy("arrival_ms", "row_id")
    kafka_timestamp = F.timestamp_millis("arrival_ms")
    return (
        rows.withColumn("arrival_s", F.floor(F.col("arrival_ms") / 1000))
        .join(F.broadcast(offsets), ["partition", "arrival_s"])
        .select(
            F.lit(topic).alias("topic"),
            F.col("partition").cast("int").alias("partition"),
            (F.col("first") + F.row_number().over(in_second) - F.lit(1)).cast("long").alias("offset"),
            F.col("sensor_id").alias("key"),
            "value",
            kafka_timestamp.alias("kafka_timestamp"),
            F.lit(None).cast("string").alias("source_file"),
            F.timestamp_millis(F.col("arrival_ms") + F.lit(ARCHIVE_LAG_MS)).alias("archived_at"),
            F.to_date(kafka_timestamp).cast("string").alias("arrival_date"),
        )
    )


# =========================================================================== the batch log


@dataclass(frozen=True)
class SyntheticBatch:
    """One micro-batch of the synthetic stream: what its offsets/N and commits/N files say."""

    batch_id: int
    batch_key: int | None  # arrival_ms // batch_ms of the records it read; None for the no-data batch
    end_offsets: dict[int, int]  # partition -> offset after its last record
    timestamp_ms: int
    watermark_ms: int  # batchWatermarkMs: emission and eviction in this batch
    late_filter_watermark_ms: int  # the previous batch's: rows of windows ending at or before it drop
    next_watermark_ms: int  # commits/N nextBatchWatermarkMs


def plan_batches(
    per_batch: Sequence[tuple[int, int, int, int | None]], delay_ms: int, batch_ms: int
) -> list[SyntheticBatch]:
    """Batches from (batch_key, partition, records, newest valid event ms) rows, in arrival order.

    One batch per batch_key that has records, then the no-data batch Spark runs when the watermark
    moved and nothing new arrived, which closes the windows the last records' event times allow.
    Watermarks follow Spark's rule through advisor.late_watermarks (the one implementation of it):
    batch N's watermark is the newest event time of batches before N minus the delay, never moving
    back, and its late filter uses batch N-1's.
    """
    from stream_pipelines.reconciliation.advisor import late_watermarks

    keys = sorted({key for key, _, _, _ in per_batch})
    records: dict[tuple[int, int], int] = {}
    newest: dict[int, int] = {}
    for key, partition, count, maximum in per_batch:
        records[(key, partition)] = records.get((key, partition), 0) + count
        if maximum is not None:
            newest[key] = max(newest.get(key, maximum), maximum)
    maxima: list[int | None] = [newest.get(key) for key in keys] + [None]  # + the no-data batch
    # late_watermarks gives each batch's late filter, i.e. the previous batch's watermark; two extra
    # entries make it yield every batch's own watermark and the one after the last (the commit's next).
    marks = late_watermarks([*maxima, None, None], delay_ms)[1:]
    late = late_watermarks(maxima, delay_ms)
    ends = dict.fromkeys(range(PARTITIONS), 0)
    batches: list[SyntheticBatch] = []
    for batch_id, key in enumerate([*keys, None]):
        if key is not None:
            for partition in range(PARTITIONS):
                ends[partition] += records.get((key, partition), 0)
            # A batch starts once its stretch of arrival time is over (a trigger after the last record).
            timestamp = (key + 1) * batch_ms
        else:
            timestamp = (batches[-1].timestamp_ms if batches else 0) + batch_ms
        batches.append(
            SyntheticBatch(
                batch_id=batch_id,
                batch_key=key,
                end_offsets=dict(ends),
                timestamp_ms=timestamp,
                watermark_ms=marks[batch_id],
                late_filter_watermark_ms=late[batch_id],
                next_watermark_ms=marks[batch_id + 1],
            )
        )
    return batches


def batch_log_files(batches: Sequence[SyntheticBatch], topic: str, conf: dict[str, str]) -> dict[str, bytes]:
    """Relative path -> content of a query's batch log, byte for byte in Spark 4's checkpoint formats."""
    compact = {"separators": (",", ":")}
    # The Kafka source's initial offsets: Spark writes a zero byte before the version line.
    initial = {topic: {str(partition): 0 for partition in range(PARTITIONS)}}
    files = {"sources/0/0": b"\x00v1\n" + json.dumps(initial, **compact).encode()}
    for batch in batches:
        metadata = {
            "batchWatermarkMs": batch.watermark_ms,
            "batchTimestampMs": batch.timestamp_ms,
            "conf": conf,
        }
        ends = {topic: {str(partition): end for partition, end in sorted(batch.end_offsets.items())}}
        files[f"offsets/{batch.batch_id}"] = (
            f"v1\n{json.dumps(metadata, **compact)}\n{json.dumps(ends, **compact)}".encode()
        )
        files[f"commits/{batch.batch_id}"] = (
            f"v1\n{json.dumps({'nextBatchWatermarkMs': batch.next_watermark_ms}, **compact)}".encode()
        )
    return files


def write_files(folder: Path, files: dict[str, bytes]) -> None:
    for relative, content in files.items():
        target = folder / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)


def streaming_windows(
    spark: SparkSession,
    archive: DataFrame,
    batches: Sequence[SyntheticBatch],
    batch_ms: int,
    config: PipelineConfig,
) -> DataFrame:
    """The tumbling output the sensor app would have written given these batches (its columns).

    Through the app's own functions: parse and validity, tumbling_window_stats, enrich_with_metadata.
    A delivery counts in its window unless the window ended at or before its batch's late-filter
    watermark; a window is written once the final watermark has passed its end.
    """
    from pyspark.sql import functions as F

    from stream_pipelines.apps.sensor_aggregation import enrich_with_metadata, tumbling_window_stats
    from stream_pipelines.inputs.parsing import RAW_SCHEMA, SENSOR_READING, parse_events, valid_events
    from stream_pipelines.inputs.sensor_metadata import sensor_metadata_frame

    table = spark.createDataFrame(
        [(b.batch_key, b.late_filter_watermark_ms) for b in batches if b.batch_key is not None],
        LATE_FILTER_SCHEMA,
    )
    window = config.sensors.window
    raw = archive.where(F.col("topic") == config.kafka.topics.sensors.name).select(*RAW_SCHEMA.fieldNames())
    readings = (
        valid_events(parse_events(raw, SENSOR_READING, config.quality), SENSOR_READING)
        .withColumn("batch_key", F.floor(F.unix_millis("kafka_timestamp") / F.lit(batch_ms)))
        .join(F.broadcast(table), "batch_key")
        # F.window is only resolved in projections, hence a column first and the filter after.
        .withColumn("_window_end_ms", F.unix_millis(F.window("ts", window.spark()).end))
        .where(F.col("_window_end_ms") > F.col("late_filter_watermark_ms"))
    )
    closed = F.unix_millis("window_end") <= F.lit(batches[-1].watermark_ms)
    metadata = sensor_metadata_frame(spark, config.project_path(config.sensors.metadata_path))
    return enrich_with_metadata(tumbling_window_stats(readings, window).where(closed), metadata)


def schema_mismatches(actual: StructType, expected: StructType) -> list[str]:
    """Column by column differences of name or type (nullability aside)."""
    found = [(f.name, f.dataType.simpleString()) for f in actual.fields]
    wanted = [(f.name, f.dataType.simpleString()) for f in expected.fields]
    if found == wanted:
        return []
    return [f"expected {wanted}", f"found {found}"]


def generate(
    spark: SparkSession, config: PipelineConfig, plan: DataPlan, interrupts: Interrupts
) -> dict[str, Any]:
    """Write archive, batch logs and streaming output under the config's data root; returns the manifest."""
    from pyspark.sql import functions as F

    from stream_pipelines.core import registry
    from stream_pipelines.core.registry import arrival_cutoff
    from stream_pipelines.driver.batch_log import query_log_dir
    from stream_pipelines.reconciliation.job import SENSOR_APP, SLIDING_QUERY, TUMBLING_QUERY

    timings: dict[str, float] = {}
    started = step = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal step
        now = time.perf_counter()
        timings[name] = round(now - step, 2)
        step = now
        interrupts.check()

    day = date.fromisoformat(plan.day)
    cutoff_ms = int(
        arrival_cutoff(day, config.reconciliation.late_horizon).replace(tzinfo=UTC).timestamp() * 1000
    )
    topic = config.kafka.topics.sensors.name
    archive_path = config.data_path("archive")

    log(
        f"generate: {plan.events:,} raw records "
        f"({plan.duplicates:,} duplicates, {plan.malformed:,} malformed)"
    )
    rows = delivery_rows(spark, plan)
    per_second = per_second_counts(rows, plan, cutoff_ms).persist()
    sums = per_second.agg(
        *[
            F.sum(name).alias(name)
            for name in (
                "records",
                "within_horizon",
                "day_deliveries",
                "day_events",
                "malformed_within_horizon",
            )
        ]
    ).first()
    totals = {name: int(sums[name] or 0) for name in sums.asDict()}
    if totals["records"] != plan.events:
        raise BenchmarkError(f"generated {totals['records']:,} records, expected {plan.events:,}")
    lap("count_seconds")

    archive = archive_frame(rows, first_offsets(per_second), topic)
    mismatch = schema_mismatches(archive.schema, registry.ARCHIVE.schema())
    if mismatch:
        raise BenchmarkError(
            f"the synthetic archive does not have the archive's schema: {'; '.join(mismatch)}"
        )
    archive.write.mode("overwrite").partitionBy(*registry.ARCHIVE.partition_by).parquet(archive_path)
    lap("archive_seconds")
    log(f"generate: archive written to {archive_path} ({timings['archive_seconds']:.0f}s)")

    # A plain batch write has no _spark_metadata log; the job reads the folder like the sink's output.
    written = spark.read.parquet(archive_path)
    read_back = written.count()
    if read_back != plan.events:
        raise BenchmarkError(f"the archive reads back {read_back:,} records, {plan.events:,} were written")
    lap("read_back_seconds")

    per_batch = [
        (int(r["batch_key"]), int(r["partition"]), int(r["records"]), r["max_event_ms"])
        for r in per_second.groupBy(
            F.floor(F.col("arrival_s") / F.lit(plan.batch_seconds)).alias("batch_key"), "partition"
        )
        .agg(F.sum("records").alias("records"), F.max("max_event_ms").alias("max_event_ms"))
        .collect()
    ]
    per_second.unpersist()
    batches = plan_batches(per_batch, plan.watermark_ms, plan.batch_ms)
    conf = {"spark.sql.shuffle.partitions": str(config.spark.shuffle_partitions)}
    # The sliding query reads the same topic with the same watermark: the same batches are a fair stand-in.
    for query in (TUMBLING_QUERY, SLIDING_QUERY):
        write_files(query_log_dir(config, SENSOR_APP, query), batch_log_files(batches, topic, conf))
    lap("batch_log_seconds")
    log(
        f"generate: batch log of {len(batches):,} batches for "
        f"{SENSOR_APP}/{TUMBLING_QUERY} and /{SLIDING_QUERY}"
    )

    output = config.output_dir("sensor_windows")
    streaming_windows(spark, written, batches, plan.batch_ms, config).write.mode("overwrite").parquet(output)
    counted = (
        spark.read.parquet(output)
        .agg(
            F.count(F.lit(1)).alias("windows"),
            F.count(F.when(F.to_date("window_start").cast("string") == F.lit(plan.day), 1)).alias("for_day"),
            F.sum("reading_count").alias("readings"),
        )
        .first()
    )
    lap("streaming_output_seconds")
    log(f"generate: {int(counted['windows']):,} streaming windows written to {output}")

    archive_files = list(Path(archive_path).rglob("*.parquet"))
    final = batches[-1].watermark_ms
    return {
        "plan": plan_key(plan),
        "records": {
            "total": plan.events,
            "originals": plan.originals,
            "duplicates": plan.duplicates,
            "malformed": plan.malformed,
            **{name: count for name, count in totals.items() if name != "records"},
        },
        "arrival_dates": sorted(
            p.name.split("=", 1)[1] for p in Path(archive_path).glob("topic=*/arrival_date=*")
        ),
        "archive_files": len(archive_files),
        "archive_bytes": sum(p.stat().st_size for p in archive_files),
        "batches": len(batches),
        "data_batches": sum(b.batch_key is not None for b in batches),
        "final_watermark": datetime.fromtimestamp(final / 1000, UTC).isoformat(),
        "streaming_windows": int(counted["windows"]),
        "streaming_windows_for_day": int(counted["for_day"]),
        "streaming_readings": int(counted["readings"] or 0),
        "delay_mix": [
            {"name": name, "share": share, "min_s": low, "max_s": high}
            for name, share, low, high in DELAY_MIX
        ],
        "timings": timings,
        "generation_seconds": round(time.perf_counter() - started, 2),
    }


def plan_key(plan: DataPlan) -> dict[str, Any]:
    """The plan as JSON would give it back, for comparing a stored manifest with the current plan."""
    return json.loads(json.dumps(asdict(plan)))


# =========================================================================== memory


@dataclass
class PhasePeak:
    """The highest tree RSS seen during one phase, what it was made of, and the JVM heap's sampled peak."""

    rss_bytes: int = 0
    breakdown_bytes: dict[str, int] = field(default_factory=dict)
    processes: int = 0
    heap_used_bytes: int | None = None
    samples: int = 0

    def as_json(self) -> dict[str, Any]:
        return {
            "peak_rss_bytes": self.rss_bytes,
            "peak_rss_gib": round(self.rss_bytes / GIB, 3),
            "breakdown_at_peak_bytes": self.breakdown_bytes,
            "processes_at_peak": self.processes,
            "jvm_heap_used_peak_bytes": self.heap_used_bytes,
            "samples": self.samples,
        }


def process_tree(root: int) -> dict[int, int]:
    """``root`` and all its descendants: pid -> start time (clock ticks since boot), from /proc/<pid>/stat."""
    children: dict[int, list[int]] = {}
    started: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # The command name may hold spaces and parentheses; the fields after the last ')' do not.
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            parent, start = int(fields[1]), int(fields[19])
        except (OSError, IndexError, ValueError):
            continue  # exited while we looked
        children.setdefault(parent, []).append(int(entry.name))
        started[int(entry.name)] = start
    tree: dict[int, int] = {}
    pending = [root]
    while pending:
        pid = pending.pop()
        tree[pid] = started.get(pid, 0)
        pending.extend(children.get(pid, ()))
    return tree


def resident_bytes(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE_SIZE
    except (OSError, IndexError, ValueError):
        return None


def process_role(pid: int, root: int) -> str:
    if pid == root:
        return "python_driver"
    try:
        name = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "other"
    if name == "java":
        return "jvm"
    return "python_other" if name.startswith("python") else "other"


def high_water_mark(pid: int) -> int | None:
    """The kernel's own peak RSS of one process (VmHWM), exact rather than sampled."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, IndexError, ValueError):
        pass
    return None


class TreeMemorySampler:
    """Samples the RSS of this process and all its descendants every SAMPLE_INTERVAL_S, per phase.

    RSS summed over processes counts pages they share more than once: PySpark's Python workers are
    forked from one daemon and share its pages, so their figure (python_other) is an upper bound.
    """

    def __init__(self, root: int, interval_s: float = SAMPLE_INTERVAL_S) -> None:
        self.root = root
        self.interval_s = interval_s
        self.phase: str | None = None
        self.peaks: dict[str, PhasePeak] = {}
        # Set while a session exists: the JVM's used heap, read through JMX.
        self.heap_probe: Callable[[], int] | None = None
        self._stopping = threading.Event()
        # The main thread samples too (at each phase change); one at a time keeps the peaks consistent.
        self._lock = threading.Lock()
        self._previous: set[tuple[int, int]] = set()
        self._thread = threading.Thread(target=self._run, name="memory-sampler", daemon=True)

    def start(self) -> TreeMemorySampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=10)

    def set_phase(self, phase: str | None) -> None:
        if phase is not None:
            self.sample_into(phase)  # a first sample at once, so a short phase still has one
        self.phase = phase

    def _run(self) -> None:
        while not self._stopping.wait(self.interval_s):
            if self.phase is not None:
                self.sample_into(self.phase)

    def sample_into(self, phase: str) -> None:
        with self._lock:
            self._sample_into(phase)

    def _sample_into(self, phase: str) -> None:
        breakdown: dict[str, int] = {}
        processes = 0
        tree = set(process_tree(self.root).items())
        # A process is counted from its second sample on. The JVM starts programs by posix_spawn, whose
        # child shares the JVM's memory until it execs: caught in that instant it would count the whole
        # JVM twice. Every process that matters lives for many samples.
        settled, self._previous = tree & self._previous, tree
        for pid in {pid for pid, _ in settled} | {self.root}:
            rss = resident_bytes(pid)
            if not rss:
                continue  # gone, or a zombie (no memory of its own)
            processes += 1
            role = process_role(pid, self.root)
            breakdown[role] = breakdown.get(role, 0) + rss
        total = sum(breakdown.values())
        peak = self.peaks.setdefault(phase, PhasePeak())
        peak.samples += 1
        if total > peak.rss_bytes:
            peak.rss_bytes, peak.breakdown_bytes, peak.processes = (
                total,
                dict(sorted(breakdown.items())),
                processes,
            )
        probe = self.heap_probe
        if probe is not None:
            try:
                used = probe()
            except Exception:  # the session may be stopping; a lost sample is harmless
                return
            peak.heap_used_bytes = max(peak.heap_used_bytes or 0, used)


class JvmMemory:
    """The driver JVM's heap through JMX: current use (for the sampler), pool peaks and GC time."""

    def __init__(self, spark: SparkSession) -> None:
        management = spark._jvm.java.lang.management.ManagementFactory  # type: ignore[union-attr]
        self._memory = management.getMemoryMXBean()
        self._pools = list(management.getMemoryPoolMXBeans())
        self._collectors = list(management.getGarbageCollectorMXBeans())
        self._runtime = spark._jvm.java.lang.Runtime.getRuntime()  # type: ignore[union-attr]
        self._gc_ms_at_reset = 0

    def heap_used(self) -> int:
        return int(self._memory.getHeapMemoryUsage().getUsed())

    def reset(self) -> None:
        for pool in self._pools:
            pool.resetPeakUsage()
        self._gc_ms_at_reset = self._gc_ms()

    def _gc_ms(self) -> int:
        return sum(max(int(collector.getCollectionTime()), 0) for collector in self._collectors)

    def since_reset(self) -> dict[str, Any]:
        heap_pools = [pool for pool in self._pools if str(pool.getType().name()) == "HEAP"]
        return {
            "max_heap_bytes": int(self._runtime.maxMemory()),
            # Each pool peaks at its own moment, so the sum is an upper bound of the heap's peak.
            "pool_peaks_sum_bytes": sum(int(pool.getPeakUsage().getUsed()) for pool in heap_pools),
            "pool_peaks_bytes": {
                str(pool.getName()): int(pool.getPeakUsage().getUsed()) for pool in heap_pools
            },
            "gc_seconds": round((self._gc_ms() - self._gc_ms_at_reset) / 1000, 2),
        }


# =========================================================================== orchestration


def benchmark_config(args: argparse.Namespace) -> PipelineConfig:
    """The user's env and --set overrides, then every data path inside the private data root."""
    from stream_pipelines.core.config import config_from_args

    root = Path(args.data_root).resolve()
    # Every stored entry relative to the data root, so that no env's absolute paths (an s3a:// archive)
    # can aim the run at shared data.
    private = [f"paths.data_root={root}", *(f"paths.{name}={name}" for name in STORED_PATHS)]
    return derive_config(config_from_args(args), private)


def data_plan(args: argparse.Namespace, config: PipelineConfig) -> DataPlan:
    from stream_pipelines.inputs.sensor_metadata import read_metadata_rows

    metadata = read_metadata_rows(config.project_path(config.sensors.metadata_path))
    return DataPlan(
        events=args.events,
        day=args.day.isoformat(),
        sensor_ids=sensor_ids_for([row[0] for row in metadata], args.sensors),
        batch_seconds=args.batch_seconds,
        watermark_ms=config.sensors.watermark.milliseconds,
        window=str(config.sensors.window),
    )


def prepare_data_root(root: Path) -> None:
    """An empty data root carrying the marker; only a folder this benchmark made is ever deleted."""
    if root.exists():
        if any(root.iterdir()) and not (root / MARKER).exists():
            raise BenchmarkError(
                f"{root} is not empty and was not made by this benchmark (no {MARKER}); "
                "refusing to delete it: pass another --data-root"
            )
        shutil.rmtree(root)
    root.mkdir(parents=True)
    (root / MARKER).write_text(
        "data of python -m stream_pipelines.devtools.benchmarks.reconcile; deleted by each run\n"
    )


def reusable_manifest(root: Path, plan: DataPlan) -> dict[str, Any] | None:
    try:
        manifest = json.loads((root / MANIFEST).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return manifest if manifest.get("plan") == plan_key(plan) else None


def run_generation_child(argv: Sequence[str]) -> float:
    """This module again with --phase generate, in its own process (and JVM); returns its wall seconds."""
    command = [
        sys.executable,
        "-m",
        "stream_pipelines.devtools.benchmarks.reconcile",
        *argv,
        "--phase",
        PHASE_GENERATE,
    ]
    started = time.perf_counter()
    completed = subprocess.run(command, check=False)
    if completed.returncode != 0:
        raise BenchmarkError(f"data generation exited with {completed.returncode} (its log is above)")
    return time.perf_counter() - started


def generation_main(args: argparse.Namespace, interrupts: Interrupts) -> int:
    """The child's whole job: one session, the data, the manifest."""
    from stream_pipelines.driver.runtime import get_spark

    config = benchmark_config(args)
    plan = data_plan(args, config)
    root = Path(config.project_path(config.paths.data_root))
    if not (root / MARKER).exists():
        raise BenchmarkError(f"{root} was not prepared by the benchmark (no {MARKER})")
    spark = get_spark(config, f"{APP}_generate")
    interrupts.install()
    try:
        manifest = generate(spark, config, plan, interrupts)
    finally:
        spark.stop()
    (root / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    log(f"generate: done in {manifest['generation_seconds']:.0f}s")
    return 0


def run_benchmark(args: argparse.Namespace, argv: Sequence[str], interrupts: Interrupts) -> dict[str, Any]:
    from stream_pipelines.driver.runtime import get_spark
    from stream_pipelines.reconciliation.job import run_reconciliation

    # Taken before anything of ours runs, so it shows what else was keeping the machine busy.
    load_before = load_average()
    config = benchmark_config(args)
    plan = data_plan(args, config)
    root = Path(config.project_path(config.paths.data_root))
    sampler = TreeMemorySampler(os.getpid()).start()
    try:
        manifest = reusable_manifest(root, plan) if args.reuse_data else None
        child_wall_s: float | None = None
        if manifest is not None:
            log(f"reusing the data generated earlier in {root}")
            for name in JOB_OUTPUTS:
                shutil.rmtree(config.data_path(name), ignore_errors=True)
        else:
            prepare_data_root(root)
            log(f"generating {plan.events:,} raw records for {plan.day} under {root} (child process) ...")
            sampler.set_phase(PHASE_GENERATE)
            child_wall_s = run_generation_child(argv)
            sampler.set_phase(None)
            manifest = json.loads((root / MANIFEST).read_text())
        interrupts.check()

        sampler.set_phase(PHASE_SESSION)
        spark = get_spark(config, APP)
        interrupts.install()
        try:
            jvm = JvmMemory(spark)
            sampler.heap_probe = jvm.heap_used
            jvm.reset()
            load_at_start = load_average()
            log(f"reconciling {plan.day} (run_reconciliation) ...")
            sampler.set_phase(PHASE_RECONCILE)
            started = time.perf_counter()
            result = run_reconciliation(
                config, date.fromisoformat(plan.day), spark=spark, fail_on_unexplained=False
            )
            seconds = time.perf_counter() - started
            sampler.set_phase(None)
            log(f"reconciled in {seconds:.1f}s: {result.status}")
            java = own_spark_jvm()
            jvm_stats = {**jvm.since_reset(), "vm_hwm_bytes": high_water_mark(java) if java else None}
        finally:
            sampler.heap_probe = None
            spark.stop()
    finally:
        sampler.stop()
    results = build_results(
        args, config, plan, manifest, child_wall_s, result, seconds, sampler.peaks, jvm_stats
    )
    results["load_average"] = {
        "before": load_before,
        "at_reconcile_start": load_at_start,
        "after": load_average(),
    }
    return results


# =========================================================================== results


def consistency_checks(
    manifest: dict[str, Any], result: ReconciliationResult, sensors_topic: str
) -> dict[str, dict[str, Any]]:
    """What the job read against what was generated; any mismatch makes the run's numbers meaningless."""
    records, inputs = manifest["records"], result.inputs
    quarantined = sum(result.quarantine.get(sensors_topic, {}).values())
    pairs = {
        "archive_rows_read": (records["within_horizon"], inputs["archive_rows_read"]),
        "sensor_deliveries_for_day": (records["day_deliveries"], inputs["sensor_deliveries_for_day"]),
        "sensor_events_for_day": (records["day_events"], inputs["sensor_events_for_day"]),
        "batches_logged": (manifest["batches"], inputs["batches_logged"]),
        "streaming_windows_for_day": (
            manifest["streaming_windows_for_day"],
            result.window_counts["streaming_windows"],
        ),
        "sensor_records_quarantined": (records["malformed_within_horizon"], quarantined),
        "deliveries_no_batch_read": (0, result.pending_deliveries),
        "deliveries_in_batch_log_gaps": (0, result.unknown_deliveries),
    }
    return {name: {"expected": want, "actual": got, "ok": want == got} for name, (want, got) in pairs.items()}


def build_results(
    args: argparse.Namespace,
    config: PipelineConfig,
    plan: DataPlan,
    manifest: dict[str, Any],
    child_wall_s: float | None,
    result: ReconciliationResult,
    seconds: float,
    peaks: dict[str, PhasePeak],
    jvm_stats: dict[str, Any],
) -> dict[str, Any]:
    rows_read = int(result.inputs["archive_rows_read"])
    checks = consistency_checks(manifest, result, config.kafka.topics.sensors.name)
    reconcile_peak = peaks.get(PHASE_RECONCILE, PhasePeak())
    return {
        "benchmark": "reconcile",
        "machine": machine_info(),
        "settings": {
            "events": plan.events,
            "day": plan.day,
            "sensors": len(plan.sensor_ids),
            "batch_seconds": plan.batch_seconds,
            "env": config.env,
            "spark_master": config.spark.master,
            "driver_memory": config.spark.driver_memory,
            "shuffle_partitions": config.spark.shuffle_partitions,
            "sensor_window": str(config.sensors.window),
            "sensor_watermark": str(config.sensors.watermark),
            "late_horizon": str(config.reconciliation.late_horizon),
            "data_root": config.project_path(config.paths.data_root),
            "reused_data": child_wall_s is None,
            "overrides": list(args.overrides),
        },
        "streaming_side": (
            f"synthesized: batch log of {manifest['batches']} batches for sensor_aggregation/tumbling and "
            f"/sliding, and the tumbling output ({manifest['streaming_windows']} windows); no ad events"
        ),
        # The sensor list only matters for reusing data; its length and first ids say enough here.
        "dataset": {
            **manifest,
            "plan": {
                **manifest["plan"],
                "sensor_ids": [*manifest["plan"]["sensor_ids"][:3], "..."],
                "sensors": len(manifest["plan"]["sensor_ids"]),
            },
        },
        "generation": {
            "seconds": manifest["generation_seconds"],
            "child_wall_seconds": round(child_wall_s, 2) if child_wall_s is not None else None,
            "memory": peaks[PHASE_GENERATE].as_json() if PHASE_GENERATE in peaks else None,
        },
        "reconcile": {
            "seconds": round(seconds, 2),
            "job_duration_s": result.inputs.get("duration_s"),
            "archive_rows_read": rows_read,
            "rows_per_s": rows_read / seconds if seconds > 0 else None,
            "status": result.status,
            "window_counts": result.window_counts,
            "ledger_pairs": result.ledger_count,
            "pending_deliveries": result.pending_deliveries,
            "unknown_deliveries": result.unknown_deliveries,
            "quarantine": result.quarantine,
            "compliance_rows": result.compliance_rows,
            "recommended_watermark_s": result.recommended_watermark_s,
            "final_streaming_watermark": result.inputs.get("final_streaming_watermark"),
            "notes": result.notes,
            "report_json": result.report_json,
        },
        "memory": {
            "sample_interval_s": SAMPLE_INTERVAL_S,
            "phases": {phase: peak.as_json() for phase, peak in peaks.items()},
            "reconcile_peak_rss_bytes": reconcile_peak.rss_bytes,
            "python_driver_vm_hwm_bytes": high_water_mark(os.getpid()),
            "jvm": jvm_stats,
        },
        "checks": checks,
        "valid": all(check["ok"] for check in checks.values()),
        "method": {
            "rows_per_s": "archive rows the job read (arrival days D-1 .. D+horizon) / wall seconds of "
            "run_reconciliation, in a session started beforehand",
            "peak_rss": "highest sum of VmRSS over this process and all descendants (JVM, Python workers; "
            f"the generation child while it runs), sampled every {SAMPLE_INTERVAL_S}s from /proc, per phase",
            "jvm_heap": "used heap sampled through JMX with the RSS; pool_peaks_sum is an upper bound; "
            "vm_hwm is the kernel's exact peak RSS of the JVM over its life (session start included)",
            "generation": "a child process with its own JVM, so its footprint does not count for the job",
        },
    }


def gib(value: int | None) -> str:
    return "n/a" if value is None else f"{value / GIB:.2f} GiB"


def format_table(results: dict[str, Any]) -> str:
    settings, machine, data = results["settings"], results["machine"], results["dataset"]
    generation, reconcile, memory = results["generation"], results["reconcile"], results["memory"]
    counts = reconcile["window_counts"]
    phases = memory["phases"]
    load = results["load_average"]
    load_text = " / ".join(f"{value:.2f}" for value in load["at_reconcile_start"]) or "unknown"
    records = data["records"]
    lines = [
        f"Reconciliation benchmark: {settings['events']:,} raw records for event day {settings['day']} "
        f"({records['duplicates']:,} duplicate deliveries, {records['malformed']:,} malformed), "
        f"{settings['sensors']} sensors, {data['batches']:,} batches of {settings['batch_seconds']} s",
        f"Spark {machine['pyspark']} {settings['spark_master']}, driver memory {settings['driver_memory']}, "
        f"{settings['shuffle_partitions']} shuffle partitions; {machine['usable_cpus']} CPUs "
        f"({machine['cpu_model']}), load average at the start of the job {load_text}",
        "",
        f"{'phase':<30}{'seconds':>10}{'rows/s':>12}{'peak RSS (tree)':>18}{'JVM heap peak':>16}",
    ]
    generated = phases.get(PHASE_GENERATE, {})
    if settings["reused_data"]:
        lines.append(f"{'generate (reused earlier data)':<30}{generation['seconds']:>10.1f}")
    else:
        lines.append(
            f"{'generate (child process)':<30}{generation['seconds']:>10.1f}{'':>12}"
            f"{gib(generated.get('peak_rss_bytes')):>18}"
        )
    peak = phases.get(PHASE_RECONCILE, {})
    lines.append(
        f"{'reconcile (run_reconciliation)':<30}{reconcile['seconds']:>10.1f}"
        f"{reconcile['rows_per_s']:>12,.0f}"
        f"{gib(peak.get('peak_rss_bytes')):>18}{gib(peak.get('jvm_heap_used_peak_bytes')):>16}"
    )
    breakdown = ", ".join(
        f"{role} {gib(size)}" for role, size in peak.get("breakdown_at_peak_bytes", {}).items()
    )
    jvm = memory["jvm"]
    failed = [name for name, check in results["checks"].items() if not check["ok"]]
    lines += [
        "",
        f"archive rows read {reconcile['archive_rows_read']:,}; peak RSS made of: {breakdown}",
        f"JVM: max heap {gib(jvm['max_heap_bytes'])}, GC {jvm['gc_seconds']}s during the job, "
        f"VmHWM {gib(jvm['vm_hwm_bytes'])}",
        f"job status {reconcile['status']}: exact windows {counts['exact_windows']:,}, streaming "
        f"{counts['streaming_windows']:,}, matching {counts['matching_windows']:,}, explained diffs "
        f"{counts['explained_diffs']:,}, unexplained {counts['unexplained_diffs']:,}, pending "
        f"{counts['pending_diffs']:,}; ledger {reconcile['ledger_pairs']:,} (delivery, window) pairs",
        "checks against the generated data: "
        + ("all agree" if not failed else f"MISMATCH in {', '.join(failed)} (see the JSON)"),
    ]
    lines += [f"note: {note}" for note in reconcile["notes"]]
    return "\n".join(lines)


# =========================================================================== entry point


def build_parser() -> argparse.ArgumentParser:
    from stream_pipelines.core.config import add_config_arguments

    parser = benchmark_parser("stream_pipelines.devtools.benchmarks.reconcile", __doc__)
    parser.add_argument(
        "--events",
        type=positive_int,
        default=DEFAULT_EVENTS,
        help="raw records to generate (default: 10000000)",
    )
    parser.add_argument(
        "--day", type=date.fromisoformat, default=DEFAULT_DAY, help="event day D (default: 2026-11-20)"
    )
    parser.add_argument(
        "--sensors",
        type=positive_int,
        default=None,
        help="sensors to spread readings over (default: every sensor in the metadata table); "
        "beyond the table's, ids it does not know",
    )
    parser.add_argument(
        "--batch-seconds",
        type=positive_int,
        default=DEFAULT_BATCH_SECONDS,
        help="arrival time per synthetic micro-batch (default: 60)",
    )
    parser.add_argument(
        "--data-root",
        type=Path,
        default=DEFAULT_DATA_ROOT,
        help="private data root, deleted at the start (default: data/bench/reconcile-data)",
    )
    parser.add_argument(
        "--reuse-data",
        action="store_true",
        help="skip generation when the data root holds data generated with the same settings",
    )
    add_results_argument(parser, DEFAULT_OUT)
    parser.add_argument(
        "--phase", choices=[PHASE_ALL, PHASE_GENERATE], default=PHASE_ALL, help=argparse.SUPPRESS
    )
    # --set changes Spark and job settings; the data paths always stay inside the private data root.
    add_config_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from stream_pipelines.inputs.sensor_metadata import SensorMetadataError

    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)

    def run(interrupts: Interrupts) -> dict[str, Any]:
        if args.phase == PHASE_GENERATE:
            # The generation child: its exit code is the whole result.
            return {"exit_code": generation_main(args, interrupts)}
        return run_benchmark(args, argv, interrupts)

    def finish(results: dict[str, Any]) -> int:
        if args.phase == PHASE_GENERATE:
            return results["exit_code"]
        print(format_table(results))
        out = write_results(args.out, results)
        print(f"results: {out}; report: {results['reconcile']['report_json']}")
        return 0 if results["valid"] and results["reconcile"]["status"] == "passed" else 1

    return run_main("bench-reconcile", run, finish, (SensorMetadataError,))


if __name__ == "__main__":
    sys.exit(main())
