"""Raw archive: exactly once across a kill -9 in the middle of a batch, malformed records included."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from stream_pipelines.devtools import generator
from stream_pipelines.kafka.topics import ensure_topics
from tests.conftest import make_overrides_config, private_source_topics, run_app, wait_for

pytestmark = [pytest.mark.broker, pytest.mark.slow]


def batch_in_flight(checkpoint: Path) -> int | None:
    """The id of a batch whose offsets are logged but not yet committed, if any."""
    offsets = {int(p.name) for p in (checkpoint / "offsets").glob("[0-9]*")}
    commits = {int(p.name) for p in (checkpoint / "commits").glob("[0-9]*")}
    pending = offsets - commits
    return max(pending) if pending and len(commits) >= 1 else None


def test_kill_minus_nine_mid_batch_loses_and_duplicates_nothing(spark, broker, make_overrides, tmp_path):
    overrides = make_overrides(
        *private_source_topics(),
        "kafka.max_offsets_per_trigger=300",
        "archive.trigger=500 milliseconds",
    )
    config = make_overrides_config(overrides)
    ensure_topics(config)
    spec = generator.ScenarioSpec(
        seed=11,
        duration_s=240,
        sensor_rate=15,
        ad_rate=5,
        topics=generator.TopicNames(*(topic.name for topic in config.kafka.topics.inputs())),
    )
    records = generator.generate(spec)
    malformed = sum(r.kind.startswith("malformed:") for r in records)
    assert malformed > 0
    generator.produce_to_kafka(records, config.kafka_client_config())

    checkpoint = Path(config.checkpoint_dir("raw_archive", "archive"))
    app = run_app("raw_archive", "processing", overrides)
    try:
        wait_for(
            lambda: batch_in_flight(checkpoint) is not None,
            180,
            "a batch in flight after the first commit",
            0.01,
        )
        killed_batch = batch_in_flight(checkpoint)
        os.killpg(app.pid, signal.SIGKILL)
        app.wait(30)
    finally:
        if app.poll() is None:
            os.killpg(app.pid, signal.SIGKILL)
    assert app.returncode == -signal.SIGKILL
    assert not (checkpoint / "commits" / str(killed_batch)).exists(), "the kill came after the commit"

    resumed = run_app("raw_archive", "available-now", overrides)
    assert resumed.wait(300) == 0
    assert (checkpoint / "commits" / str(killed_batch)).exists(), "the interrupted batch was redone"

    archive = spark.read.parquet(config.data_path("archive"))
    coordinates = archive.select("topic", "partition", "offset")
    assert archive.count() == len(records)
    assert coordinates.distinct().count() == len(records)
    payloads = sorted(bytes(r["value"]) for r in archive.select("value").collect())
    assert payloads == sorted(r.value for r in records), "the archive holds the bytes as they arrived"
    assert set(archive.columns) >= {"key", "kafka_timestamp", "archived_at", "arrival_date", "topic"}
