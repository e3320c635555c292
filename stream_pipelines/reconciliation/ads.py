"""Ad matches: exact recompute with the streaming app's own join, diff, and a scoped ledger.

Exact: ``match_clicks`` over one delivery per event_id of each side, no watermark. The streaming
output (``ad_matches``) is compared row by row on (impression_id, click_id): a pair the exact join has
and the stream lacks is *missing*, a pair the stream wrote that the exact join lacks is *wrong* (for
instance an impression written as unmatched whose click did exist).

Ledger scope (stated in the report): the stream drops an impression or click whose own event time is
at or behind the late-filter watermark of the batch that read it (the deduplication operator's late
filter, ``event_time <= watermark``; the join then never sees it). That is what is modelled, per
delivery, from the batch log of the ``matches`` query. The join's state eviction is not modelled
separately: a partner arriving after eviction is itself behind the watermark, hence in the ledger.
A diff is explained when its impression or click is in the ledger, or when the stream's final
watermark has not passed the impression's interval end (pending).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from stream_pipelines.apps.ad_matching import match_clicks
from stream_pipelines.core.config import Duration
from stream_pipelines.driver.batch_log import BatchRecord
from stream_pipelines.reconciliation import events, ledger

if TYPE_CHECKING:
    from pyspark.sql import Row, SparkSession

MISSING_MATCH, WRONG_MATCH = "missing_match", "wrong_match"


@dataclass(frozen=True)
class MatchDiff:
    impression_id: str
    click_id: str | None
    kind: str
    verdict: str
    reason: str

    @property
    def reasons(self) -> tuple[str, ...]:
        return (self.reason,)

    def label(self) -> str:
        return f"impression {self.impression_id} / click {self.click_id or '(none)'}"

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "window": self.label()}


def exact_matches(impressions: DataFrame, clicks: DataFrame, interval: Duration, day: str) -> DataFrame:
    """The authoritative matches of the impressions shown on ``day``."""
    shown = events.first_deliveries(impressions.where(F.col("event_date") == day))
    clicked = events.first_deliveries(clicks)
    return match_clicks(shown, clicked, interval)


def excluded_events(spark: SparkSession, deliveries: DataFrame, batches: Sequence[BatchRecord]) -> DataFrame:
    """event_id of every delivery the dedup late filter dropped (event_time <= late-filter watermark)."""
    assigned = ledger.with_batches(spark, deliveries, batches)
    late = F.unix_millis("event_time") <= F.col("late_filter_watermark_ms")
    return assigned.where(F.col("batch_id").isNotNull() & late).select("event_id").distinct()


def diff_matches(*frames_and_settings: Any) -> list[MatchDiff]:
    """Pairs in one side only, each explained, pending or unexplained (one Spark job); the arguments
    are ``differing_matches``'."""
    return classify_matches(differing_matches(*frames_and_settings).collect())


def differing_matches(
    exact: DataFrame,
    streaming: DataFrame,
    excluded: DataFrame,
    archived: DataFrame,
    interval: Duration,
    final_watermark_ms: int | None,
) -> DataFrame:
    """The pairs in one side only, with the evidence ``classify_matches`` reads.

    ``archived`` holds the event_id of every delivery the archive read has. While the apps run, the
    stream can match an event that reached Kafka after that read: such a pair is pending, not wrong.
    """
    key = ["impression_id", "click_key"]
    keyed_exact = exact.withColumn("click_key", F.coalesce("click_id", F.lit(""))).select(
        *key, F.lit(True).alias("in_exact"), "shown_at"
    )
    keyed_stream = streaming.withColumn("click_key", F.coalesce("click_id", F.lit(""))).select(
        *key, F.lit(True).alias("in_stream"), F.col("shown_at").alias("stream_shown_at")
    )
    flagged_ids = excluded.select(F.col("event_id").alias("flagged_id"), F.lit(True).alias("flag"))
    archived_ids = archived.select(F.col("event_id").alias("archived_id")).distinct()
    interval_end_ms = F.unix_millis(F.coalesce("shown_at", "stream_shown_at")) + F.lit(interval.milliseconds)
    return (
        keyed_exact.join(keyed_stream, key, "full_outer")
        .where(F.col("in_exact").isNull() | F.col("in_stream").isNull())
        .join(
            flagged_ids.withColumnRenamed("flag", "impression_late"),
            F.col("impression_id") == F.col("flagged_id"),
            "left",
        )
        .drop("flagged_id")
        .join(
            flagged_ids.withColumnRenamed("flag", "click_late"),
            F.col("click_key") == F.col("flagged_id"),
            "left",
        )
        .join(
            archived_ids.withColumn("impression_archived", F.lit(True)),
            F.col("impression_id") == F.col("archived_id"),
            "left",
        )
        .drop("archived_id")
        .join(
            archived_ids.withColumn("click_archived", F.lit(True)),
            F.col("click_key") == F.col("archived_id"),
            "left",
        )
        .withColumn(
            "pending", F.lit(final_watermark_ms is None) | (interval_end_ms > F.lit(final_watermark_ms or 0))
        )
    )


def classify_matches(differing: Sequence[Row | Mapping[str, Any]]) -> list[MatchDiff]:
    """The verdict on each collected row of ``differing_matches``, sorted by impression and click."""
    # An impression the stream wrote unmatched because its click was dropped is explained by that click.
    lost_click = {row["impression_id"] for row in differing if row["in_exact"] and row["click_late"]}
    # Pairs on an event the archive read does not have yet; the exact side then has the impression
    # unmatched instead.
    not_archived = {
        (row["impression_id"], row["click_key"])
        for row in differing
        if row["in_stream"]
        and not (row["impression_archived"] and (row["click_archived"] or not row["click_key"]))
    }
    awaiting_archive = {impression for impression, _ in not_archived}
    diffs = []
    for row in differing:
        kind = MISSING_MATCH if row["in_exact"] else WRONG_MATCH
        if row["impression_late"] or row["click_late"]:
            side = "impression" if row["impression_late"] else "click"
            verdict, reason = "explained", f"the {side} was dropped by the watermark (in the ledger)"
        elif kind == WRONG_MATCH and not row["click_key"] and row["impression_id"] in lost_click:
            verdict, reason = "explained", "written unmatched: its click was dropped by the watermark"
        elif (row["impression_id"], row["click_key"]) in not_archived or (
            kind == MISSING_MATCH and not row["click_key"] and row["impression_id"] in awaiting_archive
        ):
            verdict, reason = "pending", "the stream read an event after the archive was read: rerun later"
        elif row["pending"] and kind == MISSING_MATCH:
            verdict, reason = "pending", "the stream's watermark has not passed the impression's interval"
        else:
            verdict, reason = "unexplained", "not reproduced by the ledger"
        diffs.append(MatchDiff(row["impression_id"], row["click_key"] or None, kind, verdict, reason))
    return sorted(diffs, key=lambda d: (d.impression_id, d.click_id or ""))
