"""Prometheus finds the drivers through the control store: each driver's running record says where its
exporter serves, and `pipelinectl metrics-targets` turns the records into file_sd target groups."""

from __future__ import annotations

import json
import os
import socket
import urllib.request
from pathlib import Path

import pytest

from stream_pipelines.cli import main
from stream_pipelines.control.control_store import ControlStore, MetricsEndpoint
from stream_pipelines.core.config import WILDCARD_HOSTS, MetricsSettings, PipelineConfig, load_config
from stream_pipelines.core.procfs import this_host
from stream_pipelines.core.registry import app as declared_app
from stream_pipelines.observability.metrics import MetricsExporter, reachable_host
from stream_pipelines.observability.metrics_targets import target_groups

APP = "sensor_aggregation"
# Above the kernel's largest pid (2^22): no process has it.
DEAD_PID = 2**22 + 12345
OTHER_HOST = "node-7.cluster.internal"


@pytest.fixture
def config(tmp_path: Path) -> PipelineConfig:
    return load_config("local", [f"paths.data_root={tmp_path}", f"metrics.ports.{APP}=0"], environ={})


def running_record(store: ControlStore, app: str) -> dict:
    return json.loads((store.root / f"{app}.running.json").read_text())


def leave_running_record(
    store: ControlStore, app: str, *, pid: int, host: str, metrics: MetricsEndpoint
) -> None:
    """A running record as a driver elsewhere, or one killed with -9, leaves it."""
    store.root.mkdir(parents=True, exist_ok=True)
    record = {"pid": pid, "host": host, "started_at": "2025-01-01T00:00:00+00:00"}
    record["metrics"] = {"host": metrics.host, "port": metrics.port}
    (store.root / f"{app}.running.json").write_text(json.dumps(record))


# --------------------------------------------------------------------------- the running record


def test_the_running_record_says_where_the_drivers_exporter_serves(config: PipelineConfig) -> None:
    store = ControlStore(config)
    with MetricsExporter(config, declared_app(APP)).serve() as exporter:
        endpoint = exporter.endpoint
        assert endpoint == MetricsEndpoint("127.0.0.1", exporter.port)
        with urllib.request.urlopen(f"http://{endpoint.address}/metrics", timeout=5) as response:
            assert b"pipeline_restarts_total" in response.read(), "the endpoint recorded is the one serving"
        store.mark_running(APP, endpoint)

    record = running_record(store, APP)
    assert record["metrics"] == {"host": "127.0.0.1", "port": endpoint.port}
    assert record["pid"] == os.getpid() and record["host"] == this_host()
    assert store.running_driver(APP).metrics == endpoint


def test_a_driver_without_metrics_records_no_endpoint(config: PipelineConfig, tmp_path: Path) -> None:
    disabled = load_config("local", [f"paths.data_root={tmp_path}", "metrics.enabled=false"], environ={})
    with MetricsExporter(disabled, declared_app(APP)).serve() as exporter:
        assert exporter.endpoint is None
        store = ControlStore(disabled)
        store.mark_running(APP, exporter.endpoint)
    assert "metrics" not in running_record(store, APP)
    assert running_record(store, APP)["pid"] == os.getpid()


@pytest.mark.parametrize("wildcard", WILDCARD_HOSTS)
def test_an_exporter_on_every_interface_is_reached_by_its_yarn_nodes_name(wildcard: str) -> None:
    settings = MetricsSettings(host=wildcard)
    assert reachable_host(settings, {"NM_HOST": OTHER_HOST}) == OTHER_HOST


def test_an_exporter_on_every_interface_outside_yarn_is_reached_by_the_hosts_full_name() -> None:
    assert reachable_host(MetricsSettings(host="0.0.0.0"), {}) == socket.getfqdn()


def test_an_exporter_on_one_address_is_reached_there_even_in_yarn() -> None:
    assert reachable_host(MetricsSettings(host="10.1.2.3"), {"NM_HOST": OTHER_HOST}) == "10.1.2.3"


def test_an_ipv6_endpoint_is_a_bracketed_target() -> None:
    assert MetricsEndpoint("fd00::7", 9402).address == "[fd00::7]:9402"


# --------------------------------------------------------------------------- target groups


def test_a_live_driver_of_this_host_is_a_target(config: PipelineConfig) -> None:
    ControlStore(config).mark_running(APP, MetricsEndpoint("127.0.0.1", 9402))
    assert target_groups(config) == [{"targets": ["127.0.0.1:9402"], "labels": {"app": APP}}]


def test_a_dead_driver_stays_a_target_so_that_its_silence_pages(config: PipelineConfig) -> None:
    # A driver killed without its clean exit leaves its record: Prometheus keeps scraping the dead
    # endpoint, up == 0, and QueryDown pages after 2 minutes unless a restart overwrites the record first.
    store = ControlStore(config)
    leave_running_record(
        store, APP, pid=DEAD_PID, host=this_host(), metrics=MetricsEndpoint("127.0.0.1", 9402)
    )
    assert target_groups(config) == [{"targets": ["127.0.0.1:9402"], "labels": {"app": APP}}]


def test_an_app_an_operator_stopped_is_no_target_even_with_a_record_left(config: PipelineConfig) -> None:
    # Stopped on purpose after its driver died: nothing to page about.
    store = ControlStore(config)
    leave_running_record(
        store, APP, pid=DEAD_PID, host=this_host(), metrics=MetricsEndpoint("127.0.0.1", 9402)
    )
    store.set_desired(APP, "stopped", by="test", reason="maintenance")
    assert target_groups(config) == []
    store.set_desired(APP, "running", by="test", reason="back")
    assert target_groups(config) == [{"targets": ["127.0.0.1:9402"], "labels": {"app": APP}}]


def test_a_driver_on_another_host_is_a_target_while_its_record_exists(config: PipelineConfig) -> None:
    # Its pid means nothing here (it may even be a live process of this host's): not looked at.
    store = ControlStore(config)
    leave_running_record(
        store, APP, pid=DEAD_PID, host=OTHER_HOST, metrics=MetricsEndpoint(OTHER_HOST, 40123)
    )
    assert target_groups(config) == [{"targets": [f"{OTHER_HOST}:40123"], "labels": {"app": APP}}]
    store.mark_not_running(APP)
    assert target_groups(config) == []


def test_a_driver_without_a_metrics_endpoint_is_no_target(config: PipelineConfig) -> None:
    ControlStore(config).mark_running(APP)
    assert target_groups(config) == []


def test_every_app_with_a_target_has_its_own_group(config: PipelineConfig) -> None:
    store = ControlStore(config)
    store.mark_running("raw_archive", MetricsEndpoint("127.0.0.1", 9401))
    leave_running_record(
        store, "ad_matching", pid=DEAD_PID, host=OTHER_HOST, metrics=MetricsEndpoint(OTHER_HOST, 9403)
    )
    assert target_groups(config) == [
        {"targets": ["127.0.0.1:9401"], "labels": {"app": "raw_archive"}},
        {"targets": [f"{OTHER_HOST}:9403"], "labels": {"app": "ad_matching"}},
    ]


# --------------------------------------------------------------------------- pipelinectl metrics-targets


def test_pipelinectl_metrics_targets_writes_the_file_once_and_says_what_it_holds(
    config: PipelineConfig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ControlStore(config).mark_running(APP, MetricsEndpoint("127.0.0.1", 9402))
    out = tmp_path / "prometheus" / "targets" / "stream_pipelines.json"
    arguments = ["metrics-targets", "--set", f"paths.data_root={tmp_path}", "--out", str(out)]

    assert main(arguments) == 0
    assert capsys.readouterr().out == f"metrics-targets: {out}: {APP} at 127.0.0.1:9402\n"
    assert json.loads(out.read_text()) == [{"targets": ["127.0.0.1:9402"], "labels": {"app": APP}}]

    ControlStore(config).mark_not_running(APP)
    assert main(arguments) == 0
    assert capsys.readouterr().out == f"metrics-targets: {out}: no driver serves metrics\n"
    assert json.loads(out.read_text()) == []


def test_pipelinectl_metrics_targets_refuses_a_pace_that_is_not_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "stream_pipelines.json"
    assert main(["metrics-targets", "--out", str(out), "--every", "0"]) == 1
    assert "--every must be a positive number of seconds, got 0" in capsys.readouterr().err
    assert not out.exists()
