"""Spark's own Kafka source (spark-sql-kafka-0-10) against the real local broker."""

from __future__ import annotations

import time
import uuid

import pytest

from stream_pipelines.core.config import TopicSettings
from stream_pipelines.driver.runtime import parse_offsets as offsets
from stream_pipelines.driver.runtime import read_raw
from tests.conftest import create_topic, make_overrides_config, produce, wait_for

pytestmark = pytest.mark.broker


@pytest.fixture
def topic(broker) -> TopicSettings:
    name = f"source-test-{uuid.uuid4().hex[:8]}"
    create_topic(broker, name, 3)
    return TopicSettings(name=name, partitions=3)


def keyed(count: int, start: int = 0) -> list[tuple[str, bytes]]:
    return [(f"key-{i % 17}", f'{{"n": {i}}}'.encode()) for i in range(start, start + count)]


def run_available_now(spark, config, topic, checkpoint, sink_name, output=None):
    """Drain the topic once; to memory, or to Parquet when the checkpoint must be resumable."""
    writer = read_raw(spark, config, [topic]).writeStream.option("checkpointLocation", str(checkpoint))
    if output is None:
        writer = writer.format("memory").queryName(sink_name)
    else:
        writer = writer.format("parquet").option("path", str(output))
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination(120)
    return query


def test_all_partitions_are_read(spark, make_overrides, topic, tmp_path):
    config = make_overrides_config(make_overrides())
    produce(config, topic.name, keyed(600))
    run_available_now(spark, config, topic, tmp_path / "ck", "all_partitions")
    counts = {
        row["partition"]: row["count"]
        for row in spark.table("all_partitions").groupBy("partition").count().collect()
    }
    assert set(counts) == {0, 1, 2}
    assert sum(counts.values()) == 600
    sample = spark.table("all_partitions").first()
    assert sample["topic"] == topic.name and sample["kafka_timestamp"] is not None


def test_restart_resumes_at_the_committed_offsets(spark, make_overrides, topic, tmp_path):
    config = make_overrides_config(make_overrides())
    produce(config, topic.name, keyed(300))
    output = tmp_path / "out"
    first = run_available_now(spark, config, topic, tmp_path / "ck", "resume", output)
    first_end = offsets(first.lastProgress["sources"][0]["endOffset"])[topic.name]
    assert spark.read.parquet(str(output)).count() == 300
    produce(config, topic.name, keyed(120, start=300))
    second = run_available_now(spark, config, topic, tmp_path / "ck", "resume", output)
    numbers = [
        int(r["value"].decode().split(": ")[1].rstrip("}")) for r in spark.read.parquet(str(output)).collect()
    ]
    assert sorted(numbers) == list(range(420)), (
        "each record once: the second run starts where the first ended"
    )
    starts = {}
    for progress in second.recentProgress:
        if progress["numInputRows"]:
            for partition, offset in offsets(progress["sources"][0]["startOffset"])[topic.name].items():
                starts.setdefault(partition, offset)
    assert starts, "the second run read nothing"
    assert starts == {p: o for p, o in first_end.items() if p in starts}


def test_max_offsets_per_trigger_caps_each_batch(spark, make_overrides, topic, tmp_path):
    config = make_overrides_config(make_overrides("kafka.max_offsets_per_trigger=100"))
    produce(config, topic.name, keyed(1000))
    query = run_available_now(spark, config, topic, tmp_path / "ck", "capped")
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 1000
    assert max(sizes) <= 100
    assert len(sizes) >= 10


def test_data_produced_while_the_query_runs_is_picked_up(spark, make_overrides, topic, tmp_path):
    config = make_overrides_config(make_overrides())
    query = (
        read_raw(spark, config, [topic])
        .writeStream.format("memory")
        .queryName("live")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        wait_for(lambda: query.lastProgress is not None, 60, "the first batch")
        produce(config, topic.name, keyed(50))
        wait_for(lambda: spark.table("live").count() == 50, 60, "50 rows produced after the start")
        time.sleep(0.5)
        produce(config, topic.name, keyed(25, start=50))
        wait_for(lambda: spark.table("live").count() == 75, 60, "25 more rows")
    finally:
        query.stop()
