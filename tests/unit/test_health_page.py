"""The rows of the Airflow "Streaming pipeline" page, assembled from real inputs without a JVM.

The exporter text comes from the real ``ProgressRecorder`` fed with progress shaped like Spark's
(``StreamingQueryProgress.fromJson``); control records and the lease are written by ``ControlStore``
and ``Lease``; the threshold is read from monitoring/rules.
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from stream_pipelines.airflow import health
from stream_pipelines.control.control_store import AppStatus, ControlStore, app_status
from stream_pipelines.control.lease import Lease, LeaseRecord
from stream_pipelines.core.config import PipelineConfig, load_config
from stream_pipelines.core.registry import APP_NAMES
from stream_pipelines.core.registry import app as declared_app
from stream_pipelines.devtools.processes import free_port
from stream_pipelines.observability.metrics import ProgressRecorder

APP = "sensor_aggregation"
NOW = 1_800_000_000.0


def config_at(root: Path, *extra: str) -> PipelineConfig:
    return load_config("local", [f"paths.data_root={root}", *extra], environ={})


def progress(query: str, *, batch: int, watermark: float, partitions: dict[int, float], topic: str) -> Any:
    """One batch's progress as Spark reports it, with the observations the sensor app makes."""
    from pyspark.sql.streaming.listener import StreamingQueryProgress

    def stamp(seconds: float) -> str:
        return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")

    observed: dict[str, Any] = {"max_event_time": int(max(partitions.values()) * 1e6)}
    for partition, newest in partitions.items():
        observed[f"max_event_time:{topic}:{partition}"] = int(newest * 1e6)
        observed[f"max_kafka_timestamp:{topic}:{partition}"] = int((newest + 1) * 1e6)
    observed["watermark_delay_seconds"] = 120.0
    return StreamingQueryProgress.fromJson(
        {
            "id": str(uuid.uuid5(uuid.NAMESPACE_URL, query)),
            "runId": str(uuid.uuid4()),
            "name": query,
            "timestamp": stamp(NOW - 5),
            "batchId": batch,
            "batchDuration": 1000,
            "durationMs": {"triggerExecution": 1000},
            "eventTime": {"watermark": stamp(watermark), "max": stamp(max(partitions.values()))},
            "stateOperators": [
                {
                    "operatorName": "stateStoreSave",
                    "numRowsTotal": 40,
                    "numRowsUpdated": 4,
                    "numRowsRemoved": 0,
                    "allUpdatesTimeMs": 1,
                    "allRemovalsTimeMs": 0,
                    "commitTimeMs": 3,
                    "memoryUsedBytes": 2048,
                    "numRowsDroppedByWatermark": 3,
                    "numShufflePartitions": 2,
                    "numStateStoreInstances": 2,
                }
            ],
            "sources": [
                {
                    "description": f"KafkaV2[Subscribe[{topic}]]",
                    "startOffset": None,
                    "endOffset": json.dumps({topic: {str(p): 100 for p in partitions}}),
                    "latestOffset": json.dumps({topic: {str(p): 100 for p in partitions}}),
                    "numInputRows": 50,
                    "inputRowsPerSecond": 25.0,
                    "processedRowsPerSecond": 40.0,
                    "metrics": {},
                }
            ],
            "sink": {"description": "noop", "numOutputRows": 5},
            "numInputRows": 50,
            "inputRowsPerSecond": 25.0,
            "processedRowsPerSecond": 40.0,
            "observedMetrics": {"event_time.sensors": observed, "quarantine.sensors": {"rows": 2}},
        }
    )


def exporter_text(config: PipelineConfig, *batches: Any) -> str:
    from prometheus_client import CollectorRegistry, generate_latest

    recorder = ProgressRecorder(config, declared_app(APP), clock=lambda: NOW)
    registry = CollectorRegistry()
    registry.register(recorder)
    for batch in batches:
        recorder.query_progress(batch)
    return generate_latest(registry).decode()


def row_of(config: PipelineConfig, exposition: str | None, **given: Any) -> health.AppRow:
    lease = Lease(config, APP).read()
    arguments: dict[str, Any] = {
        "status": app_status(config, APP),
        "lease": lease,
        "driver_exists": True if lease else None,
        "exposition": exposition,
        "metrics_error": None if exposition is not None else "unreachable: connection refused",
        "metrics_source": health.metrics_url(config, declared_app(APP)),
        "committed": health.last_committed(config, declared_app(APP)),
        "restart_times": ControlStore(config).restarts(APP).recent,
        "prometheus": None,
        "prometheus_error": "not configured",
        "alerts": [],
        "lag_factor": health.watermark_lag_factor(),
        "now": NOW,
    }
    return health.app_row(config, declared_app(APP), **{**arguments, **given})


def write_commit(config: PipelineConfig, query: str, batch: int, at: float) -> None:
    commits = Path(config.checkpoint_dir(APP, query)) / "commits"
    commits.mkdir(parents=True, exist_ok=True)
    (commits / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    (commits / f".{batch}.crc").write_text("crc")
    import os

    os.utime(commits / str(batch), (at, at))


def test_a_running_app_s_row_from_exporter_text_control_records_lease_and_checkpoint(tmp_path):
    config = config_at(tmp_path)
    topic = config.kafka.topics.sensors.name
    control = ControlStore(config)
    control.mark_running(APP)  # this process: alive
    control.record_restart(APP, cause="a test crash")
    lease = Lease(config, APP)
    record = lease.acquire(print)
    write_commit(config, "tumbling", 6, NOW - 30)
    write_commit(config, "tumbling", 7, NOW - 12)
    text = exporter_text(
        config,
        progress(
            f"{APP}.tumbling",
            batch=8,
            watermark=NOW - 200,
            partitions={0: NOW - 60, 1: NOW - 65, 2: NOW - 60},
            topic=topic,
        ),
    )

    row = row_of(config, text, now=time.time())

    assert row.state == "running"
    assert row.owner == f"{record.host} pid {record.pid} ({record.owner[:8]})"
    assert row.heartbeat_age_s is not None and row.heartbeat_age_s < 60
    tumbling = next(q for q in row.queries if q.query == f"{APP}.tumbling")
    assert tumbling.batch_id == 8
    assert tumbling.committed_batch == 7
    assert tumbling.input_rows_per_s == 25.0 and tumbling.processed_rows_per_s == 40.0
    assert tumbling.state_rows == 40
    assert tumbling.watermark == health.iso(NOW - 200)
    # The exporter computed the lag at its clock (NOW); the threshold is 2 x the 2-minute delay.
    assert tumbling.watermark_lag_s == pytest.approx(200)
    assert tumbling.watermark_lag_threshold_s == pytest.approx(2 * 120)
    assert not tumbling.watermark_lag_high
    assert (row.input_rows_per_s, row.processed_rows_per_s, row.state_rows) == (25.0, 40.0, 40)
    assert (row.late_drops, row.quarantined) == (3, 2)
    assert row.counts_source == "since the app started (metrics endpoint; Prometheus not configured)"
    assert row.restarts_in_window == 1 and row.restart_limit == config.supervision.max_restarts
    assert [p.partition for p in row.partitions] == [0, 1, 2] and not any(p.stalled for p in row.partitions)
    assert row.actions["pipeline_control"] == "/dags/pipeline_control"
    assert json.loads(row.actions["pipeline_control_params"])["app"] == APP
    lease.release()


def test_a_partition_behind_the_others_by_more_than_the_watermark_delay_is_stalled(tmp_path):
    config = config_at(tmp_path)
    topic = config.kafka.topics.sensors.name
    text = exporter_text(
        config,
        progress(
            f"{APP}.tumbling",
            batch=3,
            watermark=NOW - 300,
            partitions={0: NOW - 10, 1: NOW - 10 - 121, 2: NOW - 15},
            topic=topic,
        ),
    )
    partitions = health.partition_times(health.parse_exposition(text), topic)
    assert [(p.partition, p.stalled) for p in partitions] == [(0, False), (1, True), (2, False)]
    assert "watermark delay 120s" in partitions[1].why
    # A firing PartitionStalled alert (the rule's "stands still" half) marks its partition too.
    alert = {"labels": {"alertname": "PartitionStalled", "topic": topic, "partition": "2"}}
    alerted = health.partition_times(health.parse_exposition(text), topic, [alert])
    assert [p.partition for p in alerted if p.stalled] == [1, 2]
    assert health.duration_text(59.6) == "1m 00s" and health.duration_text(3725) == "1h 02m"
    assert alerted[2].why == "PartitionStalled is firing"


def test_a_lag_above_the_rule_s_threshold_is_flagged(tmp_path):
    config = config_at(tmp_path)
    text = exporter_text(
        config,
        progress(
            f"{APP}.sliding",
            batch=1,
            watermark=NOW - 241,
            partitions={0: NOW},
            topic=config.kafka.topics.sensors.name,
        ),
    )
    sliding = next(q for q in row_of(config, text).queries if q.query == f"{APP}.sliding")
    assert sliding.watermark_lag_high and sliding.watermark_lag_threshold_s == 240


@pytest.mark.parametrize(
    ("state", "page"),
    [
        ("running", "running"),
        ("starting", "starting"),
        ("stopped", "stopped"),
        ("paused", "paused"),
        ("crash-looping", "crash-looping"),
        ("failed", "stopped"),
        ("not running", "stopped"),
    ],
)
def test_every_state_of_app_status_maps_to_a_page_state(state, page):
    assert health.page_state(AppStatus(APP, state, "why"), None)[0] == page


def test_a_running_app_whose_heartbeat_is_stale_while_its_driver_lives_is_stuck(tmp_path):
    config = config_at(tmp_path)
    now = time.time()  # the watchdog ages a heartbeat against the wall clock
    stale = LeaseRecord("abc", "host", 1, now - 300, now - 100)
    settings = health.WatchdogSettings.of(config, declared_app(APP))
    reason = health.stuck_reason(settings, stale, True, None, now)
    assert reason and "heartbeat 100s old" in reason
    state, detail = health.page_state(AppStatus(APP, "running", "pid 1"), reason)
    assert (state, detail) == ("stuck", reason)
    # A dead driver is not stuck (the supervisor restarts it), nor is a fresh heartbeat.
    assert health.stuck_reason(settings, stale, False, None, now) is None
    fresh = LeaseRecord("abc", "host", 1, now - 300, now - 1)
    assert health.stuck_reason(settings, fresh, True, None, now) is None


def test_no_progress_for_the_watchdog_window_while_offsets_wait_is_stuck(tmp_path):
    config = config_at(tmp_path)
    settings = health.WatchdogSettings.of(config, declared_app(APP))
    topic = config.kafka.topics.sensors.name
    batch = progress(f"{APP}.tumbling", batch=2, watermark=NOW - 200, partitions={0: NOW}, topic=topic)
    samples = health.parse_exposition(exporter_text(config, batch))
    # The batch ended at NOW - 4; offsets wait only once latestOffset is ahead of endOffset.
    assert health.stuck_reason(settings, None, None, samples, NOW + settings.window_s) is None
    waiting = [
        health.Sample(s.name, s.labels, 500.0) if s.name == "pipeline_source_lag_offsets" else s
        for s in samples
    ]
    assert health.stuck_reason(settings, None, None, waiting, NOW) is None
    reason = health.stuck_reason(settings, None, None, waiting, NOW + settings.window_s)
    assert reason and reason.startswith(f"{APP}.tumbling: no progress") and "500 offsets wait" in reason


def test_the_watermark_lag_threshold_is_read_from_the_alert_rule(tmp_path):
    rules = yaml.safe_load(health.ALERT_RULES.read_text())
    expressions = [
        " ".join(r["expr"].split())
        for g in rules["groups"]
        for r in g["rules"]
        if r.get("alert") == "WatermarkLagHigh"
    ]
    assert len(expressions) == 4, "one rule per case"
    assert all(
        e.startswith("pipeline_watermark_lag_seconds > 2 * pipeline_watermark_delay_seconds ")
        for e in expressions
    )
    assert health.watermark_lag_factor() == 2

    changed = tmp_path / "rules.yml"
    changed.write_text(
        health.ALERT_RULES.read_text().replace("> 2 * pipeline_watermark", "> 3 * pipeline_watermark")
    )
    assert health.watermark_lag_factor(changed) == 3
    one_case_changed = tmp_path / "one_case.yml"
    one_case_changed.write_text(
        health.ALERT_RULES.read_text().replace("> 2 * pipeline_watermark", "> 3 * pipeline_watermark", 1)
    )
    with pytest.raises(ValueError, match="disagree on the threshold: 2, 3 times the delay"):
        health.watermark_lag_factor(one_case_changed)
    reshaped = tmp_path / "reshaped.yml"
    reshaped.write_text(
        health.ALERT_RULES.read_text().replace("> 2 * pipeline_watermark", "> 600 + pipeline_watermark")
    )
    with pytest.raises(ValueError, match="WatermarkLagHigh is"):
        health.watermark_lag_factor(reshaped)


def test_an_app_whose_endpoint_does_not_answer_shows_unreachable_not_an_error(tmp_path):
    closed = free_port()
    config = config_at(
        tmp_path,
        *(f"metrics.ports.{app}={closed}" for app in APP_NAMES),
        f"metrics.prometheus_url=http://127.0.0.1:{closed}",
        f"metrics.alertmanager_url=http://127.0.0.1:{closed}",
    )
    page = health.collect(config)
    assert [row.app for row in page.rows] == list(APP_NAMES)
    for row in page.rows:
        assert row.metrics_unreachable and row.metrics_unreachable.startswith("unreachable:")
        assert row.late_drops is None and row.counts_source.startswith("unreachable")
        assert row.state == "stopped"
    assert page.prometheus_source.startswith(f"unreachable: Prometheus http://127.0.0.1:{closed}: ")
    assert page.alerts_source.startswith(f"unreachable: Alertmanager http://127.0.0.1:{closed}/api/v2/alerts")


def test_prometheus_counts_win_over_the_endpoint_s_totals(tmp_path):
    config = config_at(tmp_path)
    text = exporter_text(
        config,
        progress(f"{APP}.tumbling", batch=1, watermark=NOW - 100, partitions={0: NOW}, topic="sensors"),
    )
    row = row_of(config, text, prometheus={APP: {"late_drops": 12.0, "quarantined": 1.0}})
    assert (row.late_drops, row.quarantined) == (12.0, 1.0)
    assert row.counts_source == "last 1h (Prometheus)"


def test_the_last_reconciliation_per_day_from_its_report_json(stored_root):
    config = load_config("local", stored_root, environ={})
    root = health.reconciliation_root(config)
    reports = {
        "2026-11-20": {"status": "passed", "diffs": [{"verdict": "explained_late"}]},
        "2026-11-21": {
            "status": "failed",
            "diffs": [{"verdict": "unexplained"}, {"verdict": "explained_late"}],
            "ad_match_diffs": [{"verdict": "unexplained"}],
            "late_event_ledger": {"pending_deliveries_not_yet_read": 4},
        },
    }
    from stream_pipelines.core.store import write_json

    for day, document in reports.items():
        write_json(root / day / "report.json", document)
    days = health.reconciliation_days(config)
    assert [(d.day, d.status, d.unexplained, d.pending) for d in days] == [
        ("2026-11-21", "failed", 2, 4),
        ("2026-11-20", "passed", 0, 0),
    ]


def test_the_rendered_page_reloads_itself_fetches_nothing_external_and_escapes_what_it_shows(tmp_path):
    from stream_pipelines.airflow.plugin import REFRESH_S, render_page

    closed = free_port()
    config = config_at(tmp_path, *(f"metrics.ports.{app}={closed}" for app in APP_NAMES))
    ControlStore(config).set_desired(APP, "stopped", by="<script>alert(1)</script>", reason="test")
    html = render_page(health.collect(config), focus=health.app_of_dag(f"supervise_{APP}"))
    assert f'<meta http-equiv="refresh" content="{REFRESH_S}">' in html
    assert " src=" not in html and "<link" not in html and "@import" not in html
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert f'<tr id="app-{APP}" data-app="{APP}" class="focus">' in html
    assert health.app_of_dag("nightly_reconciliation") is None


def test_the_graph_window_links_keep_the_app_the_page_was_opened_for(tmp_path):
    from stream_pipelines.airflow.plugin import render_page
    from stream_pipelines.observability import graphs

    closed = free_port()
    config = config_at(tmp_path, *(f"metrics.ports.{app}={closed}" for app in APP_NAMES))
    page = health.collect(config)
    other_windows = [hours for hours in graphs.WINDOWS if hours != page.graph_hours]

    focused = render_page(page, focus=health.app_of_dag(f"supervise_{APP}"))
    for hours in other_windows:
        assert f'href="?dag_id=supervise_{APP}&amp;hours={hours}#graphs-{APP}"' in focused
    unfocused = render_page(page)
    for hours in other_windows:
        assert f'href="?hours={hours}#graphs"' in unfocused


def test_with_airflows_metadata_database_away_the_page_stands_and_says_so(tmp_path):
    from stream_pipelines.airflow.plugin import render_page

    closed = free_port()
    config = config_at(tmp_path, *(f"metrics.ports.{app}={closed}" for app in APP_NAMES))
    away = health.collect(config, metadata_database_away=lambda: "OperationalError: <refused>")
    assert away.as_json()["metadata_database_away"] == "OperationalError: <refused>"
    assert [row.app for row in away.rows] == list(APP_NAMES), "the apps' rows still come"
    html = render_page(away)
    assert '<p role="alert" class="unreachable">Airflow&#x27;s metadata database is away' in html
    assert "OperationalError: &lt;refused&gt;" in html and "the drivers stream on" in html
    assert "metadata database is away" not in render_page(health.collect(config))


def test_the_page_says_which_kind_of_restart_came_last_and_why(tmp_path):
    """A query restarted inside its driver and a driver restarted by its supervisor read differently."""
    from stream_pipelines.airflow.plugin import render_page

    closed = free_port()
    config = config_at(tmp_path, *(f"metrics.ports.{app}={closed}" for app in APP_NAMES))
    control = ControlStore(config)
    control.record_restart(APP, cause="spark-submit exited with code 3", kind="driver")
    control.record_restart(APP, cause=f"query {APP}.tumbling failed: IOException <disk>", kind="in-driver")
    page = health.collect(config)
    [row] = [row for row in page.rows if row.app == APP]
    assert row.restarts_in_window == 2
    assert row.last_restart.startswith("query restarted inside the driver at ")
    assert row.last_restart.endswith(f"query {APP}.tumbling failed: IOException <disk>")
    html = render_page(page, focus=None)
    assert "last: query restarted inside the driver at " in html and "IOException &lt;disk&gt;" in html
    control.record_restart(APP, cause="spark-submit exited with code -9, killed by signal 9", kind="driver")
    [row] = [row for row in health.collect(config).rows if row.app == APP]
    assert row.last_restart.startswith("driver restarted at ") and "killed by signal 9" in row.last_restart


def test_each_event_day_shows_its_state_what_holds_it_both_runs_side_by_side_and_who_signed(stored_root):
    """The page's "Event days" table, from the day records the watcher and the runs write."""
    from datetime import date

    from stream_pipelines.airflow.plugin import overdue_exposition, render_page
    from stream_pipelines.core.store import write_json
    from stream_pipelines.reconciliation import days

    config = load_config(
        "local",
        [*stored_root, "reconciliation.late_horizon=1 hour", "reconciliation.final_deadline=2 hours"],
        environ={},
    )
    signed, waiting, overdue = date(2026, 11, 20), date(2026, 11, 21), date(2026, 11, 19)
    now = datetime(2026, 11, 22, 2, tzinfo=UTC)
    report = {"status": "passed", "window_counts": {"exact_windows": 288, "streaming_windows": 288}}
    days.record_run(config, signed, days.PROVISIONAL, {**report, "diffs": [{"verdict": "pending"}]}, "p", now)
    days.record_run(config, signed, days.FINAL, {**report, "diffs": []}, "f", now)
    digest = days.report_digest({**report, "diffs": []})
    days.record_sign_off(
        config, signed, decision=days.REJECTED, by="ann", comment="<b>short</b>", shown_digest=digest,
        current_digest=digest, now=now,
    )  # fmt: skip
    write_json(
        days.day_path(config, waiting),
        {
            **days.read_day(config, waiting),
            "holding": ["sensor_aggregation.tumbling: not yet past X in sensors[1]"],
        },
    )
    write_json(days.day_path(config, overdue), days.read_day(config, overdue))

    shown = {d.day: d for d in health.event_days(config, now.timestamp())}
    assert list(shown) == ["2026-11-21", "2026-11-20", "2026-11-19"]
    assert shown["2026-11-21"].state == days.OPEN and shown["2026-11-21"].waiting_for
    assert (shown["2026-11-20"].state, shown["2026-11-20"].sign_off["decision"]) == (
        days.RECONCILED_FINAL,
        "rejected",
    )
    assert shown["2026-11-20"].provisional["figures"]["diffs"] == {"pending": 1}
    assert shown["2026-11-20"].final["figures"]["diffs"] == {}
    # A day's deadline is its end + 1 hour horizon + 2 hours: 2026-11-21's is 03:00 today, not yet.
    assert shown["2026-11-19"].overdue and not shown["2026-11-21"].overdue

    page = health.collect(config, now=now.timestamp())
    html = render_page(page)
    assert '<table id="days">' in html and '<tr data-day="2026-11-20">' in html
    assert "rejected by ann" in html and "&lt;b&gt;short&lt;/b&gt;" in html
    assert "not yet past X in sensors[1]" in html and "final run overdue" in html

    exposition = overdue_exposition(config, now=now.timestamp())
    assert "pipeline_reconciliation_overdue_days " in exposition
    # The exporter counts from the go-live day (2026-01-01 unless set): every day before 2026-11-20 that
    # has no final run is overdue, 2026-11-20 itself has one.
    expected = (date(2026, 11, 20) - date(2026, 1, 1)).days
    assert f"pipeline_reconciliation_overdue_days {expected}\n" in exposition
    assert days.overdue_days(config, date(2026, 11, 19), now) == ["2026-11-19"]


def test_the_page_reads_a_driver_s_metrics_where_it_registered_them(tmp_path):
    """A driver in a YARN container, or on a free port (0), says where its exporter serves in its running
    record; the page asks there, not at the configured port on this host."""
    from stream_pipelines.control.control_store import MetricsEndpoint

    config = config_at(tmp_path)
    assert (
        health.metrics_url(config, declared_app(APP)) == "http://127.0.0.1:9402/metrics"
    )  # nothing registered
    ControlStore(config).mark_running(APP, metrics=MetricsEndpoint("node-7.cluster.example", 40123))
    assert health.metrics_url(config, declared_app(APP)) == "http://node-7.cluster.example:40123/metrics"


def test_a_control_store_that_does_not_answer_leaves_the_configured_metrics_address(tmp_path):
    """The page reads where a driver registered its metrics from the control store; when that store does
    not answer, the page still renders, asking the configured address (it must never crash)."""
    config = config_at(tmp_path)
    control = Path(config.data_path("control"))
    control.parent.mkdir(parents=True, exist_ok=True)
    control.write_text("a file where the control folder should be: every read of a record fails")
    assert health.metrics_url(config, declared_app(APP)) == "http://127.0.0.1:9402/metrics"


def test_a_config_that_no_longer_loads_is_said_by_the_page_not_a_server_error(monkeypatch, tmp_path):
    """An expired client certificate or a key that no longer opens makes the config invalid: the page
    (here its unauthenticated metrics endpoint) answers 503 with what to fix."""
    import warnings

    from stream_pipelines.airflow.plugin import create_app
    from stream_pipelines.devtools.tls import make_test_pki

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

    pki = make_test_pki(tmp_path / "tls")
    monkeypatch.setenv("PIPELINE__KAFKA__SECURITY__PROTOCOL", "SSL")
    monkeypatch.setenv("PIPELINE__KAFKA__SECURITY__CERTIFICATE_FILE", str(pki.expired_client.certificate))
    monkeypatch.setenv("PIPELINE__KAFKA__SECURITY__KEY_FILE", str(pki.expired_client.key))
    response = TestClient(create_app()).get("/metrics")
    assert response.status_code == 503
    assert "the pipeline&#x27;s configuration is invalid" in response.text
    assert "expired on" in response.text and "kafka.security" in response.text
