"""Daily maintenance of what the pipeline keeps, in two tasks:

* compact_closed_days: every file sink's closed days rewritten into big files and published whole
  (stream_pipelines.tables.compaction, through spark-submit), so readers and the sinks' logs stay small;

then sweep_outputs (run whether or not the compaction succeeded: it removes nothing a reader needs):

* the sweep of the streaming outputs: removes the files that their file sink's log does not list, left
  by batches that died before committing (once older than maintenance.orphan_grace, so plain Parquet
  readers such as pyarrow, DuckDB or Trino see exactly the committed rows) or forgotten by the log, once
  every day it holds is compacted, or older than the dataset's retention; and the compacted
  days' replaced versions and failed attempts, and days past retention;
* the rest of retention (config ``retention``): the batch log's old batches, the checkpoints a reset
  moved aside, old maintenance records. Compliance datasets and reports are kept.

The task log lists every removal; the record goes to reports/maintenance. Trigger with dry_run to see
what would go. Wiring only; the tasks are stream_pipelines.airflow.tasks.compact and .maintain, over
stream_pipelines.tables.compaction, stream_pipelines.tables.maintenance and stream_pipelines.tables.retention.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, Param, task

from stream_pipelines.airflow.dag_defaults import DEFAULT_ARGS

with DAG(
    dag_id="output_maintenance",
    description="Compact closed days, sweep the streaming outputs' debris, enforce each dataset's retention",
    schedule="@daily",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    tags=["streaming", "maintenance"],
    params={"dry_run": Param(False, type="boolean", description="report what would go; remove nothing")},
    doc_md=__doc__,
) as dag:

    @task
    def compact_closed_days(params=None) -> str:
        from stream_pipelines.airflow.tasks import compact

        return compact(params)

    @task(trigger_rule="all_done")
    def sweep_outputs(params=None) -> dict:
        from stream_pipelines.airflow.tasks import maintain

        return maintain(params)

    compact_closed_days() >> sweep_outputs()
