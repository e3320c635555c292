"""Delay analysis and watermark advice.

The what-if replays Spark's own watermark rule over the batches the stream actually ran (from the
batch log), for each candidate delay: the watermark of batch N is the highest event time seen in
batches before N minus the delay (never moving back), batch N filters late rows with batch N-1's
watermark, and a delivery is dropped from its tumbling window iff window_end <= that watermark. So
its share of dropped events is what a replay of the same batches through the app at that delay drops.
Deliveries no logged batch read are grouped into trigger-sized arrival buckets instead.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from itertools import accumulate
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, LongType, StructField, StructType

from stream_pipelines.inputs.local_rows import frame_of_rows

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pyspark.sql import SparkSession

    from stream_pipelines.core.config import Duration

PERCENTILES = (0.5, 0.9, 0.99, 0.999)
# Equal-width buckets from the smallest to the largest delay, per topic (the report's plot reads them).
HISTOGRAM_BUCKETS = 30
# Arrival buckets for deliveries outside the batch log get ids far above any real batch id.
UNLOGGED_BATCH_BASE = 10**15
CANDIDATE_WATERMARK_SCHEMA = StructType(
    [
        StructField("candidate_delay_s", DoubleType()),
        StructField("what_if_batch", LongType()),
        StructField("what_if_late_watermark_ms", LongType()),
    ]
)


@dataclass(frozen=True)
class DelayStats:
    topic: str
    events: int
    p50_s: float | None
    p90_s: float | None
    p99_s: float | None
    p999_s: float | None
    max_s: float | None
    histogram: list[tuple[float, int]]  # (bucket lower edge in seconds, count)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class WhatIf:
    delay_s: float
    deliveries: int
    dropped: int
    dropped_share: float
    expected_state_rows: float
    output_latency_s: float

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def delay_stats_per_topic(
    frames: Sequence[DataFrame], topics: Sequence[str], buckets: int = HISTOGRAM_BUCKETS
) -> list[DelayStats]:
    """Percentiles and a histogram of the arrival delay (arrival minus event time), per topic.

    ``frames`` hold ``topic`` and ``delay_ms``; all topics are summarised in two Spark jobs.
    """
    delays = frames[0]
    for frame in frames[1:]:
        delays = delays.unionByName(frame)
    delays = delays.where(F.col("delay_ms").isNotNull()).withColumn("delay_s", F.col("delay_ms") / 1000.0)
    summaries = {
        r["topic"]: r
        for r in delays.groupBy("topic")
        .agg(
            F.count(F.lit(1)).alias("events"),
            F.percentile("delay_s", list(PERCENTILES)).alias("quantiles"),
            F.min("delay_s").alias("min_s"),
            F.max("delay_s").alias("max_s"),
        )
        .collect()
    }
    widths = {
        topic: max((float(r["max_s"]) - float(r["min_s"])) / buckets, 1e-3) for topic, r in summaries.items()
    }
    histograms: dict[str, list[tuple[float, int]]] = {topic: [] for topic in summaries}
    if summaries:
        edges = F.create_map(
            *[item for topic, r in summaries.items() for item in (F.lit(topic), F.lit(float(r["min_s"])))]
        )
        sizes = F.create_map(*[item for topic, w in widths.items() for item in (F.lit(topic), F.lit(w))])
        bucket = F.least(
            F.floor((F.col("delay_s") - edges[F.col("topic")]) / sizes[F.col("topic")]), F.lit(buckets - 1)
        )
        for row in delays.groupBy("topic", bucket.alias("b")).count().collect():
            low = float(summaries[row["topic"]]["min_s"])
            histograms[row["topic"]].append((low + int(row["b"]) * widths[row["topic"]], int(row["count"])))
    stats = []
    for topic in topics:
        found = summaries.get(topic)
        if found is None:
            stats.append(DelayStats(topic, 0, None, None, None, None, None, []))
            continue
        p50, p90, p99, p999 = (float(q) for q in found["quantiles"])
        stats.append(
            DelayStats(
                topic,
                int(found["events"]),
                p50,
                p90,
                p99,
                p999,
                float(found["max_s"]),
                sorted(histograms[topic]),
            )
        )
    return stats


def recommended_watermark_s(p99_s: float | None, margin: float) -> float | None:
    """p99 of the delay plus the margin, rounded up to whole seconds; None without data."""
    if p99_s is None:
        return None
    return float(math.ceil(max(p99_s, 0.0) * (1 + margin)))


def late_watermarks(batch_max_event_ms: Sequence[int | None], delay_ms: int) -> list[int]:
    """Per batch (in order): the late-filter watermark Spark would use at this delay.

    watermark(0) = 0; watermark(N) = max(watermark(N-1), max event time of batches < N - delay);
    the late filter of batch N uses watermark(N-1).
    """
    seen = list(accumulate((m if m is not None else -(2**62) for m in batch_max_event_ms), max))
    watermarks = [0]
    for index in range(1, len(batch_max_event_ms)):
        watermarks.append(max(watermarks[-1], seen[index - 1] - delay_ms))
    return [0, *watermarks[:-1]]


def what_if(
    spark: SparkSession,
    assigned: DataFrame,
    day_filter: F.Column,
    candidates: Sequence[Duration],
    window: Duration,
    trigger: Duration,
    logged_batch_ids: Sequence[int] = (),
) -> list[WhatIf]:
    """Share of the day's deliveries each candidate delay would drop, state rows and output latency.

    ``assigned`` holds every delivery read for the day (all event days: they all move the watermark)
    with ``batch_id`` from the batch log (null when no logged batch read it). ``logged_batch_ids``
    lists every logged batch, so batches that read nothing still advance the watermark in the replay.
    """
    trigger_ms = max(trigger.milliseconds, 1)
    batched = assigned.withColumn(
        "what_if_batch",
        F.coalesce(
            F.col("batch_id"),
            F.lit(UNLOGGED_BATCH_BASE) + F.floor(F.unix_millis("kafka_timestamp") / F.lit(trigger_ms)),
        ).cast("long"),
    ).withColumn("tumbling_end_ms", F.unix_millis(F.window("event_time", window.spark()).end))
    per_batch = (
        batched.groupBy("what_if_batch")
        .agg(F.max(F.unix_millis("event_time")).alias("max_event_ms"))
        .collect()
    )
    maximum_by_batch: dict[int, int | None] = {batch: None for batch in logged_batch_ids}
    maximum_by_batch.update({int(r["what_if_batch"]): int(r["max_event_ms"]) for r in per_batch})
    order = sorted(maximum_by_batch)
    maxima = [maximum_by_batch[batch] for batch in order]
    rows = []
    for candidate in candidates:
        marks = late_watermarks(maxima, candidate.milliseconds)
        rows += [(float(candidate.seconds), batch, mark) for batch, mark in zip(order, marks, strict=True)]
    table = F.broadcast(frame_of_rows(spark, rows, CANDIDATE_WATERMARK_SCHEMA))
    day = batched.where(day_filter)
    counted = (
        day.join(table, "what_if_batch")
        .groupBy("candidate_delay_s")
        .agg(
            F.count(F.lit(1)).alias("deliveries"),
            F.count(F.when(F.col("tumbling_end_ms") <= F.col("what_if_late_watermark_ms"), 1)).alias(
                "dropped"
            ),
        )
        .collect()
    )
    by_delay = {float(r["candidate_delay_s"]): r for r in counted}
    keys_per_window = _keys_per_window(day)
    results = []
    for candidate in candidates:
        found = by_delay.get(float(candidate.seconds))
        total = int(found["deliveries"]) if found else 0
        dropped = int(found["dropped"]) if found else 0
        results.append(
            WhatIf(
                delay_s=float(candidate.seconds),
                deliveries=total,
                dropped=dropped,
                dropped_share=dropped / total if total else 0.0,
                # A window stays in state from its first row until the watermark passes its end:
                # about (window + delay) / window windows per key are open at any time.
                expected_state_rows=keys_per_window * (1 + candidate.seconds / window.seconds),
                # A window is emitted by the first batch whose watermark passed its end: one trigger
                # after an event at end + delay arrived, another for the watermark to take effect.
                output_latency_s=candidate.seconds + 2 * trigger.seconds,
            )
        )
    return results


def _keys_per_window(deliveries: DataFrame) -> float:
    per_window = deliveries.groupBy(F.window("event_time", "1 minute").start.alias("w")).agg(
        F.countDistinct("sensor_id").alias("keys")
    )
    found = per_window.agg(F.avg("keys").alias("keys")).first()
    return float(found["keys"]) if found and found["keys"] is not None else 0.0
