"""Alert rules, their promtool unit tests, the Prometheus/Alertmanager configs and the example receiver.

Needs promtool (infra/scripts/install_test_servers.sh installs it); a missing promtool fails, it does
not skip, so CI cannot pass without having checked the rules.
"""

from __future__ import annotations

import importlib.util
import io
import json
import shutil
import subprocess
import threading
import urllib.request
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from stream_pipelines.core.config import load_config
from stream_pipelines.devtools import stack
from stream_pipelines.observability import runbooks
from stream_pipelines.observability.monitoring_rules import APPS_JOB

ROOT = Path(__file__).resolve().parents[1]
MONITORING = ROOT / "monitoring"
RULE_FILES = sorted((MONITORING / "rules").glob("*.yml"))
RULE_TEST_FILES = sorted((MONITORING / "tests").glob("*.yml"))

# An alert with cases (a `case` label, one rule each) is named "<alert>/<case>" here.
WATERMARK_LAG_CASES = ("stalled_input", "slow_processing", "silent_producers", "old_events")
PAGING_ALERTS = {
    "KafkaUnreachable",
    "StoreUnreachable",
    "WatermarkLagHigh/stalled_input",
    "WatermarkLagHigh/slow_processing",
    "QueryDown",
    "NoProgress",
    "ReconciliationOverdue",
}
ALERTS = PAGING_ALERTS | {
    "WatermarkLagHigh/silent_producers",
    "WatermarkLagHigh/old_events",
    "WatermarkStalled",
    "PartitionStalled",
    "StateGrowing",
    "LateDropsHigh",
    "RestartStorm",
    "AppStuckRestarted",
    "SourceLagHigh",
}


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is not on PATH: run infra/scripts/install_test_servers.sh (make test does)")
    return path


def run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT, check=False)


def alert_name(alert: str, labels: dict[str, str]) -> str:
    """An alert's name here: "<alert>/<case>" for an alert with cases, the bare alert otherwise."""
    case = labels.get("case")
    return f"{alert}/{case}" if case else alert


def alerting_rules() -> dict[str, dict[str, Any]]:
    rules: dict[str, dict[str, Any]] = {}
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                if "alert" in rule:
                    name = alert_name(rule["alert"], rule.get("labels", {}))
                    assert name not in rules, f"alert {name} is defined twice"
                    rules[name] = rule
    return rules


# --------------------------------------------------------------------------- promtool


def test_rule_files_are_valid() -> None:
    assert RULE_FILES, "no rule files in monitoring/rules"
    result = run(promtool(), "check", "rules", *map(str, RULE_FILES))
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_rule_unit_tests_pass() -> None:
    assert RULE_TEST_FILES, "no promtool tests in monitoring/tests"
    result = run(promtool(), "test", "rules", *map(str, RULE_TEST_FILES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


def test_prometheus_config_is_valid_and_matches_the_pipeline_config() -> None:
    result = run(promtool(), "check", "config", str(MONITORING / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(RULE_FILES)} rule files found" in result.stdout + result.stderr

    prometheus = yaml.safe_load((MONITORING / "prometheus.yml").read_text())
    assert prometheus["global"]["scrape_interval"] == "15s"
    assert prometheus["rule_files"] == ["rules/*.yml"]
    alertmanagers = [
        target
        for manager in prometheus["alerting"]["alertmanagers"]
        for static in manager["static_configs"]
        for target in static["targets"]
    ]
    config = load_config("local")
    assert alertmanagers == ["127.0.0.1:9094"]
    assert config.broker.controller_port != 9094
    # The drivers are discovered wherever they run, from the file `pipelinectl metrics-targets` keeps
    # beside the config: no fixed address.
    [apps_job] = [job for job in prometheus["scrape_configs"] if job["job_name"] == APPS_JOB]
    assert "static_configs" not in apps_job
    assert apps_job["file_sd_configs"] == [
        {"files": ["targets/stream_pipelines.json"], "refresh_interval": "15s"}
    ]
    # The day records' deadlines and Kafka's answer come from the plugin in the stack's Airflow api-server.
    [plugin_job] = [job for job in prometheus["scrape_configs"] if job["job_name"] == "pipeline_plugin"]
    assert plugin_job["metrics_path"] == "/streaming-pipeline/metrics"
    assert plugin_job["static_configs"][0]["targets"] == [f"127.0.0.1:{stack.AIRFLOW_PORT}"]


# --------------------------------------------------------------------------- the rules themselves


def test_the_stacks_prometheus_config_is_valid_and_reads_the_file_its_writer_keeps(tmp_path: Path) -> None:
    config = load_config("local", [f"paths.data_root={tmp_path}"], environ={})
    written = stack.write_prometheus_config(config)
    result = run(promtool(), "check", "config", str(written))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(RULE_FILES)} rule files found" in result.stdout + result.stderr

    [apps_job] = [
        job for job in yaml.safe_load(written.read_text())["scrape_configs"] if job["job_name"] == APPS_JOB
    ]
    (discovery,) = apps_job["file_sd_configs"]
    [writer] = [
        component.command for component in stack.components(config) if component.name == "metrics-targets"
    ]
    assert (
        writer[writer.index("--out") + 1] == discovery["files"][0] == str(stack.metrics_targets_file(config))
    )
    [prometheus] = [
        component.command for component in stack.components(config) if component.name == "prometheus"
    ]
    assert f"--config.file={written}" in prometheus
    # The alerts link the runbooks and the page on the stack's Airflow UI.
    labels = yaml.safe_load(written.read_text())["global"]["external_labels"]
    assert labels[runbooks.UI_LABEL] == f"http://127.0.0.1:{stack.AIRFLOW_PORT}"


# The alerts without an app label, and the page's section each links (None: the page's top, the apps).
WITHOUT_APP = {"ReconciliationOverdue": "days", "KafkaUnreachable": None, "StoreUnreachable": None}


def test_every_alert_exists_with_severity_and_links_its_runbook_and_the_page() -> None:
    """Each rule links its own section of docs/runbooks.md (which tests/unit/test_runbooks.py checks) and
    the pipeline page at the app's row; the event days' alert at the days, Kafka's and the store's at the
    apps."""
    rules = alerting_rules()
    assert set(rules) == ALERTS
    sections = runbooks.read().anchors
    for name, rule in rules.items():
        severity = rule["labels"]["severity"]
        assert severity == ("page" if name in PAGING_ALERTS else "ticket"), name
        annotations = rule["annotations"]
        assert set(annotations) == {"summary", "description", "runbook_url", "pipeline_page"}, name
        alert, _, case = name.partition("/")
        assert annotations["runbook_url"] == runbooks.runbook_url(alert, case or None), name
        assert runbooks.anchor(alert, case or None) in sections, f"{name}: no section in docs/runbooks.md"
        has_app = name not in WITHOUT_APP
        assert annotations["pipeline_page"] == runbooks.pipeline_page(has_app, WITHOUT_APP.get(name)), name


def test_thresholds_come_from_the_exported_configuration() -> None:
    rules = alerting_rules()
    for case in WATERMARK_LAG_CASES:
        assert "pipeline_watermark_delay_seconds" in rules[f"WatermarkLagHigh/{case}"]["expr"]
    assert "pipeline_watermark_delay_seconds" in rules["PartitionStalled"]["expr"]
    assert "pipeline_trigger_interval_seconds" in rules["NoProgress"]["expr"]


def test_every_alert_has_a_firing_and_a_quiet_promtool_case() -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for path in RULE_TEST_FILES:
        for case in yaml.safe_load(path.read_text())["tests"]:
            for check in case.get("alert_rule_test", []):
                name = check["alertname"]
                if not check.get("exp_alerts"):  # no case of the alert fires
                    quiet.update(alert for alert in ALERTS if alert.split("/")[0] == name)
                for alert in check.get("exp_alerts", []):
                    case_label = alert.get("exp_labels", {}).get("case")
                    firing.add(f"{name}/{case_label}" if case_label else name)
    assert firing >= ALERTS, f"no firing case for {sorted(ALERTS - firing)}"
    assert quiet >= ALERTS, f"no quiet case for {sorted(ALERTS - quiet)}"


# --------------------------------------------------------------------------- Alertmanager


def test_alertmanager_routes_pages_to_on_call_and_the_rest_to_tickets() -> None:
    path = MONITORING / "alertmanager.yml"
    manager = yaml.safe_load(path.read_text())
    route = manager["route"]
    assert route["receiver"] == "ticket"
    assert [(sub["receiver"], sub["matchers"]) for sub in route["routes"]] == [
        ("on-call", ['severity="page"'])
    ]
    receivers = {receiver["name"]: receiver for receiver in manager["receivers"]}
    assert set(receivers) == {"on-call", "ticket"}
    for name, receiver in receivers.items():
        assert [hook["url"] for hook in receiver["webhook_configs"]] == [f"http://127.0.0.1:9095/{name}"]
    if amtool := shutil.which("amtool"):  # from prometheus-alertmanager, not required
        result = run(amtool, "check-config", str(path))
        assert result.returncode == 0, result.stdout + result.stderr


def load_webhook_receiver() -> ModuleType:
    spec = importlib.util.spec_from_file_location("webhook_receiver", MONITORING / "webhook_receiver.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_webhook_receiver_logs_each_alert_as_a_json_line() -> None:
    from http.server import ThreadingHTTPServer

    receiver = load_webhook_receiver()
    output = io.StringIO()
    server = ThreadingHTTPServer(("127.0.0.1", 0), receiver.make_handler(output))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    notification = {
        "version": "4",
        "status": "firing",
        "receiver": "on-call",
        "alerts": [
            {
                "status": "firing",
                "labels": {"alertname": "QueryDown", "severity": "page", "app": "ad_matching"},
                "annotations": {
                    "summary": "ad_matching is down",
                    "description": "d",
                    "runbook_url": "http://ui/streaming-pipeline/runbooks#querydown",
                    "pipeline_page": "http://ui/streaming-pipeline/?dag_id=supervise_ad_matching#app-ad_matching",
                },
                "startsAt": "2026-01-01T00:00:00Z",
                "endsAt": "0001-01-01T00:00:00Z",
                "fingerprint": "abc",
            },
            {
                "status": "resolved",
                "labels": {"alertname": "NoProgress", "severity": "page"},
                "annotations": {},
            },
        ],
    }
    try:
        request = urllib.request.Request(
            f"http://127.0.0.1:{server.server_port}/on-call",
            data=json.dumps(notification).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200
    finally:
        server.shutdown()
        server.server_close()
    records = [json.loads(line) for line in output.getvalue().splitlines()]
    assert [(r["receiver"], r["alertname"], r["status"]) for r in records] == [
        ("on-call", "QueryDown", "firing"),
        ("on-call", "NoProgress", "resolved"),
    ]
    assert records[0]["summary"] == "ad_matching is down"
    assert records[0]["runbook_url"] == "http://ui/streaming-pipeline/runbooks#querydown"
    assert records[0]["pipeline_page"].endswith("#app-ad_matching")
    assert records[0]["labels"]["app"] == "ad_matching"
