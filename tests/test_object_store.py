"""The pipeline on S3, against the loopback S3 server: checkpoints, archive, batch log, lease and control
records all in a bucket, Spark's own connector (S3A) writing them and the file layer reading them (on
HDFS: tests/test_hdfs_store.py, tests/test_reconcile.py and tests/test_yarn_cluster_mode.py).

The archive is read back without Spark, as another reader would: the files the sink's log lists, with
pyarrow over the same file layer.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter

import pyarrow.dataset as ds
import pytest

from stream_pipelines.checkpoint import format as checkpoint_format
from stream_pipelines.checkpoint.inspect import preflight
from stream_pipelines.control.control_store import ControlStore
from stream_pipelines.control.lease import Lease
from stream_pipelines.core import registry, store
from stream_pipelines.core.registry import app as declared_app
from stream_pipelines.devtools import generator
from stream_pipelines.driver.batch_log import load_batches
from stream_pipelines.kafka.topics import ensure_topics
from stream_pipelines.tables import compacted_days, maintenance
from tests.conftest import (
    committed_rows,
    compact_through_spark_submit,
    drain_through_spark_submit,
    make_overrides_config,
    private_source_topics,
    run_app,
    run_then_reconcile,
    wait_for,
)

pytestmark = [pytest.mark.broker, pytest.mark.slow]


# S3 only: a rename there is a copy, which Spark's checkpoint and file sink work around. On HDFS a kill of
# the driver's container, with the data root on HDFS, is followed by an exact archive in
# tests/test_yarn_cluster_mode.py, and the same steps up to the nightly job run in tests/test_reconcile.py.
def test_on_s3_a_killed_archive_resumes_exactly_once_and_ad_matching_agrees_with_the_nightly(
    broker, make_overrides, s3_root, tmp_path
):
    """Every path in a bucket. The archive's driver is killed (kill -9) with a batch in flight and
    resumed: every offset archived once, which a plain Parquet reader of the swept folder sees too.
    Then ad_matching (the stream-stream join, its four state stores and file sinks) is drained, the day
    compacted in the bucket (the compaction job, through spark-submit), and the nightly job runs over the
    compacted day: every match the stream wrote is reproduced by the exact recompute from the archive,
    or explained or pending, never unexplained. On a local disk the nightly's verdicts before and after
    a compaction are compared in tests/test_compaction.py."""
    root, on_the_store = s3_root(), store.on_object_store
    import json

    from stream_pipelines.core.registry import AD_MATCHES
    from stream_pipelines.reconciliation.report import report_dir

    overrides = make_overrides(
        *private_source_topics(),
        *root,
        f"paths.scratch={tmp_path}/data/scratch",  # local, and where make_overrides' cleanup looks
    )
    # The archive in small batches on a short trigger, so that the kill finds one in flight.
    archive_overrides = [*overrides, "kafka.max_offsets_per_trigger=300", "archive.trigger=1 seconds"]
    config = make_overrides_config(overrides)
    assert on_the_store(
        store.location(config.spark.extra_conf, config.checkpoint_dir("raw_archive", "archive"))
    )
    ensure_topics(config)
    spec = generator.ScenarioSpec(
        seed=21,
        duration_s=180,
        sensor_rate=1,
        ad_rate=5,
        topics=generator.TopicNames(*(topic.name for topic in config.kafka.topics.inputs())),
    )
    records = generator.generate(spec)
    generator.produce_to_kafka(records, config.kafka_client_config())
    day = spec.start.date()
    log = tmp_path / "spark-submit.log"

    checkpoint = store.location(config.spark.extra_conf, config.checkpoint_dir("raw_archive", "archive"))

    def in_flight() -> int | None:
        """A batch planned but not committed, after the first commit. Offsets are listed before commits:
        a batch committed in between is then seen as committed, not as in flight."""
        planned = checkpoint_format.batch_ids(checkpoint / "offsets")
        committed = checkpoint_format.batch_ids(checkpoint / "commits")
        pending = set(planned) - set(committed)
        return max(pending) if pending and committed else None

    with log.open("ab") as output:
        app = run_app("raw_archive", "processing", archive_overrides, stdout=output, stderr=subprocess.STDOUT)
    try:
        seen: list[int] = []

        def caught_in_flight() -> bool:
            seen.extend(batch for batch in [in_flight()] if batch is not None)
            return bool(seen)

        wait_for(caught_in_flight, 300, "a batch in flight after the first commit", 0.05)
        os.killpg(app.pid, signal.SIGKILL)
        app.wait(30)
        killed_batch = seen[0]
    finally:
        if app.poll() is None:
            os.killpg(app.pid, signal.SIGKILL)
    assert app.returncode == -signal.SIGKILL
    assert not (checkpoint / "commits" / str(killed_batch)).exists(), "the kill came after the commit"
    # The dead driver's lease is still on the store; the next driver takes it over.
    assert Lease(config, "raw_archive").read() is not None

    assert "last committed batch" in preflight(config, declared_app("raw_archive")).describe()
    drain_through_spark_submit(["raw_archive"], archive_overrides, log)
    assert (checkpoint / "commits" / str(killed_batch)).exists(), "the interrupted batch was redone"

    rows = committed_rows(config, config.data_path("archive"), ["partition", "offset", "value"])
    coordinates = Counter((row["topic"], row["partition"], row["offset"]) for row in rows)
    assert len(rows) == len(records), f"{len(rows)} archived of {len(records)} produced"
    assert max(coordinates.values()) == 1, "an offset archived twice"
    assert sorted(row["value"] for row in rows) == sorted(record.value for record in records)

    # What the interrupted batch left (if S3A had closed a file) goes with the output sweep; then a
    # plain Parquet reader of the whole folder sees exactly the committed rows.
    archive = store.location(config.spark.extra_conf, config.data_path("archive"))
    sweep = maintenance.sweep_outputs(config, 0, now=time.time() + 60, datasets=[registry.ARCHIVE])[0]
    assert sweep.refused is None and sweep.committed_files == len(checkpoint_format.sink_files(archive))
    plainly = ds.dataset(archive.path, filesystem=archive.fs, format="parquet", partitioning="hive")
    assert plainly.count_rows() == len(records)

    # The batch log and the control records are on the store too, and the lease was released.
    batches = load_batches(config, "raw_archive", "archive")
    assert batches and all(batch.committed for batch in batches[:-1])
    assert sum(end - start for b in batches for start, end in b.kafka_ranges.values()) == len(records)
    control = ControlStore(config)
    assert on_the_store(control.root) and control.last_exit("raw_archive")["status"] == "finished"
    assert Lease(config, "raw_archive").read() is None

    drain_through_spark_submit(["ad_matching"], overrides, log)
    written = committed_rows(config, AD_MATCHES.location(config), ["impression_id", "click_id", "matched"])
    matched = [(row["impression_id"], row["click_id"]) for row in written if row["matched"]]
    assert matched, "no match written to the store"
    assert len(set(matched)) == len(matched), "an (impression, click) pair written twice"
    assert Lease(config, "ad_matching").read() is None
    assert ControlStore(config).last_exit("ad_matching")["status"] == "finished"

    compact_through_spark_submit(config, overrides, log)
    archive_day = compacted_days.latest(config, registry.ARCHIVE, day.isoformat())
    assert archive_day is not None
    run_then_reconcile([], overrides, day, log)

    folder = report_dir(config, day.isoformat())
    assert on_the_store(folder)
    report = json.loads((folder / "report.json").read_text())
    assert report["inputs"]["ad_matches_path"] == AD_MATCHES.location(config)
    assert report["inputs"]["archive_rows_read"] == archive_day.rows
    assert [d for d in report["ad_match_diffs"] if d["verdict"] == "unexplained"] == []
    # The quality gates ran in the job's driver and published their Data Docs to the bucket.
    assert [gate["success"] for gate in report["quality_gates"]] == [True, True, True]
    gx_home = f"{config.data_path('gx')}/"
    assert gx_home.startswith("s3a://") or gx_home.startswith("s3://"), gx_home
    assert all(gate["data_docs"].startswith(gx_home) for gate in report["quality_gates"]), report[
        "quality_gates"
    ]
