"""The page's graphs: the dashboard's queries, asked of Prometheus' range API, drawn as inline SVG; a
Prometheus that does not answer is said, once."""

from __future__ import annotations

import http.server
import json
import threading
import urllib.parse
from collections.abc import Iterator

import pytest

from stream_pipelines.airflow import health
from stream_pipelines.airflow.plugin import render_page
from stream_pipelines.core.config import load_config
from stream_pipelines.core.registry import APP_NAMES
from stream_pipelines.devtools.processes import free_port
from stream_pipelines.observability import graphs

APP = "sensor_aggregation"
NOW = 1_800_000_000.0


class FakePrometheus(http.server.BaseHTTPRequestHandler):
    """Answers every range query with one series per query of the app, its value rising 1 a step."""

    asked: list[dict[str, str]] = []

    def do_GET(self) -> None:
        url = urllib.parse.urlparse(self.path)
        asked = dict(urllib.parse.parse_qsl(url.query))
        FakePrometheus.asked.append(asked)
        if url.path != "/api/v1/query_range":
            self.send_response(404)
            self.end_headers()
            return
        start, end, step = float(asked["start"]), float(asked["end"]), float(asked["step"])
        values = [[start + i * step, str(i)] for i in range(int((end - start) / step) + 1)]
        result = [{"metric": {"app": APP, "query": f"{APP}.tumbling"}, "values": values}]
        body = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def prometheus() -> Iterator[str]:
    FakePrometheus.asked = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakePrometheus)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_the_page_draws_the_dashboards_own_queries_for_the_app(prometheus):
    drawn = graphs.app_graphs(prometheus, APP, now=NOW)
    assert drawn.error is None and (drawn.start, drawn.end) == (NOW - 3 * 3600, NOW)
    assert [graph.title for graph in drawn.graphs] == [title for title, _ in graphs.PAGE_PANELS]
    dashboard = json.loads(graphs.DASHBOARD.read_text())
    wanted = [
        target["expr"].replace("$app", APP)
        for title, refs in graphs.PAGE_PANELS
        for panel in dashboard["panels"]
        if panel.get("title") == title
        for target in panel["targets"]
        if target["refId"] in refs
    ]
    assert [asked["query"] for asked in FakePrometheus.asked] == wanted
    assert all(float(asked["step"]) == 60 for asked in FakePrometheus.asked), "a point a minute"
    lag = drawn.graphs[0]
    assert [(s.name, s.threshold) for s in lag.series] == [
        (f"watermark lag {APP}.tumbling", False),
        (f"alert threshold {APP}.tumbling", True),
    ]
    assert len(lag.series[0].points) == 181 and lag.series[0].points[1] == (NOW - 3 * 3600 + 60, 1.0)


def test_each_graph_is_an_inline_svg_with_its_lines_and_the_threshold_dashed(prometheus):
    drawn = graphs.app_graphs(prometheus, APP, now=NOW)
    [lag_svg, *_others] = drawn.svgs()
    assert lag_svg.startswith("<svg") and lag_svg.rstrip().endswith("</svg>")
    assert f'id="watermark lag {APP}.tumbling"' in lag_svg
    threshold = lag_svg.split(f'id="alert threshold {APP}.tumbling"', 1)[1].split("</g>", 1)[0]
    assert "stroke-dasharray" in threshold and "#c62828" in threshold
    assert "Watermark and event-time lag (seconds)" in lag_svg
    assert drawn.svgs() is drawn.svgs(), "drawn once"


def test_a_prometheus_that_does_not_answer_is_said_once_on_the_page(tmp_path):
    closed = free_port()
    config = load_config(
        "local",
        [
            f"paths.data_root={tmp_path}",
            *(f"metrics.ports.{app}={closed}" for app in APP_NAMES),
            f"metrics.prometheus_url=http://127.0.0.1:{closed}",
        ],
        environ={},
    )
    asked: list[str] = []

    def refused(url: str, app: str, hours: float) -> graphs.AppGraphs:
        asked.append(app)
        return graphs.app_graphs(url, app, hours=hours)

    page = health.collect(config, graphs_of=refused)
    assert asked == [], "the counts' query already found Prometheus away"
    assert page.graphs == []
    html = render_page(page)
    assert f"No graphs: Prometheus is unreachable: Prometheus http://127.0.0.1:{closed}" in html

    drawn = graphs.app_graphs(f"http://127.0.0.1:{closed}", APP, now=NOW)
    assert drawn.graphs == [] and drawn.error.startswith(f"Prometheus http://127.0.0.1:{closed}: ")


def test_the_page_shows_each_apps_graphs_under_its_own_anchor(prometheus, tmp_path):
    closed = free_port()
    config = load_config(
        "local",
        [f"paths.data_root={tmp_path}", *(f"metrics.ports.{app}={closed}" for app in APP_NAMES)],
        environ={},
    )
    page = health.collect(config)
    page.graphs = [graphs.app_graphs(prometheus, app, now=NOW) for app in APP_NAMES]
    html = render_page(page)
    for app in APP_NAMES:
        section = html.split(f'<section id="graphs-{app}">', 1)[1].split("</section>", 1)[0]
        assert section.count("<svg") == len(graphs.PAGE_PANELS), app
    assert " src=" not in html and "<link" not in html, "nothing fetched from elsewhere"
