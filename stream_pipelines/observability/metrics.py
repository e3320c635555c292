"""Prometheus metrics for the streaming apps: one StreamingQueryListener feeding one registry per app.

Wiring (one exporter per app process)::

    exporter = MetricsExporter(config, app).start(spark)  # HTTP server + listener; no-op if disabled
    ...run the queries...
    exporter.stop()

``start`` is idempotent, serves ``http://<metrics.host>:<metrics.ports[app]>/metrics`` from the
exporter's own ``CollectorRegistry`` (never the global one), and raises ``MetricsPortInUseError`` when
the port is taken. Port 0 picks a free port (``exporter.port`` tells which; ``exporter.endpoint`` is
where Prometheus reaches it, which the driver writes into its running record). Only queries named
``"<app>.<sink>"`` are exported; labels are ``app`` and ``query`` (the query name), never the Spark
application id or run id, so series continue across restarts.

What Spark's progress does not carry comes from ``DataFrame.observe`` helpers the apps put in their
plans, before ``withWatermark``:

* ``observe_event_time(df, "impressions", "shown_at", topic_partitions(...), watermark_delay=...)``:
  max event time and max Kafka timestamp per topic partition and per input stream;
* ``observe_quarantine(parsed, "sensors")``: how many rows got a quarantine reason.

The supervisor counts each restart in the control store (``ControlStore.record_restart``); the total
is exported as ``pipeline_restarts_total``, so it survives the restarts themselves; the liveness
watchdog's restarts of a stuck app likewise as ``pipeline_watchdog_restarts_total``.

Gauges that depend on "now" (lags) are computed when Prometheus scrapes, so a stalled query shows a
growing lag instead of its last value. ``METRICS`` lists every exported metric (the contract for the
alert rules and the dashboard).
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from stream_pipelines.control.control_store import ControlStore, MetricsEndpoint
from stream_pipelines.core.config import Duration, MetricsSettings, PipelineConfig, TopicSettings
from stream_pipelines.core.registry import App

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from prometheus_client import CollectorRegistry
    from prometheus_client.metrics_core import Metric
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQueryListener
    from pyspark.sql.streaming.listener import StreamingQueryProgress

logger = logging.getLogger(__name__)

QUERY_LABELS = ("app", "query")
PARTITION_LABELS = (*QUERY_LABELS, "topic", "partition")


@dataclass(frozen=True)
class MetricSpec:
    name: str  # as exposed; counters end in _total
    kind: Literal["gauge", "counter"]
    labels: tuple[str, ...]
    help: str


METRICS: dict[str, MetricSpec] = {
    spec.name: spec
    for spec in (
        MetricSpec(
            "pipeline_query_up", "gauge", QUERY_LABELS, "1 while the query runs, 0 after it terminated"
        ),
        MetricSpec(
            "pipeline_last_progress_timestamp_seconds",
            "gauge",
            QUERY_LABELS,
            "When the query last reported a finished batch or that it is idle (epoch seconds)",
        ),
        MetricSpec(
            "pipeline_trigger_interval_seconds", "gauge", QUERY_LABELS, "Configured processing-time trigger"
        ),
        MetricSpec("pipeline_batch_id", "gauge", QUERY_LABELS, "Id of the last reported micro-batch"),
        MetricSpec(
            "pipeline_batch_duration_seconds", "gauge", QUERY_LABELS, "Duration of the last trigger execution"
        ),
        MetricSpec("pipeline_batch_input_rows", "gauge", QUERY_LABELS, "Input rows of the last micro-batch"),
        MetricSpec("pipeline_input_rows_per_second", "gauge", QUERY_LABELS, "Arrival rate in the last batch"),
        MetricSpec(
            "pipeline_processed_rows_per_second", "gauge", QUERY_LABELS, "Processing rate in the last batch"
        ),
        MetricSpec("pipeline_input_rows_total", "counter", QUERY_LABELS, "Input rows read by the query"),
        MetricSpec(
            "pipeline_watermark_seconds",
            "gauge",
            QUERY_LABELS,
            "Event-time watermark of the last batch (epoch seconds; 0 until Spark has one)",
        ),
        MetricSpec(
            "pipeline_watermark_lag_seconds",
            "gauge",
            QUERY_LABELS,
            "Now minus the watermark, at scrape time; absent until Spark has a watermark",
        ),
        MetricSpec(
            "pipeline_watermark_delay_seconds",
            "gauge",
            QUERY_LABELS,
            "Configured watermark delay (the largest of the query's inputs)",
        ),
        MetricSpec(
            "pipeline_max_event_time_seconds", "gauge", QUERY_LABELS, "Newest event time seen (epoch seconds)"
        ),
        MetricSpec(
            "pipeline_event_time_lag_seconds",
            "gauge",
            QUERY_LABELS,
            "Now minus the newest event time seen, at scrape time",
        ),
        MetricSpec(
            "pipeline_state_rows", "gauge", QUERY_LABELS, "Rows held in state, all stateful operators"
        ),
        MetricSpec("pipeline_state_memory_bytes", "gauge", QUERY_LABELS, "Memory used by the state stores"),
        MetricSpec(
            "pipeline_late_rows_dropped_total",
            "counter",
            QUERY_LABELS,
            "Rows stateful operators dropped as later than the watermark (after partial aggregation)",
        ),
        MetricSpec(
            "pipeline_quarantined_rows_total", "counter", QUERY_LABELS, "Rows that got a quarantine reason"
        ),
        MetricSpec(
            "pipeline_source_lag_offsets",
            "gauge",
            PARTITION_LABELS,
            "Kafka offsets available but not yet read (latestOffset - endOffset)",
        ),
        MetricSpec(
            "pipeline_source_lag_seconds",
            "gauge",
            PARTITION_LABELS,
            "Now minus the newest Kafka timestamp read, while offsets are waiting; 0 when caught up",
        ),
        MetricSpec(
            "pipeline_partition_max_event_time_seconds",
            "gauge",
            PARTITION_LABELS,
            "Newest event time seen per source partition (epoch seconds)",
        ),
        MetricSpec(
            "pipeline_stream_watermark_seconds",
            "gauge",
            (*QUERY_LABELS, "stream"),
            "Per-input watermark: newest event time of that input minus its configured delay",
        ),
        MetricSpec(
            "pipeline_restarts_total",
            "counter",
            ("app",),
            "Restarts of the app: of its driver by the supervisor, and of a failed query inside its "
            "running driver; kept in a file so it survives them",
        ),
        MetricSpec(
            "pipeline_in_driver_restarts_total",
            "counter",
            ("app",),
            "Failed queries restarted from their checkpoint inside the running driver (no new JVM); "
            "also counted in pipeline_restarts_total",
        ),
        MetricSpec(
            "pipeline_watchdog_restarts_total",
            "counter",
            ("app",),
            "Times the liveness watchdog found the app stuck (no progress while data waits, or a "
            "stale heartbeat) and restarted it; also counted in pipeline_restarts_total",
        ),
    )
}
EXPORTED_METRIC_NAMES = frozenset(METRICS)


# --------------------------------------------------------------------------- observed metrics
#
# The one place that knows how observations and their columns are named; the observe helpers
# write these names and the listener reads them.

_EVENT_TIME_OBSERVATION = "event_time."
_QUARANTINE_OBSERVATION = "quarantine."
_STREAM_MAX_EVENT_TIME = "max_event_time"
_PARTITION_MAX_EVENT_TIME = "max_event_time:"
_PARTITION_MAX_KAFKA_TIMESTAMP = "max_kafka_timestamp:"
_WATERMARK_DELAY = "watermark_delay_seconds"
_QUARANTINED_ROWS = "rows"


def topic_partitions(topics: Iterable[TopicSettings]) -> dict[str, int]:
    """``{topic name: partition count}`` for ``observe_event_time``, e.g. from ``config.kafka.topics``."""
    return {topic.name: topic.partitions for topic in topics}


def observe_event_time(
    df: DataFrame,
    name: str,
    time_column: str,
    partitions: Mapping[str, int],
    *,
    watermark_delay: Duration | None = None,
    kafka_timestamp_column: str = "kafka_timestamp",
) -> DataFrame:
    """``df`` observed per batch: newest event time and Kafka timestamp per topic partition and overall.

    ``name`` names the input stream (``sensors``, ``impressions``, ``clicks``); it must be unique
    within a query. Pass the ``watermark_delay`` given to ``withWatermark`` for this input so the
    exporter can show its own watermark; without it the configured delay of the stream of that name
    is used, if any. Needs the ``topic`` and ``partition`` columns of the raw source.
    """
    from pyspark.sql import functions as F

    def newest(column: str, condition: Column | None = None) -> Column:
        value = F.col(column) if condition is None else F.when(condition, F.col(column))
        # Epoch microseconds: Python turns timestamps into naive local datetimes, which is a trap.
        return F.unix_micros(F.max(value))

    columns = [newest(time_column).alias(_STREAM_MAX_EVENT_TIME)]
    for topic, count in partitions.items():
        for partition in range(count):
            in_partition = (F.col("topic") == topic) & (F.col("partition") == partition)
            suffix = f"{topic}:{partition}"
            columns.append(newest(time_column, in_partition).alias(_PARTITION_MAX_EVENT_TIME + suffix))
            columns.append(
                newest(kafka_timestamp_column, in_partition).alias(_PARTITION_MAX_KAFKA_TIMESTAMP + suffix)
            )
    if watermark_delay is not None:
        # observe() accepts only aggregates; max of a literal carries the constant along.
        columns.append(F.max(F.lit(float(watermark_delay.seconds))).alias(_WATERMARK_DELAY))
    return df.observe(f"{_EVENT_TIME_OBSERVATION}{name}", *columns)


def observe_quarantine(df: DataFrame, name: str, reason_column: str = "quarantine_reason") -> DataFrame:
    """``df`` observed per batch: how many rows have a non-null ``reason_column``.

    Use it on the output of ``parse_events`` in exactly one query per input, or on the output of
    ``quarantined_events`` with ``reason_column="reason"``; every query that observes counts again.
    """
    from pyspark.sql import functions as F

    return df.observe(
        f"{_QUARANTINE_OBSERVATION}{name}",
        F.count(F.when(F.col(reason_column).isNotNull(), F.lit(1))).alias(_QUARANTINED_ROWS),
    )


# --------------------------------------------------------------------------- configured values


def watermark_delays(config: PipelineConfig, app: App) -> dict[str, float]:
    """Configured watermark delay per input stream of an app, in seconds (none for the archive)."""
    return {stream: delay.seconds for stream, delay in app.watermarks(config).items()}


# --------------------------------------------------------------------------- progress -> state


@dataclass
class _PartitionState:
    max_event_time: float | None = None
    max_kafka_timestamp: float | None = None
    lag_offsets: int | None = None


@dataclass
class _QueryState:
    up: bool = True
    last_progress_timestamp_seconds: float | None = None
    batch_id: int | None = None
    batch_duration_seconds: float | None = None
    batch_input_rows: float | None = None
    input_rows_per_second: float | None = None
    processed_rows_per_second: float | None = None
    input_rows_total: float = 0.0
    # None: Spark reports no watermark for this query; 0.0: it has not got a real one yet.
    watermark: float | None = None
    max_event_time: float | None = None
    state_rows: float | None = None
    state_memory_bytes: float | None = None
    late_rows_dropped_total: float = 0.0
    quarantined_rows_total: float = 0.0
    partitions: dict[tuple[str, str], _PartitionState] = field(default_factory=dict)
    stream_max_event_time: dict[str, float] = field(default_factory=dict)
    stream_delay: dict[str, float] = field(default_factory=dict)


class ProgressRecorder:
    """Query lifecycle and progress events turned into metric values; a prometheus_client collector.

    Plain Python (no Spark), so it can be fed synthetic progress in tests; ``MetricsExporter`` plugs
    it into Spark. All "now"-relative values are computed in ``collect``.
    """

    def __init__(
        self,
        config: PipelineConfig,
        app: App,
        *,
        query_filter: Callable[[str], bool] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.app = app.name  # the label and the records' key
        self._clock = clock
        self._accepts = query_filter or (lambda name: name.startswith(f"{app.name}."))
        self._trigger_seconds = app.trigger_interval(config).seconds
        self._stream_delays = watermark_delays(config, app)
        self._query_delay = max(self._stream_delays.values(), default=None)
        self._control = ControlStore(config)
        self._lock = threading.Lock()
        self._queries: dict[str, _QueryState] = {}
        self._names_by_id: dict[str, str] = {}

    # ---- events

    def query_started(self, query_id: object, name: str | None) -> None:
        if name is None or not self._accepts(name):
            return
        with self._lock:
            self._names_by_id[str(query_id)] = name
            self._queries.setdefault(name, _QueryState()).up = True

    def query_idle(self, query_id: object, timestamp: str) -> None:
        with self._lock:
            state = self._state_for_id(query_id)
            if state is not None:
                state.last_progress_timestamp_seconds = max(
                    state.last_progress_timestamp_seconds or 0.0, _epoch_seconds(timestamp) or 0.0
                )

    def query_terminated(self, query_id: object) -> None:
        with self._lock:
            state = self._state_for_id(query_id)
            if state is not None:
                state.up = False

    def query_progress(self, progress: StreamingQueryProgress) -> None:
        name = progress.name
        if name is None or not self._accepts(name):
            return
        with self._lock:
            self._names_by_id[str(progress.id)] = name
            state = self._queries.setdefault(name, _QueryState())
            state.up = True
            self._record_batch(state, progress)
            self._record_event_time(state, progress.eventTime)
            self._record_state_operators(state, progress.stateOperators)
            self._record_sources(state, progress.sources)
            self._record_observations(state, progress.observedMetrics)

    def _state_for_id(self, query_id: object) -> _QueryState | None:
        name = self._names_by_id.get(str(query_id))
        return None if name is None else self._queries.get(name)

    def _record_batch(self, state: _QueryState, progress: StreamingQueryProgress) -> None:
        durations = progress.durationMs or {}
        trigger_ms = durations.get("triggerExecution")
        started = _epoch_seconds(progress.timestamp)
        if started is not None:
            # Reported once the batch ends; "last progress" means that moment.
            state.last_progress_timestamp_seconds = started + (trigger_ms or 0) / 1000
        state.batch_id = progress.batchId
        state.batch_duration_seconds = None if trigger_ms is None else trigger_ms / 1000
        rows = progress.numInputRows or 0
        state.batch_input_rows = float(rows)
        state.input_rows_total += rows
        state.input_rows_per_second = _number(progress.inputRowsPerSecond)
        state.processed_rows_per_second = _number(progress.processedRowsPerSecond)

    def _record_event_time(self, state: _QueryState, event_time: Mapping[str, str] | None) -> None:
        event_time = event_time or {}
        if "watermark" in event_time:
            state.watermark = _epoch_seconds(event_time["watermark"]) or 0.0
        # Spark fills max with 1970-01-01 when a batch had no event times; that is "unknown".
        newest = _epoch_seconds(event_time.get("max"))
        if newest:
            state.max_event_time = _newer(state.max_event_time, newest)

    def _record_state_operators(self, state: _QueryState, operators: Iterable[Any]) -> None:
        operators = list(operators or [])
        if not operators:
            return
        state.state_rows = float(sum(op.numRowsTotal for op in operators))
        state.state_memory_bytes = float(sum(op.memoryUsedBytes for op in operators))
        state.late_rows_dropped_total += sum(op.numRowsDroppedByWatermark or 0 for op in operators)

    def _record_sources(self, state: _QueryState, sources: Iterable[Any]) -> None:
        for source in sources or []:
            latest = _kafka_offsets(source.latestOffset)
            end = _kafka_offsets(source.endOffset)
            if latest is None or end is None:
                continue
            for key, latest_offset in latest.items():
                if key in end:
                    partition = state.partitions.setdefault(key, _PartitionState())
                    partition.lag_offsets = max(latest_offset - end[key], 0)

    def _record_observations(self, state: _QueryState, observed: Mapping[str, Any] | None) -> None:
        for observation, row in (observed or {}).items():
            values = row.asDict() if hasattr(row, "asDict") else dict(row)
            if observation.startswith(_QUARANTINE_OBSERVATION):
                state.quarantined_rows_total += _number(values.get(_QUARANTINED_ROWS)) or 0
            elif observation.startswith(_EVENT_TIME_OBSERVATION):
                self._record_event_times(state, observation[len(_EVENT_TIME_OBSERVATION) :], values)

    def _record_event_times(self, state: _QueryState, stream: str, values: Mapping[str, Any]) -> None:
        delay = _number(values.get(_WATERMARK_DELAY))
        if delay is None:
            delay = self._stream_delays.get(stream)
        if delay is not None:
            state.stream_delay[stream] = delay
        for column, value in values.items():
            seconds = _observed_seconds(value)
            if seconds is None:
                continue  # no rows for this column in the batch
            if column == _STREAM_MAX_EVENT_TIME:
                state.stream_max_event_time[stream] = _newer(state.stream_max_event_time.get(stream), seconds)
                state.max_event_time = _newer(state.max_event_time, seconds)
            elif column.startswith(_PARTITION_MAX_EVENT_TIME):
                partition = state.partitions.setdefault(_topic_partition(column), _PartitionState())
                partition.max_event_time = _newer(partition.max_event_time, seconds)
            elif column.startswith(_PARTITION_MAX_KAFKA_TIMESTAMP):
                partition = state.partitions.setdefault(_topic_partition(column), _PartitionState())
                partition.max_kafka_timestamp = _newer(partition.max_kafka_timestamp, seconds)

    # ---- prometheus_client collector protocol

    def describe(self) -> list[Metric]:
        return list(_empty_families().values())

    def collect(self) -> Iterator[Metric]:
        families = _empty_families()

        def add(metric: str, labels: Iterable[str], value: float | None) -> None:
            if value is not None:
                families[metric].add_metric(list(labels), float(value))

        now = self._clock()
        with self._lock:
            for query, state in self._queries.items():
                labels = (self.app, query)
                add("pipeline_query_up", labels, 1.0 if state.up else 0.0)
                add("pipeline_trigger_interval_seconds", labels, self._trigger_seconds)
                for name in _QUERY_STATE_METRICS:
                    add(f"pipeline_{name}", labels, getattr(state, name))
                if state.watermark is not None:
                    add("pipeline_watermark_seconds", labels, state.watermark)
                    add("pipeline_watermark_delay_seconds", labels, self._query_delay)
                    # Before the first real watermark "now - 1970" would read as a 56-year lag.
                    if state.watermark > 0:
                        add("pipeline_watermark_lag_seconds", labels, now - state.watermark)
                if state.max_event_time is not None:
                    add("pipeline_max_event_time_seconds", labels, state.max_event_time)
                    add("pipeline_event_time_lag_seconds", labels, now - state.max_event_time)
                for (topic, partition), part in sorted(state.partitions.items()):
                    partition_labels = (*labels, topic, partition)
                    add("pipeline_partition_max_event_time_seconds", partition_labels, part.max_event_time)
                    add("pipeline_source_lag_offsets", partition_labels, part.lag_offsets)
                    add("pipeline_source_lag_seconds", partition_labels, _source_lag_seconds(part, now))
                for stream, newest in sorted(state.stream_max_event_time.items()):
                    delay = state.stream_delay.get(stream)
                    if delay is not None:
                        add("pipeline_stream_watermark_seconds", (*labels, stream), newest - delay)
        restarts = self._control.restarts(self.app)
        add("pipeline_restarts_total", (self.app,), restarts.total)
        add("pipeline_in_driver_restarts_total", (self.app,), restarts.in_driver)
        add("pipeline_watchdog_restarts_total", (self.app,), self._control.watchdog_restarts(self.app))
        yield from families.values()


# Exported as pipeline_<name> from the _QueryState field of the same name.
_QUERY_STATE_METRICS = (
    "last_progress_timestamp_seconds", "batch_id", "batch_duration_seconds", "batch_input_rows",
    "input_rows_per_second", "processed_rows_per_second", "input_rows_total", "late_rows_dropped_total",
    "quarantined_rows_total", "state_rows", "state_memory_bytes",
)  # fmt: skip


def _empty_families() -> dict[str, Metric]:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    families: dict[str, Metric] = {}
    for spec in METRICS.values():
        family_type = CounterMetricFamily if spec.kind == "counter" else GaugeMetricFamily
        families[spec.name] = family_type(spec.name, spec.help, labels=list(spec.labels))
    return families


def _newer(current: float | None, candidate: float) -> float:
    # Event times only move forward here, like Spark's own watermark: a batch of late rows must not
    # make the query look behind.
    return candidate if current is None else max(current, candidate)


def _source_lag_seconds(partition: _PartitionState, now: float) -> float | None:
    if partition.lag_offsets is None:
        return None
    if partition.lag_offsets == 0:
        return 0.0
    if partition.max_kafka_timestamp is None:
        return None  # offsets are waiting but nothing was read yet: no age to tell
    return max(now - partition.max_kafka_timestamp, 0.0)


def _topic_partition(column: str) -> tuple[str, str]:
    # "<kind>:<topic>:<partition>"; Kafka topic names cannot contain ':'.
    _, topic, partition = column.split(":")
    return topic, partition


def _kafka_offsets(text: str | None) -> dict[tuple[str, str], int] | None:
    """``{"topic": {"0": 12}}`` as {(topic, partition): offset}; None for non-Kafka offsets."""
    if not text:
        return None
    try:
        parsed = json.loads(text)
    except ValueError:
        return None
    if not isinstance(parsed, dict) or not parsed:
        return None
    offsets: dict[tuple[str, str], int] = {}
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict):
            return None
        for partition, offset in partitions.items():
            if isinstance(offset, int) and offset >= 0:
                offsets[(topic, str(partition))] = offset
    return offsets


def _epoch_seconds(timestamp: str | None) -> float | None:
    if not timestamp:
        return None
    try:
        return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _observed_seconds(value: object) -> float | None:
    if isinstance(value, datetime):
        return value.timestamp()
    number = _number(value)
    # The observe helpers report epoch microseconds.
    return None if number is None else number / 1_000_000


def _number(value: object) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return None if math.isinf(number) else number


# --------------------------------------------------------------------------- exporter


class MetricsPortInUseError(RuntimeError):
    """The app's metrics port is taken, most often by a still-running instance of the same app."""


class MetricsExporter:
    """Serves an app's streaming metrics over HTTP; see the module docstring for the wiring.

    ``recorder_options`` (``query_filter``, ``clock``) go to its ``ProgressRecorder``."""

    def __init__(self, config: PipelineConfig, app: App, **recorder_options: Any) -> None:
        self.config = config
        self.app = app.name
        self._declared = app
        self.enabled = config.metrics.enabled
        self.recorder = ProgressRecorder(config, app, **recorder_options)
        self._registry: CollectorRegistry | None = None
        self._server: WSGIServer | None = None
        self._listener: StreamingQueryListener | None = None
        self._spark: SparkSession | None = None
        self._lock = threading.Lock()

    @property
    def registry(self) -> CollectorRegistry:
        """This exporter's own registry (built on first use)."""
        if self._registry is None:
            from prometheus_client import CollectorRegistry

            self._registry = CollectorRegistry(auto_describe=False)
            self._registry.register(self.recorder)
        return self._registry

    @property
    def port(self) -> int | None:
        """The bound port while serving (useful with port 0), else None."""
        return None if self._server is None else int(self._server.server_port)

    @property
    def url(self) -> str | None:
        return None if self.port is None else f"http://{self.config.metrics.host}:{self.port}/metrics"

    @property
    def endpoint(self) -> MetricsEndpoint | None:
        """Where Prometheus reaches this exporter while it serves, else None."""
        if self.port is None:
            return None
        return MetricsEndpoint(reachable_host(self.config.metrics, os.environ), self.port)

    def serve(self) -> MetricsExporter:
        """Serve metrics over HTTP (the control store's counters, and whatever the recorder is fed),
        without listening to a Spark session. Idempotent; a no-op when disabled."""
        if self.enabled:
            with self._lock:
                if self._server is None:
                    self._server = self._serve()
        return self

    def start(self, spark: SparkSession) -> MetricsExporter:
        """Serve metrics and listen to the session's queries. Idempotent; a no-op when disabled."""
        if not self.enabled:
            return self
        self.serve()
        with self._lock:
            if self._listener is None:
                self._listener = _make_listener(self.recorder)
                spark.streams.addListener(self._listener)
                self._spark = spark
        return self

    def stop(self) -> None:
        """Stop listening and serving. Safe to call more than once, and when never started."""
        with self._lock:
            if self._listener is not None and self._spark is not None:
                with contextlib.suppress(Exception):  # the session may already be stopped
                    self._spark.streams.removeListener(self._listener)
            self._listener = None
            self._spark = None
            if self._server is not None:
                self._server.shutdown()
                self._server.server_close()
                self._server = None

    def __enter__(self) -> MetricsExporter:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def _serve(self) -> WSGIServer:
        from prometheus_client import start_http_server

        host = self.config.metrics.host
        port = self._declared.metrics_port(self.config)
        try:
            server, _thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                raise MetricsPortInUseError(
                    f"metrics port {host}:{port} for {self.app} is already in use (is another instance "
                    f"of {self.app} still running?); set metrics.ports.{self.app} to a free port, "
                    "or metrics.enabled=false"
                ) from error
            raise
        return server


def reachable_host(settings: MetricsSettings, environ: Mapping[str, str]) -> str:
    """The name Prometheus reaches an exporter bound to ``settings.host`` by: that address itself,
    unless it is a wildcard (every interface); then the host's name: in a YARN container the
    NodeManager's (``NM_HOST``, which YARN sets in every container), else the host's fully qualified
    name."""
    if not settings.binds_every_interface:
        return settings.host
    return environ.get("NM_HOST") or socket.getfqdn()


def _make_listener(recorder: ProgressRecorder) -> StreamingQueryListener:
    # Defined here so that importing this module does not import pyspark (DAGs import it).
    from pyspark.sql.streaming import StreamingQueryListener

    class _ExporterListener(StreamingQueryListener):
        """Runs on Py4J's callback thread; an exception here must never reach the query."""

        def onQueryStarted(self, event: Any) -> None:
            self._guard(recorder.query_started, event.id, event.name)

        def onQueryProgress(self, event: Any) -> None:
            self._guard(recorder.query_progress, event.progress)

        def onQueryIdle(self, event: Any) -> None:
            self._guard(recorder.query_idle, event.id, event.timestamp)

        def onQueryTerminated(self, event: Any) -> None:
            self._guard(recorder.query_terminated, event.id)

        @staticmethod
        def _guard(handler: Callable[..., None], *args: Any) -> None:
            try:
                handler(*args)
            except Exception:
                logger.exception("metrics listener failed to record a %s event", handler.__name__)

    return _ExporterListener()
