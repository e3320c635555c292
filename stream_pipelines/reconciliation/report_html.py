"""report.html for people: report.json (and the plot PNGs) -> one self-contained HTML string.

Order: the summary in plain words, the plots, the detail tables (long lists collapsed and capped), then
the inputs and provenance. Every key shown goes through ``LABELS`` (marked ``data-key`` in the HTML so
tests can check the map covers them); plots are embedded as data: URIs, nothing is fetched; a print
stylesheet expands the collapsed lists and starts each section on a new page.
"""

from __future__ import annotations

import base64
import html
from datetime import UTC, datetime
from typing import Any

from stream_pipelines.reconciliation.ads import MISSING_MATCH, WRONG_MATCH
from stream_pipelines.reconciliation.days import diffs_text
from stream_pipelines.reconciliation.diff import DIFFERENT, EXTRA, MISSING
from stream_pipelines.reconciliation.summary import PENDING, UNEXPLAINED, report_summary, window_label

# Report keys (JSON field names, column and group keys) -> what a reader sees. Defined once.
LABELS: dict[str, str] = {
    # inputs and provenance
    "event_day": "Event day",
    "archive_path": "Raw archive",
    "arrival_dates_read": "Arrival dates read",
    "archive_rows_read": "Archive rows read",
    "sensor_deliveries_for_day": "Sensor deliveries of the day",
    "sensor_events_for_day": "Distinct sensor events of the day",
    "streaming_output_path": "Stream's window output",
    "streaming_rows_for_day": "Stream's windows for the day",
    "ad_matches_path": "Stream's ad matches",
    "ad_batch_log_path": "Ad matching batch log",
    "sensor_metadata_path": "Sensor metadata",
    "batch_log_path": "Sensor batch log",
    "batches_logged": "Batches in the batch log",
    "final_streaming_watermark": "Stream's last watermark",
    "sensor_window": "Window length",
    "sensor_watermark": "Configured watermark delay",
    "late_horizon": "Late horizon",
    "tolerances": "Tolerances",
    "code_version": "Code version (git commit, or installed version)",
    "config_env": "Config environment",
    "config_digest": "Config digest",
    "run_at": "Run at (UTC)",
    "duration_s": "Job duration (s)",
    "compliance_rows": "Compliance rows written",
    "ledger": "Late-event ledger",
    "report_dir": "Report folder",
    "compliance": "Compliance table",
    "report_json": "report.json",
    "report_html": "report.html",
    "report_pdf": "report.pdf",
    "pdf": "PDF copy",
    # provenance groups
    "read_from": "Read from",
    "row_counts": "Row counts",
    "settings": "Settings",
    "run": "Run",
    "outputs": "Written to",
    "other": "Other",
    # window diffs
    "window": "Window (UTC)",
    "sensor_id": "Sensor",
    "kind": "Difference",
    "verdict": "Verdict",
    "reasons": "Why",
    "readings": "Readings",
    "exact_reading_count": "exact",
    "streaming_reading_count": "stream",
    "model_reading_count": "ledger model",
    "avg_temperature": "Average temperature",
    "exact_avg_temperature": "exact",
    "streaming_avg_temperature": "stream",
    "evidence": "Ledger evidence",
    "dropped_deliveries": "dropped late",
    "duplicate_deliveries": "duplicates",
    # corrections
    "windows": "Windows corrected",
    "readings_corrected": "Net readings added",
    "readings_changed": "Readings changed",
    "exact_readings": "exact",
    "streaming_readings": "stream",
    # ad matches
    "impression_id": "Impression",
    "click_id": "Click",
    "reason": "Why",
    # late-event ledger
    "query": "Query",
    "event_id": "Event",
    "event_time": "Event time",
    "window_start": "Window start",
    "window_end": "Window end",
    "arrival_delay_s": "Arrival delay (s)",
    "topic": "Topic",
    "partition": "Partition",
    "offset": "Offset",
    "source_file": "Replay file",
    "batch_id": "Batch",
    "late_filter_watermark": "Late-filter watermark",
    "kafka": "Kafka position",
    # delay analysis
    "events": "Deliveries",
    "percentiles": "Arrival delay percentiles (s)",
    "p50_s": "p50",
    "p90_s": "p90",
    "p99_s": "p99",
    "p999_s": "p99.9",
    "max_s": "max",
    "delay_s": "Watermark delay",
    "deliveries": "Deliveries",
    "dropped": "Dropped as late",
    "dropped_share": "Dropped share",
    "expected_state_rows": "State rows (estimate)",
    "output_latency_s": "Output latency (s)",
    # quarantine and gates
    "count": "Records",
    "suite": "Suite",
    "success": "Passed",
    "critical_failures": "Critical failures",
    "warnings": "Warnings",
    "data_docs": "Data Docs",
}
# Internal values shown in tables -> words.
VALUE_LABELS = {
    MISSING: "missing from the stream",
    EXTRA: "only in the stream",
    DIFFERENT: "different figures",
    MISSING_MATCH: "missing from the stream",
    WRONG_MATCH: "wrong match",
}
DETAIL_ROWS = 200  # rows per detail table; the rest is in report.json
PENDING_LISTED = 10
PROVENANCE_GROUPS = (
    (
        "read_from",
        (
            "archive_path",
            "arrival_dates_read",
            "streaming_output_path",
            "batch_log_path",
            "ad_matches_path",
            "ad_batch_log_path",
            "sensor_metadata_path",
        ),
    ),
    (
        "row_counts",
        (
            "archive_rows_read",
            "sensor_deliveries_for_day",
            "sensor_events_for_day",
            "streaming_rows_for_day",
            "batches_logged",
            "compliance_rows",
        ),
    ),
    (
        "settings",
        (
            "event_day",
            "sensor_window",
            "sensor_watermark",
            "late_horizon",
            "tolerances",
            "final_streaming_watermark",
        ),
    ),
    ("run", ("code_version", "config_digest", "config_env", "run_at", "duration_s")),
)
SECTIONS = (
    ("summary", "Summary"),
    ("plots", "Plots"),
    ("details", "Details"),
    ("provenance", "Inputs and provenance"),
)

STYLE = """
:root{--ok:#2e7d32;--bad:#c62828;--wait:#8a6d00;--line:#d7dbe0;--muted:#5f6b7a}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d2530}
header{padding:1.2em 2em .6em;border-bottom:1px solid var(--line)}
h1{font-size:1.5em;margin:0 0 .2em}
nav{position:sticky;top:0;background:#f6f8fa;border-bottom:1px solid var(--line);padding:.4em 2em;z-index:1}
nav a{margin-right:1.5em;color:#0b57d0;text-decoration:none}
main{padding:0 2em 2em;max-width:1200px}
section{margin-top:1.5em}
h2{font-size:1.25em;border-bottom:2px solid var(--line);padding-bottom:.2em}
h3{font-size:1.05em;margin:1.2em 0 .4em}
.verdict{padding:.8em 1em;border-radius:6px;border-left:6px solid;margin:1em 0}
.verdict.passed{background:#edf7ee;border-color:var(--ok)}
.verdict.failed{background:#fdeced;border-color:var(--bad)}
.verdict.empty_day{background:#f3f4f6;border-color:var(--muted)}
.verdict p{margin:0 0 .3em;font-size:1.15em;font-weight:600}
.verdict ul{margin:.3em 0 0;padding-left:1.2em}
.badge{display:inline-block;padding:.1em .6em;border-radius:4px;color:#fff;font-weight:700}
.badge.passed{background:var(--ok)}.badge.failed{background:var(--bad)}.badge.empty_day{background:var(--muted)}
.sign-off{margin:.4em 0 0;padding:.3em .6em;border-radius:4px;background:#e6f4ea}
.sign-off.rejected{background:#fde8e8}
.cards{display:grid;grid-template-columns:repeat(3,1fr);gap:.8em;margin:1em 0}
.card{border:1px solid var(--line);border-radius:6px;padding:.6em .8em}
.card dt{color:var(--muted);font-size:.85em}
.card dd{margin:.1em 0 0;font-size:1.35em;font-weight:600}
.card dd small{display:block;font-size:.6em;font-weight:400;color:var(--muted)}
.pair{display:flex;flex-wrap:wrap;gap:0 2.5em;align-items:flex-start}
table{border-collapse:collapse;margin:.5em 0 1em;font-size:13px}
th,td{border:1px solid var(--line);padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f6f8fa}
td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.unexplained td{background:#fdeced}
.more,.caption,.muted{color:var(--muted)}
figure{margin:1em 0 2em}
figure img{max-width:100%;border:1px solid var(--line)}
figcaption{color:var(--muted);max-width:60em}
details{margin:.6em 0}
summary{cursor:pointer;font-weight:600}
dl.provenance{display:grid;grid-template-columns:max-content 1fr;gap:.2em 1.2em}
dl.provenance dt{color:var(--muted)}
dl.provenance dt.group{grid-column:1/-1;color:inherit;font-weight:600;margin-top:.8em;
  border-bottom:1px solid var(--line)}
dl.provenance dd{margin:0;word-break:break-all;font-family:ui-monospace,monospace;font-size:12.5px}
@media print{
  nav{display:none}
  body{font-size:11px}
  main,header{padding:0 1em;max-width:none}
  section{break-before:page}
  section#summary{break-before:auto}
  details>summary{list-style:none}
  details::details-content{content-visibility:visible;display:block}
  table{width:100%;font-size:10px}
  td,th{overflow-wrap:anywhere}
  figure,.card{break-inside:avoid}
  tr{break-inside:avoid}
  a{color:inherit;text-decoration:none}
}
"""
# Browsers print <details> as they are: open them all first (the PDF renderer does the same).
SCRIPT = "addEventListener('beforeprint',()=>document.querySelectorAll('details').forEach(d=>d.open=true));"


def label(key: str) -> str:
    return LABELS.get(key, key.replace("_", " "))


def _labelled(key: str, tag: str = "span", attributes: str = "") -> str:
    return f'<{tag} data-key="{html.escape(key)}"{attributes}>{html.escape(label(key))}</{tag}>'


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list | tuple):
        return "; ".join(_text(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k} {_text(v)}" for k, v in value.items())
    return VALUE_LABELS.get(str(value), str(value))


def _td(value: Any) -> str:
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    return f"<td{' class=num' if numeric else ''}>{html.escape(_text(value))}</td>"


def _table(
    rows: list[dict[str, Any]],
    columns: list[str | tuple[str, list[str]]],
    row_class: str | None = None,
) -> str:
    """A table; a column may be a (group key, [column keys]) pair, shown under a spanning group header."""
    grouped = any(isinstance(c, tuple) for c in columns)
    top, sub, flat = [], [], []
    for column in columns:
        if isinstance(column, tuple):
            group, members = column
            top.append(_labelled(group, "th", f' colspan="{len(members)}"'))
            sub += [_labelled(m, "th") for m in members]
            flat += members
        else:
            top.append(_labelled(column, "th", ' rowspan="2"' if grouped else ""))
            flat.append(column)
    head = f"<tr>{''.join(top)}</tr>" + (f"<tr>{''.join(sub)}</tr>" if grouped else "")
    body = "".join(
        f"<tr{_class_of(row, row_class)}>{''.join(_td(row.get(c)) for c in flat)}</tr>" for row in rows
    )
    return f"<table><thead>{head}</thead><tbody>{body}</tbody></table>"


def _class_of(row: dict[str, Any], key: str | None) -> str:
    return f' class="{html.escape(str(row.get(key)))}"' if key and row.get(key) else ""


def _capped(rows: list[dict[str, Any]], columns: list, where: str, cap: int = DETAIL_ROWS, **kw: Any) -> str:
    more = len(rows) - cap
    tail = f'<p class="more">{more} more in report.json ({html.escape(where)}).</p>' if more > 0 else ""
    return _table(rows[:cap], columns, **kw) + tail


def _collapsed(title: str, body: str, *, is_open: bool = False) -> str:
    return f"<details{' open' if is_open else ''}><summary>{html.escape(title)}</summary>{body}</details>"


# --------------------------------------------------------------------------- summary


def _signed(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**row, "readings_corrected": f"{row['readings_corrected']:+d}"} for row in rows]


def _card(title: str, value: Any, detail: str = "") -> str:
    small = f"<small>{html.escape(detail)}</small>" if detail else ""
    return f"<div class=card><dt>{html.escape(title)}</dt><dd>{html.escape(_text(value))}{small}</dd></div>"


def summary_section(summary: dict[str, Any]) -> str:
    status = summary["status"]
    events, windows, late = summary["events"], summary["windows"], summary["late"]
    totals, pending = summary["day_totals"], summary["pending"]
    why = "".join(f"<li>{html.escape(reason)}</li>" for reason in summary["why"])
    cards = "".join(
        [
            _card(
                "Events in",
                events["sensor_events"],
                f"distinct sensor events; {events['sensor_deliveries']} deliveries, "
                f"{events['archive_rows_read']} archive rows read",
            ),
            _card(
                "Windows compared",
                windows["exact"],
                f"exact windows against {windows['streaming']} the stream wrote; {windows['matching']} match",
            ),
            _card(
                "Dropped as late by the stream",
                late["dropped_deliveries"],
                "sensor deliveries the watermark excluded from their window",
            ),
            _card(
                "Duplicate deliveries",
                summary["duplicates"]["deliveries"],
                "the stream counts each one it does not drop as late; the exact figures count the event once",
            ),
            _card(
                "Day total readings: exact vs stream",
                f"{totals['exact_readings']} vs {totals['streaming_readings']}",
                f"{totals['readings_corrected']:+d} readings in "
                f"{totals['corrected_windows']} corrected windows",
            ),
            _card(
                "Diffs: explained / unexplained / pending",
                f"{windows['explained']} / {windows[UNEXPLAINED]} / {windows[PENDING]}",
                f"{events['ad_match_diffs']} ad match diff(s)",
            ),
        ]
    )
    by_sensor = _table(
        _signed(summary["largest_by_sensor"]),
        [
            "sensor_id",
            "windows",
            "readings_changed",
            "readings_corrected",
            ("evidence", ["dropped_deliveries", "duplicate_deliveries"]),
        ],
    )
    by_window = _table(
        _signed(summary["largest_by_window"]),
        [
            "window",
            "sensor_id",
            ("readings", ["exact_readings", "streaming_readings"]),
            "readings_corrected",
            ("avg_temperature", ["exact_avg_temperature", "streaming_avg_temperature"]),
            "verdict",
        ],
        row_class="verdict",
    )
    corrections = (
        f"<div class=pair><div><h3>Largest corrections by sensor</h3>{by_sensor}</div>"
        f"<div><h3>Largest corrections by window</h3>{by_window}</div></div>"
        if summary["corrected_windows"]
        else "<p>No window needed a correction.</p>"
    )
    pending_html = ""
    if pending["count"]:
        advice = "".join(f"<li>{html.escape(line)}</li>" for line in pending["advice"])
        listed = [
            {
                "window": window_label(p) or p.get("impression_id"),
                "sensor_id": p.get("sensor_id"),
                "kind": p.get("kind"),
                "reasons": p.get("reasons") or p.get("reason"),
            }
            for p in pending["rows"]
        ]
        pending_html = (
            f"<h3>Pending: {pending['count']} diff(s), rerun later</h3><ul>{advice}</ul>"
            + _collapsed(
                f"The pending diffs ({pending['count']})",
                _capped(listed, ["window", "sensor_id", "kind", "reasons"], "diffs", cap=PENDING_LISTED),
            )
        )
    return (
        f'<section id="summary"><h2>Summary</h2>'
        f'<div class="verdict {html.escape(status)}">'
        f"<p>{html.escape(summary['headline'])}</p><ul>{why}</ul></div>"
        f"<dl class=cards>{cards}</dl>{corrections}{pending_html}</section>"
    )


# --------------------------------------------------------------------------- plots


def plots_section(plots: dict[str, tuple[bytes, str]]) -> str:
    figures = "".join(
        f'<figure><img alt="{html.escape(name)}" '
        f'src="data:image/png;base64,{base64.b64encode(png).decode()}">'
        f"<figcaption>{html.escape(caption)}</figcaption></figure>"
        for name, (png, caption) in plots.items()
    )
    return f'<section id="plots"><h2>Plots</h2>{figures or "<p>No plots.</p>"}</section>'


# --------------------------------------------------------------------------- details


def _diff_row(diff: dict[str, Any]) -> dict[str, Any]:
    row = {k: diff.get(k) for k in ("sensor_id", "kind", "verdict", "reasons")} | {
        "window": window_label(diff)
    }
    row |= {k: diff.get(k) or 0 for k in ("dropped_deliveries", "duplicate_deliveries")}
    for side in ("exact", "streaming", "model"):
        figures = diff.get(side) or {}
        row[f"{side}_reading_count"] = figures.get("reading_count")
        row[f"{side}_avg_temperature"] = figures.get("avg_temperature")
    return row


DIFF_COLUMNS: list = [
    "window",
    "sensor_id",
    "kind",
    ("readings", ["exact_reading_count", "streaming_reading_count", "model_reading_count"]),
    ("avg_temperature", ["exact_avg_temperature", "streaming_avg_temperature"]),
    ("evidence", ["dropped_deliveries", "duplicate_deliveries"]),
    "reasons",
]
LEDGER_COLUMNS: list = [
    "query",
    "event_id",
    "sensor_id",
    "event_time",
    "window_start",
    "arrival_delay_s",
    "late_filter_watermark",
    "batch_id",
    ("kafka", ["topic", "partition", "offset"]),
    "source_file",
]


def details_section(document: dict[str, Any]) -> str:
    diffs = [_diff_row(d) for d in document.get("diffs", [])]
    parts = ['<section id="details"><h2>Details</h2><h3>Sensor windows that differ, by verdict</h3>']
    for verdict in (UNEXPLAINED, "explained", PENDING):
        rows = [r for r in diffs if r["verdict"] == verdict]
        if rows:
            parts.append(
                _collapsed(
                    f"{verdict} ({len(rows)})",
                    _capped(rows, DIFF_COLUMNS, f"diffs, verdict {verdict}", row_class="verdict"),
                    is_open=verdict == UNEXPLAINED,
                )
            )
    if not diffs:
        parts.append("<p>Every window matches.</p>")
    matches = document.get("ad_match_diffs", [])
    parts.append(f"<h3>Ad matches missing or wrong ({len(matches)})</h3>")
    parts.append(f'<p class="muted">{html.escape(document.get("ad_ledger_scope", ""))}</p>')
    if matches:
        parts.append(
            _collapsed(
                f"Ad match diffs ({len(matches)})",
                _capped(
                    matches, ["impression_id", "click_id", "kind", "verdict", "reason"], "ad_match_diffs"
                ),
                is_open=any(m.get("verdict") == UNEXPLAINED for m in matches),
            )
        )
    ledger = document["late_event_ledger"]
    parts.append(
        f"<h3>Late-event ledger: {ledger['count']} (delivery, window) pairs the watermark excluded</h3>"
        f'<p class="muted">Tumbling and sliding windows; {ledger.get("pending_deliveries_not_yet_read", 0)} '
        f"deliveries not read by the stream yet, {ledger.get('deliveries_in_batch_log_gaps', 0)} in "
        f"batch log gaps. {len(ledger['rows'])} pairs listed in report.json.</p>"
    )
    if ledger["rows"]:
        more = ledger["count"] - len(ledger["rows"])
        table = html.escape(str(document.get("outputs", {}).get("ledger", "")))
        note = f'<p class="more">{more} more in the ledger table ({table}).</p>' if more > 0 else ""
        parts.append(
            _collapsed(
                f"Ledger rows ({len(ledger['rows'])})",
                _capped(ledger["rows"], LEDGER_COLUMNS, "late_event_ledger.rows") + note,
            )
        )
    delay = document["delay_analysis"]
    parts.append("<h3>Arrival delay per topic</h3>")
    parts.append(
        _table(
            delay["per_topic"],
            ["topic", "events", ("percentiles", ["p50_s", "p90_s", "p99_s", "p999_s", "max_s"])],
        )
    )
    parts.append(
        "<p>Recommended sensor watermark: "
        f"<b>{html.escape(_text(delay.get('recommended_watermark_s')))} s</b> "
        "(p99 of the sensor arrival delay plus the configured margin).</p>"
    )
    what_if = [{**w, "dropped_share": f"{100 * w['dropped_share']:.2f} %"} for w in delay["what_if"]]
    parts.append("<h3>What-if by watermark delay</h3>")
    parts.append(
        _table(
            what_if,
            ["delay_s", "deliveries", "dropped", "dropped_share", "expected_state_rows", "output_latency_s"],
        )
    )
    quarantine = [
        {"topic": topic, "reason": reason, "count": count}
        for topic, reasons in document.get("quarantine", {}).items()
        for reason, count in reasons.items()
    ]
    parts.append("<h3>Quarantine: records parsing rejected</h3>")
    parts.append(_table(quarantine, ["topic", "reason", "count"]) if quarantine else "<p>None.</p>")
    gates = document.get("quality_gates") or []
    parts.append("<h3>Quality gates</h3>")
    if gates:
        rows = [{**g, "data_docs": None} for g in gates]
        parts.append(_table(rows, ["suite", "success", "critical_failures", "warnings"]))
        links = "".join(
            f'<li><a href="{html.escape(str(g["data_docs"]))}">{html.escape(str(g.get("suite")))}</a></li>'
            for g in gates
            if g.get("data_docs")
        )
        parts.append(f"<p>{_labelled('data_docs')}:</p><ul>{links}</ul>" if links else "")
        missing = next((g["data_docs_error"] for g in gates if g.get("data_docs_error")), None)
        if missing:
            parts.append(f"<p>The Data Docs site was not rebuilt: {html.escape(str(missing))}</p>")
    else:
        parts.append("<p>Not attached yet (the nightly DAG adds them after this job).</p>")
    parts.append("</section>")
    return "".join(parts)


# --------------------------------------------------------------------------- provenance


def _pairs(items: list[tuple[str, Any]]) -> str:
    return "".join(
        f"{_labelled(key, 'dt')}<dd>{html.escape(_text(value) if value is not None else 'not recorded')}</dd>"
        for key, value in items
    )


def provenance_section(document: dict[str, Any]) -> str:
    """One labelled block: where each input was read from, the row counts, the settings, the run
    (code version, config digest) and what was written."""
    values = {**document.get("inputs", {}), "compliance_rows": document.get("compliance_rows")}
    shown = {k for _, keys in PROVENANCE_GROUPS for k in keys}
    groups = [(group, [(k, values.get(k)) for k in keys]) for group, keys in PROVENANCE_GROUPS]
    others = [(k, v) for k, v in values.items() if k not in shown]
    if others:
        groups.append(("other", others))
    written = list(document.get("outputs", {}).items())
    pdf = document.get("pdf")
    if pdf is not None and not pdf.get("rendered"):
        written.append(("pdf", f"not rendered: {pdf.get('reason')}"))
    groups.append(("outputs", written))
    blocks = "".join(_labelled(group, "dt", ' class="group"') + _pairs(items) for group, items in groups)
    return (
        f'<section id="provenance"><h2>Inputs and provenance</h2><dl class=provenance>{blocks}</dl></section>'
    )


def _moment(text: str | None) -> str:
    if not text:
        return "an unrecorded time"
    return f"{datetime.fromisoformat(text).astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"


def _pdf_note(document: dict[str, Any]) -> str:
    pdf = document.get("pdf")
    if pdf is None or pdf.get("rendered"):
        return ""
    return f" No PDF copy: {html.escape(str(pdf.get('reason')))}."


def _sign_off(decision: dict[str, Any] | None) -> str:
    """The reviewer's decision on this report, once made (compliance_sign_off records it)."""
    if not decision:
        return ""
    verdict = "Signed off" if decision.get("decision") == "approved" else "Rejected"
    comment = f": “{html.escape(str(decision['comment']))}”" if decision.get("comment") else ""
    return (
        f'<p class="sign-off {html.escape(str(decision.get("decision")))}"><strong>{verdict}</strong> by '
        f"{html.escape(str(decision.get('by')))} at {html.escape(_moment(decision.get('at')))}{comment} "
        f"(report {html.escape(str(decision.get('report_digest', ''))[:19])}…)</p>"
    )


_DAY_STATES = {
    "reconciled_provisional": "reconciled (provisional)",
    "reconciled_final": "reconciled (final)",
    "signed_off": "signed off",
}


def _day_runs(day: dict[str, Any] | None) -> str:
    """The day's state and its runs' figures side by side, as the day states keep them."""
    if not day or not day.get("runs"):
        return ""
    cells = []
    for kind in ("provisional", "final", "manual"):
        run = day["runs"].get(kind)
        if not run:
            continue
        figures = run.get("figures") or {}
        counts = figures.get("window_counts") or {}
        diffs = diffs_text(figures)
        cells.append(
            f"<tr><th>{html.escape(kind)}</th><td>{html.escape(str(run.get('status')))}</td>"
            f"<td>{html.escape(str(counts.get('exact_windows', '-')))} / "
            f"{html.escape(str(counts.get('streaming_windows', '-')))}</td><td>{html.escape(diffs)}</td>"
            f"<td>{html.escape(str(figures.get('compliance_rows', '-')))}</td>"
            f"<td>{html.escape(_moment(run.get('finished_at')))}</td></tr>"
        )
    state = html.escape(_DAY_STATES.get(str(day.get("state")), str(day.get("state"))))
    return (
        f'<div class="day-runs"><p>Day state: <strong>{state}</strong></p><table><tr><th>run</th>'
        "<th>status</th><th>exact / streamed windows</th><th>diffs</th><th>compliance rows</th>"
        f"<th>finished</th></tr>{''.join(cells)}</table></div>"
    )


def render_html(document: dict[str, Any], plots: dict[str, tuple[bytes, str]]) -> str:
    """The whole report page; ``plots`` maps each plot's name to its PNG bytes and caption."""
    summary = report_summary(document)
    status, day = document["status"], html.escape(document["day"])
    nav = "".join(f'<a href="#{key}">{title}</a>' for key, title in SECTIONS)
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>Reconciliation {day}: {html.escape(status)}</title><style>{STYLE}</style>"
        f"<script>{SCRIPT}</script></head><body>"
        f"<header><h1>Reconciliation, event day {day} "
        f'<span class="badge {html.escape(status)}">{html.escape(status.replace("_", " ").upper())}</span>'
        "</h1><div class=muted>Sensor windows and ad matches: the stream against an exact recompute from "
        f"the raw archive. Run at {html.escape(_moment(document.get('inputs', {}).get('run_at')))}."
        f"{_pdf_note(document)}</div>{_sign_off(document.get('sign_off'))}{_day_runs(document.get('day_state'))}"
        "</header>"
        f"<nav>{nav}</nav><main>"
        + summary_section(summary)
        + plots_section(plots)
        + details_section(document)
        + provenance_section(document)
        + "</main></body></html>"
    )
