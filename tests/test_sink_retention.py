"""Spark's file sink with a ``retention``, and the sweep after it: the sink's log forgets the files older
than the retention when it compacts, so its size follows the retention, not the history; the sweep
removes the forgotten files as past their retention; and readers, Spark's through the log and a plain
Parquet reader of the folder, read the same rows, never a missing file.

The pipeline's retentions are days (the config refuses less than the late horizon + 3 days); this
query sets seconds on the same option, so that Spark's own clock passes it within the test.
"""

from __future__ import annotations

import time

import pyarrow.dataset as ds
import pytest
from pyspark.sql import functions as F

from stream_pipelines.checkpoint import format as checkpoint_format
from stream_pipelines.core import registry, store
from stream_pipelines.core.config import load_config
from stream_pipelines.tables import maintenance, retention

SINK_RETENTION_S = 4
COMPACT_INTERVAL = 10
DAY = 86400.0

TEST_SINK = registry.Dataset(
    "retention_test", "outputs", "retention_test", "id bigint, written_at timestamp", retention="outputs"
)


@pytest.fixture
def config(tmp_path):
    return load_config("local", [f"paths.data_root={tmp_path}"], environ={})


def run_sink(spark, config, batches: int) -> None:
    """A rate stream into a Parquet file sink with a short log retention, for ``batches`` batches."""
    folder = TEST_SINK.location(config)
    query = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 5)
        .load()
        .select(F.col("value").alias("id"), F.col("timestamp").alias("written_at"))
        .coalesce(1)
        .writeStream.format("parquet")
        .option("path", folder)
        .option("checkpointLocation", f"{config.data_path('checkpoints')}/retention_test")
        .option("retention", f"{SINK_RETENTION_S}s")
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        deadline = time.monotonic() + 180
        while (query.lastProgress or {}).get("batchId", -1) < batches:
            assert query.isActive, query.exception()
            assert time.monotonic() < deadline, "the sink did not reach its batches in time"
            time.sleep(0.2)
    finally:
        query.stop()


def test_the_sink_log_forgets_old_files_and_the_sweep_removes_them_while_readers_agree(spark, config):
    # Enough batches for two compactions, with more than the retention between them.
    run_sink(spark, config, batches=3 * COMPACT_INTERVAL)
    folder = store.location(config.spark.extra_conf, TEST_SINK.location(config))
    on_disk = maintenance.data_files(folder)
    listed = checkpoint_format.committed_names(
        checkpoint_format.sink_files(folder), TEST_SINK.location(config)
    )
    forgotten = set(on_disk) - listed
    assert listed and forgotten, f"the log forgot nothing: {len(listed)} listed of {len(on_disk)} on disk"
    assert len(listed) < len(on_disk)

    # Months later, the outputs' retention (30 days) has passed for every file: the unlisted go, the
    # listed stay (Spark's readers rely on them until the log forgets them).
    [sweep] = maintenance.sweep_outputs(config, 3600, now=time.time() + 31 * DAY, datasets=[TEST_SINK])
    assert {item["file"] for item in sweep.removed} == forgotten
    assert all(item["expired"] for item in sweep.removed)
    assert set(maintenance.data_files(folder)) == listed
    assert retention.removed_before(folder) is not None

    through_log = sorted(row.id for row in spark.read.parquet(str(folder)).select("id").collect())
    plain_table = ds.dataset(str(folder), format="parquet").to_table(columns=["id"])
    plainly = sorted(plain_table.column("id").to_pylist())
    assert through_log == plainly and through_log, "Spark's reader and a plain reader disagree"
