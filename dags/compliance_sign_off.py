"""Airflow DAG file written by `pipelinectl airflow-dags`; do not edit (that command rewrites it).

Its DAGs are defined in stream_pipelines.airflow.dags.compliance_sign_off (the stream-pipelines package).
"""

from stream_pipelines.airflow.dags.compliance_sign_off import *  # noqa: F403
