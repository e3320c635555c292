"""The "Streaming pipeline" page in a real Airflow UI, in a real browser, against a real running query.

Started here, on free loopback ports, and stopped at the end whatever happens: Airflow's api-server
and dag-processor (as `make up` starts them; the page comes from the package's `airflow.plugins` entry point),
Alertmanager (with one alert posted to it), and a watermarked streaming query named like the
sensor app's, in this process' SparkSession, exporting through the real ``MetricsExporter``. The
control record and the lease are this process'. The other apps' endpoints and Prometheus are
closed ports: the page must show them as unreachable. Airflow's metadata database (the session's
PostgreSQL) is stopped at the end: the page's API must answer that it is away.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from stream_pipelines.airflow import health
from stream_pipelines.control.control_store import ControlStore
from stream_pipelines.control.lease import Lease, LeaseKeeper
from stream_pipelines.core.config import PROJECT_ROOT, load_config
from stream_pipelines.core.registry import app as declared_app
from stream_pipelines.core.store import write_atomically, write_json
from stream_pipelines.devtools import stack
from stream_pipelines.devtools.processes import free_port, stop_processes
from stream_pipelines.observability import runbooks
from stream_pipelines.observability.metrics import MetricsExporter, observe_event_time, observe_quarantine
from stream_pipelines.observability.monitoring_rules import AIRFLOW_API_SERVER, render_prometheus_config
from tests.conftest import pipeline_environment, wait_for

APP = "sensor_aggregation"
QUERY = f"{APP}.tumbling"
STALLED_PARTITION = 2
DAY = "2026-11-20"


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """One GET that does not follow redirects; (status, headers, body), also for 4xx/5xx."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(urllib.request.Request(url, headers=headers or {}), timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def exported(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return found


def value_of(samples, name: str, **labels: str) -> float:
    matching = [v for found, v in samples[name] if all(found.get(k) == w for k, w in labels.items())]
    assert len(matching) == 1, f"{name}{labels}: {matching}"
    return matching[0]


def write_events(folder: Path, topic: str, name: str, newest: datetime) -> None:
    """Readings of partitions 0 and 1 up to ``newest``; partition 2 ten minutes behind (stalled)."""
    lines = []
    for i in range(30):
        partition = i % 3
        ts = (
            newest
            - timedelta(seconds=i)
            - (timedelta(minutes=10) if partition == STALLED_PARTITION else timedelta())
        )
        event = {
            "sensor_id": f"s{i % 4}",
            "temperature": 20.0 + i,
            "ts": ts.isoformat(),
            "topic": topic,
            "partition": partition,
            "kafka_timestamp": (ts + timedelta(seconds=1)).isoformat(),
            "quarantine_reason": "out_of_range" if i in (3, 7) else None,
        }
        lines.append(json.dumps(event))
    (folder / name).write_text("\n".join(lines) + "\n")


def start_alertmanager(tmp_path: Path, port: int) -> subprocess.Popen:
    binary = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if binary is None:
        pytest.fail("Alertmanager is not installed: run infra/scripts/install_test_servers.sh")
    log = (tmp_path / "alertmanager.log").open("wb")
    return subprocess.Popen(
        [
            binary,
            f"--config.file={PROJECT_ROOT / 'monitoring' / 'alertmanager.yml'}",
            f"--storage.path={tmp_path / 'alertmanager'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def post_alert(base: str, labels: dict[str, str], summary: str) -> None:
    body = json.dumps([{"labels": labels, "annotations": {"summary": summary}}]).encode()
    request = urllib.request.Request(
        f"{base}/api/v2/alerts", data=body, method="POST", headers={"Content-Type": "application/json"}
    )
    urllib.request.urlopen(request, timeout=10).close()


@pytest.mark.slow
@pytest.mark.timeout(480)
def test_the_page_in_the_airflow_ui_shows_what_the_running_app_exports(spark, metadata_database, tmp_path):
    from playwright.sync_api import sync_playwright
    from pyspark.sql import functions as F

    if not Path("/usr/bin/chromium").exists():
        pytest.fail("chromium is not installed: run infra/scripts/install_test_servers.sh")
    airflow_port, metrics_port, alertmanager_port, closed = free_port(), free_port(), free_port(), free_port()
    overrides = [
        f"paths.data_root={tmp_path / 'data'}",
        f"metrics.ports.{APP}={metrics_port}",
        f"metrics.ports.raw_archive={closed}",
        f"metrics.ports.ad_matching={closed}",
        f"metrics.prometheus_url=http://127.0.0.1:{closed}",
        f"metrics.alertmanager_url=http://127.0.0.1:{alertmanager_port}",
    ]
    config = load_config("local", overrides)
    topic = config.kafka.topics.sensors.name
    base = f"http://127.0.0.1:{airflow_port}"
    environment = {
        **stack.airflow_environment(config, metadata_database, airflow_port),
        **pipeline_environment(overrides),
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
    }
    assert stack.migrate_airflow_db(environment) is None
    components = [
        c
        for c in stack.airflow_components(airflow_port)
        if c.name in (AIRFLOW_API_SERVER, "airflow-dag-processor")
    ]
    stack.start_components(config, components, environment, airflow_port)
    alertmanager = start_alertmanager(tmp_path, alertmanager_port)

    source = tmp_path / "source"
    source.mkdir()
    newest = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=30)
    write_events(source, topic, "batch-000.jsonl", newest - timedelta(seconds=40))
    write_events(source, topic, "batch-001.jsonl", newest)
    control = ControlStore(config)
    exporter = MetricsExporter(config, declared_app(APP)).start(spark)
    lease = Lease(config, APP)
    keeper = LeaseKeeper(lease, lease.acquire(print), config.supervision.heartbeat_interval.seconds).start()
    events = spark.readStream.schema(
        "sensor_id string, temperature double, ts timestamp, topic string, partition int, "
        "kafka_timestamp timestamp, quarantine_reason string"
    ).json(str(source))
    events = observe_quarantine(events, "sensors")
    events = observe_event_time(events, "sensors", "ts", {topic: 3}, watermark_delay=config.sensors.watermark)
    query = (
        events.withWatermark("ts", config.sensors.watermark.spark())
        .groupBy(F.window("ts", "1 minute"), "sensor_id")
        .agg(F.avg("temperature"))
        .writeStream.queryName(QUERY)
        .outputMode("append")
        .format("noop")
        .option("checkpointLocation", config.checkpoint_dir(APP, "tumbling"))
        .trigger(processingTime="2 seconds")
        .start()
    )
    try:
        control.mark_running(APP)
        control.record_restart(APP, cause="a crash before this run")
        report = health.reconciliation_root(config) / DAY
        write_json(
            report / "report.json",
            {
                "day": DAY,
                "status": "failed",
                "diffs": [{"verdict": "unexplained"}],
                "late_event_ledger": {"pending_deliveries_not_yet_read": 3},
            },
        )
        write_atomically(
            report / "report.html", "<html><body><h1>Reconciliation 2026-11-20</h1></body></html>"
        )
        query.processAllAvailable()
        metrics_url = health.metrics_url(config, declared_app(APP))
        wait_for(
            lambda: "pipeline_partition_max_event_time_seconds" in exported(metrics_url),
            60,
            "the exporter to publish per-partition event time",
        )
        wait_for(
            lambda: _answers(f"http://127.0.0.1:{alertmanager_port}/-/ready"), 60, "Alertmanager", poll_s=0.5
        )
        post_alert(
            f"http://127.0.0.1:{alertmanager_port}",
            {
                "alertname": "PartitionStalled",
                "app": APP,
                "query": QUERY,
                "topic": topic,
                "partition": str(STALLED_PARTITION),
                "severity": "ticket",
            },
            f"{QUERY}: partition {topic}/{STALLED_PARTITION} falls behind",
        )
        password = stack.airflow_admin_password(environment["AIRFLOW_HOME"], timeout_s=180)
        assert password, "the api-server wrote no admin password"
        wait_for(lambda: stack.api_server_answers(airflow_port), 120, "the api-server", poll_s=1)

        # (a) Without a login: the page sends the browser to the login, the JSON and reports refuse.
        status, headers, _ = get(f"{base}/streaming-pipeline/")
        assert status == 303 and "/auth/login" in headers["location"], (status, headers)
        assert get(f"{base}/streaming-pipeline/api/health")[0] == 401
        assert get(f"{base}/streaming-pipeline/reports/{DAY}/report.json")[0] == 401
        assert get(f"{base}/streaming-pipeline/api/health", {"Authorization": "Bearer not-a-jwt"})[0] == 403
        # With a token from /auth/token, as an API client: the JSON answers.
        token = _token(base, password)
        status, _, body = get(f"{base}/streaming-pipeline/api/health", {"Authorization": f"Bearer {token}"})
        assert status == 200 and [row["app"] for row in json.loads(body)["rows"]][1] == APP
        status, _, body = get(
            f"{base}/streaming-pipeline/reports/{DAY}/report.html", {"Authorization": f"Bearer {token}"}
        )
        assert status == 200 and b"Reconciliation 2026-11-20" in body

        # (b) A browser user logs in, finds the page in the nav and reads the app's row.
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
            try:
                page = browser.new_page(viewport={"width": 1680, "height": 1300})
                page.goto(f"{base}/")
                page.get_by_label("Username").fill(stack.AIRFLOW_USER)
                page.get_by_label("Password").fill(password)
                page.get_by_role("button", name="Sign in").click()
                page.get_by_role("link", name="Streaming pipeline").first.click()
                # The address `make up` and `make demo` print for the page is where the nav entry leads.
                page.wait_for_url(health.page_address(base))
                frame = page.frame_locator("iframe[title='Streaming pipeline']")
                row = frame.locator(f"tr[data-app='{APP}']")
                row.wait_for(timeout=60_000)
                shown = {
                    field: row.locator(f"[data-field='{field}']").first.inner_text()
                    for field in (
                        "state",
                        "owner",
                        "input_rows_per_s",
                        "state_rows",
                        "late_drops",
                        "quarantined",
                        "restarts",
                        "batch_id",
                        "committed_batch",
                        "watermark_lag_threshold_s",
                    )
                }
                samples = exported(metrics_url)  # read right after the page
                stalled = frame.locator(f"#partitions-{APP} tr.stalled").all_inner_texts()
                alerts = frame.locator("#alerts").inner_text()
                reconciliation = frame.locator(f"#reconciliation tr[data-day='{DAY}']").inner_text()
                unreachable = frame.locator("tr[data-app='raw_archive'] .unreachable").first.inner_text()
                no_graphs = frame.locator("#graphs + div + p.unreachable").inner_text()
                screenshot = tmp_path / "streaming-pipeline-page.png"
                page.screenshot(path=str(screenshot), full_page=True)
                print(f"screenshot of the page: {screenshot}")

                # The supervisor DAG's own tab shows the page with that app's row highlighted.
                wait_for(
                    lambda: _dag_parsed(base, token, f"supervise_{APP}"),
                    180,
                    "the supervisor DAG to be parsed",
                    poll_s=2,
                )
                page.goto(f"{base}/dags/supervise_{APP}")
                page.locator("a[href$='/plugin/streaming-pipeline-dag']").first.click()
                tab_frame = page.frame_locator("iframe[title='Streaming pipeline']")
                tab_frame.locator(f"tr[data-app='{APP}'].focus").wait_for(timeout=60_000)
                page.screenshot(path=str(tmp_path / "supervisor-dag-tab.png"), full_page=True)
                # An action link opens the DAG in the UI itself (not inside the iframe); nothing is run.
                tab_frame.locator(f"tr[data-app='{APP}'] a[href='/dags/pipeline_control']").click()
                page.wait_for_url(f"{base}/dags/pipeline_control", timeout=30_000)
                page.locator("iframe[title='Streaming pipeline']").wait_for(state="detached", timeout=30_000)
                page.screenshot(path=str(tmp_path / "pipeline-control-dag.png"))

                # The links a notification carries, on the pipeline_ui label (here, this api-server):
                # the runbook's section, linked from the alert's row too, and the app's row.
                section = runbooks.anchor("PartitionStalled")
                page.goto(f"{base}{runbooks.ROUTE}#{section}")
                heading = page.locator(f"h2#{section}")
                heading.wait_for(timeout=30_000)
                runbook_link = (heading.inner_text(), page.locator(f"#{section} ~ p").first.inner_text())
                page.goto(f"{base}/streaming-pipeline/?dag_id=supervise_{APP}#app-{APP}")
                page.locator(f"tr#app-{APP}.focus").wait_for(timeout=30_000)
                frame_link = page.locator("#alerts a").first.get_attribute("href")
            finally:
                browser.close()

        assert shown["state"] == "running"
        assert f"pid {os.getpid()}" in shown["owner"]
        batch = value_of(samples, "pipeline_batch_id", query=QUERY)
        assert abs(int(shown["batch_id"]) - batch) <= 1
        assert abs(int(shown["committed_batch"]) - batch) <= 1
        assert float(shown["input_rows_per_s"].replace(",", "")) == pytest.approx(
            value_of(samples, "pipeline_input_rows_per_second", query=QUERY), abs=0.05
        )
        assert int(shown["state_rows"].replace(",", "")) == value_of(
            samples, "pipeline_state_rows", query=QUERY
        )
        assert int(shown["late_drops"]) == value_of(samples, "pipeline_late_rows_dropped_total", query=QUERY)
        assert shown["quarantined"].startswith(
            str(int(value_of(samples, "pipeline_quarantined_rows_total", query=QUERY)))
        )
        assert "since the app started (metrics endpoint; Prometheus unreachable)" in shown["quarantined"]
        delay = value_of(samples, "pipeline_watermark_delay_seconds", query=QUERY)
        assert shown["watermark_lag_threshold_s"] == health.duration_text(
            health.watermark_lag_factor() * delay
        )
        assert shown["restarts"].startswith(f"1 / {config.supervision.max_restarts}")
        assert len(stalled) == 1 and stalled[0].split("\t")[1] == str(STALLED_PARTITION)
        assert "PartitionStalled" in alerts and APP in alerts
        assert runbook_link[0] == "PartitionStalled", runbook_link
        assert runbook_link[1].startswith("Means."), runbook_link
        assert frame_link == f"runbooks#{section}"
        assert "failed" in reconciliation and "\t1\t3\t" in f"{reconciliation}\t"
        assert unreachable.startswith("metrics unreachable")
        assert no_graphs.startswith(
            f"No graphs: Prometheus is unreachable: Prometheus http://127.0.0.1:{closed}"
        )
        # The page and its links only read: no run of either action DAG was made.
        for dag_id in ("pipeline_control", "checkpoint_reset"):
            status, _, body = get(
                f"{base}/api/v2/dags/{dag_id}/dagRuns", {"Authorization": f"Bearer {token}"}
            )
            assert status == 200 and json.loads(body)["total_entries"] == 0, (dag_id, body)

        # (c) Airflow's metadata database goes away. No login can be checked without it (Airflow looks a
        # token up among the revoked ones), so the page's API answers 503 and says why, instead of
        # failing. (A browser's request, with the UI's cookie, meets Airflow's own token-refresh
        # middleware first, which answers 500 for the whole UI: docs/operations.md.)
        health_url, bearer = f"{base}/streaming-pipeline/api/health", {"Authorization": f"Bearer {token}"}
        status, _, body = get(health_url, bearer)
        assert status == 200 and json.loads(body)["metadata_database_away"] is None, body
        metadata_database.server.stop()
        try:
            status, _, body = get(health_url, bearer)
        finally:
            metadata_database.server.start()
        assert status == 503, (status, body)
        away = json.loads(body)
        assert away["metadata_database_away"].startswith("OperationalError"), away
        assert "metadata database is away" in away["detail"] and "the drivers stream on" in away["detail"]
        assert metadata_database.server.password not in body.decode(), "the password is the URL's"
        wait_for(lambda: _answers(health_url, bearer), 60, "the page once the database is back", poll_s=1)
    finally:
        query.stop()
        exporter.stop()
        keeper.stop()
        lease.release()
        control.mark_not_running(APP)
        alertmanager.terminate()
        alertmanager.wait(timeout=30)
        stray = stack.stop_components(config, [c.name for c in components])
        stop_processes(stray)


def _answers(url: str, headers: dict[str, str] | None = None) -> bool:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


def _token(base: str, password: str) -> str:
    request = urllib.request.Request(
        f"{base}/auth/token",
        data=json.dumps({"username": stack.AIRFLOW_USER, "password": password}).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())["access_token"]


def _dag_parsed(base: str, token: str, dag_id: str) -> bool:
    status, _, _ = get(f"{base}/api/v2/dags/{dag_id}", {"Authorization": f"Bearer {token}"})
    return status == 200


@contextlib.contextmanager
def scraped_recorder(tmp_path: Path, *overrides: str) -> Iterator[tuple[Any, Any, str]]:
    """The real exporter code (``ProgressRecorder``, fed Spark-shaped progress, no JVM) for the sensor
    app, scraped every second by a real Prometheus with monitoring/prometheus.yml's job moved to it;
    (config, recorder, Prometheus' URL), once Prometheus answers."""
    import yaml
    from prometheus_client import CollectorRegistry, start_http_server

    from stream_pipelines.observability.metrics import ProgressRecorder

    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus is not installed: run infra/scripts/install_test_servers.sh")
    exporter_port, prometheus_port = free_port(), free_port()
    config = load_config(
        "local",
        [
            f"paths.data_root={tmp_path / 'data'}",
            f"metrics.ports.{APP}={exporter_port}",
            f"metrics.prometheus_url=http://127.0.0.1:{prometheus_port}",
            *overrides,
        ],
    )
    recorder = ProgressRecorder(config, declared_app(APP))
    registry = CollectorRegistry()
    registry.register(recorder)
    server, _thread = start_http_server(exporter_port, addr="127.0.0.1", registry=registry)
    scrape = render_prometheus_config(
        targets={APP: f"127.0.0.1:{exporter_port}"},
        app_targets_file=tmp_path / "stream_pipelines.json",
        rule_paths=[],
        interval="1s",
    )
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(scrape))
    log = (tmp_path / "prometheus.log").open("wb")
    prometheus = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prometheus_port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        base = f"http://127.0.0.1:{prometheus_port}"
        wait_for(lambda: _answers(f"{base}/-/ready"), 60, "Prometheus", poll_s=0.5)
        yield config, recorder, base
    finally:
        prometheus.terminate()
        prometheus.wait(timeout=30)
        log.close()
        server.shutdown()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_late_drops_and_quarantined_rows_of_the_last_hour_come_from_prometheus_when_it_runs(tmp_path):
    """A real Prometheus scrapes the real exporter code; the page counts from there."""
    from tests.unit.test_health_page import progress

    now = datetime.now(UTC).timestamp()

    def batch(number: int):
        return progress(
            f"{APP}.tumbling", batch=number, watermark=now - 200, partitions={0: now}, topic="sensors"
        )

    with scraped_recorder(tmp_path) as (config, recorder, base):
        recorder.query_progress(batch(1))  # 3 late drops, 2 quarantined rows per batch

        def scraped_once() -> bool:
            counts = health.prometheus_counts(base)
            return APP in counts

        wait_for(scraped_once, 60, "Prometheus to scrape the exporter", poll_s=0.5)
        recorder.query_progress(batch(2))
        recorder.query_progress(batch(3))

        def counted() -> dict[str, float] | None:
            found = health.prometheus_counts(base).get(APP, {})
            return found if found.get("late_drops", 0) > 0 else None

        wait_for(lambda: counted() is not None, 60, "the increase to reach Prometheus", poll_s=0.5)
        page = health.collect(config)
        row = next(r for r in page.rows if r.app == APP)
        assert row.counts_source == "last 1h (Prometheus)"
        assert page.prometheus_source == f"Prometheus {base}"
        # increase() extrapolates (each query a moment apart), but both counters grew in the same
        # scrapes: 3 drops per 2 quarantined rows.
        assert row.late_drops and row.quarantined
        assert row.late_drops / row.quarantined == pytest.approx(1.5, rel=0.01)
        # The endpoint's totals are what Prometheus counted from: 9 drops and 6 rows so far.
        totals = exported(health.metrics_url(config, declared_app(APP)))
        assert value_of(totals, "pipeline_late_rows_dropped_total", query=f"{APP}.tumbling") == 9


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_page_draws_a_lag_incident_from_prometheus_crossing_twice_the_delay(tmp_path):
    """The sensor app's watermark stops while the wall clock goes on: its lag, scraped by a real
    Prometheus, crosses twice the delay (the WatermarkLagHigh threshold), and the page draws it, from
    Prometheus' range API, next to the threshold. The page (as the plugin renders it) is opened in
    Chromium and photographed."""
    from playwright.sync_api import sync_playwright

    from stream_pipelines.airflow.plugin import render_page
    from stream_pipelines.observability import graphs
    from tests.unit.test_health_page import progress

    delay_s, window_hours = 10.0, 1 / 60  # threshold 20 s; a minute, a point a second
    with scraped_recorder(tmp_path, f"sensors.watermark={delay_s:g} seconds") as (config, recorder, base):
        stopped_at = datetime.now(UTC).timestamp() - 12  # a lag of 12 s, growing a second a second
        recorder.query_progress(
            progress(
                f"{APP}.tumbling", batch=1, watermark=stopped_at, partitions={0: stopped_at}, topic="sensors"
            )
        )

        def crossed() -> graphs.AppGraphs | None:
            drawn = graphs.app_graphs(base, APP, hours=window_hours)
            lag = {s.name: s for s in drawn.graphs[0].series} if drawn.graphs else {}
            line, threshold = (
                lag.get(f"watermark lag {APP}.tumbling"),
                lag.get(f"alert threshold {APP}.tumbling"),
            )
            if not line or not threshold:
                return None
            values = [v for _, v in line.points]
            return drawn if min(values) < 2 * delay_s < max(values) - 3 else None

        wait_for(
            lambda: crossed() is not None, 90, "the lag to cross twice the delay in Prometheus", poll_s=1
        )
        drawn = crossed()
        assert {v for _, v in drawn.graphs[0].series[1].points} == {2 * delay_s}
        page = health.collect(config, graph_hours=window_hours)
        assert APP in [drawn.app for drawn in page.graphs]
        html = render_page(page, focus=APP)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
            try:
                shown = browser.new_page(viewport={"width": 1500, "height": 1100})
                shown.set_content(html)
                section = shown.locator(f"#graphs-{APP}")
                assert section.locator("svg").count() == len(graphs.PAGE_PANELS)
                assert section.locator(f'[id="alert threshold {APP}.tumbling"]').count() == 1
                section.scroll_into_view_if_needed()
                screenshot = tmp_path / "lag-incident.png"
                section.screenshot(path=str(screenshot))
                print(f"screenshot of the lag incident: {screenshot}")
            finally:
                browser.close()
