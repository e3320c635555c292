"""An alert reaches the on-call, end to end: a running app, Prometheus, Alertmanager, the webhook receiver.

The real sensor_aggregation app reads a generated scenario whose sensors partition STALLED_PARTITION
stopped receiving (`pipelinectl produce --stall-partition`), then is stopped. A real Prometheus scrapes
its exporter and evaluates monitoring/rules, a real Alertmanager routes by monitoring/alertmanager.yml,
and monitoring/webhook_receiver.py runs as a process. Both come from monitoring/ through
stream_pipelines.observability.monitoring_rules: the rules with a shorter `for:` and evaluation interval, the
Alertmanager config with the receiver's URL; nothing else differs from what production runs.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from stream_pipelines.observability import runbooks
from stream_pipelines.observability.monitoring_rules import (
    render_alertmanager_config,
    render_prometheus_config,
    write_rules,
)
from tests.monitoring_stack import (
    EVENT_TIME_QUERIES,
    SENSOR_APP,
    STALLED_PARTITION,
    RunningApp,
    alertmanager_server,
    api,
    notifications,
    prometheus_server,
    stalled_sensor_app_fixture,  # noqa: F401 (registers the module-scoped fixture stalled_sensor_app here)
    wait_until,
    webhook_receiver,
)

pytestmark = [pytest.mark.broker, pytest.mark.slow]

INTERVAL = "1s"  # scrape and rule evaluation
FOR_DURATION = "5s"  # every rule's `for:` (2 to 30 minutes in production)
# Prometheus: one evaluation after `for:`; Alertmanager: the route's group_wait (30 s for tickets,
# 10 s for pages, as monitoring/alertmanager.yml has them); and slack for a loaded 2-core machine.
NOTIFICATION_TIMEOUT_S = 120


def alerting_rules(rule_paths: list[Path]) -> dict[str, dict[str, Any]]:
    """Alert name -> rule, as the test's Prometheus loads them."""
    return {
        rule["alert"]: rule
        for path in rule_paths
        for group in yaml.safe_load(path.read_text())["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }


def routed_receiver(labels: dict[str, str], route: dict[str, Any]) -> str:
    """The receiver Alertmanager's routing tree picks for ``labels``: the first child route whose
    matchers all hold, recursively, else the route's own. Only `name="value"` matchers are understood."""
    for child in route.get("routes", []):
        matches = []
        for matcher in child.get("matchers", []):
            name, operator, value = matcher.partition("=")
            assert operator and not name.endswith(("!", "=~")) and value.startswith('"'), (
                f'routed_receiver understands only name="value" matchers, not {matcher!r}'
            )
            matches.append(labels.get(name.strip()) == json.loads(value))
        if all(matches):
            return routed_receiver(labels, {"receiver": route["receiver"], **child})
    return route["receiver"]


def wait_for_notification(received: Path, alertname: str, status: str = "firing") -> list[dict[str, Any]]:
    return wait_until(
        lambda: [
            record
            for record in notifications(received)
            if record["alertname"] == alertname and record["status"] == status
        ],
        f"the webhook receiver to get {alertname} ({status}); received so far: "
        f"{[(r['receiver'], r['alertname'], r['status']) for r in notifications(received)]}",
        timeout_s=NOTIFICATION_TIMEOUT_S,
        poll_s=1.0,
    )


def assert_delivered_as_configured(
    records: list[dict[str, Any]], rule: dict[str, Any], route: dict[str, Any], ui: str
) -> str:
    """Every record went to the receiver the config routes the rule's severity to, with the links to its
    runbook and the app's row of the pipeline page under ``ui``, the Airflow UI's address."""
    severity = rule["labels"]["severity"]
    for record in records:
        assert record["severity"] == severity, record
        expected = routed_receiver(record["labels"], route)
        assert record["receiver"] == expected, (
            f"{record['alertname']} (severity {severity}) reached {record['receiver']}, "
            f"but monitoring/alertmanager.yml routes it to {expected}"
        )
        section = runbooks.anchor(record["alertname"], record["labels"].get("case"))
        assert record["runbook_url"] == f"{ui}/streaming-pipeline/runbooks#{section}", record
        app = record["labels"]["app"]
        assert record["pipeline_page"] == f"{ui}/streaming-pipeline/?dag_id=supervise_{app}#app-{app}", record
        assert record["summary"] and record["description"], record
    return expected


def test_a_stalled_partition_files_a_ticket_and_a_stopped_app_pages_the_on_call(
    stalled_sensor_app: RunningApp, tmp_path: Path
) -> None:
    app = stalled_sensor_app
    sensors_topic = app.config.kafka.topics.sensors.name
    received = tmp_path / "alerts.jsonl"
    rule_paths = write_rules(tmp_path / "rules", for_duration=FOR_DURATION, interval=INTERVAL)
    rules = alerting_rules(rule_paths)

    with contextlib.ExitStack() as servers:
        receiver_url = servers.enter_context(webhook_receiver(received, tmp_path))
        manager = render_alertmanager_config(receiver_url)
        route = manager["route"]
        alertmanager = servers.enter_context(alertmanager_server(manager, tmp_path / "alertmanager"))
        prometheus_config = render_prometheus_config(
            targets={SENSOR_APP: app.metrics_address},
            app_targets_file=tmp_path / "prometheus" / "stream_pipelines.json",
            rule_paths=rule_paths,
            interval=INTERVAL,
            alertmanager=alertmanager,
        )
        ui = prometheus_config["global"]["external_labels"][runbooks.UI_LABEL]
        prometheus = servers.enter_context(prometheus_server(prometheus_config, tmp_path / "prometheus"))

        # The stalled partition, while the app runs: a ticket.
        stalled = wait_for_notification(received, "PartitionStalled")
        assert {(r["labels"]["topic"], r["labels"]["partition"]) for r in stalled} == {
            (sensors_topic, str(STALLED_PARTITION))
        }, "only the stalled partition is reported"
        assert {r["labels"]["query"] for r in stalled} <= set(EVENT_TIME_QUERIES)
        assert all(r["labels"]["app"] == SENSOR_APP for r in stalled)
        ticket = assert_delivered_as_configured(stalled, rules["PartitionStalled"], route, ui)
        assert not [r for r in notifications(received) if r["alertname"] == "QueryDown"], (
            "QueryDown fired while the app was running"
        )
        firing = api(prometheus, "/api/v1/alerts")["alerts"]
        assert any(a["labels"]["alertname"] == "PartitionStalled" and a["state"] == "firing" for a in firing)

        # The app stopped: its endpoint goes away (up == 0), and the on-call is paged.
        assert app.stop() == 0, f"{SENSOR_APP} did not stop cleanly:\n{app.log_tail()}"
        down = wait_for_notification(received, "QueryDown")
        assert {(r["labels"]["app"], r["labels"]["instance"]) for r in down} == {
            (SENSOR_APP, app.metrics_address)
        }
        page = assert_delivered_as_configured(down, rules["QueryDown"], route, ui)
        assert "does not answer" in down[0]["summary"], down[0]["summary"]

    assert page != ticket, f"pages and tickets both went to {page}: the routing was not exercised"
