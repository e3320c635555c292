"""Nightly reconciliation: GX on raw events -> reconcile (spark-submit) -> GX on outputs -> report.

Wiring only: every task imports its logic from stream_pipelines.reconciliation.nightly when it runs,
so parsing this file loads neither Spark nor Great Expectations. Event day D is the run's data
interval start, or the ``date`` param (YYYY-MM-DD) for a rerun from the UI; reruns are idempotent.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG, CronTriggerTimetable, Param, get_current_context, task

# The first event day to reconcile (the go-live day): catchup reconciles every day since, and none
# before; a far-past default on a fresh deployment would queue a run for every day in between.
# `make up` sets it to the stack's first day.
START_DATE_VARIABLE = "PIPELINE_NIGHTLY_START_DATE"
try:
    first_day = datetime.fromisoformat(os.environ.get(START_DATE_VARIABLE, "2026-01-01"))
except ValueError as error:
    given = os.environ[START_DATE_VARIABLE]
    raise ValueError(f"{START_DATE_VARIABLE}={given!r} is not a YYYY-MM-DD date") from error

default_args = {
    "owner": "data-platform",
    "retries": 1,
    "retry_delay": timedelta(minutes=10),
}

with DAG(
    dag_id="nightly_reconciliation",
    description="Exact recompute of day D from the raw archive, diff against the streams, compliance table",
    # Airflow 3's cron schedules give a run an empty data interval at its trigger time; the interval
    # makes the run at midnight cover the day that has just ended, so that day is event day D.
    schedule=CronTriggerTimetable("0 0 * * *", timezone="UTC", interval=timedelta(days=1)),
    start_date=first_day + timedelta(days=1),
    catchup=True,
    max_active_runs=1,
    default_args=default_args,
    tags=["reconciliation", "compliance", "spark", "great_expectations"],
    params={
        "date": Param(
            None,
            type=["null", "string"],
            format="date",
            description="event day D to (re)reconcile; empty: the run's data interval",
        )
    },
) as dag:

    @task
    def choose_day() -> str:
        from stream_pipelines.reconciliation.nightly import event_day

        context = get_current_context()
        return event_day(
            context["params"].get("date"), context.get("data_interval_start"), context.get("logical_date")
        )

    @task
    def gx_raw_events(day: str) -> dict:
        from stream_pipelines.reconciliation.nightly import gate_raw_events

        return gate_raw_events(day)

    @task
    def reconcile(day: str, raw_gate: dict) -> str:
        from stream_pipelines.reconciliation.nightly import reconcile as run

        return run(day)

    @task
    def gx_outputs(day: str) -> list:
        from stream_pipelines.reconciliation.nightly import gate_outputs

        return gate_outputs(day)

    @task
    def report(day: str, raw_gate: dict, output_gates: list) -> str:
        from stream_pipelines.reconciliation.nightly import publish_report

        return publish_report(day, raw_gate, output_gates)

    event_day = choose_day()
    raw = gx_raw_events(event_day)
    reconciled = reconcile(event_day, raw)
    outputs = gx_outputs(reconciled)
    report(reconciled, raw, outputs)
