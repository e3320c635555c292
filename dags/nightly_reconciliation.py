"""Nightly reconciliation: GX on raw events -> reconcile (spark-submit) -> GX on outputs -> report.

Wiring only: the tasks' logic is in stream_pipelines.airflow.nightly, which imports Spark and
Great Expectations only inside the functions that run them, so parsing this file loads neither.
Event day D is the run's data interval start, or the ``date`` param (YYYY-MM-DD) for a rerun from
the UI; reruns are idempotent.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG, CronTriggerTimetable, Param, get_current_context, task

from stream_pipelines.airflow import nightly

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
    # The go-live day (PIPELINE_NIGHTLY_START_DATE): its run is at the midnight after it.
    start_date=nightly.first_event_day() + timedelta(days=1),
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
        context = get_current_context()
        return nightly.event_day(
            context["params"].get("date"), context.get("data_interval_start"), context.get("logical_date")
        )

    @task
    def gx_raw_events(day: str) -> dict:
        return nightly.gate_raw_events(day)

    @task
    def reconcile(day: str, raw_gate: dict) -> str:
        return nightly.reconcile(day)

    @task
    def gx_outputs(day: str) -> list:
        return nightly.gate_outputs(day)

    @task
    def report(day: str, raw_gate: dict, output_gates: list) -> str:
        return nightly.publish_report(day, raw_gate, output_gates)

    event_day = choose_day()
    raw = gx_raw_events(event_day)
    reconciled = reconcile(event_day, raw)
    outputs = gx_outputs(reconciled)
    report(reconciled, raw, outputs)
