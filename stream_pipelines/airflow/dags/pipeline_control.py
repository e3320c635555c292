"""Operator controls from the Airflow UI: stop, start, restart, pause or resume an app; show status.

Trigger with params. Stop and restart drain the batch in flight before the app exits.
Wiring only; the logic is in stream_pipelines.control.control_store.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, Param, task

from stream_pipelines.airflow.dag_defaults import DEFAULT_ARGS
from stream_pipelines.core.registry import APP_NAMES

with DAG(
    dag_id="pipeline_control",
    description="Stop, start, restart, pause or resume a streaming app; print every app's state",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    default_args={**DEFAULT_ARGS, "retries": 0},
    tags=["streaming", "control"],
    params={
        "app": Param("sensor_aggregation", enum=list(APP_NAMES), description="which streaming app"),
        "action": Param(
            "status",
            enum=["status", "stop", "start", "restart", "pause", "resume"],
            description="stop/restart drain the current batch first; pause stops supervision only",
        ),
        "reason": Param("", type="string", description="recorded with the change, shown in status"),
    },
    doc_md=__doc__,
) as dag:

    @task
    def apply(params=None, dag_run=None) -> str:
        from stream_pipelines.airflow.tasks import control_app

        if params["action"] == "status":
            return "no change"
        requested_by = getattr(dag_run, "triggering_user_name", None) or "airflow"
        return control_app(params["app"], params["action"], params["reason"], requested_by)

    @task
    def show_status() -> str:
        from stream_pipelines.airflow.tasks import status_table

        return status_table()

    apply() >> show_status()
