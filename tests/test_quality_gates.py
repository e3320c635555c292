"""Great Expectations gates on small hand-made tables: critical failures stop, warnings only report."""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta
from pathlib import Path

import pytest
from pyspark import StorageLevel
from pyspark.sql import functions as F

from stream_pipelines.core import store
from stream_pipelines.core.registry import COMPLIANCE_WINDOWS
from stream_pipelines.quality import gates as quality_gates
from stream_pipelines.quality import nightly_job
from stream_pipelines.reconciliation import events
from stream_pipelines.reconciliation.report import report_dir
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
    assert result.success and result.data_docs is None, "the site is rebuilt once for a run's gates"
    [result] = quality_gates.with_data_docs(config, [result])
    assert result.data_docs.startswith(f"{config.data_path('gx')}/")
    assert result.data_docs.endswith("/index.html")
    site = store.location(config.spark.extra_conf, result.data_docs.removesuffix("/index.html"))
    published = store.files_under(site)
    assert "index.html" in published
    assert any(name.startswith("validations/") for name in published), published
    assert "streaming_outputs" in (site / "index.html").read_text()
    assert (tmp_path / "scratch" / "gx").is_dir()


def test_the_data_docs_site_shows_the_results_within_retention_and_no_others(spark, make_overrides):
    """Every rebuild renders every stored validation result: the results older than retention.data_docs
    go first, and with them their pages, so the site and its rebuild stay the same size night after
    night."""
    config = make_overrides_config(make_overrides("retention.data_docs=1 days"))
    windows = spark.createDataFrame([window(0, "sensor-0001", 20.0, 30.0, 10.0, 2)], WINDOW_COLUMNS)

    def validated():
        return quality_gates.validate(
            config,
            quality_gates.with_range_columns(windows),
            quality_gates.STREAMING_OUTPUTS,
            DAY,
            quality_gates.window_expectations(),
        )

    site = quality_gates.data_docs_site(quality_gates.gx_context(config))
    quality_gates.with_data_docs(config, [validated(), validated()])
    results = quality_gates.gx_context(config).validation_results_store
    older, newer = sorted(results.list_keys(), key=lambda key: key.run_id.run_time)
    assert len(list((site / "validations").rglob("*.html"))) == 2

    # A day after a moment between the two runs: the older result is past retention, the newer is not.
    between = older.run_id.run_time + (newer.run_id.run_time - older.run_id.run_time) / 2
    [result] = quality_gates.with_data_docs(config, [validated()], now=between + timedelta(days=1))
    kept = quality_gates.gx_context(config).validation_results_store.list_keys()
    assert older not in kept and newer in kept and len(kept) == 2, kept
    pages = list((site / "validations").rglob("*.html"))
    assert len(pages) == 2 and not any(
        older.run_id.run_time.strftime("%Y%m%dT%H%M%S") in str(p) for p in pages
    )
    assert (
        result.data_docs.endswith("/index.html") and Path(result.data_docs.removeprefix("file://")).exists()
    )


# --------------------------------------------------------------------------- the nightly job


def archive_left_cached(spark, config) -> bool:
    """Whether D's archive rows, as the job reads them, are still persisted in the session (Spark finds a
    cached frame by its plan)."""
    return events.read_archive(spark, config, DAY).storageLevel != StorageLevel.NONE


def test_the_nightly_job_gates_clean_tables_with_unknown_sensors_as_a_warning_in_one_report(
    spark, config, monkeypatch
):
    """The raw events gate, the reconciliation and the output gates run in one driver, over D's archive
    rows read once; the report holds the three results with their Data Docs links; an unknown sensor
    only warns."""
    write_archive(spark, config)
    windows = [
        window(0, "sensor-0001", 20.0, 30.0, 10.0, 2),
        window(0, "sensor-9999", 5.0, 5.0, 5.0, 1, False),
    ]
    spark.createDataFrame(windows, WINDOW_COLUMNS).write.parquet(config.output_dir("sensor_windows"))
    reads = []
    read_archive = events.read_archive
    monkeypatch.setattr(events, "read_archive", lambda *args: reads.append(args) or read_archive(*args))

    result = nightly_job.run_nightly(config, DAY, spark=spark)
    assert len(reads) == 1, "the gate and the reconciliation read D's archive once between them"
    assert not archive_left_cached(spark, config)
    assert result.status == "passed"
    written = json.loads(Path(result.report_json).read_text())
    raw, outputs, compliance = written["quality_gates"]
    assert (raw["suite"], outputs["suite"], compliance["suite"]) == (
        quality_gates.RAW_EVENTS,
        quality_gates.STREAMING_OUTPUTS,
        quality_gates.COMPLIANCE,
    )
    assert raw["success"] and raw["rows"] == 2 and raw["quarantine"]["sensors"] == {"broken_json": 1}
    assert outputs["success"] and any("known_sensor" in warning for warning in outputs["warnings"])
    # The compliance partition the job itself wrote: the exact recompute's one window.
    assert compliance["success"] and compliance["rows"] == result.compliance_rows == 1
    assert all(
        Path(gate["data_docs"].removeprefix("file://")).is_file() for gate in (raw, outputs, compliance)
    )
    assert "raw_events" in Path(result.report_html).read_text()


def test_a_critical_failure_on_the_raw_events_stops_the_nightly_job_before_it_writes_anything(spark, config):
    rows = [("sensors", 0, 0, None, b"{}", None, None, datetime(2026, 1, 1, 0, 1, 6))]  # no Kafka timestamp
    spark.createDataFrame(
        rows,
        "topic string, partition int, offset long, key string, value binary, kafka_timestamp timestamp, "
        "source_file string, archived_at timestamp",
    ).withColumn("arrival_date", F.lit(DAY.isoformat())).write.partitionBy("topic", "arrival_date").parquet(
        config.data_path("archive")
    )
    with pytest.raises(quality_gates.QualityGateFailed, match=r"raw_events failed.*kafka_timestamp"):
        nightly_job.run_nightly(config, DAY, spark=spark)
    assert not archive_left_cached(spark, config), "the archive rows the gate read stay persisted"
    assert not report_dir(config, DAY.isoformat()).exists()
    assert not Path(compliance_dir(config)).exists()


def test_duplicate_windows_and_an_average_above_the_maximum_fail_the_nightly_job_after_its_report(
    spark, config
):
    write_archive(spark, config)
    broken = [
        window(0, "sensor-0001", 20.0, 30.0, 10.0, 2),
        window(0, "sensor-0001", 20.0, 30.0, 10.0, 2),  # the same window twice
        window(5, "sensor-0001", 35.0, 30.0, 10.0, 2),  # avg above max
    ]
    spark.createDataFrame(broken, WINDOW_COLUMNS).write.parquet(config.output_dir("sensor_windows"))
    with pytest.raises(quality_gates.QualityGateFailed, match="streaming_outputs") as failed:
        nightly_job.run_nightly(config, DAY, spark=spark)
    named = " ".join(failed.value.result.critical_failures)
    assert "expect_compound_columns_to_be_unique" in named and "max_minus_avg" in named
    # The report was written first, and shows which gate failed.
    written = json.loads((report_dir(config, DAY.isoformat()) / "report.json").read_text())
    assert [gate["suite"] for gate in written["quality_gates"] if not gate["success"]] == [
        quality_gates.STREAMING_OUTPUTS
    ]
