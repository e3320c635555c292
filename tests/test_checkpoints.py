"""Checkpoint preflight, inspection and reset against real Spark checkpoints.

Two real runs back most tests: sensor_aggregation's tumbling query on the files source (shared by the
preflight tests, which then damage copies of its checkpoint), and raw_archive on Kafka for the reset.
"""

from __future__ import annotations

import argparse
import re
import shutil
import time
import uuid
from datetime import datetime
from pathlib import Path

import pytest

from stream_pipelines.apps import raw_archive, sensor_aggregation
from stream_pipelines.checkpoint import inspect as checkpoints
from stream_pipelines.checkpoint.inspect import CheckpointError
from stream_pipelines.checkpoint.reset import reset
from stream_pipelines.cli import checkpoint_arguments, checkpoint_inspect, checkpoint_reset
from stream_pipelines.core.registry import app as declared_app
from stream_pipelines.driver.lifecycle import run_streams
from stream_pipelines.driver.runtime import parse_offsets
from tests.conftest import (
    Replay,
    committed_batches_of_files,
    create_topic,
    files_source_overrides,
    make_overrides_config,
    overrides_for,
    run_in_process,
)

SENSORS = "sensor_aggregation"


def reading(minute: int, second: int = 0, temperature: float = 20.0) -> dict:
    return {
        "event_id": f"r-{minute:02d}{second:02d}-{temperature}",
        "sensor_id": "sensor-0001",
        "temperature": temperature,
        "ts": f"2026-01-01T00:{minute:02d}:{second:02d}.000Z",
    }


def at(minute: int) -> datetime:
    return datetime(2026, 1, 1, 0, minute)


def run_only(spark, config, app_module, names: set[str]):
    """Some of an app's queries, exactly as its launcher starts them, to available-now."""
    every_sink = app_module.build_sinks(spark, config)
    queries: list = []
    chosen = [sink for sink in every_sink if sink.name in names]
    code = run_streams(
        config, declared_app(app_module.APP), chosen, "available-now", on_started=queries.extend
    ).code
    return code, {query.name.split(".", 1)[1]: query for query in queries}, every_sink


# --------------------------------------------------------------------------- no Spark run needed


def test_fingerprints_cover_the_state_shaping_settings_only(tmp_path, broker_ports):
    base = make_overrides_config(overrides_for(tmp_path, broker_ports))
    changed = make_overrides_config(
        overrides_for(
            tmp_path,
            broker_ports,
            "sensors.window=10 minutes",
            "sensors.watermark=7 minutes",  # a delay change is compatible: not in the fingerprint
            "ads.match_interval=10 minutes",
            "kafka.topics.sensors.name=sensors-v2",
        )
    )
    old_sensors, new_sensors = (
        checkpoints.query_fingerprints(c, declared_app(SENSORS)) for c in (base, changed)
    )
    assert checkpoints.fingerprint_changes(old_sensors["tumbling"], new_sensors["tumbling"]) == [
        'source_topics: [["sensors"]] -> [["sensors-v2"]]',
        "window: 5 minutes -> 10 minutes",
    ]
    assert checkpoints.fingerprint_changes(old_sensors["sliding"], new_sensors["sliding"]) == [
        'source_topics: [["sensors"]] -> [["sensors-v2"]]'
    ], "the watermark delay changed too, and does not count"
    old_ads, new_ads = (
        checkpoints.query_fingerprints(c, declared_app("ad_matching")) for c in (base, changed)
    )
    assert checkpoints.fingerprint_changes(old_ads["matches"], new_ads["matches"]) == [
        "join_time_range: clicked_at between shown_at and shown_at + 5 minutes"
        " -> clicked_at between shown_at and shown_at + 10 minutes"
    ]
    assert old_ads["ctr"] == new_ads["ctr"] and old_ads["quarantine"] == new_ads["quarantine"]
    assert set(old_ads["quarantine"]) == {"source", "source_topics"}, "stateless: its sources only"


def test_reset_refuses_without_the_confirmation(tmp_path, broker_ports):
    config = make_overrides_config(overrides_for(tmp_path, broker_ports))
    for confirm in (None, "", "sensor_aggregation"):
        with pytest.raises(CheckpointError, match=r"not confirmed.*--confirm raw_archive"):
            reset(config, declared_app("raw_archive"), "all", from_="committed", confirm=confirm)
    parser = argparse.ArgumentParser()
    checkpoint_arguments(parser)
    args = parser.parse_args(["reset", "raw_archive", "--from", "committed"])
    assert checkpoint_reset(config, declared_app("raw_archive"), args) == 1, (
        "stdin is no terminal: no prompt, refused"
    )
    assert not Path(config.checkpoint_dir("raw_archive", "archive")).exists()


def test_a_missing_checkpoint_is_a_fresh_start(tmp_path, broker_ports, capsys):
    config = make_overrides_config(overrides_for(tmp_path, broker_ports))
    report = checkpoints.preflight(config, declared_app("ad_matching"))
    assert [q.exists for q in report.queries] == [False, False, False]
    assert "fresh start" in report.describe()
    assert checkpoint_inspect(config, declared_app("ad_matching")) == 0
    assert "ok to start" in capsys.readouterr().out


# --------------------------------------------------------------------------- a real stateful checkpoint


@pytest.fixture(scope="module")
def tumbling_run(spark, tmp_path_factory, broker_ports):
    """sensor_aggregation.tumbling run once over one file: batch 0, then a no-data batch 1 that emits."""
    root = tmp_path_factory.mktemp("tumbling")
    replay = Replay(root / "replay")
    overrides = overrides_for(root / "data", broker_ports, *files_source_overrides(replay.root))
    config = make_overrides_config(overrides)
    replay.batch("sensors", [reading(minute) for minute in (*range(5), *range(6, 12))])  # watermark 00:09
    checkpoints.record_fingerprints(config, declared_app(SENSORS))
    code, queries, sinks = run_only(spark, config, sensor_aggregation, {"tumbling"})
    assert code == 0
    # The query specs (from the registry) agree with the app's sinks (names, file sink folders).
    specs = checkpoints.query_specs(config, declared_app(SENSORS))
    assert [(s.name, s.output_path) for s in specs] == [
        (s.name, s.path if s.format == "parquet" else None) for s in sinks
    ]
    return config, overrides, replay, queries["tumbling"]


def copy_of(tumbling_run, tmp_path: Path, *extra: str, outputs: bool = False):
    """The run's checkpoints (and outputs) under a new data root, with the same source files."""
    config, overrides, _, _ = tumbling_run
    root = Path(config.paths.data_root)
    shutil.copytree(root / "checkpoints", tmp_path / "data" / "checkpoints")
    shutil.copytree(root / "control", tmp_path / "data" / "control")  # the app's recorded exit
    if outputs:
        shutil.copytree(root / "outputs", tmp_path / "data" / "outputs")
    copied = make_overrides_config([*overrides, f"paths.data_root={tmp_path / 'data'}", *extra])
    return copied, Path(copied.checkpoint_dir(SENSORS, "tumbling"))


def refusal(config) -> str:
    with pytest.raises(CheckpointError) as refused:
        checkpoints.preflight(config, declared_app(SENSORS))
    message = str(refused.value)
    assert "Traceback" not in message and "at org.apache" not in message
    assert "sensor_aggregation.tumbling" in message and "What to do" in message
    return message


def test_inspect_reads_a_stateful_checkpoint(tumbling_run):
    config, _, _, query = tumbling_run
    found = checkpoints.preflight(config, declared_app(SENSORS)).query("tumbling")
    assert found.last_committed_batch == query.lastProgress["batchId"] == 1
    assert found.batch_in_flight is None and found.query_id == query.id
    assert found.committed_source_offsets == [{"logOffset": 0}]
    assert found.committed_watermark == "2026-01-01T00:09:00.000Z"
    assert found.shuffle_partitions == 2 and found.state_store_provider.endswith("RocksDBStateStoreProvider")
    assert found.stored_fingerprint == found.current_fingerprint and not found.fingerprint_changes
    assert found.writer_spark_version == checkpoints.running_spark_version()
    # The state layout the reset recreates is the one Spark wrote.
    assert {op: tuple(info["stores"]) for op, info in found.state_operators.items()} == {0: ("default",)}
    assert found.state_operators[0]["name"] == "stateStoreSave"


def test_preflight_refuses_an_incompatible_window(tumbling_run):
    _, overrides, _, _ = tumbling_run
    message = refusal(make_overrides_config([*overrides, "sensors.window=10 minutes"]))
    assert "incompatible" in message and "window: 5 minutes -> 10 minutes" in message
    assert "pipelinectl checkpoint reset sensor_aggregation --query tumbling --from committed" in message
    assert "sliding" not in message.split("What to do")[0], "only the query that has state is refused"
    # The watermark delay is not part of it: Spark accepts a changed delay.
    checkpoints.preflight(
        make_overrides_config([*overrides, "sensors.watermark=5 minutes"]), declared_app(SENSORS)
    )


def test_preflight_refuses_changed_shuffle_partitions_for_state(tumbling_run):
    _, overrides, _, _ = tumbling_run
    message = refusal(make_overrides_config([*overrides, "spark.shuffle_partitions=3"]))
    assert "spark.sql.shuffle.partitions is 2 in the checkpoint" in message


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        ("truncate", r"offsets/1 (does not match its checksum|.*not valid JSON)"),
        ("garbage", r"offsets/1 .*(not UTF-8|version line)"),
        ("cut after a line", "offsets/1 .*0 source line"),
        ("drop offsets", r"commit\(s\) 1 without offsets/N"),
        ("drop metadata", "metadata is missing while offsets exist"),
        ("gap", r"offsets has gaps: batch\(es\) 2 missing"),
    ],
)
def test_preflight_refuses_a_damaged_checkpoint(tumbling_run, tmp_path, damage, expected):
    config, checkpoint = copy_of(tumbling_run, tmp_path)
    offsets = checkpoint / "offsets" / "1"
    if damage == "truncate":
        offsets.write_bytes(offsets.read_bytes()[:150])
    elif damage == "garbage":
        offsets.with_name(".1.crc").unlink()
        offsets.write_bytes(b"\x00\xfe\xff garbage")
    elif damage == "cut after a line":
        # Cut exactly at a line end and with a matching checksum: only the line count gives it away.
        offsets.with_name(".1.crc").unlink()
        offsets.write_text("\n".join(offsets.read_text().split("\n")[:2]))
    elif damage == "drop offsets":
        offsets.unlink()
        offsets.with_name(".1.crc").unlink()
    elif damage == "drop metadata":
        (checkpoint / "metadata").unlink()
    else:
        shutil.copy(offsets, checkpoint / "offsets" / "3")
        shutil.copy(checkpoint / "commits" / "1", checkpoint / "commits" / "3")
    assert re.search(expected, refusal(config))


def test_preflight_refuses_a_fresh_start_over_an_existing_file_sink_log(tumbling_run, tmp_path):
    config, checkpoint = copy_of(tumbling_run, tmp_path, outputs=True)
    shutil.rmtree(checkpoint)
    message = refusal(config)
    assert "silently skip batches 0..1" in message
    assert "files source resumes only from a readable committed position" in message


def test_reset_of_a_stateful_query_continues_after_the_committed_batch(spark, tumbling_run, tmp_path):
    config, checkpoint = copy_of(tumbling_run, tmp_path, "spark.shuffle_partitions=3", outputs=True)
    assert "shuffle.partitions" in refusal(config)
    result = reset(config, declared_app(SENSORS), "tumbling", from_="committed", confirm=SENSORS)
    (done,) = result.queries
    assert done.first_batch == 2, "right after the file sink's last batch: its log stays gapless"
    assert done.start_source_offsets == [{"logOffset": 0}]
    assert Path(done.old_checkpoint).is_dir() and done.old_checkpoint.startswith(f"{checkpoint}.reset-")
    assert done.empty_state_stores == 3, "one per partition: the reset applies the new partition count"
    assert "2026-01-01T00:09:00" in result.describe()
    checkpoints.preflight(config, declared_app(SENSORS))

    _, _, replay, _ = tumbling_run
    replay.batch("sensors", [reading(minute) for minute in range(16, 23)])  # watermark -> 00:20
    code, queries, _ = run_only(spark, config, sensor_aggregation, {"tumbling"})
    assert code == 0
    progress = queries["tumbling"].recentProgress
    assert progress[0]["batchId"] == 2
    assert sum(p["numInputRows"] for p in progress) == 7, "only the new file: nothing read twice"
    output = Path(config.output_dir("sensor_windows"))
    sink_log = sorted(int(entry.name) for entry in (output / "_spark_metadata").glob("[0-9]*"))
    assert sink_log == [0, 1, 2, 3], "one sink log, no gap, no batch skipped"
    owners = committed_batches_of_files(output)
    # The copied log names the first run's files by absolute path (in the fixture's folder): read the new.
    new_files = [str(output / name) for name, batch in owners.items() if batch >= done.first_batch]
    counts = {row["window_start"]: row["reading_count"] for row in spark.read.parquet(*new_files).collect()}
    # Only [00:15, 00:20) closed; [00:05, 00:10) and [00:10, 00:15) were open in the state that was lost.
    assert counts == {at(15): 4}
    found = checkpoints.inspect(config, declared_app(SENSORS)).query("tumbling")
    assert found.last_reset["first_batch"] == 2 and found.shuffle_partitions == 3


# --------------------------------------------------------------------------- a real Kafka reset


def produce_at(config, messages: list[tuple[str, int, int]]) -> list[tuple[str, int, int, int]]:
    """(topic, partition, timestamp ms) per message; returns (topic, partition, offset, timestamp)."""
    from confluent_kafka import Producer

    delivered: list[tuple[str, int, int, int]] = []

    def on_delivery(error, message) -> None:
        assert error is None, error
        delivered.append((message.topic(), message.partition(), message.offset(), message.timestamp()[1]))

    producer = Producer({**config.kafka_client_config(), "linger.ms": 5})
    for number, (topic, partition, timestamp_ms) in enumerate(messages):
        producer.produce(
            topic,
            value=f'{{"n": {number}}}'.encode(),
            partition=partition,
            timestamp=timestamp_ms,
            on_delivery=on_delivery,
        )
    assert producer.flush(30) == 0
    return delivered


@pytest.mark.broker
def test_reset_from_committed_offsets_skips_and_repeats_nothing(spark, broker, make_overrides):
    suffix = uuid.uuid4().hex[:6]
    names = {"sensors": f"s-{suffix}", "impressions": f"i-{suffix}", "clicks": f"c-{suffix}"}
    for name in names.values():
        create_topic(broker, name, 2)
    config = make_overrides_config(
        make_overrides(
            *(f"kafka.topics.{key}.name={name}" for key, name in names.items()),
            "kafka.max_offsets_per_trigger=12",
        )
    )
    topics = list(names.values())
    # Recent enough for the broker's retention and timestamp checks, apart enough to pick a time between.
    start_ms = int(time.time() * 1000) - 7_200_000
    first = produce_at(config, [(topics[i % 3], i % 2, start_ms + i * 1000) for i in range(30)])

    checkpoints.record_fingerprints(config, declared_app("raw_archive"))
    code, queries = run_in_process(spark, config, raw_archive)
    assert code == 0
    last = queries["archive"].lastProgress
    found = checkpoints.preflight(config, declared_app("raw_archive")).query("archive")
    assert found.last_committed_batch == last["batchId"] and found.batch_in_flight is None
    end_offsets = parse_offsets(last["sources"][0]["endOffset"])
    assert found.committed_offsets == {
        topic: {int(p): o for p, o in parts.items()} for topic, parts in end_offsets.items()
    }
    assert "resume point" in checkpoints.inspect(config, declared_app("raw_archive")).describe()

    later_ms = start_ms + 3_600_000
    second = produce_at(config, [(topics[i % 3], (i + 1) % 2, later_ms + i * 1000) for i in range(12)])
    result = reset(config, declared_app("raw_archive"), "archive", from_="committed", confirm="raw_archive")
    (done,) = result.queries
    assert done.start_offsets == found.committed_offsets
    assert done.first_batch == found.last_committed_batch + 1
    assert Path(done.old_checkpoint, "commits", str(found.last_committed_batch)).exists(), "kept, not deleted"

    code, queries = run_in_process(spark, config, raw_archive)
    assert code == 0
    assert queries["archive"].recentProgress[0]["batchId"] == done.first_batch
    archive = spark.read.parquet(config.data_path("archive"))
    assert archive.count() == len(first) + len(second)
    assert archive.select("topic", "partition", "offset").distinct().count() == len(first) + len(second)

    # From a time: the first offset at or after it, per partition; the end where none is that late yet.
    moment = later_ms + 5_500
    result = reset(
        config, declared_app("raw_archive"), "all", from_="time", timestamp_ms=moment, confirm="raw_archive"
    )
    expected: dict[str, dict[int, int]] = {topic: {0: 0, 1: 0} for topic in topics}
    for topic in topics:
        for partition in (0, 1):
            written = [m for m in first + second if m[:2] == (topic, partition)]
            late_enough = [offset for _, _, offset, stamp in written if stamp >= moment]
            expected[topic][partition] = min(late_enough, default=len(written))
    assert result.queries[0].start_offsets == expected
    assert expected != done.start_offsets, "the time lies inside the second lot, after the committed end"
