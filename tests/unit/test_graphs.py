"""The page's graphs: the dashboard's queries, asked of Prometheus' range API, drawn as inline SVG; a
Prometheus that does not answer is said, once."""

from __future__ import annotations

import http.server
import json
import threading
import time
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
    """Answers every range query with one series per query of the app, its value rising 1 a step (the
    query label and the first value as ``labels`` and ``first`` say); instant queries with nothing;
    ``delay_s`` before each answer, and ``refuse`` refuses every range query."""

    asked: list[dict[str, str]] = []
    labels: dict[str, str] = {}
    first = "0"
    delay_s = 0.0
    refuse = False

    def do_GET(self) -> None:
        url = urllib.parse.urlparse(self.path)
        asked = dict(urllib.parse.parse_qsl(url.query))
        time.sleep(FakePrometheus.delay_s)
        if url.path == "/api/v1/query":
            self.answer({"status": "success", "data": {"resultType": "vector", "result": []}})
            return
        FakePrometheus.asked.append(asked)
        if FakePrometheus.refuse:
            self.answer({"status": "error", "errorType": "bad_data", "error": "parse error"})
            return
        start, end, step = float(asked["start"]), float(asked["end"]), float(asked["step"])
        values = [[start + i * step, str(i)] for i in range(int((end - start) / step) + 1)]
        values[0][1] = FakePrometheus.first
        labels = {"app": APP, "query": f"{APP}.tumbling", **FakePrometheus.labels}
        self.answer(
            {
                "status": "success",
                "data": {"resultType": "matrix", "result": [{"metric": labels, "values": values}]},
            }
        )

    def answer(self, document: dict) -> None:
        body = json.dumps(document).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def prometheus() -> Iterator[str]:
    FakePrometheus.asked, FakePrometheus.labels, FakePrometheus.first = [], {}, "0"
    FakePrometheus.delay_s, FakePrometheus.refuse = 0.0, False
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


def test_a_nan_sample_is_no_point_and_a_label_with_dollar_signs_is_drawn_as_text(prometheus):
    FakePrometheus.first, FakePrometheus.labels = "NaN", {"query": "odd $x$ name"}
    drawn = graphs.app_graphs(prometheus, APP, now=NOW)
    line = drawn.graphs[0].series[0]
    assert line.name == "watermark lag odd $x$ name" and line.points[0][0] == NOW - 3 * 3600 + 60
    assert drawn.error is None and "odd $x$ name" in drawn.svgs()[0]


def test_the_cache_asks_and_draws_once_a_step_for_every_page_load_meanwhile(prometheus):
    hours = 1 / 20  # a step of 1 s, so the cache keeps it CACHE_S
    results: list[graphs.AppGraphs] = []
    loads = [
        threading.Thread(target=lambda: results.append(graphs.cached_app_graphs(prometheus, APP, hours)))
        for _ in range(4)
    ]
    for load in loads:
        load.start()
    for load in loads:
        load.join()
    queries = sum(len(panel.queries) for panel in graphs.page_panels())
    assert len(FakePrometheus.asked) == queries, "four page loads at once, one fill"
    assert all(result is results[0] for result in results) and results[0].__dict__.get("_svgs")


def test_a_refused_query_is_not_kept_and_does_not_hide_the_other_apps(prometheus, tmp_path):
    FakePrometheus.refuse = True
    config = load_config(
        "local",
        [f"paths.data_root={tmp_path}", f"metrics.prometheus_url={prometheus}"],
        environ={},
    )
    page = health.collect(config, graph_hours=2 / 60)
    assert [drawn.app for drawn in page.graphs] == list(APP_NAMES), "Prometheus answers: every app is asked"
    assert all(
        drawn.error and "parse error" in drawn.error and not drawn.unreachable for drawn in page.graphs
    )
    asked = len(FakePrometheus.asked)
    graphs.cached_app_graphs(prometheus, APP, 2 / 60)
    assert len(FakePrometheus.asked) == asked + 1, "a failure is asked again at the next load"


def test_a_slow_prometheus_gets_a_budget_for_all_of_an_apps_queries(prometheus):
    FakePrometheus.delay_s = 0.4
    started = time.monotonic()
    drawn = graphs.app_graphs(prometheus, APP, now=NOW, budget_s=1.0)
    assert time.monotonic() - started < 2.5
    assert drawn.unreachable and drawn.graphs == [], drawn.error
