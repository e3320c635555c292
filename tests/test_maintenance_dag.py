"""The daily output_maintenance DAG through Airflow's own dag.test(): on a data root months into
production (file times set into the past), it compacts the closed days (the compaction job, through
spark-submit), removes what has outlived its retention, keeps what is in use, and records both."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime, timedelta

from stream_pipelines.core import registry, store
from stream_pipelines.core.config import load_config
from stream_pipelines.driver.batch_log import parse_batch_log, query_log_dir
from stream_pipelines.tables import compacted_days, retention
from tests.conftest import start_dag_test
from tests.unit.test_output_sweep import build_sink, parquet_bytes
from tests.unit.test_retention import LISTED_OLD, NEW, OLD, write_batches

DAY = 86400.0


def age(path, days: float) -> None:
    moment = time.time() - days * DAY
    os.utime(path, (moment, moment))


def test_the_dag_removes_what_outlived_its_retention_and_records_it(airflow_env, tmp_path):
    overrides = [f"paths.data_root={tmp_path}"]
    config = load_config("local", overrides, environ={})
    recent = (datetime.now(UTC) - timedelta(days=3)).date().isoformat()
    listed_recent = f"topic=sensors/arrival_date={recent}/part-00000-recent.c000.snappy.parquet"
    archive = build_sink(config, {NEW: [10], LISTED_OLD: [5], listed_recent: [7]}, {OLD: parquet_bytes([1])})
    age(archive / OLD, 402)  # forgotten by the log, past 400 days and the grace period after it
    age(archive / LISTED_OLD, 402)  # as old, but the log lists it: in use
    batches = query_log_dir(config, registry.AD_MATCHING.name, "matches")
    write_batches(config, registry.AD_MATCHING.name, "matches", range(5))
    for batch in range(3):
        age(batches / "offsets" / str(batch), 9)
    checkpoints = store.location(config.spark.extra_conf, config.data_path("checkpoints")) / "ad_matching"
    stamp = (datetime.now(UTC) - timedelta(days=40)).strftime("%Y%m%dT%H%M%SZ")
    store.write_atomically(checkpoints / f"ctr.reset-{stamp}" / "metadata", '{"id": "x"}')
    store.write_atomically(checkpoints / "ctr" / "metadata", '{"id": "live"}')

    log = tmp_path / "dag.log"
    process = start_dag_test(airflow_env, "output_maintenance", overrides, log)
    assert process.wait(timeout=300) == 0, log.read_text()[-4000:]
    output = log.read_text()
    assert "DAG RUN STATE success" in output, output[-4000:]

    assert sorted(name for name in store.files_under(archive) if not name.startswith("_")) == sorted(
        [NEW, LISTED_OLD, listed_recent]
    )
    assert retention.removed_before(archive) is not None
    assert [record.batch_id for record in parse_batch_log(batches)] == [2, 3, 4]
    assert sorted(path.name for path in checkpoints.iterdir()) == ["ctr"]
    assert f"removed {OLD} (" in output and "past retention" in output
    # The arrival day of three days ago is closed: compacted, from its one listed file.
    assert f"archive {recent}: compacting 1 new file(s) into version 1" in output, output[-4000:]
    assert compacted_days.latest(config, registry.ARCHIVE, recent).rows == 1

    records = store.location(config.spark.extra_conf, f"{config.data_path('reports')}/maintenance")
    [record] = [json.loads((records / name).read_text()) for name in store.entries(records)]
    assert record["retention"]["archive"] == "400 days"
    swept = next(sink for sink in record["sinks"] if sink["dataset"] == "archive")
    assert [(item["file"], item["expired"]) for item in swept["removed"]] == [(OLD, True)]
    removals = {removal["kind"]: removal for removal in record["removals"]}
    assert [item["batch"] for item in removals["batch log ad_matching.matches"]["removed"]] == [0, 1]
    assert removals["reset copies"]["removed"][0]["folder"] == f"ad_matching/ctr.reset-{stamp}"
