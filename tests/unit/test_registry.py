"""The registry: each app and dataset declared once, and the declarations agree with the code."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

from stream_pipelines.core import registry
from stream_pipelines.core.config import load_config


@pytest.fixture
def config(tmp_path: Path):
    return load_config("local", [f"paths.data_root={tmp_path}"], environ={})


def test_every_app_has_its_entry_point_module_and_build_sinks():
    for app in registry.APPS.values():
        entry = Path(app.entry_point)
        assert entry.is_file(), entry
        module = importlib.util.find_spec(app.module)
        assert module is not None and module.origin, app.module
        defined = {
            node.name
            for node in ast.parse(Path(module.origin).read_text()).body
            if isinstance(node, ast.FunctionDef)
        }
        assert "build_sinks" in defined, app.module
        assert f'run_app("{app.name}")' in entry.read_text(), f"{entry} runs the lifecycle of {app.name}"


def test_queries_are_unique_and_each_has_exactly_one_sink():
    for app in registry.APPS.values():
        assert len(set(app.query_names)) == len(app.query_names), app.name
        for query in app.queries:
            assert (query.sink is None) != (query.sink_topic is None), f"{app.name}.{query.name}"
            assert query.reads, f"{app.name}.{query.name} reads nothing"


def test_metrics_ports_are_distinct_and_come_from_config_first(config):
    ports = [app.metrics_port(config) for app in registry.APPS.values()]
    assert len(set(ports)) == len(ports)
    moved = load_config("local", ["metrics.ports.raw_archive=9999"], environ={})
    assert registry.RAW_ARCHIVE.metrics_port(moved) == 9999


def test_triggers_and_watermarks_come_from_each_apps_config_section(config):
    changed = load_config("local", ["sensors.trigger=3 seconds", "ads.clicks_watermark=1 minute"], environ={})
    assert registry.SENSOR_AGGREGATION.trigger_interval(changed).seconds == 3
    assert registry.AD_MATCHING.watermarks(changed)["clicks"].seconds == 60
    assert registry.RAW_ARCHIVE.watermarks(config) == {}


def test_sources_follow_the_source_kind(config):
    archive = registry.RAW_ARCHIVE.query("archive")
    # One Kafka source subscribes to all three topics; the files source is one source per folder.
    assert archive.source_topics(config) == (("sensors", "impressions", "clicks_ads"),)
    files = load_config("local", ["source.kind=files"], environ={})
    assert archive.source_topics(files) == (("sensors",), ("impressions",), ("clicks_ads",))
    assert registry.AD_MATCHING.query("matches").source_topics(config) == (("impressions",), ("clicks_ads",))
    assert registry.SENSOR_AGGREGATION.sink_topic_names(config) == {"sensor_sliding_avg"}


def test_datasets_live_under_their_paths_entry(config, tmp_path):
    assert registry.ARCHIVE.location(config) == str(tmp_path / "archive")
    assert registry.SENSOR_WINDOWS.location(config) == str(tmp_path / "outputs" / "sensor_windows")
    assert registry.SENSOR_QUARANTINE.location(config) == str(tmp_path / "quarantine" / "sensor_aggregation")
    remote = load_config("local", ["paths.data_root=s3a://bucket/root"], environ={})
    assert registry.AD_CTR.location(remote) == "s3a://bucket/root/outputs/ad_ctr"


def test_partition_and_day_columns_are_declared_columns():
    for dataset in registry.DATASETS.values():
        assert set(dataset.partition_by) <= set(dataset.column_names), dataset.name
        assert dataset.day_column in dataset.column_names, dataset.name
        assert dataset.ddl().count(",") == len(dataset.columns) - 1


def test_an_unknown_app_is_named_with_the_list():
    with pytest.raises(ValueError, match="unknown app 'nope'; the apps are: raw_archive, sensor_aggregation"):
        registry.app("nope")
    with pytest.raises(KeyError, match="sensor_aggregation has no query 'nope'"):
        registry.SENSOR_AGGREGATION.query("nope")
