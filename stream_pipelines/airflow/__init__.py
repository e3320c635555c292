"""Everything that runs inside Airflow: the supervisor (operator, adoption, watchdog thread, retry
policy), the bodies of every DAG's tasks, DAG defaults, and the "Streaming pipeline" page (plugin and
health data). The DAG definitions in dags/ only wire these (Airflow reads them through the one-line DAG
files `pipelinectl airflow-dags` writes); the plugin reaches Airflow through the package's
``airflow.plugins`` entry point.
"""

from __future__ import annotations

from stream_pipelines.core.config import ConfigError, PipelineConfig, load_config


def task_config() -> PipelineConfig:
    """The pipeline's config as a task reads it when it runs: from the environment (PIPELINE_ENV,
    PIPELINE__SECTION__KEY), as the apps read theirs.

    An invalid config fails the task with ``AirflowFailException``, which Airflow never retries (nor
    asks a retry policy about): no retry can mend it, a person has to."""
    try:
        return load_config()
    except ConfigError as error:
        from airflow.sdk.exceptions import AirflowFailException

        raise AirflowFailException(f"the pipeline's configuration is invalid: {error}") from None
