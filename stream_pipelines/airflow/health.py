"""What the "Streaming pipeline" page of the Airflow UI shows: one row per app, assembled from what exists.

Sources, each read on its own so that one that does not answer shows as "unreachable" instead of
failing the page:

- the control store (``control_store.app_status``, restarts within the crash-loop window);
- the app's lease (owner, heartbeat age; a stale heartbeat of a live driver is the watchdog's "stuck");
- the checkpoint's commit log (last committed batch and when it was committed);
- the app's metrics endpoint (rates, watermark, state rows, per-partition event time, counters);
- Prometheus' HTTP API, when it answers, for late drops and quarantined rows in the last hour
  (without it: the counters since the app started, from the metrics endpoint, and the page says so);
- Alertmanager's ``/api/v2/alerts``, when it answers;
- the nightly reconciliation reports (``report.json`` through the file layer, so on S3 too).

``collect`` does the reading; ``app_row`` and the helpers it calls are pure (inputs -> row), which is
what tests/unit/test_health_page.py pins down. Nothing here acts on an app: the page links to the
``pipeline_control`` and ``checkpoint_reset`` DAGs instead.
"""

from __future__ import annotations

import json
import math
import re
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from stream_pipelines.control.control_store import AppStatus, ControlStore, Restarts, app_status
from stream_pipelines.control.lease import Lease, LeaseRecord
from stream_pipelines.core import store
from stream_pipelines.core.config import PipelineConfig
from stream_pipelines.core.procfs import process_exists
from stream_pipelines.core.registry import APPS, App, spark_query_name
from stream_pipelines.core.shipped import MONITORING
from stream_pipelines.core.store import StoreError
from stream_pipelines.observability import prometheus_api
from stream_pipelines.observability.graphs import HOURS as GRAPH_HOURS
from stream_pipelines.observability.graphs import AppGraphs, cached_app_graphs
from stream_pipelines.observability.prometheus_api import PrometheusRefused, PrometheusUnreachable
from stream_pipelines.observability.watchdog import Watchdog, WatchdogSettings
from stream_pipelines.reconciliation import days as day_states

ALERT_RULES = MONITORING / "rules" / "streaming_pipelines.yml"
WATERMARK_LAG_ALERT = "WatermarkLagHigh"
PARTITION_STALLED_ALERT = "PartitionStalled"
# The window Prometheus counts late drops and quarantined rows over.
COUNT_WINDOW = "1h"
RECONCILIATION_DAYS_SHOWN = 7
SOURCE_TIMEOUT_S = 3.0

# What the page calls each state of control_store.app_status, plus "stuck" (the watchdog's verdict).
_PAGE_STATES = {
    "running": "running",
    "starting": "starting",
    "stopped": "stopped",
    "paused": "paused",
    "crash-looping": "crash-looping",
    # The supervisor restarts a failed or ended app while it is wanted: for now it is not running.
    "failed": "stopped",
    "not running": "stopped",
}


# The plugin's external view: the UI shows the page at <Airflow base URL>/plugin/<PAGE_ROUTE>.
PAGE_ROUTE = "streaming-pipeline"


def page_address(airflow_base_url: str) -> str:
    """Where a person opens the page in the Airflow UI."""
    return f"{airflow_base_url.rstrip('/')}/plugin/{PAGE_ROUTE}"


class SourceUnreachable(RuntimeError):
    """A source of the page (an endpoint, a file) did not answer; the message says which and why."""


# --------------------------------------------------------------------------- reading the sources


def http_get(url: str, timeout_s: float = SOURCE_TIMEOUT_S) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.read()
    except (OSError, ValueError) as error:
        raise SourceUnreachable(f"{url}: {getattr(error, 'reason', error)}") from error


def metrics_url(config: PipelineConfig, app: App) -> str:
    """Where the app's driver serves its metrics: as it registered them in its running record (a YARN
    container's node, a free port), else (none registered, or the control store does not answer) the
    configured port on this host."""
    try:
        driver = ControlStore(config).running_driver(app.name)
    except (OSError, StoreError):
        driver = None
    if driver is not None and driver.metrics is not None:
        return f"http://{driver.metrics.address}/metrics"
    # An exporter bound to every interface is reached on loopback from this host.
    reachable = "127.0.0.1" if config.metrics.binds_every_interface else config.metrics.host
    return f"http://{reachable}:{app.metrics_port(config)}/metrics"


def prometheus_counts(base_url: str, timeout_s: float = SOURCE_TIMEOUT_S) -> dict[str, dict[str, float]]:
    """Per app: late drops and quarantined rows in the last hour, from Prometheus' HTTP API."""
    counts: dict[str, dict[str, float]] = {}
    for key, metric in (
        ("late_drops", "pipeline_late_rows_dropped_total"),
        ("quarantined", "pipeline_quarantined_rows_total"),
    ):
        query = f"sum by (app) (increase({metric}[{COUNT_WINDOW}]))"
        try:
            found = prometheus_api.result(base_url, "/api/v1/query", {"query": query}, timeout_s)
        except PrometheusUnreachable as error:  # its message is the reason, without the query's long URL
            raise SourceUnreachable(f"{base_url}: {error}") from error
        except PrometheusRefused as error:
            raise SourceUnreachable(f"{base_url}: {query}: {error}") from error
        for result in found:
            counts.setdefault(result["metric"].get("app", ""), {})[key] = float(result["value"][1])
    return counts


def alertmanager_alerts(base_url: str, timeout_s: float = SOURCE_TIMEOUT_S) -> list[dict[str, Any]]:
    url = f"{base_url}/api/v2/alerts?active=true&silenced=false&inhibited=false"
    alerts = _json(http_get(url, timeout_s), url)
    if not isinstance(alerts, list):
        raise SourceUnreachable(f"{url}: expected a list of alerts, got {type(alerts).__name__}")
    return alerts


def _json(data: bytes, url: str) -> Any:
    try:
        return json.loads(data)
    except ValueError as error:
        raise SourceUnreachable(f"{url}: not JSON ({error})") from error


# --------------------------------------------------------------------------- the exporter's text


@dataclass(frozen=True)
class Sample:
    name: str
    labels: Mapping[str, str]
    value: float


def parse_exposition(text: str) -> list[Sample]:
    """The samples of a Prometheus text exposition (what the apps' metrics endpoints serve)."""
    from prometheus_client.parser import text_string_to_metric_families

    return [
        Sample(sample.name, dict(sample.labels), float(sample.value))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    ]


def _by_query(samples: Iterable[Sample], name: str) -> dict[str, float]:
    return {s.labels["query"]: s.value for s in samples if s.name == name and "query" in s.labels}


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


# --------------------------------------------------------------------------- thresholds from the rules


# The start every case of WatermarkLagHigh shares: N times the delay, nothing more to the right side.
_LAG_THRESHOLD = re.compile(
    r"pipeline_watermark_lag_seconds > ([0-9.]+) \* pipeline_watermark_delay_seconds(?![\w*/+-])"
)


def watermark_lag_factor(rules_path: Path = ALERT_RULES) -> float:
    """How many watermark delays of lag fire WatermarkLagHigh, read from the alert rules themselves: each
    of its cases starts with the same threshold (and adds what tells the case)."""
    document = yaml.safe_load(rules_path.read_text())
    factors = set()
    for group in document.get("groups", []):
        for rule in group.get("rules", []):
            if rule.get("alert") == WATERMARK_LAG_ALERT:
                expr = " ".join(str(rule["expr"]).split())
                match = _LAG_THRESHOLD.match(expr)
                if match is None:
                    raise ValueError(
                        f"{rules_path}: {WATERMARK_LAG_ALERT} is {expr!r}; the health page reads its "
                        "threshold from a start 'pipeline_watermark_lag_seconds > N * "
                        "pipeline_watermark_delay_seconds'"
                    )
                factors.add(float(match.group(1)))
    if not factors:
        raise ValueError(f"{rules_path}: no alert rule named {WATERMARK_LAG_ALERT}")
    if len(factors) > 1:
        raise ValueError(
            f"{rules_path}: the cases of {WATERMARK_LAG_ALERT} disagree on the threshold: "
            f"{', '.join(f'{factor:g}' for factor in sorted(factors))} times the delay"
        )
    return factors.pop()


# --------------------------------------------------------------------------- the row of one app


@dataclass(frozen=True)
class CommittedBatch:
    batch_id: int
    committed_at: float  # epoch seconds (the commit file's modification time)


@dataclass
class QueryHealth:
    query: str
    up: bool | None = None
    batch_id: int | None = None
    committed_batch: int | None = None
    committed_age_s: float | None = None
    input_rows_per_s: float | None = None
    processed_rows_per_s: float | None = None
    watermark: str | None = None
    watermark_lag_s: float | None = None
    watermark_lag_threshold_s: float | None = None
    watermark_lag_high: bool = False
    state_rows: float | None = None


@dataclass
class PartitionTime:
    topic: str
    partition: int
    max_event_time: str
    behind_s: float  # behind the newest partition of the topic
    stalled: bool
    why: str = ""


@dataclass
class AppRow:
    app: str
    state: str
    state_detail: str
    supervisor_dag: str
    owner: str | None = None
    heartbeat_age_s: float | None = None
    queries: list[QueryHealth] = field(default_factory=list)
    input_rows_per_s: float | None = None
    processed_rows_per_s: float | None = None
    state_rows: float | None = None
    late_drops: float | None = None
    quarantined: float | None = None
    counts_source: str = ""
    restarts_in_window: int = 0
    restart_limit: int = 0
    restart_window: str = ""
    # The last restart: the driver's (a new JVM) or a query's inside its driver, and its cause.
    last_restart: str | None = None
    partitions: list[PartitionTime] = field(default_factory=list)
    metrics_source: str = ""
    metrics_unreachable: str | None = None
    alerts: list[dict[str, Any]] = field(default_factory=list)
    actions: dict[str, str] = field(default_factory=dict)


def iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def page_state(status: AppStatus, stuck: str | None) -> tuple[str, str]:
    """The page's state and its detail: app_status's, except that a running app found stuck is "stuck"."""
    if status.state == "running" and stuck:
        return "stuck", stuck
    state = _PAGE_STATES.get(status.state, status.state)
    detail = status.detail if state == status.state else f"{status.state}: {status.detail}"
    return state, detail


def stuck_reason(
    settings: WatchdogSettings,
    lease: LeaseRecord | None,
    driver_exists: bool | None,
    samples: list[Sample] | None,
    now: float,
) -> str | None:
    """The watchdog's two verdicts, from one look: a stale heartbeat while the driver still exists
    (``Watchdog.look``), and no progress for the watchdog's window while offsets wait in the source
    (the exporter's last-progress time and source lag stand in for the watchdog's clock)."""
    if lease is not None:
        verdict = Watchdog(settings, lambda _query, _offsets: None).look(lease, driver_exists)
        if verdict:
            return verdict
    if not samples:
        return None
    progress = _by_query(samples, "pipeline_last_progress_timestamp_seconds")
    up = _by_query(samples, "pipeline_query_up")
    waiting: dict[str, float] = {}
    for sample in samples:
        if sample.name == "pipeline_source_lag_offsets":
            query = sample.labels.get("query", "")
            waiting[query] = waiting.get(query, 0.0) + sample.value
    for query, last in sorted(progress.items()):
        silent_s = now - last
        if up.get(query) == 1 and silent_s >= settings.window_s and waiting.get(query, 0) > 0:
            return (
                f"{query}: no progress for {silent_s:.0f}s (window {settings.window_s:.0f}s) "
                f"while {waiting[query]:,.0f} offsets wait"
            )
    return None


def partition_times(
    samples: list[Sample], topic: str, alerts: list[dict[str, Any]] | None = None
) -> list[PartitionTime]:
    """Newest event time per partition of ``topic``; stalled as the PartitionStalled rule says: behind
    the newest partition of the topic by more than the query's watermark delay (part a of the rule),
    or named by a firing PartitionStalled alert (part b needs history only Prometheus has)."""
    delays = _by_query(samples, "pipeline_watermark_delay_seconds")
    newest: dict[int, float] = {}
    delay_of: dict[int, float] = {}
    for sample in samples:
        if sample.name != "pipeline_partition_max_event_time_seconds" or sample.labels.get("topic") != topic:
            continue
        partition = int(sample.labels["partition"])
        if sample.value > newest.get(partition, -math.inf):
            newest[partition] = sample.value
            delay = delays.get(sample.labels.get("query", ""))
            if delay is not None:
                delay_of[partition] = delay
    alerted = {
        int(alert["labels"]["partition"])
        for alert in alerts or []
        if alert.get("labels", {}).get("alertname") == PARTITION_STALLED_ALERT
        and alert["labels"].get("topic") == topic
        and str(alert["labels"].get("partition", "")).isdigit()
    }
    if not newest:
        return []
    top = max(newest.values())
    rows = []
    for partition, value in sorted(newest.items()):
        behind = top - value
        delay = delay_of.get(partition)
        why = ""
        if delay is not None and behind > delay:
            why = f"{behind:.0f}s behind the topic's newest partition (watermark delay {delay:.0f}s)"
        elif partition in alerted:
            why = f"{PARTITION_STALLED_ALERT} is firing"
        rows.append(PartitionTime(topic, partition, iso(value), behind, bool(why), why))
    return rows


def app_row(
    config: PipelineConfig,
    app: App,
    *,
    status: AppStatus,
    lease: LeaseRecord | None,
    driver_exists: bool | None,
    exposition: str | None,
    metrics_error: str | None,
    metrics_source: str,
    committed: Mapping[str, CommittedBatch | None],
    restart_times: Iterable[str],
    prometheus: Mapping[str, Mapping[str, float]] | None,
    prometheus_error: str,
    alerts: list[dict[str, Any]],
    last_restart: str | None = None,
    lag_factor: float | None,
    now: float,
) -> AppRow:
    """One app's row from what was read (``exposition`` is the metrics endpoint's text, None when it
    did not answer, with ``metrics_error`` saying why; ``metrics_source`` is where it was read)."""
    samples = parse_exposition(exposition) if exposition is not None else None
    settings, app_name = WatchdogSettings.of(config, app), app.name
    state, detail = page_state(status, stuck_reason(settings, lease, driver_exists, samples, now))
    window = config.supervision.crash_loop_window
    recent = [
        moment
        for moment in restart_times
        if now - datetime.fromisoformat(moment).timestamp() < window.seconds
    ]
    row = AppRow(
        app=app_name,
        state=state,
        state_detail=detail,
        supervisor_dag=app.supervisor_dag_id,
        owner=f"{lease.host} pid {lease.pid} ({lease.owner[:8]})" if lease is not None else None,
        heartbeat_age_s=lease.heartbeat_age(now) if lease is not None else None,
        restarts_in_window=len(recent),
        restart_limit=config.supervision.max_restarts,
        restart_window=duration_text(window.seconds),
        last_restart=last_restart,
        metrics_source=metrics_source,
        metrics_unreachable=metrics_error if samples is None else None,
        alerts=[a for a in alerts if a.get("labels", {}).get("app") == app_name],
        actions=action_links(app_name),
    )
    queries = [spark_query_name(app_name, query) for query in app.query_names]
    values = {name: _by_query(samples or [], f"pipeline_{name}") for name in _QUERY_VALUES}
    for query in queries:
        health = QueryHealth(query=query)
        if samples is not None:
            up = values["query_up"].get(query)
            health.up = None if up is None else up == 1
            batch = values["batch_id"].get(query)
            health.batch_id = None if batch is None else int(batch)
            health.input_rows_per_s = _finite(values["input_rows_per_second"].get(query))
            health.processed_rows_per_s = _finite(values["processed_rows_per_second"].get(query))
            health.state_rows = values["state_rows"].get(query)
            watermark = values["watermark_seconds"].get(query)
            health.watermark = iso(watermark) if watermark else None
            health.watermark_lag_s = values["watermark_lag_seconds"].get(query)
            delay = values["watermark_delay_seconds"].get(query)
            if delay is not None and lag_factor is not None:
                health.watermark_lag_threshold_s = lag_factor * delay
                health.watermark_lag_high = (health.watermark_lag_s or 0) > health.watermark_lag_threshold_s
        last = committed.get(query)
        if last is not None:
            health.committed_batch = last.batch_id
            health.committed_age_s = max(now - last.committed_at, 0.0)
        row.queries.append(health)
    if samples is not None:
        row.input_rows_per_s = _sum(q.input_rows_per_s for q in row.queries)
        row.processed_rows_per_s = _sum(q.processed_rows_per_s for q in row.queries)
        row.state_rows = _sum(q.state_rows for q in row.queries)
        row.partitions = partition_times(samples, config.kafka.topics.sensors.name, alerts)
    if prometheus is not None:
        counts = prometheus.get(app_name, {})
        row.late_drops, row.quarantined = counts.get("late_drops", 0.0), counts.get("quarantined", 0.0)
        row.counts_source = f"last {COUNT_WINDOW} (Prometheus)"
    elif samples is not None:
        row.late_drops = _sum(values["late_rows_dropped_total"].values())
        row.quarantined = _sum(values["quarantined_rows_total"].values())
        row.counts_source = f"since the app started (metrics endpoint; Prometheus {prometheus_error})"
    else:
        row.counts_source = f"unreachable (metrics endpoint unreachable; Prometheus {prometheus_error})"
    return row


_QUERY_VALUES = (
    "query_up",
    "batch_id",
    "input_rows_per_second",
    "processed_rows_per_second",
    "state_rows",
    "watermark_seconds",
    "watermark_lag_seconds",
    "watermark_delay_seconds",
    "late_rows_dropped_total",
    "quarantined_rows_total",
)


def _sum(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def app_of_dag(dag_id: str | None) -> str | None:
    """The app a supervisor DAG keeps running (None for any other DAG)."""
    return next((app.name for app in APPS.values() if app.supervisor_dag_id == dag_id), None)


def action_links(app: str) -> dict[str, str]:
    """Where an operator acts: the DAG pages of pipeline_control and checkpoint_reset (Airflow 3.3's UI
    has no trigger-form URL that takes params, so the page names the params to enter there)."""
    return {
        "pipeline_control": "/dags/pipeline_control",
        "checkpoint_reset": "/dags/checkpoint_reset",
        "pipeline_control_params": json.dumps({"app": app, "action": "restart", "reason": ""}),
        "checkpoint_reset_params": json.dumps(
            # confirm is left for the operator to type: it is the reset's safety check.
            {"app": app, "query": "all", "start_from": "committed"}
        ),
    }


# --------------------------------------------------------------------------- reading what is stored


def last_committed(config: PipelineConfig, app: App) -> dict[str, CommittedBatch | None]:
    """Per query (``app.name``): the newest batch in its checkpoint's commit log and when it was written."""
    found: dict[str, CommittedBatch | None] = {}
    for name in app.query_names:
        commits = store.location(config.spark.extra_conf, config.checkpoint_dir(app.name, name)) / "commits"
        entries = {
            int(entry): modified
            for entry, (_size, modified) in store.entries(commits).items()
            if entry.isdigit()  # not the .crc files beside them
        }
        newest = max(entries, default=None)
        found[spark_query_name(app.name, name)] = (
            None if newest is None else CommittedBatch(newest, entries[newest])
        )
    return found


@dataclass
class ReconciliationDay:
    day: str
    status: str
    unexplained: int
    pending: int
    report: str  # the report's folder name, for the page's link


def reconciliation_days(
    config: PipelineConfig, limit: int = RECONCILIATION_DAYS_SHOWN
) -> list[ReconciliationDay]:
    """The newest nightly reconciliations, one per event day (its report is rewritten by a rerun)."""
    root = reconciliation_root(config)
    days = sorted(
        {name.split("/", 1)[0] for name in store.files_under(root) if name.endswith("/report.json")},
        reverse=True,
    )[:limit]
    found = []
    for day in days:
        document = store.read_json(root / day / "report.json") or {}
        found.append(reconciliation_summary(day, document))
    return found


def reconciliation_summary(day: str, document: Mapping[str, Any]) -> ReconciliationDay:
    diffs = [*document.get("diffs", []), *document.get("ad_match_diffs", [])]
    ledger = document.get("late_event_ledger", {})
    return ReconciliationDay(
        day=day,
        status=str(document.get("status", "unreadable")),
        unexplained=sum(1 for diff in diffs if diff.get("verdict") == "unexplained"),
        pending=int(ledger.get("pending_deliveries_not_yet_read", 0) or 0),
        report=day,
    )


def reconciliation_root(config: PipelineConfig) -> Path:
    # As reconciliation.report.report_dir lays it out: <reports>/reconciliation/<day>/.
    from stream_pipelines.reconciliation.report import report_dir

    return report_dir(config, "_").parent


@dataclass
class EventDay:
    """One event day on its way to signed-off figures (reconciliation.days), as the page shows it."""

    day: str
    state: str
    # Why the day is not further along: one line per query that holds it (while open or closed).
    waiting_for: list[str]
    # Each run's outcome: status, figures, report digest, when; None until it ran.
    provisional: dict[str, Any] | None
    final: dict[str, Any] | None
    # The standing decision on the final report: approved or rejected, by whom, when, their comment.
    sign_off: dict[str, Any] | None
    overdue: bool


def event_days(config: PipelineConfig, now: float, limit: int = RECONCILIATION_DAYS_SHOWN) -> list[EventDay]:
    """The newest day records, newest first; a day past its deadline without a final run is overdue."""
    found = []
    for record in day_states.recent_days(config, limit):
        day = datetime.fromisoformat(record["day"]).date()
        runs = record.get("runs", {})
        final = runs.get(day_states.FINAL)
        found.append(
            EventDay(
                day=record["day"],
                state=record["state"],
                waiting_for=record.get("holding", [])
                if record["state"] in (day_states.OPEN, day_states.CLOSED)
                else [],
                provisional=runs.get(day_states.PROVISIONAL),
                final=final,
                sign_off=record.get("sign_off"),
                overdue=day_states.is_overdue(record, day, config, int(now * 1000)),
            )
        )
    return found


# --------------------------------------------------------------------------- the whole page


@dataclass
class HealthPage:
    generated_at: str
    rows: list[AppRow]
    reconciliation: list[ReconciliationDay]
    reconciliation_error: str | None
    days: list[EventDay]
    days_error: str | None
    alerts: list[dict[str, Any]]
    alerts_source: str
    prometheus_source: str
    lag_factor: float | None
    lag_rule: str
    # None while Airflow's metadata database answers; else why it does not. Nothing on this page
    # comes from it, so the page stands while it is away and says so.
    metadata_database_away: str | None = None
    # Each app's last hours from Prometheus; empty when it is not configured or does not answer
    # (prometheus_source says which).
    graphs: list[AppGraphs] = field(default_factory=list)
    graph_hours: float = GRAPH_HOURS

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def collect(
    config: PipelineConfig,
    *,
    now: float | None = None,
    fetch: Callable[[str], bytes] = http_get,
    metadata_database_away: Callable[[], str | None] = lambda: None,
    graphs_of: Callable[[str, str, float], AppGraphs] = cached_app_graphs,
    graph_hours: float = GRAPH_HOURS,
) -> HealthPage:
    """Read every source once and assemble the page; a source that fails is named, never raised.
    ``metadata_database_away`` says why Airflow's metadata database does not answer (None when it does):
    the plugin asks Airflow's own engine."""
    now = time.time() if now is None else now
    try:
        lag_factor, lag_rule = watermark_lag_factor(), WATERMARK_LAG_ALERT
    except (OSError, ValueError) as error:  # e.g. deployed without monitoring/: no threshold, said so
        lag_factor, lag_rule = None, f"threshold unknown: {error}"
    prometheus, prometheus_error = None, "not configured"
    prometheus_source = "not configured (metrics.prometheus_url)"
    if config.metrics.prometheus_url:
        try:
            prometheus = prometheus_counts(config.metrics.prometheus_url)
            prometheus_source = f"Prometheus {config.metrics.prometheus_url}"
        except SourceUnreachable as error:
            prometheus_error, prometheus_source = "unreachable", f"unreachable: Prometheus {error}"
    alerts: list[dict[str, Any]] = []
    if config.metrics.alertmanager_url:
        try:
            alerts = alertmanager_alerts(config.metrics.alertmanager_url)
            alerts_source = f"Alertmanager {config.metrics.alertmanager_url}"
        except SourceUnreachable as error:
            alerts_source = f"unreachable: Alertmanager {error}"
    else:
        alerts_source = "not configured (metrics.alertmanager_url)"
    control = ControlStore(config)
    rows = []
    for declared in APPS.values():
        app = declared.name
        exposition, metrics_error, metrics_source = None, None, metrics_url(config, declared)
        try:
            exposition = fetch(metrics_source).decode()
        except SourceUnreachable as error:
            metrics_error = f"unreachable: {error}"
        lease = Lease(config, app)
        try:
            status, record, restarts = app_status(config, app), lease.read(), control.restarts(app)
        except (OSError, StoreError) as error:  # the control store or the lease's store does not answer
            status, record, restarts = (
                AppStatus(app, "unreachable", f"control store: {error}"),
                None,
                Restarts(),
            )
        driver_exists = None if record is None or record.host != lease.host else process_exists(record.pid)
        try:
            committed = last_committed(config, declared)
        except (OSError, StoreError):
            committed = {}
        rows.append(
            app_row(
                config,
                declared,
                status=status,
                lease=record,
                driver_exists=driver_exists,
                exposition=exposition,
                metrics_error=metrics_error,
                metrics_source=metrics_source,
                committed=committed,
                restart_times=restarts.recent,
                last_restart=restarts.describe_last(),
                prometheus=prometheus,
                prometheus_error=prometheus_error,
                alerts=alerts,
                lag_factor=lag_factor,
                now=now,
            )
        )
    reconciliation, reconciliation_error = [], None
    try:
        reconciliation = reconciliation_days(config)
    except (OSError, ValueError) as error:
        reconciliation_error = f"unreachable: {error}"
    days: list[EventDay] = []
    days_error = None
    try:
        days = event_days(config, now)
    except (OSError, ValueError, StoreError) as error:
        days_error = f"unreachable: {error}"
    drawn: list[AppGraphs] = []
    if prometheus is not None and config.metrics.prometheus_url:
        for declared in APPS.values():
            drawn.append(graphs_of(config.metrics.prometheus_url, declared.name, graph_hours))
            if drawn[-1].unreachable:  # Prometheus stopped answering: said once, not waited for per app
                break
    return HealthPage(
        generated_at=iso(now),
        rows=rows,
        reconciliation=reconciliation,
        reconciliation_error=reconciliation_error,
        days=days,
        days_error=days_error,
        alerts=alerts,
        alerts_source=alerts_source,
        prometheus_source=prometheus_source,
        lag_factor=lag_factor,
        lag_rule=lag_rule,
        metadata_database_away=metadata_database_away(),
        graphs=drawn,
        graph_hours=graph_hours,
    )


def duration_text(seconds: float | None) -> str:
    """``42s``, ``3m 30s``, ``2h 05m``: short enough for a table cell."""
    if seconds is None:
        return "-"
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m {whole % 60:02d}s"
    return f"{whole // 3600}h {whole % 3600 // 60:02d}m"
