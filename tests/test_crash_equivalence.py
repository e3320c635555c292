"""kill -9 mid-stream, restart from the checkpoint: outputs equal an uninterrupted run, row for row.

The killed driver is a spark-submit of the app, as the supervisor starts one; the baseline and the
restart run in the session's Spark.

All input is in Kafka before either run and maxOffsetsPerTrigger fixes the batch boundaries, so the
watermark sequence (and with it every emitted window and match) is the same in both runs.
"""

from __future__ import annotations

import json
import os
import signal
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from stream_pipelines.apps import ad_matching, sensor_aggregation
from stream_pipelines.devtools import generator
from stream_pipelines.kafka.topics import ensure_topics
from tests.conftest import make_overrides_config, overrides_for, run_app, run_in_process, wait_for

pytestmark = [pytest.mark.broker, pytest.mark.slow]

# Event time each app's input spans: past its watermark delay and a window, so that windows are emitted
# before the end (the ads' watermark is 10 minutes behind, the sensors' 2).
EVENT_SPAN_S = {"sensor_aggregation": 600, "ad_matching": 1200}

OUTPUTS = {
    "sensor_aggregation": (sensor_aggregation, ["sensor_windows"], ["tumbling", "sliding", "quarantine"]),
    "ad_matching": (ad_matching, ["ad_matches", "ad_ctr"], ["matches", "ctr", "quarantine"]),
}


def in_flight(config, app: str, queries: list[str]) -> bool:
    for query in queries:
        checkpoint = Path(config.checkpoint_dir(app, query))
        offsets = {p.name for p in (checkpoint / "offsets").glob("[0-9]*")}
        commits = {p.name for p in (checkpoint / "commits").glob("[0-9]*")}
        if commits and offsets - commits:
            return True
    return False


def rows(spark, path: str, drop: tuple[str, ...] = ()) -> list[tuple]:
    frame = spark.read.parquet(path).drop(*drop)
    return sorted(tuple(row) for row in frame.collect())


def latest_per_key(config) -> dict[bytes, bytes]:
    topic = config.kafka.topics.sliding_averages.name
    consumer = Consumer(
        {**config.kafka_client_config(), "group.id": uuid.uuid4().hex, "enable.auto.commit": False}
    )
    latest: dict[bytes, bytes] = {}
    for partition in range(config.kafka.topics.sliding_averages.partitions):
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        consumer.assign([TopicPartition(topic, partition, low)])
        position = low
        while position < high:
            message = consumer.poll(10)
            assert message is not None
            position = message.offset() + 1
            latest[message.key()] = message.value()
    consumer.close()
    return latest


@pytest.mark.parametrize("app", ["sensor_aggregation", "ad_matching"])
def test_kill_minus_nine_changes_no_output_row(spark, broker, broker_ports, tmp_path, app):
    module, outputs, queries = OUTPUTS[app]
    suffix = uuid.uuid4().hex[:6]
    topics = [
        f"kafka.topics.sensors.name=sensors-{suffix}",
        f"kafka.topics.impressions.name=impressions-{suffix}",
        f"kafka.topics.clicks.name=clicks-{suffix}",
        # At most 1,600 records a batch: 3 batches of readings (4,800), more of ad events; the kill lands
        # after the first commit.
        "kafka.max_offsets_per_trigger=1600",
    ]

    def overrides(run: str) -> list[str]:
        return overrides_for(
            tmp_path / run,
            broker_ports,
            *topics,
            f"kafka.topics.sliding_averages.name=sliding-{suffix}-{run}",
            "sensors.trigger=500 milliseconds",
            "ads.trigger=500 milliseconds",
        )

    baseline = make_overrides_config(overrides("baseline"))
    crashed = make_overrides_config(overrides("crashed"))
    ensure_topics(baseline)
    ensure_topics(crashed)
    spec = generator.ScenarioSpec(
        seed=5,
        duration_s=EVENT_SPAN_S[app],
        sensor_rate=8,
        ad_rate=4,
        topics=generator.TopicNames(f"sensors-{suffix}", f"impressions-{suffix}", f"clicks-{suffix}"),
    )
    generator.produce_to_kafka(generator.generate(spec), baseline.kafka_client_config())

    code, _ = run_in_process(spark, baseline, module)
    assert code == 0

    process = run_app(app, "processing", overrides("crashed"))
    try:
        wait_for(lambda: in_flight(crashed, app, queries), 240, "a batch in flight after a commit", 0.01)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == -signal.SIGKILL
    # The restart from the killed driver's checkpoint, drained in the session's Spark: what it resumes
    # from is the checkpoint alone (a spark-submit would add a JVM's start and nothing to compare).
    code, _ = run_in_process(spark, crashed, module)
    assert code == 0

    for output in outputs:
        expected = rows(spark, baseline.output_dir(output))
        assert expected, f"the baseline wrote no {output}: the comparison would prove nothing"
        assert rows(spark, crashed.output_dir(output)) == expected, f"{output} differs after kill -9"
    quarantine = f"{{}}/{app}"
    assert rows(spark, quarantine.format(crashed.data_path("quarantine")), ("quarantined_at",)) == rows(
        spark, quarantine.format(baseline.data_path("quarantine")), ("quarantined_at",)
    )
    if app == "sensor_aggregation":
        expected_live = latest_per_key(baseline)
        assert expected_live and latest_per_key(crashed) == expected_live, "the live sliding view differs"
        assert all(json.loads(v)["avg_temperature"] is not None for v in expected_live.values())
