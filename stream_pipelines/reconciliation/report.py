"""The reviewers' report: report.json for machines, report.html (with PNG plots) for people."""

from __future__ import annotations

import html
import io
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stream_pipelines.store import location, write_atomically

if TYPE_CHECKING:
    from stream_pipelines.config import PipelineConfig
    from stream_pipelines.reconciliation.job import ReconciliationResult

DELAY_PLOT = "delay_histogram.png"
WHAT_IF_PLOT = "what_if.png"


def report_dir(config: PipelineConfig, day: str) -> Path:
    """Where event day D's report lives (``day`` as YYYY-MM-DD), locally or on the object store."""
    return location(config, f"{config.data_path('reports')}/reconciliation/{day}")


def write_report(result: ReconciliationResult, folder: Path) -> None:
    """Write report.json, report.html and the plots into ``folder`` (a :func:`store.location`, local or
    on the object store); sets the paths on ``result``."""
    plots = {DELAY_PLOT: delay_plot(result), WHAT_IF_PLOT: what_if_plot(result)}
    for name, png in plots.items():
        write_atomically(folder / name, png)
    result.report_json = str(folder / "report.json")
    result.report_html = str(folder / "report.html")
    result.outputs["report_json"] = result.report_json
    result.outputs["report_html"] = result.report_html
    document = result.as_json()
    document["plots"] = {name: str(folder / name) for name in plots}
    write_atomically(folder / "report.json", json.dumps(document, indent=2, default=str))
    write_atomically(folder / "report.html", render_html(document))


def update_report(folder: Path, section: str, value: Any) -> None:
    """Add a section (e.g. quality gate results) to an existing report and re-render the HTML."""
    document = json.loads((folder / "report.json").read_text())
    document[section] = value
    write_atomically(folder / "report.json", json.dumps(document, indent=2, default=str))
    write_atomically(folder / "report.html", render_html(document))


def _png(figure: Any) -> bytes:
    """The figure as PNG bytes (written through the file layer, so the report can live on a store)."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png", dpi=90)
    plt.close(figure)
    return buffer.getvalue()


def _figure() -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")  # no display on servers
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(7, 3.5))


def delay_plot(result: ReconciliationResult) -> bytes:
    figure, axes = _figure()
    drawn = False
    for stats in result.delay_stats:
        if stats.histogram:
            edges, counts = zip(*stats.histogram, strict=True)
            axes.step(edges, counts, where="post", label=f"{stats.topic} (n={stats.events})")
            drawn = True
    axes.set_xlabel("arrival delay (s)")
    axes.set_ylabel("events")
    axes.set_title(f"Arrival delay, event day {result.day}")
    if drawn:
        axes.legend()
    return _png(figure)


def what_if_plot(result: ReconciliationResult) -> bytes:
    figure, axes = _figure()
    delays = [w.delay_s / 60 for w in result.what_if]
    axes.plot(delays, [100 * w.dropped_share for w in result.what_if], marker="o", label="dropped (%)")
    axes.set_xlabel("watermark delay (minutes)")
    axes.set_ylabel("share of events dropped (%)")
    latency = axes.twinx()
    latency.plot(delays, [w.output_latency_s / 60 for w in result.what_if], color="grey", linestyle="--")
    latency.set_ylabel("output latency (minutes)")
    axes.set_title(f"What-if by watermark delay, event day {result.day}")
    return _png(figure)


def _table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_cell(row.get(c)))}</td>" for c in columns) + "</tr>"
        for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list | tuple):
        return "; ".join(_cell(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={_cell(v)}" for k, v in value.items())
    return "" if value is None else str(value)


def render_html(document: dict[str, Any]) -> str:
    status = document["status"]
    colour = {"passed": "#2e7d32", "failed": "#c62828"}.get(status, "#555")
    inputs = [{"input": k, "value": v} for k, v in document["inputs"].items()]
    delay = document["delay_analysis"]
    gates = document.get("quality_gates") or []
    docs_links = "".join(
        f'<li><a href="{html.escape(str(gate["data_docs"]))}">{html.escape(str(gate.get("suite")))}</a></li>'
        for gate in gates
        if gate.get("data_docs")
    )
    plots = "".join(
        f'<img src="{html.escape(Path(p).name)}" alt="{html.escape(n)}">'
        for n, p in document.get("plots", {}).items()
    )
    quarantine = [
        {"topic": topic, "reason": reason, "count": count}
        for topic, reasons in document["quarantine"].items()
        for reason, count in reasons.items()
    ]
    sections = [
        f"<h1>Reconciliation of event day {html.escape(document['day'])}: "
        f"<span style='color:{colour}'>{html.escape(status.upper())}</span></h1>",
        "<ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in document["notes"]) + "</ul>",
        "<h2>Inputs</h2>",
        _table(inputs, ["input", "value"]),
        "<h2>Windows</h2>",
        _table([document["window_counts"]], list(document["window_counts"])),
        "<h2>Diffs (window by window)</h2>",
        _table(document["diffs"], ["window", "kind", "verdict", "reasons", "exact", "streaming", "model"]),
        "<h2>Ad matches (missing or wrong)</h2>",
        f"<p>Ledger scope: {html.escape(document.get('ad_ledger_scope', ''))}</p>",
        _table(
            document.get("ad_match_diffs", []), ["impression_id", "click_id", "kind", "verdict", "reason"]
        ),
        f"<h2>Late-event ledger ({document['late_event_ledger']['count']} excluded (delivery, window) pairs; "
        f"{document['late_event_ledger']['pending_deliveries_not_yet_read']} pending)</h2>",
        _table(
            document["late_event_ledger"]["rows"],
            [
                "query",
                "event_id",
                "sensor_id",
                "event_time",
                "window_start",
                "window_end",
                "arrival_delay_s",
                "topic",
                "partition",
                "offset",
                "source_file",
                "batch_id",
                "late_filter_watermark",
            ],
        ),
        "<h2>Delay analysis</h2>",
        _table(delay["per_topic"], ["topic", "events", "p50_s", "p90_s", "p99_s", "p999_s", "max_s"]),
        f"<p>Recommended sensor watermark: <b>{_cell(delay['recommended_watermark_s'])} s</b> "
        "(p99 of the arrival delay plus the configured margin).</p>",
        _table(
            delay["what_if"],
            ["delay_s", "deliveries", "dropped", "dropped_share", "expected_state_rows", "output_latency_s"],
        ),
        plots,
        "<h2>Quarantine (records parsing rejected, by reason)</h2>",
        _table(quarantine, ["topic", "reason", "count"]),
        "<h2>Quality gates</h2>",
        _table(gates, ["suite", "success", "critical_failures", "warnings", "data_docs"]),
        f"<ul>{docs_links}</ul>",
    ]
    style = (
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}"
        "td,th{border:1px solid #ccc;padding:3px 6px;font-size:13px;text-align:left}"
    )
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>Reconciliation {html.escape(document['day'])}</title><style>{style}</style></head>"
        f"<body>{''.join(sections)}</body></html>"
    )
