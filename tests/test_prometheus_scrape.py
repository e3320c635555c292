"""A real Prometheus scrapes the exporter of a running streaming query, with the repo's scrape config.

Prometheus runs on a free loopback port (never 9090) with a temporary storage folder and the rules
of monitoring/rules; it is stopped at the end whatever happens.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import TYPE_CHECKING

import pytest

from stream_pipelines.core.config import load_config
from stream_pipelines.core.registry import app as declared_app
from stream_pipelines.observability.metrics import MetricsExporter
from stream_pipelines.observability.monitoring_rules import RULES_DIR, render_prometheus_config
from tests.monitoring_stack import api, prometheus_server, wait_until
from tests.test_alert_rules import ALERTS, alert_name

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

APP = "sensor_aggregation"
QUERY = f"{APP}.windows"
SCRAPE_INTERVAL_S = 1
# The exporter computes the lag while answering the scrape; Prometheus stamps the sample with the
# scrape's start. Between the two lie an HTTP round trip on loopback and Python's collect.
SCRAPE_TOLERANCE_S = 1.0
SAMPLES = 5


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

    exporter = MetricsExporter(config, declared_app(APP)).start(spark)
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


@pytest.fixture(scope="module")
def prometheus(running_query: RunningQuery, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """monitoring/prometheus.yml discovering the sensor app at the test exporter; no Alertmanager."""
    folder = tmp_path_factory.mktemp("prometheus")
    config = render_prometheus_config(
        targets={APP: f"127.0.0.1:{running_query.exporter.port}"},
        app_targets_file=folder / "stream_pipelines.json",
        rule_paths=[RULES_DIR / "*.yml"],
        interval=f"{SCRAPE_INTERVAL_S}s",
    )
    with prometheus_server(config, folder) as url:
        yield url


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
    alerts = {
        alert_name(rule["name"], rule.get("labels", {})): rule for group in groups for rule in group["rules"]
    }
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
