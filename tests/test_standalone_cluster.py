"""The same apps on a real Spark standalone cluster (master + worker from the pyspark distribution).

The cluster runs on free loopback ports for this module and is stopped at the end, also on failure.
Each app is launched exactly as the front door launches it (``run_app``: spark-submit with the
project's launcher); the only difference from every other test is configuration:
``spark.master=spark://127.0.0.1:<port>`` and executor sizing through ``spark.extra_conf``.

"It ran on the cluster" is checked on the cluster's side, not only the driver's: the master lists a
finished application with the app's name; the worker kept that application's executor folder, with
the Kafka connector jars the driver shipped to it and an executor log recording the tasks it ran;
and the driver's log names that application id. The raw_archive run reads Kafka over mutual TLS with an
encrypted client key. The sensor_aggregation run also needs Python on the executors (its metadata join
is a Python data source), so it shows they import this package.
"""

from __future__ import annotations

import json
import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from stream_pipelines.devtools import generator
from stream_pipelines.devtools.standalone import StandaloneCluster
from stream_pipelines.kafka.topics import ensure_topics
from tests.conftest import Replay, create_topic, files_source_overrides, make_overrides_config, run_app

pytestmark = [pytest.mark.broker, pytest.mark.slow]

# 512m executors on a worker that offers 1g and 2 cores: one executor per app, room to spare.
EXECUTOR_CONF = '{spark.executor.memory: 512m, spark.executor.cores: "2", spark.cores.max: "2"}'


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    home = tmp_path_factory.mktemp("standalone")
    with StandaloneCluster(home, workers=1, worker_cores=2, worker_memory="1g") as running:
        yield running


def on_cluster(cluster: StandaloneCluster) -> list[str]:
    """The whole difference between a local run and a cluster run: configuration."""
    return [f"spark.master={cluster.master_url}", f"spark.extra_conf={EXECUTOR_CONF}"]


def run_to_completion(app: str, overrides: list[str], log: Path, timeout_s: float = 600) -> int:
    with log.open("wb") as output:
        process = run_app(app, "available-now", overrides, stdout=output, stderr=output)
        try:
            return process.wait(timeout_s)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(30)


def assert_ran_on_cluster(cluster: StandaloneCluster, app: str, driver_log: Path) -> None:
    finished = cluster.completed_apps(app)
    assert len(finished) == 1, f"the master lists {len(finished)} completed '{app}' apps: {finished}"
    record = finished[0]
    assert record["state"] == "FINISHED", record
    executor_logs = cluster.executor_logs(record["id"])
    assert executor_logs, f"the worker kept no executor log for {record['id']} under {cluster.work_dir()}"
    shipped = {jar.name for log in executor_logs for jar in log.parent.glob("*.jar")}
    assert any(name.startswith("spark-sql-kafka") for name in shipped), "the connector was not shipped"
    executor_text = "\n".join(path.read_text(errors="replace") for path in executor_logs)
    assert "Finished task" in executor_text, "the cluster's executor ran no task"
    assert f"app ID {record['id']}" in driver_log.read_text(errors="replace"), (
        "the driver did not connect to this cluster"
    )


def test_raw_archive_runs_on_the_standalone_cluster(
    spark, broker, secured_kafka, cluster, make_overrides, monkeypatch, tmp_path
):
    """Over the broker's mutual TLS listener, with a client key encrypted as openssl 3 encrypts one by
    default: the cluster's executors, JVMs of their own, read Kafka with the key the driver hands them."""
    for name, value in secured_kafka.environment().items():
        monkeypatch.setenv(name, value)
    suffix = uuid.uuid4().hex[:6]
    topics = generator.TopicNames(f"sensors-{suffix}", f"impressions-{suffix}", f"clicks-{suffix}")
    overrides = make_overrides(
        f"kafka.topics.sensors.name={topics.sensors}",
        f"kafka.topics.impressions.name={topics.impressions}",
        f"kafka.topics.clicks.name={topics.clicks}",
        *secured_kafka.mutual_tls(),
        *on_cluster(cluster),
    )
    config = make_overrides_config(overrides)
    ensure_topics(config)
    records = generator.generate(
        generator.ScenarioSpec(seed=5, duration_s=60, sensor_rate=4, ad_rate=2, topics=topics)
    )
    generator.produce_to_kafka(records, config.kafka_client_config())

    driver_log = tmp_path / "raw_archive.driver.log"
    code = run_to_completion("raw_archive", overrides, driver_log)
    assert code == 0, driver_log.read_text(errors="replace")[-5000:]

    archive = spark.read.parquet(config.data_path("archive"))
    assert archive.count() == len(records)
    assert archive.select("topic", "partition", "offset").distinct().count() == len(records)
    assert_ran_on_cluster(cluster, "raw_archive", driver_log)


def reading(minute: int, sensor: str, temperature: float) -> dict:
    return {
        "event_id": f"{sensor}-{minute:02d}-{temperature}",
        "sensor_id": sensor,
        "temperature": temperature,
        "ts": f"2026-01-01T00:{minute:02d}:00.000Z",
    }


def test_sensor_aggregation_runs_python_on_the_cluster_executors(
    spark, broker, cluster, make_overrides, tmp_path
):
    """The metadata join is a Python data source, read by the executors: they run this package's code.

    One file, one micro-batch: the live sliding output (update mode, to Kafka) already carries the
    enriched windows, so no later batch is needed to move the watermark.
    """
    sliding_topic = f"sliding-{uuid.uuid4().hex[:8]}"
    create_topic(broker, sliding_topic, 1)
    replay = Replay(tmp_path / "replay")
    replay.batch(
        "sensors",
        [reading(1, "sensor-0001", 20.0), reading(2, "sensor-9999", 30.0), reading(3, "sensor-0001", 22.0)],
    )
    overrides = make_overrides(
        *files_source_overrides(replay.root),
        f"kafka.topics.sliding_averages.name={sliding_topic}",
        *on_cluster(cluster),
    )

    driver_log = tmp_path / "sensor_aggregation.driver.log"
    code = run_to_completion("sensor_aggregation", overrides, driver_log)
    assert code == 0, driver_log.read_text(errors="replace")[-5000:]

    records = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", broker.kafka.bootstrap_servers)
        .option("subscribe", sliding_topic)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("CAST(value AS STRING) AS value")
        .collect()
    )
    latest = {}
    for record in records:
        row = json.loads(record["value"])
        latest[(row["sensor_id"], row["window_start"])] = row
    window = next(
        start for sensor, start in latest if sensor == "sensor-0001" and start.startswith("2026-01-01T00:00")
    )
    known, unknown = latest[("sensor-0001", window)], latest[("sensor-9999", window)]
    assert known["reading_count"] == 2 and known["avg_temperature"] == pytest.approx(21.0)
    assert known["known_sensor"] is True and known["location"] == "warehouse"
    assert unknown["known_sensor"] is False and unknown.get("location") is None
    assert_ran_on_cluster(cluster, "sensor_aggregation", driver_log)
