"""Loaded from Airflow's plugins folder: the "Streaming pipeline" page (stream_pipelines.airflow.plugin)."""

from stream_pipelines.airflow.plugin import StreamingPipelinePlugin

__all__ = ["StreamingPipelinePlugin"]
