"""The Grafana dashboard and the alert rules read only metrics the exporter really exports."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from stream_pipelines.airflow.plugin import KAFKA_UP_METRIC, STORE_UP_METRIC
from stream_pipelines.observability.metrics import EXPORTED_METRIC_NAMES
from stream_pipelines.reconciliation import days

MONITORING = Path(__file__).resolve().parents[2] / "monitoring"
DASHBOARD = MONITORING / "grafana" / "streaming_pipelines.json"
# Series Prometheus makes itself for every target; the rules may use them, the dashboard does not.
PROMETHEUS_SERIES = frozenset({"up"})
# Exported by the "Streaming pipeline" plugin in Airflow's api-server, not by the apps.
PLUGIN_METRICS = frozenset({days.OVERDUE_METRIC, KAFKA_UP_METRIC, STORE_UP_METRIC})

_PROMQL_KEYWORDS = frozenset(
    {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool"}
)
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENTIFIER = re.compile(r"(?<![\w$.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?")


def promql_metric_names(expr: str) -> set[str]:
    """Metric names an expression reads: identifiers that are not functions, keywords or labels."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # label values
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges and subqueries
    text = _GROUPING.sub(" ", text)
    text = re.sub(r"\$\w+", "", text)  # Grafana variables such as $__rate_interval
    text = re.sub(r"\b\d+(\.\d+)?([eE][+-]?\d+)?[smhdwy]?\b", " ", text)  # numbers and durations
    return {
        match.group(1)
        for match in _IDENTIFIER.finditer(text)
        if not match.group(2) and match.group(1) not in _PROMQL_KEYWORDS
    }


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def all_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from all_panels(panel.get("panels", []))


def data_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [panel for panel in all_panels(dashboard["panels"]) if panel["type"] != "row"]


def test_the_metric_name_extractor_reads_promql() -> None:
    expr = (
        'max by (query, topic) (pipeline_partition_max_event_time_seconds{app="$app", topic=~"a|b"})'
        ' - on (query, topic) group_right pipeline_partition_max_event_time_seconds{app="$app"}'
        " > 2 * rate(pipeline_input_rows_total[$__rate_interval]) and time() - up offset 5m > 1e3"
    )
    assert promql_metric_names(expr) == {
        "pipeline_partition_max_event_time_seconds",
        "pipeline_input_rows_total",
        "up",
    }


def test_dashboard_structure(dashboard: dict[str, Any]) -> None:
    assert dashboard["uid"] and dashboard["title"]
    assert 36 <= dashboard["schemaVersion"] <= 41
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["app"]["type"] == "query"
    assert "label_values(pipeline_query_up, app)" in json.dumps(variables["app"]["query"])

    ids = [panel["id"] for panel in all_panels(dashboard["panels"])]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in all_panels(dashboard["panels"]):
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["w"] > 0 and grid["x"] + grid["w"] <= 24, panel["title"]
    for panel in data_panels(dashboard):
        assert panel["title"] and panel.get("description"), (
            f"panel {panel['id']} needs a title and a description"
        )
        assert panel["datasource"]["uid"] == "${datasource}"
        refs = [target["refId"] for target in panel["targets"]]
        assert refs and len(refs) == len(set(refs)), panel["title"]
        assert all(target["expr"].strip() for target in panel["targets"]), panel["title"]


def test_rows_repeat_per_app_and_filter_on_it(dashboard: dict[str, Any]) -> None:
    panels = dashboard["panels"]
    repeated = [index for index, panel in enumerate(panels) if panel.get("repeat") == "app"]
    assert len(repeated) == 1 and panels[repeated[0]]["type"] == "row"
    in_app_row = [panel for panel in panels[repeated[0] + 1 :] if panel["type"] != "row"]
    assert len(in_app_row) >= 8
    for panel in in_app_row:
        for target in panel["targets"]:
            assert 'app="$app"' in target["expr"], f"{panel['title']}: {target['expr']}"


def test_dashboard_reads_only_exported_metrics(dashboard: dict[str, Any]) -> None:
    used: set[str] = set()
    for panel in data_panels(dashboard):
        for target in panel["targets"]:
            names = promql_metric_names(target["expr"])
            assert names, f"{panel['title']}: no metric in {target['expr']!r}"
            unknown = names - EXPORTED_METRIC_NAMES
            assert not unknown, (
                f"{panel['title']}: {sorted(unknown)} are not exported by "
                "stream_pipelines.observability.metrics"
            )
            used |= names
    # Watermark & lag, throughput, state, drops, restarts and source lag all have a panel.
    for needed in (
        "pipeline_watermark_lag_seconds",
        "pipeline_stream_watermark_seconds",
        "pipeline_partition_max_event_time_seconds",
        "pipeline_input_rows_total",
        "pipeline_state_rows",
        "pipeline_late_rows_dropped_total",
        "pipeline_quarantined_rows_total",
        "pipeline_restarts_total",
        "pipeline_source_lag_seconds",
        "pipeline_source_lag_offsets",
    ):
        assert needed in used, f"no panel shows {needed}"


def test_alert_rules_read_only_exported_metrics() -> None:
    for rules_file in sorted((MONITORING / "rules").glob("*.yml")):
        for group in yaml.safe_load(rules_file.read_text())["groups"]:
            for rule in group["rules"]:
                names = promql_metric_names(rule["expr"])
                assert names, f"{rule.get('alert')}: no metric found"
                unknown = names - EXPORTED_METRIC_NAMES - PROMETHEUS_SERIES - PLUGIN_METRICS
                assert not unknown, (
                    f"{rules_file.name} {rule.get('alert')}: {sorted(unknown)} are not exported"
                )
