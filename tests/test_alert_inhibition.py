"""One fault, one page, on a real Alertmanager with monitoring/alertmanager.yml as it ships (only the
receivers' host and port changed).

A Kafka outage stops every app at once, and so does a storage outage, which also hides the event days'
records. Prometheus then fires KafkaUnreachable or StoreUnreachable first (from the api-server plugin's
probes, `for: 30s`), and each app's own alerts later (NoProgress after at least 1.5 minutes,
QueryDown after 2, the rest after 5 or more): the promtool cases in monitoring/tests/ fire each rule from
its series. Here the alerts reach Alertmanager in that order, posted as Prometheus posts them, and the
webhook receiver counts what on-call and the ticket queue get. Beside it, the same app alerts without
the outage reach their receivers, so what the outage holds back is the inhibition, not the routing.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from stream_pipelines.core.registry import APP_NAMES
from stream_pipelines.devtools.game_day import longest_group_wait_s
from stream_pipelines.observability.monitoring_rules import render_alertmanager_config
from tests.monitoring_stack import alertmanager_server, notifications, wait_until, webhook_receiver

# What a Kafka outage raises, by the rules' severities: an app whose query failed on it is down (and its
# other alerts are QueryDown's to hold back, as before); an app that waits on it makes no progress, falls
# behind and leaves its partitions standing.
CRASHED_APP, *WAITING_APPS = APP_NAMES
DOWN = ("QueryDown", "page", {})
WAITING = (
    ("NoProgress", "page", {"query": "q"}),
    ("WatermarkLagHigh", "page", {"query": "q", "case": "slow_processing"}),
    ("SourceLagHigh", "ticket", {"topic": "t", "partition": "0"}),
    ("PartitionStalled", "ticket", {"query": "q", "topic": "t", "partition": "0"}),
    ("WatermarkStalled", "ticket", {"query": "q"}),
)
# A storage outage stops the same apps in the same ways, and hides the event days' records.
DAYS_UNREAD = ("ReconciliationOverdue", "page", {"job": "pipeline_plugin"})
OUTAGES = {
    "kafka_outage": ("KafkaUnreachable", "page", {"bootstrap_servers": "kafka-1:9092", "cause": "no_answer"}),
    "store_outage": ("StoreUnreachable", "page", {"location": "hdfs://nn/p/control", "cause": "no_answer"}),
}


def alert(name: str, severity: str, labels: dict[str, str]) -> dict[str, Any]:
    now = datetime.now(UTC)
    return {
        "labels": {"alertname": name, "severity": severity, **labels},
        "annotations": {"summary": f"{name} {labels}"},
        "startsAt": now.isoformat(),
        "endsAt": (now + timedelta(minutes=15)).isoformat(),
    }


def post(alertmanager: str, alerts: list[dict[str, Any]]) -> None:
    request = urllib.request.Request(
        f"http://{alertmanager}/api/v2/alerts",
        data=json.dumps(alerts).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


def test_a_kafka_or_store_outage_pages_once_and_holds_back_every_apps_alerts(tmp_path: Path) -> None:
    raised = [(CRASHED_APP, symptom) for symptom in (DOWN, *WAITING)]
    raised += [(app, symptom) for app in WAITING_APPS for symptom in WAITING]
    symptoms = [alert(name, severity, {"app": app, **labels}) for app, (name, severity, labels) in raised]
    # Without the outage: the crashed app's QueryDown (which holds back that app's other alerts), and
    # each waiting app's every alert.
    alone = {(DOWN[0], CRASHED_APP)} | {(name, app) for app in WAITING_APPS for name, _, _ in WAITING}
    held_s = longest_group_wait_s()
    with contextlib.ExitStack() as servers:
        # Alertmanagers side by side: one per outage gets the outage and then its symptoms, the other
        # the symptoms alone.
        received: dict[str, Path] = {}
        managers: dict[str, str] = {}
        for scenario in (*OUTAGES, "symptoms_alone"):
            folder = tmp_path / scenario
            folder.mkdir()
            received[scenario] = folder / "alerts.jsonl"
            receiver = servers.enter_context(webhook_receiver(received[scenario], folder))
            managers[scenario] = servers.enter_context(
                alertmanager_server(render_alertmanager_config(receiver), folder / "alertmanager")
            )
        post(managers["kafka_outage"], [alert(*OUTAGES["kafka_outage"])])
        post(managers["kafka_outage"], symptoms)
        post(managers["store_outage"], [alert(*OUTAGES["store_outage"])])
        post(managers["store_outage"], [*symptoms, alert(*DAYS_UNREAD)])
        post(managers["symptoms_alone"], symptoms)
        posted = time.monotonic()

        wait_until(
            lambda: {(r["alertname"], r["labels"]["app"]) for r in notifications(received["symptoms_alone"])}
            == alone,
            "the app alerts to reach their receivers when Kafka answers",
            timeout_s=held_s + 60,
            poll_s=1.0,
        )
        # Every group of the outage's Alertmanager has been flushed once by now (the longest group_wait
        # has passed since the posts): what it sent is all it would send before group_interval.
        time.sleep(max(0.0, held_s + 5 - (time.monotonic() - posted)))

    for scenario, (cause, _, _) in OUTAGES.items():
        outage = notifications(received[scenario])
        sent = [(r["receiver"], r["alertname"], r["status"]) for r in outage]
        assert sent == [("on-call", cause, "firing")], (scenario, outage)
    pages = [
        (r["alertname"], r["labels"]["app"])
        for r in notifications(received["symptoms_alone"])
        if r["receiver"] == "on-call"
    ]
    waiting_pages = [
        (name, app) for app in WAITING_APPS for name, severity, _ in WAITING if severity == "page"
    ]
    assert sorted(pages) == sorted([(DOWN[0], CRASHED_APP), *waiting_pages]), pages
