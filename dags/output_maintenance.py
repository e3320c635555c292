"""Daily sweep of the streaming outputs: removes the files that their file sink's log does not list
(left by batches that died before committing) once older than maintenance.orphan_grace, so plain
Parquet readers (pyarrow, DuckDB, Trino) see exactly the committed rows. The task log lists every file
removed; the record goes to reports/maintenance. Trigger with dry_run to see what would go.

Wiring only; the task is stream_pipelines.airflow.tasks.sweep_outputs, over stream_pipelines.maintenance.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, Param, task

from stream_pipelines.airflow.dag_defaults import DEFAULT_ARGS

with DAG(
    dag_id="output_maintenance",
    description="Remove uncommitted debris from the streaming outputs (files the sink logs do not list)",
    schedule="@daily",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    tags=["streaming", "maintenance"],
    params={"dry_run": Param(False, type="boolean", description="report what would go; remove nothing")},
    doc_md=__doc__,
):

    @task
    def sweep_outputs(params=None) -> dict:
        from stream_pipelines.airflow.tasks import sweep_outputs

        return sweep_outputs(params)

    sweep_outputs()
