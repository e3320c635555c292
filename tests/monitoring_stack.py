"""Shared pieces of the monitoring tests: Prometheus, Alertmanager and the webhook receiver as real
processes on free loopback ports, and a real sensor_aggregation app fed by the generator with one
stalled partition.

A test module that needs the app imports ``stalled_sensor_app_fixture``, which registers the fixture
``stalled_sensor_app`` there; being module-scoped, each such module gets its own app. Every process
started here is stopped when its context or fixture ends, also on failure.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from stream_pipelines.control.control_store import apply_action
from stream_pipelines.core.config import PipelineConfig, load_config
from stream_pipelines.core.registry import SENSOR_AGGREGATION
from stream_pipelines.core.registry import app as declared_app
from stream_pipelines.devtools.alerting import (  # noqa: F401 (the monitoring tests import them from here)
    alertmanager_server,
    notifications,
    prometheus_server,
    wait_until,
    webhook_receiver,
)
from stream_pipelines.devtools.processes import free_port, stop_process_group
from tests.conftest import kill_processes_of, overrides_for, private_source_topics, run_app

SENSOR_APP = SENSOR_AGGREGATION.name
# The app's queries that read event times per partition (observe_event_time before the watermark).
# Spark query names are "<app>.<query>" (runtime.run_streams), the exporter's `query` label.
EVENT_TIME_QUERIES = tuple(
    f"{SENSOR_APP}.{SENSOR_AGGREGATION.query(name).name}" for name in ("tumbling", "sliding")
)
STALLED_PARTITION = 1
# Event time the generated scenario spans, and when the stalled partition stops receiving: its newest
# event then trails the other partitions by about SCENARIO_S - STALL_AFTER_S, twice the configured
# sensors watermark (2 minutes), so PartitionStalled holds from the first batch on.
SCENARIO_S = 300
STALL_AFTER_S = 60
APP_READY_TIMEOUT_S = 240


def api(base: str, path: str, **params: str) -> Any:
    """``data`` of a successful Prometheus HTTP API answer; any other answer fails with its error."""
    url = f"{base}{path}?{urllib.parse.urlencode(params)}"
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.loads(response.read())
    except urllib.error.HTTPError as error:
        body = json.loads(error.read() or b"{}") or {"status": "error", "error": str(error)}
    if body.get("status") != "success":
        raise PrometheusQueryError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
    return body["data"]


class PrometheusQueryError(AssertionError):
    pass


# --------------------------------------------------------------------------- the running app


@dataclass
class RunningApp:
    app: str
    config: PipelineConfig
    driver: subprocess.Popen
    metrics_address: str  # host:port of the app's exporter
    log: Path

    def metrics(self) -> dict[str, list[tuple[dict[str, str], float]]]:
        """What the exporter serves now: metric name -> [(labels, value)]."""
        from prometheus_client.parser import text_string_to_metric_families

        with urllib.request.urlopen(f"http://{self.metrics_address}/metrics", timeout=5) as response:
            text = response.read().decode()
        samples: dict[str, list[tuple[dict[str, str], float]]] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                samples.setdefault(sample.name, []).append((sample.labels, sample.value))
        return samples

    def stop(self, timeout_s: float = 120.0) -> int:
        """Stop the app as `pipelinectl stop` does (desired state and stop marker: drain, commit, exit)."""
        apply_action(
            self.config,
            declared_app(self.app),
            "stop",
            by="tests.monitoring_stack",
            reason="stopped by a test",
        )
        try:
            return self.driver.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.app} did not stop within {timeout_s}s of its stop marker; log: {self.log}"
            ) from None

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


def produce_stalled_scenario(overrides: list[str], log: Path) -> None:
    """`pipelinectl produce` with a stalled sensors partition: the generator's own mode, through the CLI."""
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=SCENARIO_S)
    command = [
        sys.executable,
        "-m",
        "stream_pipelines.cli",
        "produce",
        *(argument for item in overrides for argument in ("--set", item)),
        f"--start={start.isoformat()}",
        f"--duration={SCENARIO_S}",
        "--ad-rate=0",
        f"--stall-partition={STALLED_PARTITION}",
        f"--stall-after={STALL_AFTER_S}",
    ]
    with log.open("a") as output:
        result = subprocess.run(command, stdout=output, stderr=subprocess.STDOUT, timeout=180, check=False)
    assert result.returncode == 0, f"pipelinectl produce failed; see {log}"


def event_times_per_partition(app: RunningApp, query: str) -> dict[str, float]:
    return {
        labels["partition"]: value
        for labels, value in app.metrics().get("pipeline_partition_max_event_time_seconds", [])
        if labels["query"] == query
    }


@pytest.fixture(scope="module", name="stalled_sensor_app")
def stalled_sensor_app_fixture(
    broker: PipelineConfig, broker_ports, tmp_path_factory
) -> Iterator[RunningApp]:
    """sensor_aggregation through spark-submit, its exporter on a free port, after reading a scenario
    whose partition STALLED_PARTITION of the sensors topic stopped STALL_AFTER_S into it."""
    from stream_pipelines.kafka.topics import ensure_topics

    folder = tmp_path_factory.mktemp("sensor-app")
    data_root = folder / "data"
    metrics_port = free_port()
    overrides = overrides_for(
        data_root,
        broker_ports,
        *private_source_topics(),
        f"kafka.topics.sliding_averages.name=sliding-{uuid.uuid4().hex[:6]}",
        "metrics.enabled=true",
        "spark.shuffle_partitions=1",  # one state store task per stateful operator: a faster first batch
        f"metrics.ports.{SENSOR_APP}={metrics_port}",
    )
    config = load_config("local", overrides)
    ensure_topics(config)
    log = folder / "app.log"
    produce_stalled_scenario(overrides, log)
    with log.open("ab") as output:
        driver = run_app(SENSOR_APP, "processing", overrides, stdout=output, stderr=subprocess.STDOUT)
    app = RunningApp(SENSOR_APP, config, driver, f"{config.metrics.host}:{metrics_port}", log)
    try:
        partitions = config.kafka.topics.sensors.partitions

        def every_partition_read() -> bool:
            assert driver.poll() is None, f"{SENSOR_APP} exited with {driver.returncode}:\n{app.log_tail()}"
            return all(
                len(event_times_per_partition(app, query)) == partitions for query in EVENT_TIME_QUERIES
            )

        wait_until(
            every_partition_read,
            f"{SENSOR_APP} to report event times for all {partitions} sensors partitions (log: {log})",
            timeout_s=APP_READY_TIMEOUT_S,
            poll_s=1.0,
        )
        yield app
    finally:
        if driver.poll() is None:
            stop_process_group(driver.pid, timeout_s=20)
        kill_processes_of(data_root)
