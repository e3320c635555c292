"""Airflow DAG file written by `pipelinectl airflow-dags`; do not edit (that command rewrites it).

Its DAGs are defined in stream_pipelines.airflow.dags.checkpoint_reset (the stream-pipelines package).
"""

from stream_pipelines.airflow.dags.checkpoint_reset import *  # noqa: F403
