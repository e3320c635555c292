"""The bodies of the day-state tasks: the watcher that asks for reconciliations when the data allows
them, the reconciliation DAG's claim and record steps, and the sign-off's (stream_pipelines.reconciliation
.days holds the rules; this module reads the config, Kafka and the clock, and speaks Airflow).

Two assets carry a day from one DAG to the next, one partition per event day (YYYY-MM-DD):
``DAY_DUE`` (reconciliation_days -> nightly_reconciliation) and ``FINAL_REPORTED``
(nightly_reconciliation -> compliance_sign_off).
"""

from __future__ import annotations

import functools
import json
import logging
import os
from datetime import UTC, date, datetime, timedelta
from typing import Any

from airflow.sdk import Asset
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from stream_pipelines.airflow import task_config
from stream_pipelines.airflow.nightly import first_event_day
from stream_pipelines.core import registry, store
from stream_pipelines.core.config import Duration
from stream_pipelines.kafka import clients as kafka_clients
from stream_pipelines.reconciliation import days

log = logging.getLogger(__name__)
# A day whose reconciliation is due; the event's extra maps each day to the kind due ("provisional",
# "final"), which the run re-derives from the day's record anyway.
DAY_DUE = Asset(name="reconciliation_day_due", uri="pipeline://reconciliation/day-due")
# A day whose final reconciliation wrote a report: a reviewer is asked to sign it off.
FINAL_REPORTED = Asset(name="reconciliation_final_reported", uri="pipeline://reconciliation/final-reported")
# How often the watcher looks, read when the DAG is parsed (5 minutes unless set).
WATCH_EVERY_VARIABLE = "PIPELINE_DAYS_WATCH_EVERY"
# The Airflow user ids who may sign off compliance figures (comma-separated), read when the DAG is parsed.
REVIEWERS_VARIABLE = "PIPELINE_COMPLIANCE_REVIEWERS"
DEFAULT_REVIEWERS = "admin"


def watch_every() -> timedelta:
    given = os.environ.get(WATCH_EVERY_VARIABLE, "5 minutes")
    try:
        return timedelta(seconds=Duration.parse(given).seconds)
    except ValueError as error:
        raise ValueError(f"{WATCH_EVERY_VARIABLE}={given!r}: {error}") from error


def reviewers() -> list[dict[str, str]]:
    """The assigned users of every sign-off: only they can answer it (Airflow refuses anyone else)."""
    names = [name.strip() for name in os.environ.get(REVIEWERS_VARIABLE, DEFAULT_REVIEWERS).split(",")]
    if not all(names):
        raise ValueError(f"{REVIEWERS_VARIABLE} must list Airflow user ids separated by commas, not {names}")
    return [{"id": name, "name": name} for name in names]


def watch_days() -> list[dict[str, str]]:
    """Move every ended day forward by the data and return the runs now due, as {"day", "kind"}."""

    config = task_config()
    consumer = kafka_clients.offset_reader(config, "day-states")
    try:
        watched = days.watch(
            config,
            datetime.now(UTC),
            first_event_day().date(),
            functools.partial(kafka_clients.first_offsets_at, consumer),
        )
    finally:
        consumer.close()
    for day, state in watched.states.items():
        record = days.read_day(config, date.fromisoformat(day)) if state == days.OPEN else {}
        holding = "; ".join(record.get("holding", []))
        log.info("%s: %s%s", day, state, f" ({holding})" if holding else "")
    due = [{"day": item.day.isoformat(), "kind": item.kind} for item in watched.due]
    log.info("due: %s; first day not yet final-reconciled: %s", due or "nothing", watched.first_unfinished)
    return due


def claim_run(
    day: str, requested_kind: str | None, manual: bool, run_id: str, declare_final: str = ""
) -> str:
    """The kind of this run of D; skips the run (with the reason) when the day states decline it."""
    claim = days.begin_run(
        task_config(),
        date.fromisoformat(day),
        requested_kind=requested_kind,
        manual=manual,
        run_id=run_id,
        now=datetime.now(UTC),
        declare_final=declare_final,
    )
    if claim.kind is None:
        raise AirflowSkipException(claim.reason)
    log.info("%s: %s", day, claim.reason)
    return claim.kind


def record_run(day: str, kind: str) -> dict[str, Any]:
    """D's run outcome into its day record, from the report this run wrote."""

    config = task_config()
    document, html = _this_runs_report(config, day, kind)
    if document is None:
        raise RuntimeError(
            f"the {kind} reconciliation of {day} succeeded but its report is older than the run"
        )
    record = days.record_run(config, date.fromisoformat(day), kind, document, html, datetime.now(UTC))
    run = record["runs"][kind]
    _show_in_report(config, day, record)
    log.info("%s: %s reconciliation recorded: %s", day, kind, run["figures"])
    return {"day": day, "kind": kind, "status": run["status"], "report_digest": run["report_digest"]}


def due_or_skip(due: list[dict[str, str]]) -> list[dict[str, str]]:
    """Skips the watcher's task when nothing is due: a task that succeeds emits an asset event, and one
    without a day would be recorded (and warned about) every few minutes, for nothing."""
    if not due:
        raise AirflowSkipException("no reconciliation is due")
    return due


def only_final(outcome: dict[str, Any]) -> None:
    """Skips the task unless the run was the day's final one: only final figures are signed off."""
    if outcome["kind"] != "final":
        raise AirflowSkipException(f"a {outcome['kind']} reconciliation is not signed off")


def record_failed_run(day: str, kind: str | None) -> None:
    """A run that failed after writing its report (unexplained diffs, a failed quality gate) is recorded
    as failed, so that it is not asked for again every hour: a person has to look. One that failed before
    its report is not recorded, and the day states ask for it again after ``request_retry``. Always fails
    the task, so the run shows failed."""
    if kind is None:
        raise AirflowFailException(f"the reconciliation of {day} failed before it was claimed")
    config = task_config()
    document, html = _this_runs_report(config, day, kind)
    if document is None:
        raise AirflowFailException(
            f"the {kind} reconciliation of {day} failed before writing its report: not recorded; the day "
            "states ask for it again after reconciliation.request_retry "
            f"({config.reconciliation.request_retry})"
        )
    gates = [gate for gate in document.get("quality_gates", []) if not gate.get("success", True)]
    failed = {**document, "status": "failed"}
    _show_in_report(
        config, day, days.record_run(config, date.fromisoformat(day), kind, failed, html, datetime.now(UTC))
    )
    reasons = [f"status {document.get('status')}"] + [f"quality gate {g.get('suite')} failed" for g in gates]
    raise AirflowFailException(f"the {kind} reconciliation of {day} failed ({'; '.join(reasons)}): recorded")


def _show_in_report(config: Any, day: str, record: dict[str, Any]) -> None:
    """The day's state and its runs side by side, in the report the reviewer reads."""
    from stream_pipelines.reconciliation.report import report_dir, update_report  # matplotlib

    update_report(report_dir(config, day), "day_state", days.day_section(record))


def _this_runs_report(config: Any, day: str, kind: str) -> tuple[dict[str, Any] | None, str]:
    """D's report.json if this run wrote it (written after the run was claimed), else None."""
    from stream_pipelines.reconciliation.report import report_dir  # matplotlib: only when it runs

    folder = report_dir(config, day)
    started = (days.read_day(config, date.fromisoformat(day))["runs"].get(kind) or {}).get("started_at")
    try:
        document = json.loads(store.read_bytes(folder / "report.json"))
    except FileNotFoundError:
        return None, ""
    run_at = (document.get("inputs") or {}).get("run_at")
    if started is None or run_at is None or run_at < started:
        return None, ""
    return document, str(folder / "report.html")


# --------------------------------------------------------------------------- sign-off


def sign_off_request(day: str) -> dict[str, Any]:
    """What the reviewer is shown: D's final figures, the digest of the report they sign, its link."""
    record = days.read_day(task_config(), date.fromisoformat(day))
    final = record["runs"].get(days.FINAL) or {}
    if not days.final_reconciled(record):
        raise AirflowSkipException(f"{day} has no final reconciliation that passed: nothing to sign")
    if days.rerun_in_progress(final):
        raise AirflowSkipException(f"a rerun of {day} is in progress: its report asks for its own sign-off")
    figures = final.get("figures", {})
    counts = figures.get("window_counts", {})
    diffs = days.diffs_text(figures)
    return {
        "day": day,
        "report_digest": final["report_digest"],
        "report_url": f"/streaming-pipeline/reports/{day}/report.html",
        "summary": (
            f"status {final.get('status')}; {counts.get('exact_windows', '-')} exact and "
            f"{counts.get('streaming_windows', '-')} streamed windows; diffs: {diffs}; late-event ledger "
            f"{figures.get('late_event_ledger', '-')} rows; "
            f"compliance rows {figures.get('compliance_rows', '-')}"
        ),
    }


def record_sign_off(shown: dict[str, Any], response: dict[str, Any] | None) -> dict[str, Any]:
    """The reviewer's answer into D's record, its report and beside its compliance rows. Fails (and
    records nothing) when the report they were shown is not the day's current one."""
    from stream_pipelines.reconciliation.report import report_dir, update_report  # matplotlib

    if not response:
        raise AirflowFailException(f"no answer was recorded for {shown['day']}'s sign-off")
    config = task_config()
    day = date.fromisoformat(shown["day"])
    folder = report_dir(config, shown["day"])
    current = days.report_digest(json.loads(store.read_bytes(folder / "report.json")))
    who = response.get("responded_by_user") or {}
    try:
        record = days.record_sign_off(
            config,
            day,
            decision=days.APPROVED if response["chosen_options"] == ["Approve"] else days.REJECTED,
            by=str(who.get("name") or who.get("id")),
            comment=str((response.get("params_input") or {}).get("comment") or ""),
            shown_digest=shown["report_digest"],
            current_digest=current,
            now=datetime.now(UTC),
        )
    except days.SignOffRefused as refused:
        raise AirflowFailException(str(refused)) from None
    decision = record["sign_off"]
    # The day record (under its lock) decides; the copies follow: beside the compliance rows (Spark's
    # readers skip names starting with "_"; a rerun's overwrite of the partition removes it), then in the
    # report, unless a rerun has replaced it meanwhile (its record_run clears this sign-off).
    compliance = store.location(
        config.spark.extra_conf, f"{registry.COMPLIANCE_WINDOWS.location(config)}/event_date={shown['day']}"
    )
    if compliance.is_dir():
        store.write_json(compliance / "_sign_off.json", decision)
    if days.report_digest(json.loads(store.read_bytes(folder / "report.json"))) == shown["report_digest"]:
        update_report(folder, "sign_off", decision)
    log.info(
        "%s: %s by %s (%s)",
        shown["day"],
        decision["decision"],
        decision["by"],
        decision["comment"] or "no comment",
    )
    return decision
