"""Airflow DAG file written by `pipelinectl airflow-dags`; do not edit (that command rewrites it).

Its DAGs are defined in stream_pipelines.airflow.dags.output_maintenance (the stream-pipelines package).
"""

from stream_pipelines.airflow.dags.output_maintenance import *  # noqa: F403
