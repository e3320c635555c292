"""The registry's dataset declarations: where each lives and what it holds (no Spark needed)."""

from __future__ import annotations

import pytest

from stream_pipelines.core import registry
from stream_pipelines.core.config import PipelineConfig, load_config


@pytest.fixture
def config() -> PipelineConfig:
    return load_config("local", ["paths.data_root=/srv/pipeline"], environ={})


def test_locations_are_the_paths_entry_plus_the_folder(config: PipelineConfig):
    assert registry.ARCHIVE.location(config) == "/srv/pipeline/archive"
    assert registry.SENSOR_WINDOWS.location(config) == "/srv/pipeline/outputs/sensor_windows"
    assert registry.AD_MATCHES.location(config) == "/srv/pipeline/outputs/ad_matches"
    assert registry.SENSOR_QUARANTINE.location(config) == "/srv/pipeline/quarantine/sensor_aggregation"
    # The nightly job has always written these two here; moving them would orphan the tables.
    assert registry.COMPLIANCE_WINDOWS.location(config) == "/srv/pipeline/compliance/sensor_windows"
    assert registry.LATE_EVENT_LEDGER.location(config) == "/srv/pipeline/compliance/late_event_ledger"


def test_a_sink_dataset_is_where_its_app_writes(config: PipelineConfig):
    assert registry.SENSOR_WINDOWS.location(config) == config.output_dir("sensor_windows")
    assert registry.AD_CTR.location(config) == config.output_dir("ad_ctr")
    assert registry.ARCHIVE.location(config) == config.data_path("archive")


def test_locations_follow_an_object_store_root_and_an_absolute_entry():
    config = load_config(
        "local", ["paths.data_root=s3a://bucket/pipeline", "paths.compliance=/mnt/compliance"], environ={}
    )
    assert registry.SENSOR_WINDOWS.location(config) == "s3a://bucket/pipeline/outputs/sensor_windows"
    assert registry.COMPLIANCE_WINDOWS.location(config) == "/mnt/compliance/sensor_windows"


def test_the_archive_columns_are_what_the_raw_events_gate_expects():
    assert registry.ARCHIVE.column_names == (
        "topic",
        "partition",
        "offset",
        "key",
        "value",
        "kafka_timestamp",
        "source_file",
        "archived_at",
        "arrival_date",
    )
    assert registry.ARCHIVE.partition_by == ("topic", "arrival_date")


def test_ddl_lists_every_column_with_its_spark_type():
    assert registry.SENSOR_WINDOWS.ddl() == (
        "window_start timestamp, window_end timestamp, sensor_id string, avg_temperature double, "
        "max_temperature double, min_temperature double, reading_count bigint, location string, "
        "building string, floor int, known_sensor boolean, metadata_problem string"
    )
    assert registry.COMPLIANCE_WINDOWS.ddl() == f"{registry.SENSOR_WINDOWS.ddl()}, event_date string"


def test_schema_matches_the_declared_columns():
    schema = registry.ARCHIVE.schema()
    assert schema.simpleString() == (
        "struct<topic:string,partition:int,offset:bigint,key:string,value:binary,"
        "kafka_timestamp:timestamp,source_file:string,archived_at:timestamp,arrival_date:string>"
    )
    for dataset in registry.DATASETS.values():
        assert tuple(dataset.schema().fieldNames()) == dataset.column_names, dataset.name


def test_every_dataset_selects_its_day_by_a_column_it_has():
    for dataset in registry.DATASETS.values():
        assert dataset.day_column in dataset.column_names, dataset.name
        assert set(dataset.partition_by) <= set(dataset.column_names), dataset.name


def test_the_compliance_table_is_the_stream_windows_plus_their_day():
    assert registry.COMPLIANCE_WINDOWS.column_names == (*registry.SENSOR_WINDOWS.column_names, "event_date")
    assert (
        registry.COMPLIANCE_WINDOWS.partition_by == registry.LATE_EVENT_LEDGER.partition_by == ("event_date",)
    )
