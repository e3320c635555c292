"""A real Prometheus scrapes the exporter of a running streaming query, with the repo's scrape config.

Prometheus runs on a free loopback port (never 9090) with a temporary storage folder and the rules
of monitoring/rules; it is stopped at the end whatever happens.
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from stream_pipelines.config import load_config
from stream_pipelines.metrics import MetricsExporter
from tests.test_alert_rules import ALERTS

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

MONITORING = Path(__file__).resolve().parents[1] / "monitoring"
APP = "sensor_aggregation"
QUERY = f"{APP}.windows"
SCRAPE_INTERVAL_S = 1
# The exporter computes the lag while answering the scrape; Prometheus stamps the sample with the
# scrape's start. Between the two lie an HTTP round trip on loopback and Python's collect.
SCRAPE_TOLERANCE_S = 1.0
SAMPLES = 5


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until(condition: Callable[[], Any], what: str, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            result = condition()
        except OSError:
            result = None
        if result:
            return result
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


@dataclass
class RunningQuery:
    query: StreamingQuery
    exporter: MetricsExporter
    watermark: float


@pytest.fixture(scope="module")
def running_query(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningQuery]:
    """A watermarked aggregation that has processed one file and then waits, so its watermark stays."""
    from pyspark.sql import functions as F

    tmp_path = tmp_path_factory.mktemp("scrape")
    config = load_config(
        "local", [f"paths.data_root={tmp_path}", f"metrics.ports.{APP}=0", "sensors.watermark=10 seconds"]
    )
    source = tmp_path / "source"
    source.mkdir()
    newest = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=3)
    events = [
        {
            "sensor_id": f"s{i % 2}",
            "temperature": 20.0 + i,
            "ts": (newest - timedelta(seconds=10 * i)).isoformat(),
        }
        for i in range(5)
    ]
    (source / "batch-000.jsonl").write_text("".join(json.dumps(event) + "\n" for event in events))

    exporter = MetricsExporter(config, APP).start(spark)
    query = (
        spark.readStream.schema("sensor_id string, temperature double, ts timestamp")
        .json(str(source))
        .withWatermark("ts", config.sensors.watermark.spark())
        .groupBy(F.window("ts", "10 seconds"), "sensor_id")
        .agg(F.avg("temperature"))
        .writeStream.queryName(QUERY)
        .outputMode("append")
        .format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        query.processAllAvailable()
        watermark = (newest - timedelta(seconds=10)).timestamp()

        def reported_watermark() -> float | None:
            progress = query.lastProgress
            if progress is None:
                return None
            return datetime.fromisoformat(
                progress["eventTime"]["watermark"].replace("Z", "+00:00")
            ).timestamp()

        wait_until(lambda: reported_watermark() == watermark, "Spark to move the watermark")
        yield RunningQuery(query, exporter, watermark)
    finally:
        query.stop()
        exporter.stop()


def prometheus_config(exporter_port: int, storage: Path) -> Path:
    """monitoring/prometheus.yml with the sensor app's target moved to the test exporter."""
    config = yaml.safe_load((MONITORING / "prometheus.yml").read_text())
    config["global"]["scrape_interval"] = f"{SCRAPE_INTERVAL_S}s"
    config["global"]["evaluation_interval"] = f"{SCRAPE_INTERVAL_S}s"
    config["rule_files"] = [str(MONITORING / "rules" / "*.yml")]
    config.pop("alerting")  # no Alertmanager in this test
    (job,) = config["scrape_configs"]
    job["static_configs"] = [
        {"targets": [f"127.0.0.1:{exporter_port}"], "labels": static["labels"]}
        for static in job["static_configs"]
        if static["labels"]["app"] == APP
    ]
    path = storage / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def prometheus(running_query: RunningQuery, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus is not on PATH: run infra/scripts/install_test_servers.sh (make test does)")
    folder = tmp_path_factory.mktemp("prometheus")
    assert running_query.exporter.port is not None
    config = prometheus_config(running_query.exporter.port, folder)
    address = f"127.0.0.1:{free_port()}"
    log = (folder / "prometheus.log").open("w")
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={folder / 'data'}",
            f"--web.listen-address={address}",
            "--storage.tsdb.retention.time=1h",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://{address}"
    try:

        def ready() -> bool:
            assert process.poll() is None, (
                f"prometheus exited: {(folder / 'prometheus.log').read_text()[-3000:]}"
            )
            with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as response:
                return response.status == 200

        wait_until(ready, "prometheus to become ready", timeout_s=30)
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
        log.close()


def api(base: str, path: str, **params: str) -> Any:
    with urllib.request.urlopen(f"{base}{path}?{urllib.parse.urlencode(params)}", timeout=10) as response:
        body = json.loads(response.read())
    assert body["status"] == "success", body
    return body["data"]


def test_prometheus_sees_the_watermark_lag_of_the_running_query(
    prometheus: str, running_query: RunningQuery
) -> None:
    # Raw samples with their scrape timestamps: each must be "scrape time - watermark".
    def samples() -> list[tuple[float, float]] | None:
        result = api(
            prometheus, "/api/v1/query", query=f'pipeline_watermark_lag_seconds{{query="{QUERY}"}}[30s]'
        )
        if not result["result"] or len(result["result"][0]["values"]) < SAMPLES:
            return None
        (series,) = result["result"]
        assert series["metric"] == {
            "__name__": "pipeline_watermark_lag_seconds",
            "app": APP,
            "query": QUERY,
            "job": "stream_pipelines",
            "instance": f"127.0.0.1:{running_query.exporter.port}",
        }
        return [(float(stamp), float(value)) for stamp, value in series["values"]]

    scraped = wait_until(samples, f"{SAMPLES} scrapes of the watermark lag", timeout_s=30)
    for stamp, lag in scraped:
        assert lag == pytest.approx(stamp - running_query.watermark, abs=SCRAPE_TOLERANCE_S)
    # The query is idle, so the lag grows with the clock: computed per scrape, not cached.
    for (_, earlier), (_, later) in pairwise(scraped):
        assert later > earlier
    (first_stamp, first), (last_stamp, last) = scraped[0], scraped[-1]
    assert last_stamp - first_stamp >= SAMPLES - 1 - SCRAPE_TOLERANCE_S
    assert last - first == pytest.approx(last_stamp - first_stamp, abs=SCRAPE_TOLERANCE_S)

    # The instant query as a dashboard would issue it.
    before = time.time()
    (instant,) = api(prometheus, "/api/v1/query", query="pipeline_watermark_lag_seconds")["result"]
    lag = float(instant["value"][1])
    expected_now = before - running_query.watermark
    assert expected_now - SCRAPE_INTERVAL_S - 1 <= lag <= expected_now + SCRAPE_TOLERANCE_S

    (watermark,) = api(prometheus, "/api/v1/query", query="pipeline_watermark_seconds")["result"]
    assert float(watermark["value"][1]) == running_query.watermark
    (delay,) = api(prometheus, "/api/v1/query", query="pipeline_watermark_delay_seconds")["result"]
    assert float(delay["value"][1]) == 10


def test_prometheus_loads_the_alert_rules(prometheus: str) -> None:
    groups = api(prometheus, "/api/v1/rules", type="alert")["groups"]
    alerts = {rule["name"]: rule for group in groups for rule in group["rules"]}
    assert set(alerts) == ALERTS
    # Rules evaluate against live data without errors.
    wait_until(
        lambda: all(
            rule["health"] == "ok"
            for group in api(prometheus, "/api/v1/rules", type="alert")["groups"]
            for rule in group["rules"]
        ),
        "every rule to evaluate healthily",
        timeout_s=20,
    )
