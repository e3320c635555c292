"""The "Streaming pipeline" page inside the Airflow UI: a FastAPI app the api-server mounts (a plugin).

- ``/streaming-pipeline/``: the page, server-rendered HTML that reloads itself every 10 s;
- ``/streaming-pipeline/api/health``: the same data as JSON;
- ``/streaming-pipeline/reports/<day>/<file>``: a nightly reconciliation report, read through the
  file layer (so it works on S3 too);
- ``/streaming-pipeline/metrics``: for Prometheus, how many event days are past their final
  reconciliation's deadline (the ReconciliationOverdue alert), whether Kafka answers the pipeline's
  client config (KafkaUnreachable, the one page of a Kafka outage) and whether the store of its data
  answers (StoreUnreachable, the one page of a storage outage); open, as exporters are.

Airflow mounts plugin apps without its login in front of them, so every other route checks the caller's
JWT as the REST API does (``get_user``: the ``Authorization: Bearer`` header, else the ``_token``
cookie the UI's login sets, which the browser sends with the page the UI shows in its iframe) and
that the user may see the UI (``requires_access_view``). A browser that is not logged in is sent to
the login page; the JSON and report routes answer 401/403.

The UI shows the page in the nav (``destination: nav``) and as a tab on every DAG's page
(``destination: dag``; Airflow 3.3 has no way to limit a tab to some DAGs); on a supervisor DAG the
tab highlights that DAG's app. The page only reads: its action links open the ``pipeline_control``
and ``checkpoint_reset`` DAGs, with the params to enter.
"""

from __future__ import annotations

import html
import logging
import re
import urllib.parse
from datetime import UTC, datetime
from typing import Annotated, Any

from airflow.plugins_manager import AirflowPlugin
from airflow.sdk.exceptions import AirflowFailException
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from stream_pipelines.airflow import health, task_config
from stream_pipelines.airflow.nightly import first_event_day
from stream_pipelines.core import store
from stream_pipelines.core.registry import query_of
from stream_pipelines.kafka import clients
from stream_pipelines.observability import graphs, runbooks
from stream_pipelines.reconciliation import days

# Where Airflow mounts the page; the alert rules link it and its runbooks under the same prefix.
URL_PREFIX = runbooks.PAGE_PREFIX
PAGE_NAME = "Streaming pipeline"
REFRESH_S = 10
_REPORT_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
_REPORT_FILE = re.compile(r"[A-Za-z0-9_.-]+\.(html|json|png)")
_MEDIA_TYPES = {"html": "text/html; charset=utf-8", "json": "application/json", "png": "image/png"}
KAFKA_UP_METRIC = "pipeline_kafka_up"
STORE_UP_METRIC = "pipeline_store_up"
# Under Prometheus' default scrape timeout (10 s), so that a cluster or store that does not answer still
# gives a sample, 0, rather than a failed scrape. The two probes run at once.
KAFKA_PROBE_TIMEOUT_S = 5.0
STORE_PROBE_TIMEOUT_S = 5.0
log = logging.getLogger(__name__)


class _LoginRequired(Exception):
    """An anonymous browser asked for the page: it is sent to Airflow's login instead."""


class _MetadataDatabaseAway(Exception):
    """Airflow checks a token against its revoked tokens in the metadata database: while the database is
    away no login can be checked, so nothing is served but a page that says so."""


async def _airflow_user(request: Request) -> Any:
    """The logged-in user, checked as the REST API checks it; raises 401/403 like it does."""
    from airflow.api_fastapi.auth.managers.models.resource_details import AccessView
    from airflow.api_fastapi.core_api.security import bearer_scheme, get_user, requires_access_view
    from sqlalchemy.exc import DBAPIError

    try:
        user = await get_user(request, None, await bearer_scheme(request))
    except DBAPIError as error:
        raise _MetadataDatabaseAway(_database_error(error)) from None
    requires_access_view(AccessView.WEBSITE)(request, user)
    return user


async def _page_user(request: Request) -> Any:
    try:
        return await _airflow_user(request)
    except HTTPException as error:
        if error.status_code == 401:
            raise _LoginRequired from error
        raise


def create_app() -> FastAPI:
    app = FastAPI(title=PAGE_NAME, docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(_LoginRequired)
    async def to_login(request: Request, _error: _LoginRequired) -> Response:
        from airflow.api_fastapi.app import get_auth_manager

        return RedirectResponse(get_auth_manager().get_url_login(next_url=str(request.url)), status_code=303)

    @app.exception_handler(_MetadataDatabaseAway)
    async def database_away(request: Request, error: _MetadataDatabaseAway) -> Response:
        why = metadata_database_notice(str(error))
        if request.url.path.endswith("/api/health"):
            return JSONResponse({"metadata_database_away": str(error), "detail": why}, status_code=503)
        return HTMLResponse(f"<h1>{PAGE_NAME}</h1><p role='alert'>{html.escape(why)}</p>", status_code=503)

    @app.exception_handler(AirflowFailException)
    async def invalid_config(_request: Request, error: AirflowFailException) -> Response:
        # task_config's refusal (an expired client certificate, a key that no longer opens): the page
        # says what to fix instead of failing.
        return HTMLResponse(
            f"<h1>{PAGE_NAME}</h1><p role='alert'>{html.escape(str(error))}</p>", status_code=503
        )

    @app.get("/", response_class=HTMLResponse)
    def page(
        _user: Annotated[Any, Depends(_page_user)], dag_id: str | None = None, hours: int = graphs.HOURS
    ) -> str:
        if hours not in graphs.WINDOWS:
            raise HTTPException(
                400, f"hours={hours}: the graphs show {', '.join(map(str, graphs.WINDOWS))} hours"
            )
        collected = health.collect(
            task_config(), metadata_database_away=metadata_database_away, graph_hours=hours
        )
        return render_page(collected, focus=health.app_of_dag(dag_id))

    @app.get("/runbooks", response_class=HTMLResponse)
    def runbooks_page(_user: Annotated[Any, Depends(_page_user)]) -> str:
        return render_runbooks(runbooks.read())

    @app.get("/api/health")
    def health_json(_user: Annotated[Any, Depends(_airflow_user)]) -> JSONResponse:
        collected = health.collect(task_config(), metadata_database_away=metadata_database_away)
        return JSONResponse(collected.as_json())

    @app.get("/metrics")
    def metrics() -> Response:
        # Open like any Prometheus exporter (Prometheus has no Airflow login): it says only how many
        # event days are past their final reconciliation's deadline, and whether Kafka and the store answer.
        return Response(metrics_exposition(task_config()), media_type="text/plain; version=0.0.4")

    @app.get("/reports/{day}/{name}")
    def report_file(day: str, name: str, _user: Annotated[Any, Depends(_airflow_user)]) -> Response:
        match = _REPORT_FILE.fullmatch(name)
        if not _REPORT_DAY.fullmatch(day) or match is None:
            raise HTTPException(404, f"no report file {day}/{name}")

        target = health.reconciliation_root(task_config()) / day / name
        try:
            data = store.read_bytes(target)
        except (FileNotFoundError, OSError) as error:
            raise HTTPException(404, f"{day}/{name}: {error}") from error
        return Response(data, media_type=_MEDIA_TYPES[match.group(1)])

    return app


def metadata_database_away() -> str | None:
    """None when Airflow's metadata database answers a query through the api-server's own engine; else
    the error's first line (never the URL, which holds the password)."""
    from airflow import settings
    from sqlalchemy import text

    try:
        with settings.engine.connect() as connection:
            connection.execute(text("select 1"))
    except Exception as error:  # any failure to reach it is what the page reports
        return _database_error(error)
    return None


def _database_error(error: Exception) -> str:
    """The error's type and its driver's first line: says why, never the URL (it holds the password)."""
    first_line = str(getattr(error, "orig", None) or error).strip().splitlines()[:1]
    return f"{type(error).__name__}: {first_line[0] if first_line else 'no answer'}"


def metadata_database_notice(why: str) -> str:
    return (
        f"Airflow's metadata database is away ({why}). Airflow's own pages, logins, the scheduling of "
        "tasks and the sign-off wait for it; the drivers stream on."
    )


def metrics_exposition(
    config: Any,
    kafka_timeout_s: float = KAFKA_PROBE_TIMEOUT_S,
    store_timeout_s: float = STORE_PROBE_TIMEOUT_S,
) -> str:
    """What Prometheus scrapes, each part on its own: whether Kafka answers and whether the store does
    (probed at once), and the overdue event days, read from the store's day records only when the store
    answered. A store that is down or hangs so gives its own sample, 0, and never fails the scrape or
    holds it past its timeout: StoreUnreachable pages for it, not ReconciliationOverdue's "does not
    answer"."""
    control = store.location(config.spark.extra_conf, config.data_path("control"))
    probe = store.start_probe(control)
    kafka = kafka_exposition(config, kafka_timeout_s)
    store_text, answered = store_exposition(control, probe, store_timeout_s)
    return (overdue_exposition(config) if answered else "") + kafka + store_text


def store_exposition(folder: Any, probe: Any, timeout_s: float) -> tuple[str, bool]:
    """Prometheus' text format: whether the store holding ``folder`` (the control records, beside the
    day records and the drivers' checkpoints) answered ``probe``, a listing of it, within ``timeout_s``
    (``pipeline_store_up``); when not, why (``cause``): ``no_answer``, or ``error`` when it failed the
    request (the api-server's log has the error). And whether it answered."""
    try:
        store.probe_outcome(folder, probe, timeout_s)
        cause = None
    except store.StoreNoAnswer:
        cause = "no_answer"
    except Exception as error:  # any failure of the store's client is the store failing the request
        log.warning("the store failed a listing of %s: %s: %s", folder, type(error).__name__, error)
        cause = "error"
    text = _up_gauge(
        STORE_UP_METRIC,
        f"the store of the pipeline's data answers a listing of the control records within {timeout_s:g} s",
        {"location": str(folder)},
        cause,
    )
    return text, cause is None


def overdue_exposition(config: Any, now: float | None = None) -> str:
    """Prometheus' text format: the event days past their final deadline (reconciliation.days)."""
    moment = datetime.now(UTC) if now is None else datetime.fromtimestamp(now, UTC)
    overdue = days.overdue_days(config, first_event_day().date(), moment)
    name = days.OVERDUE_METRIC
    return (
        f"# HELP {name} Event days past their end + late horizon + reconciliation.final_deadline "
        "without a final reconciliation.\n"
        f"# TYPE {name} gauge\n"
        f"{name} {len(overdue)}\n"
    )


def kafka_exposition(config: Any, timeout_s: float = KAFKA_PROBE_TIMEOUT_S) -> str:
    """Prometheus' text format: whether the cluster answers a metadata request made with the pipeline's
    own client config (``pipeline_kafka_up``), and when not, why (``cause``): ``no_answer`` for a cluster
    that is down or out of reach, ``refused`` for one that refuses the login or the TLS handshake (the
    api-server's log has what it said). Every app reads Kafka with the same config, so either way no
    app reads."""
    try:
        cause = None if clients.cluster_answers(config, timeout_s) else "no_answer"
    except clients.KafkaAccessRefused as refusal:
        log.warning("Kafka refused the pipeline's client: %s", refusal)
        cause = "refused"
    return _up_gauge(
        KAFKA_UP_METRIC,
        f"Kafka answers the pipeline's client config within {timeout_s:g} s",
        {"bootstrap_servers": config.kafka.bootstrap_servers},
        cause,
    )


def _up_gauge(name: str, when: str, labels: dict[str, str], cause: str | None) -> str:
    """One probe's gauge in Prometheus' text format: 1 when ``when`` holds, else 0 with a ``cause`` label."""
    pairs = {**labels, **({"cause": cause} if cause is not None else {})}
    rendered = ",".join(f'{key}="{_label_value(value)}"' for key, value in pairs.items())
    return (
        f"# HELP {name} 1 when {when}, else 0 with the cause.\n"
        f"# TYPE {name} gauge\n"
        f"{name}{{{rendered}}} {0 if cause else 1}\n"
    )


def _label_value(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


# --------------------------------------------------------------------------- HTML

_STYLE = """
body{font:13px/1.4 system-ui,sans-serif;margin:12px;color:#1a202c;background:#fff}
h1{font-size:18px;margin:0 0 4px} h2{font-size:15px;margin:18px 0 6px}
.meta{color:#555;margin-bottom:8px} table{border-collapse:collapse;width:100%}
th,td{border:1px solid #d8dde3;padding:4px 6px;text-align:left;vertical-align:top}
th{background:#f1f4f7;font-weight:600} td.num{text-align:right;font-variant-numeric:tabular-nums}
.state{font-weight:600;padding:1px 6px;border-radius:8px;white-space:nowrap}
.s-running{background:#c6f6d5}.s-starting{background:#bee3f8}.s-paused{background:#fefcbf}
.s-stopped{background:#e2e8f0}.s-crash-looping,.s-stuck,.s-unreachable{background:#fed7d7;color:#9b2c2c}
.bad{color:#c53030;font-weight:600}.unreachable{color:#c53030;font-style:italic}
.small{color:#555;font-size:12px} tr.focus>td{background:#fffbea}
td.queries{min-width:220px} td.actions{min-width:180px} .scroll{overflow-x:auto}
code{white-space:normal;word-break:break-all}
.stalled{background:#fed7d7;font-weight:600} code{font-size:12px;background:#f1f4f7;padding:0 3px}
ul{margin:0;padding-left:16px}
h3{font-size:13px;margin:10px 0 2px} .graphs{display:flex;flex-wrap:wrap;gap:6px}
.graphs svg{width:420px;height:auto;border:1px solid #d8dde3}
"""

# The UI shows the page in a sandboxed iframe that may not navigate the top window; Airflow's own
# pages are opened through the UI's router instead (same origin), or plainly outside the iframe.
_SCRIPT = """
document.addEventListener('click', function (event) {
  var link = event.target.closest('a[data-airflow]');
  if (!link || window.parent === window) return;
  event.preventDefault();
  window.parent.history.pushState({}, '', link.getAttribute('href'));
  window.parent.dispatchEvent(new PopStateEvent('popstate'));
});
"""


def _e(value: object) -> str:
    return html.escape(str(value))


def _num(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}" if digits else f"{value:,.0f}"


_APP_HEADINGS = [
    "App",
    "State",
    "Owner / heartbeat",
    "Queries: committed batch, watermark, lag",
    "Input rows/s",
    "Processed rows/s",
    "State rows",
    "Late drops",
    "Quarantined",
    "Restarts",
    "Alerts",
    "Actions",
]


def _lag_rule(page: health.HealthPage) -> str:
    if page.lag_factor is None:
        return _tag("span", f"Watermark lag {_e(page.lag_rule)}", class_="unreachable")
    return (
        f"Watermark lag alerts above {page.lag_factor:g} &times; the watermark delay ({_e(page.lag_rule)})."
    )


def _metadata_database(page: health.HealthPage) -> str:
    if page.metadata_database_away is None:
        return ""
    notice = metadata_database_notice(page.metadata_database_away)
    return _tag("p", _e(notice), role="alert", class_="unreachable")


def render_page(page: health.HealthPage, focus: str | None = None) -> str:
    rows = [_app_row(row, row.app == focus) for row in page.rows]
    partitions = "\n".join(_partitions(row) for row in page.rows if row.partitions)
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><meta http-equiv="refresh" content="{REFRESH_S}">
<title>{_e(PAGE_NAME)}</title><style>{_STYLE}</style></head>
<body>
<h1>{_e(PAGE_NAME)}</h1>
<div class="meta">As of {_e(page.generated_at)} (reloads every {REFRESH_S} s).
Counts: {_e(page.prometheus_source)}. Alerts: {_e(page.alerts_source)}.
{_lag_rule(page)}</div>
{_metadata_database(page)}
<div class="scroll">{_table("apps", _APP_HEADINGS, rows)}</div>
<h2 id="graphs">The last {_window(page.graph_hours)}</h2>
{_graph_windows(page, focus)}
{_graphs(page)}
<h2>Sensors topic: newest event time per partition</h2>
{partitions or '<p class="small">No app exports per-partition event time right now.</p>'}
<h2>Active alerts</h2>
{_alerts(page)}
<h2>Event days: from open to signed off</h2>
{_event_days(page)}
<h2>Reconciliation reports: the last run of each day</h2>
{_reconciliation(page)}
<script>{_SCRIPT}</script>
</body></html>"""


def _window(hours: float) -> str:
    if hours < 1:  # shorter than the page offers (tests draw a minute)
        return f"{hours * 60:g} minutes"
    return "hour" if hours == 1 else f"{hours:g} hours"


def _graph_windows(page: health.HealthPage, focus: str | None) -> str:
    """Links to the page with the graphs over each window it offers; a page opened from an app's DAG
    stays that app's page, at its graphs."""
    dag = next((row.supervisor_dag for row in page.rows if row.app == focus), None)

    def href(hours: int) -> str:
        asked = {"dag_id": dag, "hours": hours} if dag else {"hours": hours}
        return f"?{urllib.parse.urlencode(asked)}#graphs{f'-{focus}' if dag else ''}"

    links = [
        _e(f"{hours} h") if hours == page.graph_hours else _tag("a", _e(f"{hours} h"), href=href(hours))
        for hours in graphs.WINDOWS
    ]
    return _small("Window: " + " · ".join(links))


def _graphs(page: health.HealthPage) -> str:
    """Each app's graphs (``observability.graphs``), or why there are none."""
    if not page.graphs:
        return _tag("p", f"No graphs: Prometheus is {_e(page.prometheus_source)}.", class_="unreachable")
    sections = []
    for drawn in page.graphs:
        charts = drawn.svgs()  # first: a graph that cannot be drawn becomes the app's error
        if drawn.error:
            body = _tag("p", f"No graphs: {_e(drawn.error)}", class_="unreachable")
        else:
            body = _tag("div", "".join(charts), class_="graphs")
        sections.append(_tag("section", _tag("h3", _e(drawn.app)) + body, id=f"graphs-{drawn.app}"))
    return "\n".join(sections)


def render_runbooks(rendered: runbooks.RenderedRunbooks) -> str:
    """The on-call runbooks (docs/runbooks.md as the package ships it), each section at its anchor."""
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Runbooks: {_e(PAGE_NAME)}</title>
<style>{_STYLE} body{{max-width:60em}} h2{{border-top:1px solid #d8dee4;padding-top:8px}}
:target{{background:#fefcbf}}</style></head>
<body><p class="small"><a href="./">{_e(PAGE_NAME)}</a></p>
{rendered.html}
</body></html>"""


def _tag(name: str, content: str, **attributes: object) -> str:
    """``<name attr="value">content</name>``; attribute names with ``_`` become ``-``, values escaped."""
    attrs = "".join(
        f' {key.rstrip("_").replace("_", "-")}="{_e(value)}"'
        for key, value in attributes.items()
        if value is not None and value != ""
    )
    return f"<{name}{attrs}>{content}</{name}>"


def _small(text: str) -> str:
    return _tag("div", text, class_="small")


def _app_row(row: health.AppRow, focus: bool) -> str:
    dag_link = _tag("a", _e(row.supervisor_dag), data_airflow="1", href=f"/dags/{row.supervisor_dag}")
    unreachable = (
        _tag("div", f"metrics {_e(row.metrics_unreachable)}", class_="unreachable small")
        if row.metrics_unreachable
        else ""
    )
    state = _tag("span", _e(row.state), class_=f"state s-{row.state}", data_field="state")
    if row.owner:
        owner = _e(row.owner) + _small(f"heartbeat {_e(health.duration_text(row.heartbeat_age_s))} ago")
    else:
        owner = _tag("span", "no lease", class_="small")
    figures = (
        ("input_rows_per_s", row.input_rows_per_s, 1),
        ("processed_rows_per_s", row.processed_rows_per_s, 1),
        ("state_rows", row.state_rows, 0),
    )
    if row.metrics_unreachable:
        rates = [_tag("td", "unreachable", class_="unreachable", data_field=name) for name, _v, _d in figures]
    else:
        rates = [
            _tag("td", _num(value, digits), class_="num", data_field=name) for name, value, digits in figures
        ]
    if row.late_drops is None:
        counts = [_tag("td", "unreachable", class_="unreachable", colspan=2, title=row.counts_source)]
    else:
        counts = [
            _tag(
                "td", _num(row.late_drops, 0), class_="num", data_field="late_drops", title=row.counts_source
            ),
            _tag(
                "td",
                _num(row.quarantined, 0) + _small(_e(row.counts_source)),
                class_="num",
                data_field="quarantined",
                title=row.counts_source,
            ),
        ]
    restarts = _tag(
        "td",
        f"{row.restarts_in_window} / {row.restart_limit}"
        + _small(f"in {_e(row.restart_window)}")
        + (_small(f"last: {_e(row.last_restart)}") if row.last_restart else ""),
        class_="num bad" if row.restarts_in_window >= row.restart_limit else "num",
        data_field="restarts",
    )
    alerts = "".join(_tag("li", _e(a["labels"].get("alertname")), class_="bad") for a in row.alerts)
    actions = "".join(
        _tag("a", dag, data_airflow="1", href=row.actions[dag])
        + _small(f"trigger with <code>{_e(row.actions[dag + '_params'])}</code>")
        for dag in ("pipeline_control", "checkpoint_reset")
    )
    cells = [
        _tag(
            "td",
            _tag("b", _e(row.app))
            + _small(dag_link)
            + _small(_tag("a", "graphs", href=f"#graphs-{row.app}"))
            + unreachable,
        ),
        _tag("td", state + _small(_e(row.state_detail))),
        _tag("td", owner, data_field="owner"),
        _tag("td", _tag("ul", "".join(_query(query) for query in row.queries)), class_="queries"),
        *rates,
        *counts,
        restarts,
        _tag("td", _tag("ul", alerts) if alerts else _tag("span", "none", class_="small")),
        _tag("td", actions, class_="small actions"),
    ]
    return _tag(
        "tr", "\n".join(cells), id=f"app-{row.app}", data_app=row.app, class_="focus" if focus else None
    )


def _query(query: health.QueryHealth) -> str:
    if query.committed_batch is not None:
        committed = (
            f"batch {_tag('span', str(query.committed_batch), data_field='committed_batch')} "
            f"committed {_e(health.duration_text(query.committed_age_s))} ago"
        )
    else:
        committed = "no commit yet"
    if query.batch_id is not None:
        committed += f", last reported {_tag('span', str(query.batch_id), data_field='batch_id')}"
    if query.up is False:
        committed += " " + _tag("span", "query down", class_="bad")
    watermark = ""
    if query.watermark:
        lag = _tag(
            "span",
            _e(health.duration_text(query.watermark_lag_s)),
            class_="bad" if query.watermark_lag_high else None,
            data_field="watermark_lag_s",
        )
        threshold = _tag(
            "span",
            _e(health.duration_text(query.watermark_lag_threshold_s)),
            data_field="watermark_lag_threshold_s",
        )
        watermark = _small(f"watermark {_e(query.watermark)}, lag {lag} (alert &gt; {threshold})")
    name = _tag("b", _e(query_of(query.query)))
    return _tag("li", f"{name}: {committed}{watermark}", data_query=query.query)


def _table(table_id: str, headings: list[str], rows: list[str], **attributes: object) -> str:
    head = _tag("thead", _tag("tr", "".join(_tag("th", _e(h)) for h in headings)))
    return _tag("table", head + _tag("tbody", "\n".join(rows)), id=table_id, **attributes)


def _partitions(row: health.AppRow) -> str:
    rows = [
        _tag(
            "tr",
            _tag("td", _e(p.topic))
            + _tag("td", str(p.partition), class_="num")
            + _tag("td", _e(p.max_event_time))
            + _tag("td", _e(health.duration_text(p.behind_s)), class_="num")
            + _tag("td", f"stalled: {_e(p.why)}" if p.stalled else "ok"),
            data_partition=p.partition,
            class_="stalled" if p.stalled else None,
        )
        for p in row.partitions
    ]
    headings = [f"Topic ({row.app})", "Partition", "Newest event time", "Behind newest partition", "Status"]
    return _table(f"partitions-{row.app}", headings, rows, class_="partitions")


def _alerts(page: health.HealthPage) -> str:
    if page.alerts_source.startswith(("unreachable", "not configured")):
        return _tag("p", f"Alertmanager {_e(page.alerts_source)}", class_="unreachable")
    if not page.alerts:
        return _tag("p", "No active alerts.", class_="small")
    rows = [
        _tag(
            "tr",
            _tag("td", _runbook_link(alert["labels"]), class_="bad")
            + "".join(_tag("td", _e(alert["labels"].get(key, ""))) for key in ("severity", "app"))
            + _tag("td", _e(alert.get("annotations", {}).get("summary", "")))
            + _tag("td", _e(alert.get("startsAt", ""))),
        )
        for alert in page.alerts
    ]
    return _table("alerts", ["Alert", "Severity", "App", "Summary", "Since"], rows)


def _runbook_link(labels: dict[str, str]) -> str:
    """The alert's name, linking its runbook (beside this page, under the same prefix: in the UI's iframe,
    the link opens the runbook in the iframe itself, which its sandbox allows)."""
    section = runbooks.anchor(labels.get("alertname", ""), labels.get("case"))
    return _tag("a", _e(labels.get("alertname")), href=f"runbooks#{section}")


def _reconciliation(page: health.HealthPage) -> str:
    if page.reconciliation_error:
        return _tag("p", f"reports {_e(page.reconciliation_error)}", class_="unreachable")
    if not page.reconciliation:
        return _tag("p", "No reconciliation report yet.", class_="small")
    rows = [
        _tag(
            "tr",
            _tag("td", _e(day.day))
            + _tag(
                "td", _e(day.status), class_="bad" if day.status == "failed" else None, data_field="status"
            )
            + _tag("td", str(day.unexplained), class_="num", data_field="unexplained")
            + _tag("td", str(day.pending), class_="num", data_field="pending")
            + _tag("td", _tag("a", "report", href=f"{URL_PREFIX}/reports/{day.report}/report.html")),
            data_day=day.day,
        )
        for day in page.reconciliation
    ]
    headings = ["Event day", "Status", "Unexplained", "Pending deliveries", "Report"]
    return _table("reconciliation", headings, rows)


_STATE_LABELS = {
    "open": "open",
    "closed": "closed",
    "reconciled_provisional": "reconciled (provisional)",
    "final": "final",
    "reconciled_final": "reconciled (final)",
    "signed_off": "signed off",
}


def _run_cell(run: dict[str, Any] | None, kind: str) -> str:
    if not run or not run.get("finished_at"):
        started = (run or {}).get("started_at")
        return _small(f"running since {_e(started)}") if started else _small("not run")
    figures = run.get("figures", {})
    counts = figures.get("window_counts", {})
    status = str(run.get("status"))
    lines = [
        _tag("span", _e(status), class_="bad" if status == "failed" else None, data_field=f"{kind}-status"),
        f"{_e(counts.get('exact_windows', '-'))} exact / "
        f"{_e(counts.get('streaming_windows', '-'))} streamed windows",
        "diffs: " + _e(days.diffs_text(figures)),
        f"ledger {_e(figures.get('late_event_ledger', '-'))} · "
        f"compliance rows {_e(figures.get('compliance_rows', '-'))}",
        _small(f"{_e(run.get('finished_at'))} · {_e(run.get('report_digest', ''))[:19]}"),
    ]
    return "<br>".join(lines)


def _sign_off_cell(day: health.EventDay) -> str:
    decision = day.sign_off
    if not decision:
        return _small("awaiting a reviewer" if day.state == "reconciled_final" else "-")
    text = f"{_e(decision.get('decision'))} by {_e(decision.get('by'))}"
    comment = f"<br>“{_e(decision.get('comment'))}”" if decision.get("comment") else ""
    return (
        _tag(
            "span",
            text,
            class_="bad" if decision.get("decision") == "rejected" else None,
            data_field="sign-off",
        )
        + comment
        + _small(_e(decision.get("at")))
    )


def _event_days(page: health.HealthPage) -> str:
    if page.days_error:
        return _tag("p", f"day records {_e(page.days_error)}", class_="unreachable")
    if not page.days:
        return _tag(
            "p", "No event day checked yet (the reconciliation_days DAG records them).", class_="small"
        )
    rows = []
    for day in page.days:
        state = _tag("span", _e(_STATE_LABELS.get(day.state, day.state)), class_="state", data_field="state")
        if day.overdue:
            state += _tag("div", "final run overdue", class_="bad")
        waiting = (
            _tag("ul", "".join(_tag("li", _e(line)) for line in day.waiting_for)) if day.waiting_for else ""
        )
        rows.append(
            _tag(
                "tr",
                _tag("td", _e(day.day))
                + _tag("td", state + waiting)
                + _tag("td", _run_cell(day.provisional, "provisional"))
                + _tag("td", _run_cell(day.final, "final"))
                + _tag("td", _sign_off_cell(day))
                + _tag("td", _tag("a", "report", href=f"{URL_PREFIX}/reports/{day.day}/report.html")),
                data_day=day.day,
            )
        )
    headings = ["Event day", "State", "Provisional run", "Final run", "Sign-off", "Report"]
    return _table("days", headings, rows)


# --------------------------------------------------------------------------- the plugin


class StreamingPipelinePlugin(AirflowPlugin):
    name = "streaming_pipeline"
    fastapi_apps = [{"app": create_app(), "url_prefix": URL_PREFIX, "name": PAGE_NAME}]
    external_views = [
        {
            "name": PAGE_NAME,
            "href": f"{URL_PREFIX}/",
            "destination": "nav",
            "url_route": health.PAGE_ROUTE,
            "nav_top_level": True,
        },
        {
            "name": PAGE_NAME,
            "href": f"{URL_PREFIX}/?dag_id={{DAG_ID}}",
            "destination": "dag",
            "url_route": f"{health.PAGE_ROUTE}-dag",
        },
    ]
