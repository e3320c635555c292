"""Everything that runs inside Airflow: the supervisor (operator, adoption, watchdog thread, retry
policy), the bodies of every DAG's tasks, DAG defaults, and the "Streaming pipeline" page (plugin and
health data). The DAG files in dags/ and the plugin in plugins/ only wire these.
"""

from __future__ import annotations

from stream_pipelines.core.config import PipelineConfig, load_config


def task_config() -> PipelineConfig:
    """The pipeline's config as a task reads it when it runs: from the environment (PIPELINE_ENV,
    PIPELINE__SECTION__KEY), as the apps read theirs."""
    return load_config()
