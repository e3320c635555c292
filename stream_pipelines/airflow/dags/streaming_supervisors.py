"""One supervisor DAG per streaming app: keep it running, restart it from its checkpoint after a crash.

Wiring only; the logic is in stream_pipelines.airflow.supervisor and stream_pipelines.control.control_store.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.providers.standard.sensors.python import PythonSensor
from airflow.sdk import DAG

from stream_pipelines.airflow.dag_defaults import (
    DEFAULT_ARGS,
    ORPHAN_RETRY_DELAY,
    SUPERVISOR_RETRIES,
    SUPERVISOR_TAGS,
)
from stream_pipelines.airflow.supervisor import StreamingAppOperator, SupervisorRetryPolicy, app_is_wanted
from stream_pipelines.core.registry import APPS

for declared in APPS.values():
    app_name = declared.name
    with DAG(
        dag_id=declared.supervisor_dag_id,
        description=f"Keeps {app_name} running; restarts it from its checkpoint after a crash",
        schedule="@continuous",
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,
        default_args={**DEFAULT_ARGS, "retries": 2, "retry_delay": timedelta(seconds=30)},
        tags=[*SUPERVISOR_TAGS, app_name],
        doc_md=__doc__,
    ) as dag:
        wait_until_wanted = PythonSensor(
            task_id="wait_until_wanted",
            python_callable=app_is_wanted,
            op_kwargs={"app": app_name},
            mode="reschedule",
            poke_interval=30,
        )
        run_app = StreamingAppOperator(
            task_id="run_app",
            app=app_name,
            retries=SUPERVISOR_RETRIES,
            retry_delay=ORPHAN_RETRY_DELAY,
            retry_policy=SupervisorRetryPolicy(app_name),
        )
        wait_until_wanted >> run_app
    globals()[dag.dag_id] = dag
