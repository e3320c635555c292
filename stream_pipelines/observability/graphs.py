"""The last hours of each app, drawn for the "Streaming pipeline" page: watermark lag against twice the
delay (the WatermarkLagHigh threshold), input rate, source backlog in seconds, and batch duration
against the trigger.

The series are the dashboard's own (monitoring/grafana/streaming_pipelines.json): ``PAGE_PANELS`` names
the panels and the targets of each that the page draws, so a query is written once. They come from
Prometheus' HTTP API (``/api/v1/query_range``). They are drawn on the server as inline SVG with
matplotlib, the library that draws the nightly report's plots. Matplotlib is pinned in the lock and
needs no network and no script in the browser, which suits the page: the UI shows it in a sandboxed
iframe and it reloads itself every 10 s. An app is drawn at most once a step of the window (a new
point), and at most once per ``CACHE_S``.
"""

from __future__ import annotations

import io
import json
import math
import re
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache, cached_property
from pathlib import Path
from typing import Any

from stream_pipelines.core.shipped import MONITORING
from stream_pipelines.observability import prometheus_api
from stream_pipelines.observability.prometheus_api import PrometheusRefused, PrometheusUnreachable

DASHBOARD = MONITORING / "grafana" / "streaming_pipelines.json"
# Per dashboard panel, the targets (refId) the page draws.
PAGE_PANELS = (
    ("Watermark and event-time lag", ("A", "C")),
    ("Throughput", ("B",)),
    ("Source lag", ("A",)),
    ("Batch duration and progress", ("A", "B")),
)
# The dashboard's legend of a threshold series: drawn dashed and red, as the alert's line.
THRESHOLD_LEGEND = re.compile(r"^(alert threshold|trigger)\b")
THRESHOLD_STYLE = {"color": "#c62828", "linestyle": "--"}
HOURS = 3  # the page's window unless it is asked for another (WINDOWS)
WINDOWS = (1, 3, 12, 48)
POINTS = 180  # per series: a point a minute over 3 hours
QUERY_TIMEOUT_S = 5.0
BUDGET_S = 10.0  # for all of an app's queries
CACHE_S = 30.0
_LEGEND_FIELD = re.compile(r"\{\{\s*(\w+)\s*\}\}")
_UNITS = {"s": "seconds", "short": "rows/s"}


@dataclass(frozen=True)
class PanelQuery:
    legend: str  # the dashboard's legendFormat: "watermark lag {{query}}"
    expr: str  # with ``$app`` for the app


@dataclass(frozen=True)
class Panel:
    title: str
    unit: str
    queries: tuple[PanelQuery, ...]


@dataclass
class Series:
    name: str
    threshold: bool
    points: list[tuple[float, float]]  # (epoch seconds, value)


@dataclass
class Graph:
    title: str
    unit: str
    series: list[Series] = field(default_factory=list)


@dataclass
class AppGraphs:
    """One app's graphs, or why there are none (``error``)."""

    app: str
    graphs: list[Graph]
    start: float
    end: float
    error: str | None = None
    unreachable: bool = False  # Prometheus did not answer (a refused query leaves it answering)

    def svgs(self) -> list[str]:
        """Each graph as SVG, drawn once (the cache hands the same object to every page load meanwhile).
        A graph matplotlib cannot draw becomes the app's error: the page says so instead of failing."""
        return self._svgs

    @cached_property
    def _svgs(self) -> list[str]:
        try:
            return [svg(graph, self.start, self.end) for graph in self.graphs]
        except (ValueError, RuntimeError, OverflowError) as error:
            self.graphs, self.error = [], f"could not draw the graphs: {error}"
            return []


@cache
def page_panels(dashboard: Path = DASHBOARD) -> tuple[Panel, ...]:
    """The dashboard's panels and targets that ``PAGE_PANELS`` names, in that order."""
    panels = {panel.get("title"): panel for panel in json.loads(dashboard.read_text())["panels"]}
    found = []
    for title, ref_ids in PAGE_PANELS:
        panel = panels[title]
        targets = {target["refId"]: target for target in panel["targets"]}
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
        queries = tuple(PanelQuery(targets[ref]["legendFormat"], targets[ref]["expr"]) for ref in ref_ids)
        found.append(Panel(title, _UNITS.get(unit, unit), queries))
    return tuple(found)


def query_range(
    base_url: str, expr: str, start: float, end: float, step_s: float, timeout_s: float = QUERY_TIMEOUT_S
) -> list[dict[str, Any]]:
    """Prometheus' answer to a range query: one ``{"metric": labels, "values": [[t, "v"], ...]}`` per
    series. Raises PrometheusUnreachable when Prometheus does not answer (in time), ValueError when it
    refuses the query or answers something else."""
    parameters = {"query": expr, "start": start, "end": end, "step": f"{step_s:g}"}
    try:
        found = prometheus_api.result(base_url, "/api/v1/query_range", parameters, timeout_s)
        return [
            {"metric": dict(series.get("metric", {})), "values": list(series["values"])} for series in found
        ]
    except PrometheusRefused as error:
        raise ValueError(f"Prometheus refused {expr!r}: {error}") from error
    except (AttributeError, KeyError, TypeError) as error:  # JSON, but not a range query's answer
        raise ValueError(f"Prometheus answered {expr!r} with something else: {error!r}") from error


def legend(template: str, labels: dict[str, str]) -> str:
    return _LEGEND_FIELD.sub(lambda match: labels.get(match.group(1), "?"), template)


def finite_points(values: list[list[Any]]) -> list[tuple[float, float]]:
    """(time, value) pairs; Prometheus' NaN and infinities are left out (no line, and no JSON can carry
    them to the page's API)."""
    points = []
    for moment, text in values:
        value = float(text)
        if math.isfinite(value):
            points.append((float(moment), value))
    return points


def app_graphs(
    base_url: str, app: str, *, hours: float = HOURS, now: float | None = None, budget_s: float = BUDGET_S
) -> AppGraphs:
    """The page's graphs of ``app`` over the last ``hours``, from the Prometheus at ``base_url``; its
    queries get ``budget_s`` in all, so a slow Prometheus cannot hold the page."""
    end = time.time() if now is None else now
    start = end - hours * 3600
    step_s = max(1.0, (end - start) / POINTS)
    deadline = time.monotonic() + budget_s
    graphs = []
    try:
        for panel in page_panels():
            graph = Graph(panel.title, panel.unit)
            for query in panel.queries:
                left_s = deadline - time.monotonic()
                if left_s <= 0:
                    raise PrometheusUnreachable(f"no answer to every query within {budget_s:g} s")
                expr = query.expr.replace("$app", app)
                for found in query_range(base_url, expr, start, end, step_s, min(QUERY_TIMEOUT_S, left_s)):
                    name = legend(query.legend, found["metric"])
                    graph.series.append(
                        Series(name, bool(THRESHOLD_LEGEND.match(name)), finite_points(found["values"]))
                    )
            graphs.append(graph)
    except PrometheusUnreachable as error:
        return AppGraphs(app, [], start, end, error=f"Prometheus {base_url}: {error}", unreachable=True)
    except ValueError as error:
        return AppGraphs(app, [], start, end, error=f"Prometheus {base_url}: {error}")
    return AppGraphs(app, graphs, start, end)


_cached: dict[tuple[str, str, float], tuple[float, AppGraphs]] = {}
_filling: dict[tuple[str, str, float], threading.Lock] = {}
_cache_lock = threading.Lock()


def cached_app_graphs(base_url: str, app: str, hours: float = HOURS) -> AppGraphs:
    """``app_graphs``, drawn: asked of Prometheus and drawn at most once a step of the window (a new
    point) and once per ``CACHE_S``, however many page loads ask meanwhile (the page reloads every 10 s,
    and drawing an app takes about 0.6 s of CPU). A failure is not kept: the next load asks again."""
    key = (base_url, app, hours)
    with _cache_lock:
        filling = _filling.setdefault(key, threading.Lock())
    with filling:  # one page load fills an expired entry; the others wait for it and take its result
        now = time.time()
        with _cache_lock:
            kept = _cached.get(key)
        if kept and now - kept[0] < max(CACHE_S, hours * 3600 / POINTS):
            return kept[1]
        fresh = app_graphs(base_url, app, hours=hours, now=now)
        fresh.svgs()  # drawn here, under the fill's lock, not by each page load
        if fresh.error is None:
            with _cache_lock:
                _cached[key] = (now, fresh)
        return fresh


# Matplotlib's settings are global: one drawing at a time, with the page's own.
_drawing = threading.Lock()
# Text as text, not as glyph outlines (a third of the size, and the labels stay searchable); a label
# value with two dollar signs is text, not mathtext.
DRAWING_SETTINGS = {"svg.fonttype": "none", "text.parse_math": False}


def svg(graph: Graph, start: float, end: float) -> str:
    """One graph as an inline ``<svg>`` element: each series a line, thresholds dashed red."""
    from matplotlib import rc_context
    from matplotlib.dates import DateFormatter
    from matplotlib.figure import Figure

    with _drawing, rc_context(DRAWING_SETTINGS):
        return _svg(Figure(figsize=(4.2, 2.2), dpi=72), graph, start, end, DateFormatter)


def _svg(figure: Any, graph: Graph, start: float, end: float, date_formatter: Any) -> str:
    axes = figure.add_subplot()
    colours = iter(("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#17becf"))
    for series in graph.series:
        times = [datetime.fromtimestamp(t, UTC) for t, _ in series.points]
        values = [v for _, v in series.points]
        style = THRESHOLD_STYLE if series.threshold else {"color": next(colours, "#444")}
        axes.plot(times, values, label=series.name, linewidth=1.3, gid=series.name, **style)
    axes.set_xlim(datetime.fromtimestamp(start, UTC), datetime.fromtimestamp(end, UTC))
    # Minutes apart at least on the page's windows; seconds on a shorter one.
    axes.xaxis.set_major_formatter(date_formatter("%H:%M" if end - start >= 3600 else "%H:%M:%S", tz=UTC))
    axes.set_title(f"{graph.title} ({graph.unit})" if graph.unit else graph.title, fontsize=9)
    axes.tick_params(labelsize=7)
    axes.set_ylim(bottom=0)
    axes.grid(alpha=0.3)
    if graph.series:
        axes.legend(fontsize=6, loc="upper left")
    else:
        axes.text(0.5, 0.5, "no data", transform=axes.transAxes, ha="center", va="center", color="#777")
    figure.subplots_adjust(left=0.11, right=0.98, top=0.88, bottom=0.14)
    out = io.StringIO()
    figure.savefig(out, format="svg")
    text = out.getvalue()
    return text[text.index("<svg") :]
