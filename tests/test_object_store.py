"""The pipeline on s3a://, against the loopback S3 server: checkpoints, archive, batch log, lease and
control records all in a bucket, and Spark's S3A connector writing them.

The archive is read back without Spark, as another reader would: the files the sink's log lists, with
pyarrow over the same file layer.
"""

from __future__ import annotations

import os
import signal
from collections import Counter

import pyarrow.parquet as pq
import pytest

from stream_pipelines import store
from stream_pipelines.batch_log import load_batches
from stream_pipelines.checkpoint import format as checkpoint_format
from stream_pipelines.checkpoint.inspect import preflight
from stream_pipelines.control import ControlStore
from stream_pipelines.devtools import generator
from stream_pipelines.lease import Lease
from stream_pipelines.topics import ensure_topics
from tests.conftest import make_overrides_config, private_source_topics, run_app, wait_for

pytestmark = [pytest.mark.broker, pytest.mark.slow]


def committed_rows(config) -> list[dict]:
    """Every row of the files the archive's sink log lists, read with pyarrow through the file layer."""
    archive = store.location(config, config.data_path("archive"))
    rows = []
    for url in checkpoint_format.sink_files(archive):
        # topic is a partition column: it is in the path (topic=<name>/arrival_date=<day>/part-...).
        topic = next(part.split("=", 1)[1] for part in url.split("/") if part.startswith("topic="))
        with store.location(config, url).open("rb") as handle:
            table = pq.read_table(handle, columns=["partition", "offset", "value"])
        rows += [{"topic": topic, **row} for row in table.to_pylist()]
    return rows


def test_the_raw_archive_on_s3_survives_a_kill_minus_nine_exactly_once(
    broker, make_overrides, s3_root, tmp_path
):
    overrides = make_overrides(
        *private_source_topics(),
        *s3_root(),
        f"paths.scratch={tmp_path}/data/scratch",  # local, and where make_overrides' cleanup looks
        "kafka.max_offsets_per_trigger=300",
        "archive.trigger=1 seconds",
    )
    config = make_overrides_config(overrides)
    assert config.checkpoint_dir("raw_archive", "archive").startswith("s3a://")
    ensure_topics(config)
    spec = generator.ScenarioSpec(
        seed=13,
        duration_s=120,
        sensor_rate=10,
        ad_rate=4,
        topics=generator.TopicNames(*(topic.name for topic in config.kafka.topics.inputs())),
    )
    records = generator.generate(spec)
    generator.produce_to_kafka(records, config.kafka.bootstrap_servers)

    checkpoint = store.location(config, config.checkpoint_dir("raw_archive", "archive"))

    def in_flight() -> int | None:
        """A batch planned but not committed, after the first commit. Offsets are listed before commits:
        a batch committed in between is then seen as committed, not as in flight."""
        planned = checkpoint_format.batch_ids(checkpoint / "offsets")
        committed = checkpoint_format.batch_ids(checkpoint / "commits")
        pending = set(planned) - set(committed)
        return max(pending) if pending and committed else None

    app = run_app("raw_archive", "processing", overrides)
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
    # The dead driver's lease is still in the bucket; the next driver takes it over.
    assert Lease(config, "raw_archive").read() is not None

    assert "last committed batch" in preflight(config, "raw_archive").describe()
    resumed = run_app("raw_archive", "available-now", overrides)
    assert resumed.wait(600) == 0
    assert (checkpoint / "commits" / str(killed_batch)).exists(), "the interrupted batch was redone"

    rows = committed_rows(config)
    coordinates = Counter((row["topic"], row["partition"], row["offset"]) for row in rows)
    assert len(rows) == len(records), f"{len(rows)} archived of {len(records)} produced"
    assert max(coordinates.values()) == 1, "an offset archived twice"
    assert sorted(row["value"] for row in rows) == sorted(record.value for record in records)

    # The batch log and the control records are in the bucket too, and the lease was released.
    batches = load_batches(config, "raw_archive", "archive")
    assert batches and all(batch.committed for batch in batches[:-1])
    assert sum(end - start for b in batches for start, end in b.kafka_ranges.values()) == len(records)
    control = ControlStore(config)
    assert store.on_object_store(control.root) and control.last_exit("raw_archive")["status"] == "finished"
    assert Lease(config, "raw_archive").read() is None
