"""The nightly reconciliation for one event day D: recompute, ledger, diff, compliance table, report.

Sources (raw archive, batch log, streaming outputs) are read and sinks (compliance table, ledger,
report) written here only; everything between is pure DataFrame -> DataFrame functions, and the
aggregations are the streaming apps' own functions, called without a watermark.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stream_pipelines.apps.common import EXIT_BAD_CONFIG, add_config_arguments, config_from_args
from stream_pipelines.config import PROJECT_ROOT, ConfigError, PipelineConfig

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from stream_pipelines.reconciliation.ads import MatchDiff
    from stream_pipelines.reconciliation.advisor import DelayStats, WhatIf
    from stream_pipelines.reconciliation.diff import WindowDiff
    from stream_pipelines.reconciliation.settings import ReconciliationSettings

APP = "reconcile"
SENSOR_APP, TUMBLING_QUERY, SLIDING_QUERY = "sensor_aggregation", "tumbling", "sliding"
AD_APP, MATCHES_QUERY = "ad_matching", "matches"
EXIT_UNEXPLAINED = 1
ADS_LEDGER_SCOPE = (
    "ad deliveries count as dropped when their own event time is at or behind the late-filter watermark "
    "of the batch that read them (deduplication's late filter); join state eviction is not modelled apart"
)


class UnexplainedDifferences(RuntimeError):
    """Streaming windows that differ from the exact recompute for no reason the ledger can give."""

    def __init__(self, result: ReconciliationResult) -> None:
        self.result = result
        windows = result.unexplained
        listed = "; ".join(f"{d.label()} {d.kind}: {', '.join(d.reasons)}" for d in windows[:20])
        more = f" (and {len(windows) - 20} more)" if len(windows) > 20 else ""
        super().__init__(
            f"reconciliation of {result.day} FAILED: {len(windows)} unexplained window diff(s): "
            f"{listed}{more}. Report: {result.report_json}"
        )


@dataclass
class ReconciliationResult:
    day: str
    status: str  # passed | failed | empty_day
    notes: list[str]
    inputs: dict[str, Any]
    window_counts: dict[str, int]
    diffs: list[WindowDiff]
    ledger: list[dict[str, Any]]
    ledger_count: int
    pending_deliveries: int
    unknown_deliveries: int
    delay_stats: list[DelayStats]
    recommended_watermark_s: float | None
    what_if: list[WhatIf]
    quarantine: dict[str, dict[str, int]]
    compliance_rows: int
    outputs: dict[str, str] = field(default_factory=dict)
    match_diffs: list[MatchDiff] = field(default_factory=list)
    report_json: str = ""
    report_html: str = ""
    quality_gates: list[dict[str, Any]] = field(default_factory=list)

    @property
    def unexplained(self) -> list[WindowDiff | MatchDiff]:
        return [d for d in [*self.diffs, *self.match_diffs] if d.verdict == "unexplained"]

    def as_json(self) -> dict[str, Any]:
        return {
            "day": self.day,
            "status": self.status,
            "notes": self.notes,
            "inputs": self.inputs,
            "window_counts": self.window_counts,
            "diffs": [d.as_json() for d in self.diffs],
            "ad_match_diffs": [d.as_json() for d in self.match_diffs],
            "ad_ledger_scope": ADS_LEDGER_SCOPE,
            "late_event_ledger": {
                "count": self.ledger_count,
                "rows": self.ledger,
                "pending_deliveries_not_yet_read": self.pending_deliveries,
                "deliveries_in_batch_log_gaps": self.unknown_deliveries,
            },
            "delay_analysis": {
                "per_topic": [s.as_json() for s in self.delay_stats],
                "recommended_watermark_s": self.recommended_watermark_s,
                "what_if": [w.as_json() for w in self.what_if],
            },
            "quarantine": self.quarantine,
            "compliance_rows": self.compliance_rows,
            "outputs": self.outputs,
            "quality_gates": self.quality_gates,
        }


def run_reconciliation(
    config: PipelineConfig,
    day: date,
    *,
    spark: SparkSession | None = None,
    settings: ReconciliationSettings | None = None,
    fail_on_unexplained: bool = True,
    progress: Callable[[str], None] = lambda step: None,
) -> ReconciliationResult:
    """Reconcile event day ``day``; raises UnexplainedDifferences (after writing the report) on failure.

    ``progress`` hears each step as it starts, for a log that shows where a long run is.
    """
    from pyspark.sql import functions as F

    from stream_pipelines import batch_log
    from stream_pipelines.apps.sensor_aggregation import enrich_with_metadata, tumbling_window_stats
    from stream_pipelines.parsing import CLICK, IMPRESSION, SENSOR_READING
    from stream_pipelines.reconciliation import ads, advisor, diff, events, ledger, report
    from stream_pipelines.reconciliation.settings import (
        compliance_dir,
        ledger_dir,
        report_dir,
        settings_of,
    )
    from stream_pipelines.runtime import get_spark, read_parquet_or_none
    from stream_pipelines.sensor_metadata import sensor_metadata_frame

    started = time.monotonic()
    settings = settings or settings_of(config)
    spark = spark or get_spark(config, APP)
    sensors_cfg, topics = config.sensors, config.kafka.topics
    day_text = day.isoformat()
    on_day = F.col("event_date") == day_text

    archive_path = config.data_path("archive")
    progress(f"reading the archive for {day_text} and the batch logs")
    archive = events.read_archive(spark, archive_path, day, settings.late_horizon).persist()
    sensor_deliveries = events.deliveries(archive, topics.sensors.name, SENSOR_READING, config).persist()

    tumbling_batches = batch_log.load_batches(config, SENSOR_APP, TUMBLING_QUERY)
    sliding_batches = batch_log.load_batches(config, SENSOR_APP, SLIDING_QUERY)
    final_ms = ledger.final_eviction_watermark_ms(tumbling_batches)

    progress("exact recompute, ledger model and window-by-window diff of the sensor windows")
    # Exact recompute: one delivery per event, the streaming app's own aggregation, no watermark.
    exact = tumbling_window_stats(
        events.first_deliveries(sensor_deliveries.where(on_day)), sensors_cfg.window
    )

    assigned = ledger.with_batches(spark, sensor_deliveries, tumbling_batches).persist()
    pairs = ledger.windowed(assigned, sensors_cfg.window).where(
        F.to_date("window_start").cast("string") == day_text
    )
    # What the stream should have written, given the ledger: duplicates included, dropped rows out.
    closed = _window_ends_by(final_ms)
    model = tumbling_window_stats(
        pairs.where((F.col("ledger_status") == ledger.ACCEPTED) & F.col("committed") & closed),
        sensors_cfg.window,
    )
    streaming_path = config.output_dir("sensor_windows")
    streaming = read_parquet_or_none(spark, streaming_path)
    streaming_day = (
        streaming.where(F.to_date("window_start").cast("string") == day_text).select(
            "window_start", "window_end", "sensor_id", *diff.STATS
        )
        if streaming is not None
        else exact.limit(0)
    )
    evidence = pairs.groupBy(*diff.WINDOW_KEY).agg(
        F.count(F.when(F.col("ledger_status") == ledger.DROPPED, 1)).alias("dropped_deliveries"),
        (F.count(F.lit(1)) - F.countDistinct("event_id")).alias("duplicate_deliveries"),
    )
    archived_ends = {
        (topics.sensors.name, int(row["partition"])): int(row["end"])
        # Rows archived from replay files have no Kafka coordinates.
        for row in archive.where((F.col("topic") == topics.sensors.name) & F.col("offset").isNotNull())
        .groupBy("partition")
        .agg((F.max("offset") + 1).alias("end"))
        .collect()
    }
    verified_ms = ledger.archived_eviction_watermark_ms(tumbling_batches, archived_ends)
    compared = (
        diff.compare_windows(exact, streaming_day, model, evidence)
        .withColumn("closed_by_stream", closed)
        .withColumn("archived_for_stream", _window_ends_by(verified_ms))
        .persist()
    )
    differing = [r.asDict() for r in diff.differing_rows(compared, settings.tolerances).collect()]
    diffs = sorted(
        (diff.classify(row, settings.tolerances) for row in differing),
        key=lambda d: (d.window_start, d.sensor_id),
    )
    counts = compared.agg(
        F.count(F.col("exact_present")).alias("exact_windows"),
        F.count(F.col("streaming_present")).alias("streaming_windows"),
    ).first()
    window_counts = {
        "exact_windows": int(counts["exact_windows"]),
        "streaming_windows": int(counts["streaming_windows"]),
        "matching_windows": int(counts["exact_windows"]) - sum(d.kind != diff.EXTRA for d in diffs),
        **{
            f"{verdict}_diffs": sum(d.verdict == verdict for d in diffs)
            for verdict in (diff.EXPLAINED, diff.UNEXPLAINED, diff.PENDING)
        },
    }

    progress(
        f"{window_counts['exact_windows']} exact windows, {len(diffs)} differ; building the late-event ledger"
    )
    # The ledger: tumbling pairs and sliding pairs the watermark excluded.
    sliding_assigned = ledger.with_batches(spark, sensor_deliveries, sliding_batches)
    sliding_pairs = ledger.windowed(sliding_assigned, sensors_cfg.sliding_window, sensors_cfg.slide)
    ledger_frame = (
        ledger.ledger_rows(pairs, TUMBLING_QUERY)
        .unionByName(
            ledger.ledger_rows(
                sliding_pairs.where(F.to_date("window_start").cast("string") == day_text), SLIDING_QUERY
            )
        )
        .withColumn("event_date", F.lit(day_text))
        .persist()
    )
    ledger_count = ledger_frame.count()
    ledger_listed = [
        _jsonable(r.asDict())
        for r in ledger_frame.orderBy("query", "window_start", "event_time", "event_id")
        .limit(settings.report_ledger_rows)
        .collect()
    ]
    status_counts = {
        r["ledger_status"]: int(r["count"]) for r in pairs.groupBy("ledger_status").count().collect()
    }

    progress(f"{ledger_count} ledger pairs; delay analysis per topic")
    # Delay analysis and the what-if (one Spark job per figure, all topics at once).
    typed_topics = (
        (topics.sensors, SENSOR_READING),
        (topics.impressions, IMPRESSION),
        (topics.clicks, CLICK),
    )
    all_deliveries = [
        sensor_deliveries if topic is topics.sensors else events.deliveries(archive, topic.name, kind, config)
        for topic, kind in typed_topics
    ]
    delay_stats = advisor.delay_stats_per_topic(
        [frame.where(on_day).select("topic", "delay_ms") for frame in all_deliveries],
        [topic.name for topic, _ in typed_topics],
    )
    quarantine = events.quarantine_counts(archive, typed_topics, config)
    progress("ad matches: exact join and diff against the stream")
    # Ad matches: exact join, diff against the stream, attributed with the dedup late filter.
    impressions, clicks = all_deliveries[1], all_deliveries[2]
    match_batches = batch_log.load_batches(config, AD_APP, MATCHES_QUERY)
    exact_matches = ads.exact_matches(impressions, clicks, config.ads.match_interval, day_text)
    stream_matches = ads.streaming_matches(spark, config.output_dir("ad_matches"), day_text)
    ad_deliveries = impressions.unionByName(clicks, allowMissingColumns=True)
    excluded = ads.excluded_events(spark, ad_deliveries, match_batches)
    match_diffs = ads.diff_matches(
        exact_matches,
        stream_matches if stream_matches is not None else exact_matches.limit(0),
        excluded,
        ad_deliveries.select("event_id"),
        config.ads.match_interval,
        ledger.final_eviction_watermark_ms(match_batches),
    )
    progress(f"{len(match_diffs)} match diffs; watermark advisor and what-if")
    sensor_delay = delay_stats[0]
    recommended = advisor.recommended_watermark_s(sensor_delay.p99_s, settings.watermark_margin)
    what_if = advisor.what_if(
        spark,
        assigned,
        on_day,
        settings.what_if_delays,
        sensors_cfg.window,
        sensors_cfg.trigger,
        logged_batch_ids=[b.batch_id for b in tumbling_batches],
    )

    # Inputs, for the audit trail.
    archive_rows = archive.count()
    day_counts = (
        sensor_deliveries.where(on_day)
        .agg(
            F.count(F.lit(1)).alias("deliveries"),
            F.count(F.when(F.col("delivery_rank") == 1, 1)).alias("events"),
        )
        .first()
    )
    day_deliveries = int(day_counts["deliveries"])
    inputs = {
        "event_day": day_text,
        "archive_path": archive_path,
        "arrival_dates_read": events.arrival_dates(day, settings.late_horizon),
        "archive_rows_read": archive_rows,
        "sensor_deliveries_for_day": day_deliveries,
        "sensor_events_for_day": int(day_counts["events"]),
        "streaming_output_path": streaming_path,
        "streaming_rows_for_day": window_counts["streaming_windows"],
        "batch_log_path": str(batch_log.query_log_dir(config, SENSOR_APP, TUMBLING_QUERY)),
        "batches_logged": len(tumbling_batches),
        "final_streaming_watermark": (
            datetime.fromtimestamp(final_ms / 1000, UTC).isoformat() if final_ms is not None else None
        ),
        "sensor_window": str(sensors_cfg.window),
        "sensor_watermark": str(sensors_cfg.watermark),
        "late_horizon": str(settings.late_horizon),
        "tolerances": _as_dict(settings.tolerances),
        "code_version": code_version(),
        "config_env": config.env,
        "run_at": datetime.now(UTC).isoformat(),
    }

    notes = []
    if day_deliveries == 0:
        notes.append(f"empty day: no valid sensor event for {day_text} in the archive")
    if streaming is None or window_counts["streaming_windows"] == 0:
        notes.append(
            f"no streaming output for {day_text} (at {streaming_path}); windows the stream has not closed "
            "are pending, not diffs"
        )
    if not tumbling_batches:
        notes.append("the batch log is empty: every delivery is pending for the stream")
    if status_counts.get(ledger.UNKNOWN):
        notes.append(f"{status_counts[ledger.UNKNOWN]} delivery(ies) fall in a batch log gap")
    unexplained = [d for d in diffs if d.verdict == diff.UNEXPLAINED] + [
        d for d in match_diffs if d.verdict == diff.UNEXPLAINED
    ]
    status = "failed" if unexplained else ("empty_day" if day_deliveries == 0 else "passed")

    progress(f"status {status}: writing the ledger, the compliance table and the report")
    outputs = {"ledger": ledger_dir(config), "report_dir": report_dir(config, day_text)}
    write_day_partition(spark, ledger_frame, ledger_dir(config), day_text)
    compliance_rows = 0
    if not unexplained:
        # Published only when every diff is explained: otherwise the archive itself is suspect.
        metadata = sensor_metadata_frame(spark, config.project_path(sensors_cfg.metadata_path))
        compliance = enrich_with_metadata(exact, metadata).withColumn("event_date", F.lit(day_text))
        compliance_rows = write_day_partition(spark, compliance, compliance_dir(config), day_text)
        outputs["compliance"] = compliance_dir(config)
    else:
        notes.append("compliance table NOT updated for this day: unexplained diffs")

    result = ReconciliationResult(
        day=day_text,
        status=status,
        notes=notes,
        inputs=inputs,
        window_counts=window_counts,
        diffs=diffs,
        ledger=ledger_listed,
        ledger_count=ledger_count,
        pending_deliveries=status_counts.get(ledger.PENDING, 0),
        unknown_deliveries=status_counts.get(ledger.UNKNOWN, 0),
        delay_stats=delay_stats,
        recommended_watermark_s=recommended,
        what_if=what_if,
        quarantine=quarantine,
        compliance_rows=compliance_rows,
        outputs=outputs,
        match_diffs=match_diffs,
    )
    result.inputs["duration_s"] = round(time.monotonic() - started, 1)
    report.write_report(result, Path(report_dir(config, day_text)))
    for frame in (compared, ledger_frame, assigned, sensor_deliveries, archive):
        frame.unpersist()
    if unexplained and fail_on_unexplained:
        raise UnexplainedDifferences(result)
    return result


def write_day_partition(spark: SparkSession, frame: DataFrame, path: str, day: str) -> int:
    """Replace day D's partition only (dynamic partition overwrite); an empty result clears it."""
    rows = frame.count()
    if rows == 0:
        jvm_path = spark._jvm.org.apache.hadoop.fs.Path(f"{path}/event_date={day}")  # type: ignore[union-attr]
        jvm_path.getFileSystem(spark._jsc.hadoopConfiguration()).delete(jvm_path, True)  # type: ignore[union-attr]
        return 0
    (
        frame.write.mode("overwrite")
        .option("partitionOverwriteMode", "dynamic")
        .partitionBy("event_date")
        .parquet(path)
    )
    return rows


def _as_dict(settings: object) -> dict[str, Any]:
    """Tolerances as a dict, whether they come from the pydantic config or the built-in defaults."""
    if hasattr(settings, "model_dump"):
        return settings.model_dump()
    return dict(vars(settings))


def _jsonable(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.isoformat() if isinstance(v, datetime | date) else v) for k, v in row.items()}


def code_version() -> str:
    """The git commit the job runs from (with +dirty for local changes), else 'unknown'."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(PROJECT_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(PROJECT_ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return f"{commit}{'+dirty' if dirty else ''}"
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


# --------------------------------------------------------------------------- entry points


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=APP, description=__doc__)
    add_config_arguments(parser)
    parser.add_argument("--date", required=True, type=date.fromisoformat, help="event day D (YYYY-MM-DD)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = argument_parser().parse_args(argv)
    try:
        config = config_from_args(args)
    except ConfigError as error:
        print(f"{APP}: {error}", file=sys.stderr)
        return EXIT_BAD_CONFIG
    try:
        result = run_reconciliation(config, args.date, progress=progress_printer())
    except UnexplainedDifferences as failure:
        print(f"{APP}: {failure}", file=sys.stderr)
        return EXIT_UNEXPLAINED
    print(
        f"{APP}: {result.day} {result.status}: {result.window_counts}; ledger {result.ledger_count}; "
        f"report {result.report_html}",
        file=sys.stderr,
    )
    return 0


def _window_ends_by(watermark_ms: int | None) -> Column:
    """window_end at or before a watermark; false when there is none yet.

    Compared inside Spark, never as Python datetimes, which PySpark renders in the local zone.
    """
    from pyspark.sql import functions as F

    if watermark_ms is None:
        return F.lit(False)
    return F.col("window_end") <= F.timestamp_millis(F.lit(watermark_ms))


def progress_printer() -> Callable[[str], None]:
    """Steps as "reconcile progress [elapsed]: step" lines on stderr, as they start."""
    started = time.monotonic()

    def say(step: str) -> None:
        print(f"{APP} progress [{time.monotonic() - started:.0f}s]: {step}", file=sys.stderr, flush=True)

    return say
