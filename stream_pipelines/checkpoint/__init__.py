"""The streaming queries' checkpoints: reading Spark's files, the start preflight, and the reset.

  format    the one reader of Spark's checkpoint files (also used by the batch log and the demo)
  inspect   what a checkpoint says, fingerprints, and ``preflight`` before every start
  reset     a new checkpoint from committed offsets, given offsets or a time

Nothing is re-exported here: the modules ``inspect`` and ``reset`` share their names with their main
functions, so callers import from the module (``from stream_pipelines.checkpoint.inspect import
preflight``). Nothing in this package imports pyspark: Airflow workers import it.
"""
