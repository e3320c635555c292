"""The nightly reconciliation for one event day D, in stages that read top to bottom.

    load_inputs        I/O: the archive rows for D, the batch logs, the streaming outputs, sensor metadata
    typed_deliveries   the archive as typed deliveries per input topic, and what parsing rejects
    reconcile_sensors  exact recompute, ledger model, window-by-window comparison, the late-event ledger
    reconcile_ads      exact ad matches against the stream's, attributed with the dedup late filter
    advise             the frames the watermark advisor summarises (arrival delays, the what-if replay)
    summarize          every Spark action of the run: the figures, the verdicts, the ReconciliationResult
    publish            I/O: the ledger, the compliance table (only when every diff is explained), the report

The stages between the two I/O ends are DataFrame -> DataFrame (nothing runs until ``summarize``), and
the aggregations are the streaming apps' own functions, called without a watermark.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from stream_pipelines.apps.sensor_aggregation import enrich_with_metadata, tumbling_window_stats
from stream_pipelines.core import registry
from stream_pipelines.core.config import PipelineConfig
from stream_pipelines.core.shipped import DISTRIBUTION, source_checkout
from stream_pipelines.driver import batch_log
from stream_pipelines.driver.runtime import get_spark
from stream_pipelines.inputs.parsing import CLICK, IMPRESSION, SENSOR_READING
from stream_pipelines.inputs.sensor_metadata import sensor_metadata_frame
from stream_pipelines.reconciliation import ads, advisor, diff, events, ledger, report
from stream_pipelines.tables import maintenance
from stream_pipelines.tables.day_reader import read_dataset_day

if TYPE_CHECKING:
    from pathlib import Path

    from pyspark.sql import Column, DataFrame, Row, SparkSession

    from stream_pipelines.driver.batch_log import BatchRecord
    from stream_pipelines.reconciliation.ads import MatchDiff
    from stream_pipelines.reconciliation.advisor import DelayStats, WhatIf
    from stream_pipelines.reconciliation.diff import WindowDiff

APP = "reconcile"
SENSOR_APP, TUMBLING_QUERY, SLIDING_QUERY = "sensor_aggregation", "tumbling", "sliding"
AD_APP, MATCHES_QUERY = "ad_matching", "matches"
# The sides of the window comparison whose readings the report totals for the day.
DAY_TOTAL_SIDES = ("exact", "streaming", "model")
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
    # Readings in D's windows three ways (exact, stream, ledger model), for the report's day totals.
    day_totals: dict[str, int] = field(default_factory=dict)
    # The ledger status of each (sensor delivery, tumbling window of D) pair, counted.
    tumbling_statuses: dict[str, int] = field(default_factory=dict)

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
                "tumbling_status_counts": self.tumbling_statuses,
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
            "day_totals": self.day_totals,
        }


def run_reconciliation(
    config: PipelineConfig,
    day: date,
    *,
    spark: SparkSession | None = None,
    archive: DataFrame | None = None,
    fail_on_unexplained: bool = True,
    write_the_report: bool = True,
    progress: Callable[[str], None] = lambda step: None,
) -> ReconciliationResult:
    """Reconcile event day ``day``; raises UnexplainedDifferences (after writing the report) on failure,
    and RetentionPassed (before reading anything) when retention has removed part of the day's inputs.

    ``write_the_report=False`` leaves the report to the caller, who adds to the result first (the nightly
    job its quality gates) and writes it with ``write_report``; such a caller also passes
    ``fail_on_unexplained=False`` and raises once the report is written.
    ``progress`` hears each step as it starts, for a log that shows where a long run is. ``archive``: D's
    archive rows already read and persisted by the caller, who releases them (``load_inputs``).
    """

    started = time.monotonic()
    maintenance.refuse_if_expired(config, day)
    spark = spark or get_spark(config, APP)
    progress(f"reading the archive for {day.isoformat()} and the batch logs")
    inputs = load_inputs(spark, config, day, archive)
    deliveries = typed_deliveries(config, inputs)
    progress("exact recompute, ledger model and window-by-window diff of the sensor windows")
    sensors = reconcile_sensors(spark, config, inputs, deliveries)
    matches = reconcile_ads(spark, config, inputs, deliveries)
    advice = advise(inputs, deliveries, sensors)
    try:
        result = summarize(spark, config, inputs, deliveries, sensors, matches, advice, progress)
        progress(f"status {result.status}: writing the ledger, the compliance table and the report")
        publish(config, sensors, result, started, write_the_report)
    finally:
        persisted_here = [sensors.compared, sensors.ledger, sensors.assigned, deliveries.sensors]
        if archive is None:  # read here; a caller's archive is the caller's to release
            persisted_here.append(inputs.archive)
        for frame in persisted_here:
            frame.unpersist()
    if result.unexplained and fail_on_unexplained:
        raise UnexplainedDifferences(result)
    return result


# --------------------------------------------------------------------------- load_inputs


@dataclass(frozen=True)
class Inputs:
    """What the reconciliation of day D reads (lazily, for the frames)."""

    day: date
    # The archived records that arrived D-1 .. D + late_horizon (persisted: every stage reads them).
    archive: DataFrame
    tumbling_batches: list[BatchRecord]
    sliding_batches: list[BatchRecord]
    match_batches: list[BatchRecord]
    # What the streaming apps wrote for D (empty when they wrote nothing yet).
    sensor_windows: DataFrame
    ad_matches: DataFrame
    sensor_metadata: DataFrame

    @property
    def day_text(self) -> str:
        return self.day.isoformat()


def load_inputs(
    spark: SparkSession, config: PipelineConfig, day: date, archive: DataFrame | None = None
) -> Inputs:
    """``archive``: D's archive rows as ``events.read_archive`` reads them, persisted by the caller (the
    nightly job's gate has scanned them already); else they are read and persisted here."""
    return Inputs(
        day=day,
        archive=archive if archive is not None else events.read_archive(spark, config, day).persist(),
        tumbling_batches=batch_log.load_batches(config, SENSOR_APP, TUMBLING_QUERY),
        sliding_batches=batch_log.load_batches(config, SENSOR_APP, SLIDING_QUERY),
        match_batches=batch_log.load_batches(config, AD_APP, MATCHES_QUERY),
        sensor_windows=read_dataset_day(spark, config, registry.SENSOR_WINDOWS, day),
        ad_matches=read_dataset_day(spark, config, registry.AD_MATCHES, day),
        sensor_metadata=sensor_metadata_frame(spark, config.project_path(config.sensors.metadata_path)),
    )


# --------------------------------------------------------------------------- typed_deliveries


@dataclass(frozen=True)
class Deliveries:
    """The archive read as valid, typed deliveries per input topic (all event days: they all moved the
    stream's watermark), and the records parsing rejects."""

    sensors: DataFrame
    impressions: DataFrame
    clicks: DataFrame
    # topic, reason, count.
    rejections: DataFrame | None
    topics: tuple[str, ...]


def typed_deliveries(config: PipelineConfig, inputs: Inputs) -> Deliveries:
    topics = config.kafka.topics
    typed_topics = (
        (topics.sensors, SENSOR_READING),
        (topics.impressions, IMPRESSION),
        (topics.clicks, CLICK),
    )
    sensors, impressions, clicks = (
        events.deliveries(inputs.archive, topic.name, kind, config) for topic, kind in typed_topics
    )
    return Deliveries(
        # Persisted: the exact recompute, both ledgers, the advisor and the day's counts read them.
        sensors=sensors.persist(),
        impressions=impressions,
        clicks=clicks,
        rejections=events.rejections(inputs.archive, typed_topics, config),
        topics=tuple(topic.name for topic, _ in typed_topics),
    )


# --------------------------------------------------------------------------- reconcile_sensors


@dataclass(frozen=True)
class SensorReconciliation:
    """D's tumbling windows three ways (exact, ledger model, stream), and the late-event ledger."""

    # The exact windows as the compliance table holds them (with the sensor metadata and event_date).
    compliance: DataFrame
    # Every sensor delivery with the tumbling batch that read it.
    assigned: DataFrame
    # Exact, streaming and ledger-model figures side by side, per window of D.
    compared: DataFrame
    differing: DataFrame
    window_counts: DataFrame
    # The late-event ledger: (delivery, window) pairs the watermark excluded, tumbling and sliding.
    ledger: DataFrame
    ledger_listed: DataFrame
    ledger_statuses: DataFrame
    # One past the highest archived offset per sensor-topic partition.
    archive_ends: DataFrame
    day_counts: DataFrame


def reconcile_sensors(
    spark: SparkSession, config: PipelineConfig, inputs: Inputs, deliveries: Deliveries
) -> SensorReconciliation:
    sensors_cfg, day_text = config.sensors, inputs.day_text
    on_day = F.col("event_date") == day_text
    windows_of_day = F.to_date("window_start").cast("string") == day_text

    # Exact recompute: one delivery per event, the streaming app's own aggregation, no watermark.
    exact = tumbling_window_stats(
        events.first_deliveries(deliveries.sensors.where(on_day)), sensors_cfg.window
    )

    assigned = ledger.with_batches(spark, deliveries.sensors, inputs.tumbling_batches).persist()
    pairs = ledger.windowed(assigned, sensors_cfg.window).where(windows_of_day)
    # What the stream should have written, given the ledger: duplicates included, dropped rows out.
    closed = window_ends_by(ledger.final_eviction_watermark_ms(inputs.tumbling_batches))
    model = tumbling_window_stats(
        pairs.where((F.col("ledger_status") == ledger.ACCEPTED) & F.col("committed") & closed),
        sensors_cfg.window,
    )
    streaming = inputs.sensor_windows.select("window_start", "window_end", "sensor_id", *diff.STATS)
    evidence = pairs.groupBy(*diff.WINDOW_KEY).agg(
        F.count(F.when(F.col("ledger_status") == ledger.DROPPED, 1)).alias("dropped_deliveries"),
        (F.count(F.lit(1)) - F.countDistinct("event_id")).alias("duplicate_deliveries"),
    )
    compared = (
        diff.compare_windows(exact, streaming, model, evidence)
        .withColumn("closed_by_stream", closed)
        .persist()
    )

    # The ledger: tumbling pairs and sliding pairs the watermark excluded.
    sliding_assigned = ledger.with_batches(spark, deliveries.sensors, inputs.sliding_batches)
    sliding_pairs = ledger.windowed(sliding_assigned, sensors_cfg.sliding_window, sensors_cfg.slide)
    excluded = (
        ledger.ledger_rows(pairs, TUMBLING_QUERY)
        .unionByName(ledger.ledger_rows(sliding_pairs.where(windows_of_day), SLIDING_QUERY))
        .withColumn("event_date", F.lit(day_text))
        .persist()
    )

    # Rows archived from replay files have no Kafka coordinates.
    sensor_offsets = inputs.archive.where(
        (F.col("topic") == config.kafka.topics.sensors.name) & F.col("offset").isNotNull()
    )
    return SensorReconciliation(
        compliance=enrich_with_metadata(exact, inputs.sensor_metadata).withColumn(
            "event_date", F.lit(day_text)
        ),
        assigned=assigned,
        compared=compared,
        differing=diff.differing_rows(compared, config.reconciliation.tolerances),
        window_counts=compared.agg(
            F.count(F.col("exact_present")).alias("exact_windows"),
            F.count(F.col("streaming_present")).alias("streaming_windows"),
            *[
                F.coalesce(F.sum(f"{side}_reading_count"), F.lit(0)).alias(f"{side}_readings")
                for side in DAY_TOTAL_SIDES
            ],
        ),
        ledger=excluded,
        ledger_listed=excluded.orderBy("query", "window_start", "event_time", "event_id").limit(
            config.reconciliation.report_ledger_rows
        ),
        ledger_statuses=pairs.groupBy("ledger_status").count(),
        archive_ends=sensor_offsets.groupBy("partition").agg((F.max("offset") + 1).alias("end")),
        day_counts=deliveries.sensors.where(on_day).agg(
            F.count(F.lit(1)).alias("deliveries"),
            F.count(F.when(F.col("delivery_rank") == 1, 1)).alias("events"),
        ),
    )


# --------------------------------------------------------------------------- reconcile_ads


def reconcile_ads(
    spark: SparkSession, config: PipelineConfig, inputs: Inputs, deliveries: Deliveries
) -> DataFrame:
    """The ad match pairs in the exact join or in the stream only, with the evidence that explains them."""
    interval = config.ads.match_interval
    exact = ads.exact_matches(deliveries.impressions, deliveries.clicks, interval, inputs.day_text)
    ad_deliveries = deliveries.impressions.unionByName(deliveries.clicks, allowMissingColumns=True)
    return ads.differing_matches(
        exact,
        inputs.ad_matches.select(*registry.AD_MATCHES.column_names),
        ads.excluded_events(spark, ad_deliveries, inputs.match_batches),
        ad_deliveries.select("event_id"),
        interval,
        ledger.final_eviction_watermark_ms(inputs.match_batches),
    )


# --------------------------------------------------------------------------- advise


@dataclass(frozen=True)
class Advice:
    """What the watermark advisor summarises."""

    # topic, delay_ms of D's deliveries, one frame per topic (in Deliveries.topics order).
    delays: list[DataFrame]
    # The sensor deliveries with their tumbling batch, replayed at each candidate delay.
    replayed: DataFrame
    replayed_day: Column


def advise(inputs: Inputs, deliveries: Deliveries, sensors: SensorReconciliation) -> Advice:
    on_day = F.col("event_date") == inputs.day_text
    return Advice(
        delays=[
            frame.where(on_day).select("topic", "delay_ms")
            for frame in (deliveries.sensors, deliveries.impressions, deliveries.clicks)
        ],
        replayed=sensors.assigned,
        replayed_day=on_day,
    )


# --------------------------------------------------------------------------- summarize


def summarize(
    spark: SparkSession,
    config: PipelineConfig,
    inputs: Inputs,
    deliveries: Deliveries,
    sensors: SensorReconciliation,
    matches: DataFrame,
    advice: Advice,
    progress: Callable[[str], None],
) -> ReconciliationResult:
    """Run the Spark jobs (directly, or through the advisor's summaries) and build the result.

    Starts with the sensor windows' diff (the step ``run_reconciliation`` announced before the frames
    were built); ``publish`` adds what it writes: compliance rows, output locations, report paths.
    """
    settings, sensors_cfg, day_text = config.reconciliation, config.sensors, inputs.day_text
    sensor_topic = config.kafka.topics.sensors.name
    archived_ends = {
        (sensor_topic, int(row["partition"])): int(row["end"]) for row in sensors.archive_ends.collect()
    }
    # Known only once the archive's extent is: past this watermark the stream may have read events the
    # archive read lacks.
    verified_ms = ledger.archived_eviction_watermark_ms(inputs.tumbling_batches, archived_ends)
    differing = sensors.differing.withColumn("archived_for_stream", window_ends_by(verified_ms)).collect()
    diffs = sorted(
        (diff.classify(row.asDict(), settings.tolerances) for row in differing),
        key=lambda d: (d.window_start, d.sensor_id),
    )
    counted_windows = sensors.window_counts.first()
    window_counts = count_windows(counted_windows, diffs)

    progress(
        f"{window_counts['exact_windows']} exact windows, {len(diffs)} differ; building the late-event ledger"
    )
    ledger_count = sensors.ledger.count()
    ledger_listed = [_jsonable(row.asDict()) for row in sensors.ledger_listed.collect()]
    status_counts = {row["ledger_status"]: int(row["count"]) for row in sensors.ledger_statuses.collect()}

    progress(f"{ledger_count} ledger pairs; delay analysis per topic")
    delay_stats = advisor.delay_stats_per_topic(advice.delays, deliveries.topics)
    quarantine = events.count_rejections(deliveries.rejections, deliveries.topics)

    progress("ad matches: exact join and diff against the stream")
    match_diffs = ads.classify_matches(matches.collect())

    progress(f"{len(match_diffs)} match diffs; watermark advisor and what-if")
    sensor_delay = delay_stats[0]
    recommended = advisor.recommended_watermark_s(sensor_delay.p99_s, settings.watermark_margin)
    what_if = advisor.what_if(
        spark,
        advice.replayed,
        advice.replayed_day,
        settings.what_if_delays,
        sensors_cfg.window,
        sensors_cfg.trigger,
        logged_batch_ids=[b.batch_id for b in inputs.tumbling_batches],
    )

    archive_rows = inputs.archive.count()
    day_counts = sensors.day_counts.first()
    day_deliveries = int(day_counts["deliveries"])
    unexplained = any(d.verdict == diff.UNEXPLAINED for d in [*diffs, *match_diffs])
    return ReconciliationResult(
        day=day_text,
        status="failed" if unexplained else ("empty_day" if day_deliveries == 0 else "passed"),
        notes=input_notes(
            day_text,
            day_deliveries,
            window_counts["streaming_windows"],
            registry.SENSOR_WINDOWS.location(config),
            batches_logged=len(inputs.tumbling_batches),
            unknown_deliveries=status_counts.get(ledger.UNKNOWN, 0),
        ),
        inputs={
            "event_day": day_text,
            "archive_path": registry.ARCHIVE.location(config),
            "arrival_dates_read": registry.arrival_dates(inputs.day, settings.late_horizon),
            "archive_rows_read": archive_rows,
            "sensor_deliveries_for_day": day_deliveries,
            "sensor_events_for_day": int(day_counts["events"]),
            "streaming_output_path": registry.SENSOR_WINDOWS.location(config),
            "streaming_rows_for_day": window_counts["streaming_windows"],
            "ad_matches_path": registry.AD_MATCHES.location(config),
            "ad_batch_log_path": str(batch_log.query_log_dir(config, AD_APP, MATCHES_QUERY)),
            "sensor_metadata_path": config.project_path(config.sensors.metadata_path),
            **audit_trail(config, inputs.tumbling_batches),
        },
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
        compliance_rows=0,
        match_diffs=match_diffs,
        day_totals={f"{side}_readings": int(counted_windows[f"{side}_readings"]) for side in DAY_TOTAL_SIDES},
        tumbling_statuses=status_counts,
    )


def audit_trail(config: PipelineConfig, tumbling_batches: Sequence[BatchRecord]) -> dict[str, Any]:
    """The rest of the report's inputs: what the verdicts were reached with."""
    settings, sensors_cfg = config.reconciliation, config.sensors
    final_ms = ledger.final_eviction_watermark_ms(tumbling_batches)
    return {
        "batch_log_path": str(batch_log.query_log_dir(config, SENSOR_APP, TUMBLING_QUERY)),
        "batches_logged": len(tumbling_batches),
        "final_streaming_watermark": (
            datetime.fromtimestamp(final_ms / 1000, UTC).isoformat() if final_ms is not None else None
        ),
        "sensor_window": str(sensors_cfg.window),
        "sensor_watermark": str(sensors_cfg.watermark),
        "late_horizon": str(settings.late_horizon),
        "tolerances": settings.tolerances.model_dump(),
        "code_version": code_version(),
        "config_env": config.env,
        "config_digest": config_digest(config),
        "run_at": datetime.now(UTC).isoformat(),
    }


def count_windows(counts: Row | dict[str, Any], diffs: Sequence[WindowDiff]) -> dict[str, int]:
    exact, streaming = int(counts["exact_windows"]), int(counts["streaming_windows"])
    return {
        "exact_windows": exact,
        "streaming_windows": streaming,
        "matching_windows": exact - sum(d.kind != diff.EXTRA for d in diffs),
        **{
            f"{verdict}_diffs": sum(d.verdict == verdict for d in diffs)
            for verdict in (diff.EXPLAINED, diff.UNEXPLAINED, diff.PENDING)
        },
    }


def input_notes(
    day: str,
    day_deliveries: int,
    streaming_windows: int,
    streaming_path: str,
    *,
    batches_logged: int,
    unknown_deliveries: int,
) -> list[str]:
    """What a reader of the report should know about the inputs before looking at the diffs."""
    notes = []
    if day_deliveries == 0:
        notes.append(f"empty day: no valid sensor event for {day} in the archive")
    if streaming_windows == 0:
        notes.append(
            f"no streaming output for {day} (at {streaming_path}); windows the stream has not closed "
            "are pending, not diffs"
        )
    if not batches_logged:
        notes.append("the batch log is empty: every delivery is pending for the stream")
    if unknown_deliveries:
        notes.append(f"{unknown_deliveries} delivery(ies) fall in a batch log gap")
    return notes


# --------------------------------------------------------------------------- publish


def publish(
    config: PipelineConfig,
    sensors: SensorReconciliation,
    result: ReconciliationResult,
    started: float,
    write_the_report: bool = True,
) -> None:
    """Write the ledger, the compliance table and (unless the caller will) the report; records what it
    wrote on ``result``."""
    ledger_dir = registry.LATE_EVENT_LEDGER.location(config)
    folder = report.report_dir(config, result.day)
    result.outputs.update({"ledger": ledger_dir, "report_dir": str(folder)})
    write_day_partition(sensors.ledger, ledger_dir, result.day)
    if not result.unexplained:
        # Published only when every diff is explained: otherwise the archive itself is suspect.
        compliance_dir = registry.COMPLIANCE_WINDOWS.location(config)
        result.compliance_rows = write_day_partition(sensors.compliance, compliance_dir, result.day)
        result.outputs["compliance"] = compliance_dir
    else:
        result.notes.append("compliance table NOT updated for this day: unexplained diffs")
    result.inputs["duration_s"] = round(time.monotonic() - started, 1)
    if write_the_report:
        write_report(result, folder)


def write_report(result: ReconciliationResult, folder: Path) -> None:
    """Write report.json, report.html, its PDF copy and the plots into ``folder`` (a
    :func:`store.location`, local or on the object store); sets the paths on ``result``."""
    result.report_json = str(folder / "report.json")
    result.report_html = str(folder / "report.html")
    result.outputs["report_json"] = result.report_json
    result.outputs["report_html"] = result.report_html
    report.write_document(result.as_json(), folder)


def write_day_partition(frame: DataFrame, path: str, day: str) -> int:
    """Replace day D's partition only (dynamic partition overwrite); an empty result clears it."""
    rows = frame.count()
    if rows == 0:
        spark = frame.sparkSession
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


# --------------------------------------------------------------------------- helpers


def window_ends_by(watermark_ms: int | None) -> Column:
    """window_end at or before a watermark; false when there is none yet.

    Compared inside Spark, never as Python datetimes, which PySpark renders in the local zone.
    """
    if watermark_ms is None:
        return F.lit(False)
    return F.col("window_end") <= F.timestamp_millis(F.lit(watermark_ms))


def _jsonable(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.isoformat() if isinstance(v, datetime | date) else v) for k, v in row.items()}


def config_digest(config: PipelineConfig) -> str:
    """sha256 of the effective config (after overrides): equal digests, equal settings."""
    return "sha256:" + hashlib.sha256(config.model_dump_json().encode()).hexdigest()


def code_version() -> str:
    """The git commit of the checkout the job runs from (with +dirty for local changes), or an installed
    package's name and version; else 'unknown'. An install is never asked git: its folder may sit in
    some other repository."""
    checkout = source_checkout()
    if checkout is None:
        try:
            return f"{DISTRIBUTION} {importlib.metadata.version(DISTRIBUTION)}"
        except importlib.metadata.PackageNotFoundError:
            return "unknown"
    try:
        commit = subprocess.run(
            ["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(checkout), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return f"{commit}{'+dirty' if dirty else ''}"
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


# --------------------------------------------------------------------------- progress


def progress_printer() -> Callable[[str], None]:
    """Steps as "reconcile progress [elapsed]: step" lines on stderr, as they start."""
    started = time.monotonic()

    def say(step: str) -> None:
        print(f"{APP} progress [{time.monotonic() - started:.0f}s]: {step}", file=sys.stderr, flush=True)

    return say
