"""A real Prometheus finds a driver's metrics endpoint through the control store, with no address in its
config: the driver's running record names the endpoint, `pipelinectl metrics-targets` (its loop, as a
process) writes the file_sd file, Prometheus discovers the target and scrapes the real exporter; when the
record goes, the file is rewritten and the target disappears.

No Spark: the exporter serves over HTTP alone (``MetricsExporter.serve``), which is what Prometheus reads.
Prometheus and the writer run on free loopback ports and temporary folders and are stopped at the end
whatever happens.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from stream_pipelines.control.control_store import ControlStore
from stream_pipelines.core.config import load_config
from stream_pipelines.core.registry import app as declared_app
from stream_pipelines.devtools.processes import stop_process_group
from stream_pipelines.observability.metrics import MetricsExporter
from stream_pipelines.observability.monitoring_rules import APPS_JOB, render_prometheus_config
from tests.monitoring_stack import api, prometheus_server, wait_until

APP = "raw_archive"
INTERVAL = "1s"
WRITER_EVERY_S = 0.5


@contextlib.contextmanager
def metrics_targets_writer(overrides: list[str], out: Path, log: Path) -> Iterator[subprocess.Popen]:
    """`pipelinectl metrics-targets --every` as its own process, its output in ``log``."""
    command = [
        sys.executable,
        "-m",
        "stream_pipelines.cli",
        "metrics-targets",
        *(argument for item in overrides for argument in ("--set", item)),
        "--out",
        str(out),
        "--every",
        str(WRITER_EVERY_S),
    ]
    with log.open("w") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield process
    finally:
        stop_process_group(process.pid, timeout_s=10)
        process.wait(timeout=5)


def app_targets(prometheus: str) -> list[dict[str, Any]]:
    """The active targets of the apps' job, as Prometheus has discovered them."""
    targets = api(prometheus, "/api/v1/targets", state="active")["activeTargets"]
    return [target for target in targets if target["labels"].get("job") == APPS_JOB]


def test_prometheus_discovers_a_registered_driver_and_forgets_it_when_its_record_goes(tmp_path: Path) -> None:
    overrides = [f"paths.data_root={tmp_path / 'data'}", f"metrics.ports.{APP}=0"]
    config = load_config("local", overrides, environ={})
    store = ControlStore(config)
    targets_file = tmp_path / "prometheus" / "stream_pipelines.json"
    writer_log = tmp_path / "metrics-targets.log"
    # The apps' job as in monitoring/prometheus.yml: no target of its own, only the file.
    prometheus_config = render_prometheus_config(
        rule_paths=[], app_targets_file=targets_file, interval=INTERVAL
    )

    with contextlib.ExitStack() as running:
        exporter = running.enter_context(MetricsExporter(config, declared_app(APP)).serve())
        writer = running.enter_context(metrics_targets_writer(overrides, targets_file, writer_log))

        def first_pass_written() -> bool:
            assert writer.poll() is None, f"the writer exited: {writer_log.read_text()}"
            return targets_file.exists()

        wait_until(first_pass_written, "the writer's first pass", timeout_s=30)
        prometheus = running.enter_context(prometheus_server(prometheus_config, tmp_path / "prometheus"))
        assert app_targets(prometheus) == []

        # The driver registers, as the lifecycle does once its queries run.
        endpoint = exporter.endpoint
        assert endpoint is not None
        store.mark_running(APP, endpoint)

        (target,) = wait_until(
            lambda: [t for t in app_targets(prometheus) if t["health"] == "up"],
            "Prometheus to discover and scrape the registered endpoint",
            timeout_s=30,
        )
        assert target["labels"]["app"] == APP
        assert target["scrapeUrl"] == f"http://{endpoint.address}/metrics"
        (series,) = wait_until(
            lambda: api(prometheus, "/api/v1/query", query=f'pipeline_restarts_total{{app="{APP}"}}')[
                "result"
            ],
            "the exporter's series to be queryable",
            timeout_s=30,
        )
        assert series["metric"]["job"] == APPS_JOB and series["metric"]["instance"] == endpoint.address

        # A clean exit removes the record: the file is rewritten and the target goes.
        store.mark_not_running(APP)
        wait_until(lambda: app_targets(prometheus) == [], "Prometheus to drop the target", timeout_s=30)
        assert json.loads(targets_file.read_text()) == []
        assert writer.poll() is None, f"the writer exited: {writer_log.read_text()}"

    # Many passes, one line per change of the targets.
    assert writer_log.read_text().splitlines() == [
        f"metrics-targets: {targets_file}: no driver serves metrics",
        f"metrics-targets: {targets_file}: {APP} at {endpoint.address}",
        f"metrics-targets: {targets_file}: no driver serves metrics",
    ]
