"""The report's two plots, drawn from report.json alone: the arrival delays and the what-if by delay.

Each ``*_figure`` returns a matplotlib Figure (tests inspect its Axes: scales, marker lines by gid);
``png`` renders one. Figures are built without pyplot, so no global state or display backend is used.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

from stream_pipelines.core.config import Duration
from stream_pipelines.reconciliation.advisor import HISTOGRAM_BUCKETS

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

DELAY_PLOT = "delay_histogram.png"
WHAT_IF_PLOT = "what_if.png"
# Marker lines, found again by tests through Line2D.get_gid().
CONFIGURED_GID, RECOMMENDED_GID, P99_GID = "configured_watermark", "recommended_watermark", "p99"
MARKER_STYLE = {
    CONFIGURED_GID: {"color": "#c62828", "linestyle": "-", "linewidth": 1.6},
    RECOMMENDED_GID: {"color": "#2e7d32", "linestyle": "--", "linewidth": 1.6},
    P99_GID: {"color": "#444444", "linestyle": ":", "linewidth": 1.6},
}
TOPIC_COLOURS = ("#1f77b4", "#ff7f0e", "#9467bd")


def configured_watermark_s(document: dict[str, Any]) -> float | None:
    """The sensor app's watermark delay the stream ran with (recorded in the report's inputs)."""
    text = document.get("inputs", {}).get("sensor_watermark")
    return Duration.parse(text).seconds if text else None


def _minutes_or_seconds(seconds: float) -> str:
    return f"{seconds / 60:.3g} min" if seconds >= 120 else f"{seconds:.3g} s"


def _seconds(seconds: float) -> str:
    """Seconds as on the delay plot's axis, with minutes beside them when that reads easier."""
    return f"{seconds:.0f} s ({seconds / 60:.3g} min)" if seconds >= 120 else f"{seconds:.3g} s"


def _log_counts(axes: Axes, highest: int) -> None:
    """A log count axis with plain tick labels (1, 2, 5, 10, ...), readable for small counts too."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axes.set_yscale("log")
    axes.set_ylim(0.7, max(highest, 1) * 2.5)
    axes.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axes.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axes.yaxis.set_minor_formatter(NullFormatter())


def _mark(axes: Axes, gid: str, x: float, label: str) -> None:
    axes.axvline(x, label=label, gid=gid, **MARKER_STYLE[gid])


def delay_figure(document: dict[str, Any]) -> Figure:
    """Arrival-delay histogram per topic with events, log-scale counts; the sensor topic (the first,
    whose p99 the recommendation uses) also shows the configured and the recommended watermark."""
    from matplotlib.figure import Figure

    analysis = document["delay_analysis"]
    topics = [t for t in analysis["per_topic"] if t.get("events") and t.get("histogram")]
    figure = Figure(figsize=(9, 2.8 * len(topics) + 0.6 if topics else 1.4), layout="constrained")
    figure.suptitle(f"Arrival delay (arrival time minus event time), event day {document['day']}")
    if not topics:
        axes = figure.subplots()
        axes.set_axis_off()
        axes.text(0.5, 0.5, "no deliveries for this day", ha="center", va="center", transform=axes.transAxes)
        return figure
    sensor_topic = analysis["per_topic"][0]["topic"]
    panels = figure.subplots(len(topics), 1, squeeze=False)[:, 0]
    for axes, stats, colour in zip(panels, topics, TOPIC_COLOURS[: len(topics)], strict=True):
        edges = [float(edge) for edge, _ in stats["histogram"]]
        counts = [int(count) for _, count in stats["histogram"]]
        width = max((float(stats["max_s"]) - min(edges)) / HISTOGRAM_BUCKETS, 1e-3)
        axes.bar(edges, counts, width=width, align="edge", color=colour, alpha=0.8)
        _log_counts(axes, max(counts))
        axes.set_ylabel("deliveries (log scale)")
        axes.set_title(f"{stats['topic']}: {stats['events']} deliveries", loc="left", fontsize=10)
        if stats.get("p99_s") is not None:
            _mark(axes, P99_GID, float(stats["p99_s"]), f"p99 {_seconds(float(stats['p99_s']))}")
        if stats["topic"] == sensor_topic:
            configured = configured_watermark_s(document)
            if configured is not None:
                # Deliveries this late may arrive after the watermark has closed their window.
                right = max(float(stats["max_s"]), configured) * 1.05
                axes.axvspan(configured, right, color=MARKER_STYLE[CONFIGURED_GID]["color"], alpha=0.06, lw=0)
                _mark(axes, CONFIGURED_GID, configured, f"configured watermark {_seconds(configured)}")
            recommended = analysis.get("recommended_watermark_s")
            if recommended is not None:
                _mark(
                    axes,
                    RECOMMENDED_GID,
                    float(recommended),
                    f"recommended watermark {_seconds(recommended)}",
                )
        axes.set_xlim(left=0)
        axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
        axes.grid(axis="y", which="major", alpha=0.3)
    panels[-1].set_xlabel("arrival delay (seconds)")
    return figure


def delay_caption(document: dict[str, Any]) -> str:
    analysis = document["delay_analysis"]
    sensor = analysis["per_topic"][0] if analysis["per_topic"] else {}
    empty = [t["topic"] for t in analysis["per_topic"] if not t.get("events")]
    caption = (
        "How long after its event time each delivery of the day arrived, per topic; counts on a log "
        "scale so that the rare late deliveries in the tail stay visible. Deliveries right of the "
        "configured watermark (red line, shaded) are at risk of being dropped as late; the recommended "
        f"watermark (green, dashed) is the {sensor.get('topic', 'sensor')} p99 (dotted) plus the "
        "configured margin."
    )
    if empty:
        caption += f" No deliveries for: {', '.join(empty)}."
    return caption


def what_if_figure(document: dict[str, Any]) -> Figure:
    """Dropped share, estimated state rows and output latency against the watermark delay (log axis),
    with the configured and the recommended delay marked on each panel."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import FixedLocator, NullLocator

    rows = sorted(document["delay_analysis"]["what_if"], key=lambda r: r["delay_s"])
    figure = Figure(figsize=(8, 7), layout="constrained")
    figure.suptitle(f"What if the sensor watermark were longer or shorter? Event day {document['day']}")
    panels = figure.subplots(3, 1, sharex=True)
    delays = [r["delay_s"] / 60 for r in rows]
    series = (
        ("dropped as late (% of deliveries)", [100 * r["dropped_share"] for r in rows], "#6a3d9a"),
        ("state rows (estimate)", [r["expected_state_rows"] for r in rows], "#1f77b4"),
        ("output latency (minutes)", [r["output_latency_s"] / 60 for r in rows], "#555555"),
    )
    for axes, (label, values, colour) in zip(panels, series, strict=True):
        axes.plot(delays, values, marker="o", color=colour)
        axes.set_ylabel(label, fontsize=9)
        axes.grid(alpha=0.3)
    for row, delay, share in zip(rows, delays, series[0][1], strict=True):
        panels[0].annotate(
            f"{row['dropped']}/{row['deliveries']}",
            (delay, share),
            textcoords="offset points",
            xytext=(5, 6),
            ha="left",
            fontsize=8,
        )
    panels[0].set_ylim(bottom=0, top=max([*series[0][1], 1.0]) * 1.3)
    configured = configured_watermark_s(document)
    recommended = document["delay_analysis"].get("recommended_watermark_s")
    for axes in panels:
        if configured is not None:
            _mark(axes, CONFIGURED_GID, configured / 60, f"configured {_minutes_or_seconds(configured)}")
        if recommended is not None:
            _mark(
                axes,
                RECOMMENDED_GID,
                float(recommended) / 60,
                f"recommended {_minutes_or_seconds(recommended)}",
            )
    panels[0].legend(loc="upper right", fontsize=8, framealpha=0.9)
    bottom = panels[-1]
    if delays:
        bottom.set_xscale("log")
        bottom.xaxis.set_major_locator(FixedLocator(delays))
        bottom.xaxis.set_minor_locator(NullLocator())
        bottom.set_xticklabels([f"{d:g}" for d in delays])
    bottom.set_xlabel("watermark delay (minutes, log scale)")
    return figure


def what_if_caption(document: dict[str, Any]) -> str:
    window = document.get("inputs", {}).get("sensor_window", "the window length")
    return (
        "Top: the share of the day's sensor deliveries each delay would drop as late, from a replay of "
        "the batches the stream actually ran (labels: dropped/deliveries). Middle: state rows, an "
        "estimate, not a measurement: the average number of sensors reporting per minute (minutes with "
        "readings) "
        f"times (1 + delay / {window}), i.e. the windows per sensor kept open until the watermark passes "
        "their end. Bottom: output latency, a formula: the delay plus two triggers (one to read the "
        "closing event, one for the watermark to take effect). Vertical lines: configured delay (red), "
        "recommended delay (green, dashed)."
    )


def png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()


def plot_figures(document: dict[str, Any]) -> dict[str, tuple[Figure, str]]:
    """Each plot's file name with its figure and caption, in the order the report shows them."""
    return {
        DELAY_PLOT: (delay_figure(document), delay_caption(document)),
        WHAT_IF_PLOT: (what_if_figure(document), what_if_caption(document)),
    }
