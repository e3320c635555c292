"""Great Expectations gates on small hand-made tables: critical failures stop, warnings only report."""

from __future__ import annotations

import json
from datetime import date, datetime
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from stream_pipelines.core import store
from stream_pipelines.core.registry import COMPLIANCE_WINDOWS
from stream_pipelines.quality import gates as quality_gates
from tests.conftest import make_overrides_config

compliance_dir = COMPLIANCE_WINDOWS.location

DAY = date(2026, 1, 1)
WINDOW_COLUMNS = (
    "window_start timestamp, window_end timestamp, sensor_id string, avg_temperature double, "
    "max_temperature double, min_temperature double, reading_count long, location string, "
    "building string, floor int, known_sensor boolean, metadata_problem string"
)


def window(minute: int, sensor: str, avg: float, high: float, low: float, count: int, known: bool = True):
    start = datetime(2026, 1, 1, 0, minute)
    end = datetime(2026, 1, 1, 0, minute + 5)
    return (start, end, sensor, avg, high, low, count, "lab", "B1", 1, known, None)


@pytest.fixture
def config(make_overrides):
    return make_overrides_config(make_overrides())


def write_archive(spark, config) -> None:
    value = json.dumps(
        {"event_id": "e1", "sensor_id": "sensor-0001", "temperature": 20.5, "ts": "2026-01-01T00:01:00Z"}
    )
    rows = [
        (
            "sensors",
            0,
            0,
            None,
            value.encode(),
            datetime(2026, 1, 1, 0, 1, 5),
            None,
            datetime(2026, 1, 1, 0, 1, 6),
        ),
        ("sensors", 0, 1, None, b"{broken", datetime(2026, 1, 1, 0, 2), None, datetime(2026, 1, 1, 0, 2, 1)),
    ]
    frame = spark.createDataFrame(
        rows,
        "topic string, partition int, offset long, key string, value binary, kafka_timestamp timestamp, "
        "source_file string, archived_at timestamp",
    ).withColumn("arrival_date", F.lit(DAY.isoformat()))
    frame.write.partitionBy("topic", "arrival_date").parquet(config.data_path("archive"))


def test_clean_tables_pass_and_unknown_sensors_only_warn(spark, config):
    write_archive(spark, config)
    windows = [
        window(0, "sensor-0001", 20.0, 30.0, 10.0, 2),
        window(0, "sensor-9999", 5.0, 5.0, 5.0, 1, False),
    ]
    spark.createDataFrame(windows, WINDOW_COLUMNS).write.parquet(config.output_dir("sensor_windows"))
    spark.createDataFrame(windows, WINDOW_COLUMNS).withColumn(
        "event_date", F.lit(DAY.isoformat())
    ).write.partitionBy("event_date").parquet(compliance_dir(config))

    raw = quality_gates.enforce(quality_gates.raw_events_gate(config, DAY, spark))
    assert raw.rows == 2 and raw.quarantine["sensors"] == {"broken_json": 1}
    outputs = quality_gates.enforce(quality_gates.streaming_outputs_gate(config, DAY, spark))
    assert outputs.success and any("known_sensor" in w for w in outputs.warnings)
    compliance = quality_gates.enforce(quality_gates.compliance_gate(config, DAY, spark))
    assert compliance.success and compliance.rows == 2
    assert compliance.data_docs and Path(compliance.data_docs.removeprefix("file://")).is_file()


def test_duplicate_windows_and_an_average_above_the_maximum_fail_critically(spark, config):
    broken = [
        window(0, "sensor-0001", 20.0, 30.0, 10.0, 2),
        window(0, "sensor-0001", 20.0, 30.0, 10.0, 2),  # the same window twice
        window(5, "sensor-0001", 35.0, 30.0, 10.0, 2),  # avg above max
    ]
    spark.createDataFrame(broken, WINDOW_COLUMNS).write.parquet(config.output_dir("sensor_windows"))
    result = quality_gates.streaming_outputs_gate(config, DAY, spark)
    assert not result.success
    failed = " ".join(result.critical_failures)
    assert "expect_compound_columns_to_be_unique" in failed and "max_minus_avg" in failed
    with pytest.raises(quality_gates.QualityGateFailed, match="streaming_outputs"):
        quality_gates.enforce(result)


def test_data_docs_are_published_to_the_object_store_and_linked_from_the_result(
    spark, make_overrides, s3_root, tmp_path
):
    """With paths.gx in a bucket, GX works in the local scratch folder and the rebuilt site is copied to
    the bucket, where the gate result's link points."""
    config = make_overrides_config(make_overrides(*s3_root(), f"paths.scratch={tmp_path}/scratch"))
    windows = spark.createDataFrame([window(0, "sensor-0001", 20.0, 30.0, 10.0, 2)], WINDOW_COLUMNS)
    result = quality_gates.validate(
        config,
        quality_gates.with_range_columns(windows),
        quality_gates.STREAMING_OUTPUTS,
        DAY,
        quality_gates.window_expectations(),
    )
    assert result.success
    assert result.data_docs.startswith(f"{config.data_path('gx')}/")
    assert result.data_docs.endswith("/index.html")
    site = store.location(config.spark.extra_conf, result.data_docs.removesuffix("/index.html"))
    published = store.files_under(site)
    assert "index.html" in published
    assert any(name.startswith("validations/") for name in published), published
    assert "streaming_outputs" in (site / "index.html").read_text()
    assert (tmp_path / "scratch" / "gx").is_dir()
