"""Ad impressions matched to clicks (stream-stream join), and CTR per ad per tumbling window.

Queries (checkpoints under checkpoints/ad_matching/<name>):
- ``matches``: impressions LEFT OUTER JOIN clicks on ad_id, user_id and
  ``clicked_at BETWEEN shown_at AND shown_at + match_interval``, appended to Parquet. A matched pair
  is emitted when it matches; an impression that never got a click is emitted with null click
  columns once the watermark passes the end of its interval.
- ``ctr``: impressions, clicks and CTR per ad per tumbling window (by each event's own time).
- ``quarantine``: impressions and clicks that fail parsing or range checks.

Both inputs carry their own watermark (Spark uses the minimum of the two) and drop duplicate
deliveries of the same event_id within the watermark.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from stream_pipelines.core.config import Duration
from stream_pipelines.core.registry import AD_MATCHING
from stream_pipelines.driver.runtime import file_sink, read_raw
from stream_pipelines.inputs.parsing import CLICK, IMPRESSION, parse_events, quarantined_events, valid_events
from stream_pipelines.observability.metrics import observe_event_time, observe_quarantine, topic_partitions

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from stream_pipelines.core.config import PipelineConfig, TopicSettings
    from stream_pipelines.driver.runtime import StreamSink
    from stream_pipelines.inputs.parsing import EventType

APP = AD_MATCHING.name


def match_clicks(impressions: DataFrame, clicks: DataFrame, interval: Duration) -> DataFrame:
    """Each impression with the clicks inside its interval, or once with null click columns."""
    shown = impressions.select(
        F.col("event_id").alias("impression_id"),
        F.col("ad_id").alias("impression_ad_id"),
        F.col("user_id").alias("impression_user_id"),
        "shown_at",
    )
    clicked = clicks.select(
        F.col("event_id").alias("click_id"),
        F.col("ad_id").alias("click_ad_id"),
        F.col("user_id").alias("click_user_id"),
        "clicked_at",
    )
    condition = (
        (F.col("impression_ad_id") == F.col("click_ad_id"))
        & (F.col("impression_user_id") == F.col("click_user_id"))
        & (F.col("clicked_at") >= F.col("shown_at"))
        & (
            F.col("clicked_at")
            <= F.col("shown_at") + F.expr(f"INTERVAL {interval.milliseconds} MILLISECONDS")
        )
    )
    return shown.join(clicked, condition, "leftOuter").select(
        "impression_id",
        F.col("impression_ad_id").alias("ad_id"),
        F.col("impression_user_id").alias("user_id"),
        "shown_at",
        "click_id",
        "clicked_at",
        F.col("click_id").isNotNull().alias("matched"),
    )


def ad_events(impressions: DataFrame, clicks: DataFrame) -> DataFrame:
    """Impressions and clicks as one stream of (ad_id, event_time, is_click)."""
    return impressions.select(
        "ad_id", F.col("shown_at").alias("event_time"), F.lit(False).alias("is_click")
    ).unionByName(
        clicks.select("ad_id", F.col("clicked_at").alias("event_time"), F.lit(True).alias("is_click"))
    )


def ctr_per_window(events: DataFrame, window: Duration) -> DataFrame:
    """Impressions, clicks and click-through rate per ad per tumbling window of ``ad_events``."""
    counted = events.groupBy(F.window("event_time", window.spark()).alias("window"), "ad_id").agg(
        F.count(F.when(~F.col("is_click"), 1)).alias("impressions"),
        F.count(F.when(F.col("is_click"), 1)).alias("clicks"),
    )
    return counted.select(
        F.col("window.start").alias("window_start"),
        F.col("window.end").alias("window_end"),
        "ad_id",
        "impressions",
        "clicks",
        F.when(F.col("impressions") > 0, F.col("clicks") / F.col("impressions")).alias("ctr"),
    )


def deduplicated(events: DataFrame, time_column: str, delay: Duration) -> DataFrame:
    """The streaming edge of both inputs: watermark on the event's time, duplicates dropped within it."""
    return events.withWatermark(time_column, delay.spark()).dropDuplicatesWithinWatermark(["event_id"])


def build_sinks(spark: SparkSession, config: PipelineConfig) -> list[StreamSink]:
    settings, topics = config.ads, config.kafka.topics

    def parsed_impressions() -> DataFrame:
        return parse_events(read_raw(spark, config, [topics.impressions]), IMPRESSION, config.quality)

    def parsed_clicks() -> DataFrame:
        return parse_events(read_raw(spark, config, [topics.clicks]), CLICK, config.quality)

    def edge(
        parsed: DataFrame, event_type: EventType, stream: str, topic: TopicSettings, delay: Duration
    ) -> DataFrame:
        """One input's valid events observed before its watermark (its partitions' event times and its
        own watermark, which PartitionStalled and WatermarkLagHigh's stalled_input case read: a query
        takes the lower of the two), then deduplicated within it; ``stream`` names the input."""
        time_column = event_type.time_field
        observed = observe_event_time(
            valid_events(parsed, event_type),
            stream,
            time_column,
            topic_partitions([topic]),
            watermark_delay=delay,
        )
        return deduplicated(observed, time_column, delay)

    def impressions() -> DataFrame:
        return edge(
            parsed_impressions(),
            IMPRESSION,
            "impressions",
            topics.impressions,
            settings.impressions_watermark,
        )

    def clicks() -> DataFrame:
        return edge(parsed_clicks(), CLICK, "clicks", topics.clicks, settings.clicks_watermark)

    quarantine = observe_quarantine(
        quarantined_events(parsed_impressions(), IMPRESSION).unionByName(
            quarantined_events(parsed_clicks(), CLICK)
        ),
        "ads",
        reason_column="reason",
    )
    query = AD_MATCHING.query
    return [
        file_sink(config, query("matches"), match_clicks(impressions(), clicks(), settings.match_interval)),
        file_sink(
            config, query("ctr"), ctr_per_window(ad_events(impressions(), clicks()), settings.ctr_window)
        ),
        file_sink(config, query("quarantine"), quarantine),
    ]
