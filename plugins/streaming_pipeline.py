"""Loaded from Airflow's plugins folder: the "Streaming pipeline" page (stream_pipelines.airflow_plugin)."""

from stream_pipelines.airflow_plugin import StreamingPipelinePlugin

__all__ = ["StreamingPipelinePlugin"]
