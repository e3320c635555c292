"""Each event day's way to a reconciliation, driven by the data, not the clock.

Every few minutes (PIPELINE_DAYS_WATCH_EVERY, default 5 minutes) the watcher reads the streams' committed
batches and the Kafka partitions they read, moves each ended day forward (open -> closed -> final, never
back) and emits the reconciliation_day_due asset for each day whose run is due: a provisional run when the
day closes, the final one when the late horizon has passed. nightly_reconciliation runs once per such
day. Wiring only: the rules are stream_pipelines.reconciliation.days, the task
stream_pipelines.airflow.day_states.watch_days.
"""

from __future__ import annotations

from airflow.sdk import DAG, task

from stream_pipelines.airflow import day_states
from stream_pipelines.airflow.dag_defaults import DEFAULT_ARGS
from stream_pipelines.airflow.nightly import first_event_day

with DAG(
    dag_id="reconciliation_days",
    description="Moves each event day from open to final by the data, and asks for its reconciliations",
    schedule=day_states.watch_every(),
    start_date=first_event_day(),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    tags=["reconciliation", "compliance"],
) as dag:

    @task(outlets=[day_states.DAY_DUE])
    def watch_days(*, outlet_events=None) -> list[dict[str, str]]:
        due = day_states.due_or_skip(day_states.watch_days())
        outlet_events[day_states.DAY_DUE].add_partitions([item["day"] for item in due])
        outlet_events[day_states.DAY_DUE].extra = {"due": {item["day"]: item["kind"] for item in due}}
        return due

    watch_days()
