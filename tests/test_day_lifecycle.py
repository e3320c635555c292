"""A day from open to signed off with no manual trigger, against real Airflow (api-server, two
schedulers and dag-processor on PostgreSQL, as `make up` starts them), the real broker, the real apps
and the real nightly job.

Yesterday (UTC) is day D (the day before, in a day's first half hour). Its events and later ones
(which carry every stream's watermark and every partition past D's end) are in Kafka, and so is a record
stamped after D's late horizon, set to end just after them, in every partition; the apps drain them
once (available-now), so D is final when the watcher first looks. Then, with nobody triggering a
reconciliation:

- the watcher asks for D's final run, which runs once, on D's partition, though the metadata database is
  stopped for 20 s just after the run is asked for (when that loses the ask's asset event with the
  watcher's report, the ask is repeated after the claim wait);
- past the (shortened) deadline D shows as overdue to Prometheus' scrape until its final run is recorded;
- the final report asks the named reviewer for a sign-off in Required Actions: anyone else is refused;
  a rejection is recorded and leaves D unsigned; a sign-off asked again is approved in the browser;
- the final run's job writes its output into its task log as it runs;
- the page shows each step.

A provisional run before the final one (D closed first), a rerun of D and the sign-off it then needs are
the day records' (tests/unit/test_day_states.py) and the job's (tests/test_reconcile.py): here each
would add a nightly run, two to three minutes, and no wiring that the final run does not already go
through (the same DAG; a provisional run skips ask_sign_off).
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from stream_pipelines.apps import ad_matching, raw_archive, sensor_aggregation
from stream_pipelines.core import store
from stream_pipelines.devtools import stack
from stream_pipelines.devtools.processes import free_port, stop_processes
from stream_pipelines.kafka.topics import ensure_topics
from stream_pipelines.observability.monitoring_rules import AIRFLOW_API_SERVER
from stream_pipelines.reconciliation import days
from tests.conftest import (
    make_overrides_config,
    pipeline_environment,
    private_source_topics,
    run_in_process,
)

pytestmark = [pytest.mark.broker, pytest.mark.slow]
DAGS = ("reconciliation_days", "nightly_reconciliation", "compliance_sign_off")
USERS = {"admin": "admin", "reviewer": "reviewer", "outsider": "outsider"}
# How long a reviewer takes at least before answering a request (see hitl_pending).
HUMAN_READING_S = 10
METADATA_DB_DOWN_S = 20


class Rest:
    def __init__(self, base: str) -> None:
        self.base = base

    def call(self, user: str, method: str, path: str, body: dict | None = None) -> dict:
        token = self._send("POST", "/auth/token", {"username": user, "password": USERS[user]})["access_token"]
        return self._send(method, path, body, token)

    def status(self, user: str, method: str, path: str, body: dict | None = None) -> int:
        try:
            self.call(user, method, path, body)
        except urllib.error.HTTPError as error:
            return error.code
        return 200

    def _send(self, method: str, path: str, body: dict | None = None, token: str | None = None) -> dict:
        request = urllib.request.Request(
            self.base + path,
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={
                "Content-Type": "application/json",
                **({"Authorization": f"Bearer {token}"} if token else {}),
            },
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read() or b"{}")


def poll(check, timeout_s: float, what: str, every_s: float = 3.0):
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            found = check()
        except (OSError, KeyError, ValueError) as error:  # not up yet, not parsed yet
            last_error, found = error, None
        if found:
            return found
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what} (last error: {last_error})")


def ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def day_events(config, day_start: datetime) -> list[tuple[str, int, int, bytes]]:
    """D's readings (three sensors, every sensor partition), impressions and clicks (one click matches)."""
    topics = config.kafka.topics
    events = []
    for n in range(12):
        moment = day_start + timedelta(hours=10, minutes=n)
        reading = {
            "event_id": f"r{n}",
            "sensor_id": f"sensor-000{n % 3 + 1}",
            "temperature": 20.0 + n,
            "ts": moment.isoformat(),
        }
        events.append(
            (topics.sensors.name, n % topics.sensors.partitions, ms(moment), json.dumps(reading).encode())
        )
    for n in range(6):
        shown = day_start + timedelta(hours=11, minutes=n)
        impression = {
            "event_id": f"i{n}",
            "ad_id": f"ad-{n % 2}",
            "user_id": f"u{n}",
            "shown_at": shown.isoformat(),
        }
        events.append(
            (
                topics.impressions.name,
                n % topics.impressions.partitions,
                ms(shown),
                json.dumps(impression).encode(),
            )
        )
        if n % 2 == 0:
            clicked = shown + timedelta(minutes=1)
            click = {
                "event_id": f"c{n}",
                "ad_id": f"ad-{n % 2}",
                "user_id": f"u{n}",
                "clicked_at": clicked.isoformat(),
            }
            events.append(
                (topics.clicks.name, n % topics.clicks.partitions, ms(clicked), json.dumps(click).encode())
            )
    return events


def one_per_partition(config, moment: datetime, tag: str) -> list[tuple[str, int, int, bytes]]:
    """An event stamped ``moment`` in every partition of every source topic."""
    topics = config.kafka.topics
    events = []
    for topic, kind in (
        (topics.sensors, "ts"),
        (topics.impressions, "shown_at"),
        (topics.clicks, "clicked_at"),
    ):
        for partition in range(topic.partitions):
            body = {
                "event_id": f"{tag}-{topic.name}-{partition}",
                "ts": moment.isoformat(),
                kind: moment.isoformat(),
            }
            body |= (
                {"sensor_id": "sensor-0001", "temperature": 21.5}
                if kind == "ts"
                else {"ad_id": "ad-9", "user_id": tag}
            )
            events.append((topic.name, partition, ms(moment), json.dumps(body).encode()))
    return events


def produce(config, events: list[tuple[str, int, int, bytes]]) -> None:
    from confluent_kafka import Producer

    producer = Producer({**config.kafka_client_config(), "linger.ms": 5})
    for topic, partition, timestamp_ms, value in events:
        producer.produce(topic, value=value, partition=partition, timestamp=timestamp_ms)
    assert producer.flush(30) == 0


def drain(spark, config, *apps) -> None:
    """Each app's queries drained (available-now) in the session's Spark, with its batch log (what the
    day watcher reads): this test is about the days' orchestration, and a spark-submit per app would add
    a JVM's start to each drain (the front door is tests/test_launch.py's and the cluster tests')."""
    for app in apps:
        code, _ = run_in_process(spark, config, app, batch_log=True)
        assert code == 0, f"{app.APP} did not drain"


def compliance_rows(config, day: str) -> list[dict]:
    """D's compliance rows as a plain Parquet reader sees them (the job writes the partition whole)."""
    import pyarrow.parquet as pq

    folder = Path(config.data_path("compliance")) / "sensor_windows" / f"event_date={day}"
    rows = [row for part in sorted(folder.glob("*.parquet")) for row in pq.read_table(part).to_pylist()]
    return sorted(rows, key=lambda r: (str(r["window_start"]), r["sensor_id"]))


@pytest.mark.timeout(2400)
def test_a_day_goes_from_open_to_signed_off_by_itself(
    spark, broker, make_overrides, metadata_database, tmp_path
):
    started = datetime.now(UTC)
    today = datetime(started.year, started.month, started.day, tzinfo=UTC)
    # D is yesterday, and events a minute old carry every watermark past its end. In a day's first half
    # hour they would not (the ads' watermark is 10 minutes behind, windows 5 minutes long): D is then
    # the day before yesterday, and the events after it are stamped yesterday noon, which closes D and
    # leaves yesterday open (a second closed day would queue its own run before D's).
    early = started - today < timedelta(minutes=30)
    day_start = today - timedelta(days=2 if early else 1)
    after_day = day_start + timedelta(days=1, hours=12) if early else started - timedelta(minutes=1)
    day = day_start.date().isoformat()
    # The horizon ends just after the "today" events, so D is final as soon as the archive has read past
    # it; in a day's first half hour that is yesterday noon, which leaves yesterday open.
    horizon_end = after_day + timedelta(seconds=30)
    horizon_s = math.ceil((horizon_end - (day_start + timedelta(days=1))).total_seconds())
    suffix = private_source_topics()[0].rsplit("-", 1)[-1]
    overrides = make_overrides(
        *private_source_topics(),
        f"kafka.topics.sliding_averages.name=sliding-{suffix}",
        f"reconciliation.late_horizon={horizon_s} seconds",
        # D's final run is overdue a second after the horizon: the deadline shows until the run is recorded.
        "reconciliation.final_deadline=1 seconds",
        # The database's outage can take the watcher's report of success, and with it the asset event
        # that asks for D's run: the ask is repeated after this, well past a run's usual claim (a repeat
        # that crosses a late claim queues a run that its claim skips).
        "reconciliation.claim_wait=240 seconds",
    )
    config = make_overrides_config(overrides)
    ensure_topics(config)
    produce(
        config,
        day_events(config, day_start)
        + one_per_partition(config, after_day, "today")
        + one_per_partition(config, horizon_end + timedelta(seconds=2), "after-horizon"),
    )

    port = free_port()
    passwords = tmp_path / "passwords.json"
    passwords.write_text(json.dumps(USERS))
    environment = {
        **stack.airflow_environment(config, metadata_database, port),
        **pipeline_environment(overrides),
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin,reviewer:op,outsider:op",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        stack.START_DATE_VARIABLE: day,
        "PIPELINE_DAYS_WATCH_EVERY": "15 seconds",
        "PIPELINE_COMPLIANCE_REVIEWERS": "reviewer",
    }
    assert stack.migrate_airflow_db(environment) is None
    wanted = (AIRFLOW_API_SERVER, *stack.SCHEDULERS, "airflow-dag-processor")
    components = [c for c in stack.airflow_components(port) if c.name in wanted]
    stack.start_components(config, components, environment, port)
    rest = Rest(f"http://127.0.0.1:{port}")
    record_of = lambda: days.read_day(config, day_start.date())  # noqa: E731
    try:
        drain(spark, config, raw_archive, sensor_aggregation, ad_matching)
        for dag_id in DAGS:
            poll(
                lambda dag_id=dag_id: rest.call("admin", "GET", f"/api/v2/dags/{dag_id}")["dag_id"],
                600,
                f"{dag_id} parsed",
            )
            rest.call("admin", "PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})

        # D final: the watcher asks for the final run by itself (open to final in one look: no provisional).
        poll(lambda: record_of()["requests"].get("final"), 300, "the final run to be asked for")
        assert record_of()["completeness"] == days.FINAL

        # Airflow's metadata database restarts just after: the run, the watcher and all that follows
        # carry on by themselves once it is back (none runs twice).
        metadata_database.server.stop()
        time.sleep(METADATA_DB_DOWN_S)
        metadata_database.server.start()

        assert poll(lambda: overdue_metric(port) == 1, 60, "the deadline to show D overdue")
        poll(lambda: record_of()["runs"].get("final", {}).get("started_at"), 450, "the final run to claim D")
        final = poll(
            lambda: (r := record_of())["runs"].get("final", {}).get("finished_at") and r,
            1200,
            "the final run",
            every_s=5,
        )
        assert "provisional" not in final["runs"]
        assert [h["state"] for h in final["history"]] == [days.FINAL]
        assert final["runs"]["final"]["status"] == "passed"
        assert overdue_metric(port) == 0
        # Kafka answers the api-server's probe (KafkaUnreachable stays quiet).
        assert (
            plugin_sample(port, f'pipeline_kafka_up{{bootstrap_servers="{config.kafka.bootstrap_servers}"}}')
            == "1"
        )
        # So does the store of its data (StoreUnreachable stays quiet).
        control = store.location(config.spark.extra_conf, config.data_path("control"))
        assert plugin_sample(port, f'pipeline_store_up{{location="{control}"}}') == "1"
        # The final run's DAG run ends a moment after its record (ask_sign_off comes after it).
        runs = poll(lambda: nightly_runs(rest, finished=True), 300, "the runs to finish")
        assert {(kind, partition, state) for kind, partition, state, _ in runs} == {
            ("asset_triggered", day, "success")
        }
        # D was reconciled once: one run claimed it; a repeated ask's run, if any, was skipped at claim.
        claims = {run_id: claim_state(rest, run_id) for *_, run_id in runs}
        assert [r for r, state in claims.items() if state == "success"] == [final["runs"]["final"]["run_id"]]
        assert set(claims.values()) <= {"success", "skipped"}, claims
        # The job's output reaches the task log as it runs, each Spark line at Spark's own level. The log
        # is the last try's: when the outage caught the job running, its scheduler died and the other
        # reset the orphaned try, which the next try replaced from the start (docs/deploy.md).
        reconcile = (
            "/api/v2/dags/nightly_reconciliation/dagRuns/"
            f"{urllib.parse.quote(final['runs']['final']['run_id'])}/taskInstances/reconcile"
        )
        last_try = rest.call("admin", "GET", reconcile)["try_number"]
        log = rest.call("admin", "GET", f"{reconcile}/logs/{last_try}?full_content=true")["content"]
        lines = [entry for entry in log if isinstance(entry, dict) and "event" in entry]
        assert any(str(line["event"]).startswith("reconcile:") and line["level"] == "info" for line in lines)
        assert len([line for line in lines if str(line["event"]).startswith("reconcile progress [")]) >= 5
        spark_info = [line for line in lines if " INFO " in str(line["event"])[:30]]
        assert spark_info and all(line["level"] == "info" for line in spark_info), (
            "Spark INFO is not an error"
        )

        # The reviewer is asked; only they may answer.
        pending = poll(lambda: hitl_pending(rest), 300, "the sign-off to be asked for")
        assert day in pending["subject"] and final["runs"]["final"]["report_digest"] in pending["body"]
        answer = answer_path(pending)
        assert (
            rest.status(
                "outsider",
                "PATCH",
                answer,
                {"chosen_options": ["Approve"], "params_input": {"comment": "me"}},
            )
            == 403
        )
        rest.call(
            "reviewer",
            "PATCH",
            answer,
            {"chosen_options": ["Reject"], "params_input": {"comment": "window 10:05 looks short"}},
        )
        poll(lambda: sign_off_runs(rest) == ["success"], 300, "the rejection's run to finish")
        rejected = record_of()
        assert rejected["sign_off"]["decision"] == "rejected" and rejected["sign_off"]["by"] == "reviewer"
        assert days.state_of(rejected) == days.RECONCILED_FINAL

        # Asked again, approved.
        rest.call(
            "admin",
            "POST",
            "/api/v2/dags/compliance_sign_off/dagRuns",
            {"logical_date": None, "conf": {"date": day}},
        )
        again = poll(lambda: hitl_pending(rest), 300, "the second sign-off request")
        assert again["subject"] == f"Sign off the compliance figures of {day}"
        approve_in_browser(f"http://127.0.0.1:{port}", "checked the ledger", tmp_path)
        poll(lambda: sign_off_runs(rest) == ["success", "success"], 300, "the approval's run to finish")
        signed = record_of()
        assert days.state_of(signed) == days.SIGNED_OFF
        assert [s["decision"] for s in signed["sign_offs"]] == ["rejected", "approved"]
        report = store.read_json(
            store.location(
                config.spark.extra_conf, f"{config.data_path('reports')}/reconciliation/{day}/report.json"
            )
        )
        assert report["sign_off"]["comment"] == "checked the ledger"
        assert days.report_digest(report) == signed["runs"]["final"]["report_digest"]
        beside = store.read_json(
            store.location(
                config.spark.extra_conf,
                f"{config.data_path('compliance')}/sensor_windows/event_date={day}/_sign_off.json",
            )
        )
        assert beside["decision"] == "approved" and beside["by"] == "reviewer"
        assert compliance_rows(config, day), "no compliance row of D for a plain Parquet reader"
        page_days = poll(lambda: page_day(rest, day, port), 60, "the page's day row")
        assert page_days["state"] == "signed_off" and page_days["sign_off"]["by"] == "reviewer"
        shown = page_in_browser(f"http://127.0.0.1:{port}", day, tmp_path)
        assert "signed off" in shown and "approved by reviewer" in shown and "checked the ledger" in shown
        assert "passed" in shown, "the final run's outcome"

    finally:
        stop_processes(stack.stop_components(config, [c.name for c in components]))


@contextlib.contextmanager
def logged_in(base: str, user: str) -> Iterator:
    """A Chromium page logged into the Airflow UI as ``user``."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 1100})
            page.goto(f"{base}/")
            page.get_by_label("Username").fill(user)
            page.get_by_label("Password").fill(USERS[user])
            page.get_by_role("button", name="Sign in").click()
            page.wait_for_url(f"{base}/")
            yield page
        finally:
            browser.close()


def approve_in_browser(base: str, comment: str, shots: Path) -> None:
    """The reviewer opens the pending request in Required Actions, writes what they checked and approves
    (the option button is the submit; both wait for the comment)."""
    from playwright.sync_api import expect

    with logged_in(base, "reviewer") as page:
        page.goto(f"{base}/required_actions?response_received=false")
        row = page.get_by_role("row").filter(has_text="compliance_sign_off").filter(has_text="Required").first
        expect(row).to_be_visible(timeout=60_000)
        page.screenshot(path=str(shots / "required-actions.png"), full_page=True)
        row.get_by_role("button", name="Open Review Drawer").click()
        form = page.get_by_role("dialog", name="Required Actions")
        expect(form).to_be_visible()
        form.evaluate("e => Promise.all(e.getAnimations({subtree: true}).map(a => a.finished))")
        # The form's label does not point at its input (Airflow 3.3.2's UI): find it by its group.
        field = form.get_by_role("group").filter(has_text="comment").get_by_role("textbox")
        approve = form.get_by_role("button", name="Approve", exact=True)
        field.fill(comment)
        expect(approve).to_be_enabled()
        page.screenshot(path=str(shots / "required-action-form.png"), full_page=True)
        with page.expect_response(lambda r: r.request.method == "PATCH" and "/hitlDetails" in r.url) as sent:
            approve.click()
        assert sent.value.status == 200, sent.value.text()
        expect(page.get_by_text(re.compile("response successful"))).to_be_visible()


def page_in_browser(base: str, day: str, shots: Path) -> str:
    """The "Streaming pipeline" page as a logged-in user sees it; the text of the day's row."""
    with logged_in(base, "admin") as page:
        page.goto(f"{base}/streaming-pipeline/")
        row = page.locator(f"#days tr[data-day='{day}']")
        row.wait_for(timeout=60_000)
        page.screenshot(path=str(shots / "event-days-page.png"), full_page=True)
        return row.inner_text()


def overdue_metric(port: int) -> float:
    """pipeline_reconciliation_overdue_days as Prometheus scrapes it: no login."""
    return float(plugin_sample(port, "pipeline_reconciliation_overdue_days "))


def plugin_sample(port: int, prefix: str) -> str:
    """The value of the one sample of the plugin's /metrics whose line starts with ``prefix``."""
    with urllib.request.urlopen(
        f"http://127.0.0.1:{port}/streaming-pipeline/metrics", timeout=30
    ) as response:
        text = response.read().decode()
    (value,) = [line.rsplit(" ", 1)[1] for line in text.splitlines() if line.startswith(prefix)]
    return value


def hitl_pending(rest: Rest) -> dict | None:
    """The sign-off request waiting for an answer, once a person could answer it. Airflow 3.3.2 fails the
    task when an answer comes before its worker has reported the parking (the request is written first,
    the state set next, the executor's report a second or two later): wait for the state, then as long
    as a person would at least take to read the request."""
    found = rest.call("admin", "GET", "/api/v2/dags/~/dagRuns/~/hitlDetails?response_received=false")
    pending = [
        d
        for d in found.get("hitl_details", [])
        if d["task_instance"]["dag_id"] == "compliance_sign_off"
        and d["task_instance"]["state"] == "awaiting_input"
    ]
    if not pending:
        return None
    time.sleep(HUMAN_READING_S)
    return pending[0]


def nightly_runs(rest: Rest, finished: bool = False) -> list[tuple[str, str, str, str]] | None:
    """(run type, partition key, state, run id) of every nightly_reconciliation run; None while one is
    not done."""
    runs = rest.call("admin", "GET", "/api/v2/dags/nightly_reconciliation/dagRuns")["dag_runs"]
    if finished and any(run["state"] not in ("success", "failed") for run in runs):
        return None
    return sorted((run["run_type"], run["partition_key"], run["state"], run["dag_run_id"]) for run in runs)


def claim_state(rest: Rest, run_id: str) -> str:
    """The state of a nightly_reconciliation run's claim task: success when it claimed D."""
    path = f"/api/v2/dags/nightly_reconciliation/dagRuns/{urllib.parse.quote(run_id)}/taskInstances/claim"
    return rest.call("admin", "GET", path)["state"]


def sign_off_runs(rest: Rest) -> list[str]:
    runs = rest.call("admin", "GET", "/api/v2/dags/compliance_sign_off/dagRuns?order_by=run_after")[
        "dag_runs"
    ]
    return [run["state"] for run in runs]


def answer_path(detail: dict) -> str:
    ti = detail["task_instance"]
    run = urllib.parse.quote(ti["dag_run_id"])
    return f"/api/v2/dags/{ti['dag_id']}/dagRuns/{run}/taskInstances/{ti['task_id']}/-1/hitlDetails"


def page_day(rest: Rest, day: str, port: int) -> dict | None:
    page = rest.call("admin", "GET", "/streaming-pipeline/api/health")
    return next((d for d in page["days"] if d["day"] == day), None)
