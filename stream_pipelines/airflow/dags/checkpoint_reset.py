"""Reset an app's checkpoint from the UI: a new checkpoint that starts from the old committed offsets,
or from given offsets or a time. State is lost; no input is skipped or read twice. The app must be
stopped first (pipeline_control action=stop), and `confirm` must repeat the app's name.

Wiring only; the task is stream_pipelines.airflow.tasks.reset_checkpoint, over
stream_pipelines.checkpoint.reset.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, Param, task

from stream_pipelines.airflow.dag_defaults import DEFAULT_ARGS
from stream_pipelines.core.registry import APP_NAMES

with DAG(
    dag_id="checkpoint_reset",
    description="Start an app's checkpoint afresh from committed offsets, given offsets or a time",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    default_args={**DEFAULT_ARGS, "retries": 0},
    tags=["streaming", "control"],
    params={
        "app": Param("sensor_aggregation", enum=list(APP_NAMES)),
        "query": Param("all", type="string", description="one query (e.g. tumbling) or all"),
        "start_from": Param("committed", enum=["committed", "offsets", "time"]),
        "offsets": Param("", type="string", description='with offsets: {"topic": {"0": 123}}'),
        "time": Param("", type="string", description="with time: ISO-8601, e.g. 2026-11-21T03:00:00Z"),
        "confirm": Param("", type="string", description="type the app's name to confirm: state is lost"),
    },
    doc_md=__doc__,
) as dag:

    @task
    def reset(params=None) -> str:
        from stream_pipelines.airflow.tasks import reset_checkpoint

        return reset_checkpoint(params)

    reset()
