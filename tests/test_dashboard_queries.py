"""Every query of the Grafana dashboard, run through a real Prometheus that scrapes a running app.

The app is the real sensor_aggregation (spark-submit, Kafka, its exporter) after reading a generated
scenario with one stalled partition, so the per-partition panels have something to show. Each target
expression gets the dashboard's template variables substituted the way Grafana does, then goes to
/api/v1/query. A query fails the test, naming its panel, when Prometheus rejects it, or when it
returns nothing although the app exports every metric it reads. A metric the app does not export
must be named, with the reason, in NOT_EXPORTED_BY_THE_APP; nothing is skipped silently.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from stream_pipelines.observability.metrics_targets import target_groups
from stream_pipelines.observability.monitoring_rules import (
    render_prometheus_config,
    rule_files,
    target_group,
    write_target_groups,
)
from tests.monitoring_stack import (
    SENSOR_APP,
    PrometheusQueryError,
    RunningApp,
    api,
    prometheus_server,
    stalled_sensor_app_fixture,  # noqa: F401 (registers the module-scoped fixture stalled_sensor_app here)
    wait_until,
)
from tests.unit.test_dashboard import DASHBOARD, promql_metric_names

pytestmark = [pytest.mark.broker, pytest.mark.slow]

SCRAPE_INTERVAL_S = 1
# Grafana asks for about one point per pixel: maxDataPoints defaults to the panel's width.
GRAFANA_MAX_DATA_POINTS = 1000
# Metric -> why the running app cannot export it. The sensor app exports every metric the dashboard
# reads today; a panel for, say, an ad_matching-only metric would need its reason here.
NOT_EXPORTED_BY_THE_APP: dict[str, str] = {}

_VARIABLE = re.compile(r"\$\{(\w+)(?::[^}]*)?\}|\$(\w+)|\[\[(\w+)\]\]")
_RELATIVE_TIME = re.compile(r"now-(\d+)([smhdw])")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


@dataclass(frozen=True)
class Target:
    panel: str
    row: str | None
    ref_id: str
    expr: str

    def __str__(self) -> str:
        where = f"row {self.row!r}, " if self.row else ""
        return f"panel {self.panel!r} ({where}target {self.ref_id})"


def dashboard_targets(dashboard: dict[str, Any]) -> Iterator[Target]:
    """Every query target with the title of its panel and of the row it sits in (collapsed or not)."""
    row: str | None = None
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            row = panel["title"]
            nested = panel.get("panels", [])
        else:
            nested = [panel]
        for inner in nested:
            for target in inner.get("targets", []):
                yield Target(inner["title"], row, target["refId"], target["expr"])


def interval_variables(dashboard: dict[str, Any], scrape_interval_s: int) -> dict[str, str]:
    """$__interval and $__rate_interval as Grafana computes them for the dashboard's default range, with
    the data source's scrape interval set to what this Prometheus scrapes at (whole seconds, rounded up)."""
    match = _RELATIVE_TIME.fullmatch(dashboard["time"]["from"])
    assert match and dashboard["time"]["to"] == "now", f"unexpected dashboard time range {dashboard['time']}"
    range_s = int(match.group(1)) * _SECONDS[match.group(2)]
    interval_s = max(scrape_interval_s, math.ceil(range_s / GRAFANA_MAX_DATA_POINTS))
    rate_interval_s = max(interval_s + scrape_interval_s, 4 * scrape_interval_s)
    return {
        "__interval": f"{interval_s}s",
        "__interval_ms": str(interval_s * 1000),
        "__rate_interval": f"{rate_interval_s}s",
        "__range": f"{range_s}s",
        "__range_s": str(range_s),
    }


def substitute(expr: str, values: dict[str, str], target: Target) -> str:
    def value(match: re.Match[str]) -> str:
        name = next(group for group in match.groups() if group)
        if name not in values:
            raise AssertionError(f"{target}: no value for the variable ${name} in {expr!r}")
        return values[name]

    return _VARIABLE.sub(value, expr)


@pytest.fixture(scope="module")
def prometheus(stalled_sensor_app: RunningApp, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Prometheus finding the app as in production: the file of targets made from the running records,
    in which the driver registered its exporter."""
    folder = tmp_path_factory.mktemp("prometheus")
    targets_file = folder / "stream_pipelines.json"
    write_target_groups(targets_file, target_groups(stalled_sensor_app.config))
    assert json.loads(targets_file.read_text()) == [
        target_group(SENSOR_APP, stalled_sensor_app.metrics_address)
    ]
    config = render_prometheus_config(
        app_targets_file=targets_file, rule_paths=rule_files(), interval=f"{SCRAPE_INTERVAL_S}s"
    )
    with prometheus_server(config, folder) as url:
        yield url


def test_every_dashboard_query_returns_data_from_the_running_app(
    prometheus: str, stalled_sensor_app: RunningApp
) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    intervals = interval_variables(dashboard, SCRAPE_INTERVAL_S)
    rate_window = intervals["__rate_interval"]

    # The $app variable's own query (label_values(pipeline_query_up, app)) offers the running app.
    apps = wait_until(
        lambda: api(prometheus, "/api/v1/label/app/values", **{"match[]": "pipeline_query_up"}),
        "Prometheus to scrape the app's pipeline_query_up",
        timeout_s=30,
    )
    assert SENSOR_APP in apps, f"the $app variable would offer {apps}, not {SENSOR_APP}"
    # Enough scrapes that a rate over $__rate_interval has samples all through its window.
    window_s = int(rate_window.removesuffix("s"))

    def scrapes_in_window() -> bool:
        query = f'count_over_time(up{{app="{SENSOR_APP}"}}[{rate_window}])'
        result = api(prometheus, "/api/v1/query", query=query)["result"]
        return bool(result) and float(result[0]["value"][1]) >= window_s // SCRAPE_INTERVAL_S - 1

    wait_until(scrapes_in_window, f"{rate_window} of scrapes", timeout_s=60)

    exported = {name for name, samples in stalled_sensor_app.metrics().items() if samples}
    stale = set(NOT_EXPORTED_BY_THE_APP) & exported
    assert not stale, f"NOT_EXPORTED_BY_THE_APP names {sorted(stale)}, which the app does export now"

    values = {**intervals, "app": SENSOR_APP}
    targets = list(dashboard_targets(dashboard))
    assert len(targets) >= 20, f"only {len(targets)} targets found in {DASHBOARD}"
    failures = []
    for target in targets:
        query = substitute(target.expr, values, target)
        try:
            result = api(prometheus, "/api/v1/query", query=query)["result"]
        except PrometheusQueryError as error:
            failures.append(f"{target}: Prometheus rejects {query!r}: {error}")
            continue
        if result:
            continue
        missing = promql_metric_names(target.expr) - exported
        unexplained = missing - set(NOT_EXPORTED_BY_THE_APP)
        if not missing:
            failures.append(
                f"{target}: {query!r} returns nothing although {SENSOR_APP} exports what it reads"
            )
        elif unexplained:
            failures.append(
                f"{target}: reads {sorted(unexplained)}, which {SENSOR_APP} does not export; "
                "fix the panel or say why in NOT_EXPORTED_BY_THE_APP"
            )
    assert not failures, "dashboard queries that fail against the running app:\n" + "\n".join(failures)


def test_variables_are_substituted_as_grafana_writes_them() -> None:
    target = Target("a panel", None, "A", "")
    values = {"app": "sensor_aggregation", "__rate_interval": "12s"}
    assert (
        substitute(
            'rate(x{app="$app"}[$__rate_interval]) + y{app="${app}"} + z{app="[[app]]"}', values, target
        )
        == 'rate(x{app="sensor_aggregation"}[12s])'
        ' + y{app="sensor_aggregation"} + z{app="sensor_aggregation"}'
    )
    with pytest.raises(
        AssertionError, match=r"panel 'a panel' \(target A\): no value for the variable \$query"
    ):
        substitute('x{query="$query"}', values, target)
    # 3 hours over 1000 points is 10.8 s, so 11 s; the rate window adds one scrape to it.
    intervals = interval_variables({"time": {"from": "now-3h", "to": "now"}}, scrape_interval_s=1)
    assert (intervals["__interval"], intervals["__rate_interval"]) == ("11s", "12s")
    assert (
        interval_variables({"time": {"from": "now-5m", "to": "now"}}, scrape_interval_s=15)["__rate_interval"]
        == "60s"
    )
