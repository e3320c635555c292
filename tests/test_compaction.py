"""Compaction of closed days, through the real apps' file sinks and the real nightly job (local disk; the
remote stores are in tests/test_reconcile.py's remote-store run).

The reconciliation scenario of tests/test_reconcile.py (raw_archive and sensor_aggregation over the
files source, event day 2026-01-01) is run once; each test compacts its own copy. What must hold:
every row of every day once, before and after (counts and checksums per day, and the rows themselves);
a reader at any moment of a compaction sees each day whole, from one place; the nightly job gives the
same result before and after; a late batch of a compacted day is read at once and compacted again.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from datetime import UTC, date, datetime
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from stream_pipelines.apps import raw_archive
from stream_pipelines.checkpoint import format as checkpoint_format
from stream_pipelines.core import registry, store
from stream_pipelines.reconciliation.job import run_reconciliation
from stream_pipelines.tables import compacted_days, compaction, day_reader, maintenance, retention
from stream_pipelines.tables.day_reader import read_dataset_day, sink_log_names
from tests.conftest import Replay, run_in_process
from tests.test_reconcile import (  # noqa: F401 (fixtures)
    DAY,
    SCENARIO,
    VERDICT_SECTIONS,
    compliance_rows,
    scenario,
    scenario_config,
    write_scenario,
)

pytestmark = pytest.mark.broker

# The scenario's day, 2026-01-01, is past the outputs' and quarantines' default retention by now, and
# will be past the archive's.
KEEP = ("retention.outputs=forever", "retention.quarantine=forever", "retention.archive=forever")
SINKS = maintenance.file_sinks()


def private_copy(scenario, tmp_path: Path):  # noqa: F811
    """The scenario's data root, copied (sink logs pointed at the copy); the replay folder is shared (the
    checkpoints name its files)."""
    original = scenario.config.project_path(scenario.config.paths.data_root)
    shutil.copytree(original, tmp_path / "data")
    for log in (tmp_path / "data").rglob("_spark_metadata/[0-9]*"):
        log.write_text(log.read_text().replace(f"file://{original}/", f"file://{tmp_path / 'data'}/"))
    return scenario_config(
        tmp_path / "data", scenario.replay_root, scenario.ports, scenario.sliding_topic, *KEEP
    )


def digests(spark, config) -> dict[str, tuple[int, str]]:
    """Per file sink, the rows of event day D as the readers see them: count and checksum."""
    return {
        dataset.name: compaction.row_digest(read_dataset_day(spark, config, dataset, DAY))
        for dataset in SINKS
    }


def rows_of(spark, config, dataset) -> list[tuple]:
    frame = read_dataset_day(spark, config, dataset, DAY)
    return sorted(tuple(row) for row in frame.collect())


def files_read(spark, config, dataset) -> set[str]:
    frame = read_dataset_day(spark, config, dataset, DAY)
    return {row.path for row in frame.select(F.col("_metadata.file_path").alias("path")).distinct().collect()}


def names_read(spark, config, dataset) -> set[str]:
    """The sink files a reader of the day reads rows from, relative to the dataset's folder."""
    urls = list(files_read(spark, config, dataset))
    return checkpoint_format.committed_names(urls, dataset.location(config))


def verdicts(result) -> dict:
    report = json.loads(Path(result.report_json).read_text())
    return {section: report[section] for section in VERDICT_SECTIONS}


def test_compaction_keeps_every_row_of_every_day_once_and_the_nightly_reads_the_same(
    spark,
    scenario,  # noqa: F811
    tmp_path,
):
    config = private_copy(scenario, tmp_path)
    before = digests(spark, config)
    assert before["archive"][0] == sum(len(batch) for batch in SCENARIO)
    assert before["sensor_windows"][0] > 0 and before["sensor_aggregation_quarantine"][0] > 0, before
    archive_rows = rows_of(spark, config, registry.ARCHIVE)
    windows_rows = rows_of(spark, config, registry.SENSOR_WINDOWS)
    holding = {
        dataset.name: names_read(spark, config, dataset) for dataset in SINKS if before[dataset.name][0]
    }
    nightly_before = run_reconciliation(config, DAY, spark=spark)
    compliance_before = compliance_rows(spark, config)

    results = {result.dataset: result for result in compaction.compact(spark, config)}
    assert all(result.ok for result in results.values()), [r.lines() for r in results.values()]
    for dataset in SINKS:
        count, checksum = before[dataset.name]
        if count == 0:
            assert not results[dataset.name].units
            continue
        [unit] = results[dataset.name].units
        assert (unit.unit, unit.version, unit.outcome) == (DAY.isoformat(), 1, "published")
        manifest = compacted_days.latest(config, dataset, DAY.isoformat())
        assert (manifest.rows, manifest.checksum) == (count, checksum) == (unit.rows, unit.checksum)
        # Every listed file with rows of the day; the files of batches that wrote no rows go with the
        # day they were written (today: not closed yet).
        assert set(manifest.sources) == holding[dataset.name], dataset.name
        assert len(manifest.files) == 1

    # The readers now read the compacted files only, and see the very same rows.
    assert digests(spark, config) == before
    assert rows_of(spark, config, registry.ARCHIVE) == archive_rows
    assert rows_of(spark, config, registry.SENSOR_WINDOWS) == windows_rows
    assert all(f"/{compacted_days.FOLDER}/" in path for path in files_read(spark, config, registry.ARCHIVE))
    nightly_after = run_reconciliation(config, DAY, spark=spark)
    assert verdicts(nightly_after) == verdicts(nightly_before)
    assert nightly_after.compliance_rows == nightly_before.compliance_rows
    assert compliance_rows(spark, config) == pytest.approx(compliance_before)

    # A second run finds nothing new to do.
    again = {result.dataset: result for result in compaction.compact(spark, config)}
    assert all(not result.units for result in again.values())
    assert again["archive"].up_to_date == 1


def test_a_reader_during_a_compaction_sees_each_day_whole_never_doubled(
    spark,
    scenario,  # noqa: F811
    tmp_path,
    monkeypatch,
):
    config = private_copy(scenario, tmp_path)
    expected = compaction.row_digest(read_dataset_day(spark, config, registry.ARCHIVE, DAY))

    # At the one moment that matters: the compacted files are written, the manifest not yet published.
    seen_at_publish: list[tuple[int, str]] = []
    publish = compacted_days.publish

    def publish_after_a_read(config_, dataset, manifest):
        attempt = compacted_days.unit_url(config_, dataset, manifest.unit) + f"/{manifest.folder}"
        assert store.entries(store.location(config_.spark.extra_conf, attempt)), (
            "the compacted files are written"
        )
        seen_at_publish.append(compaction.row_digest(read_dataset_day(spark, config_, dataset, DAY)))
        return publish(config_, dataset, manifest)

    monkeypatch.setattr(compacted_days, "publish", publish_after_a_read)

    # And all along: a reader in another thread, reading the day over and over.
    seen_meanwhile: list[tuple[int, str]] = []
    stop = threading.Event()

    def read_until_stopped() -> None:
        while not stop.is_set():
            seen_meanwhile.append(
                compaction.row_digest(read_dataset_day(spark, config, registry.ARCHIVE, DAY))
            )

    reader = threading.Thread(target=read_until_stopped)
    reader.start()
    try:
        [result] = compaction.compact(spark, config, datasets=[registry.ARCHIVE])
    finally:
        stop.set()
        reader.join(timeout=120)
    assert result.units[0].outcome == "published"
    seen_meanwhile.append(compaction.row_digest(read_dataset_day(spark, config, registry.ARCHIVE, DAY)))
    assert seen_at_publish == [expected]
    assert len(seen_meanwhile) >= 2 and set(seen_meanwhile) == {expected}, seen_meanwhile


def test_a_late_batch_of_a_compacted_day_is_read_at_once_and_compacted_again(
    spark,
    scenario,  # noqa: F811
    tmp_path,
):
    config = private_copy(scenario, tmp_path)
    compaction.compact(spark, config, datasets=[registry.ARCHIVE])
    first = compacted_days.latest(config, registry.ARCHIVE, DAY.isoformat())
    before = compaction.row_digest(read_dataset_day(spark, config, registry.ARCHIVE, DAY))

    # Two more records arrive on the compacted arrival day (a backlog read after an outage).
    replay_root = scenario.replay_root
    replay = Replay(replay_root)
    replay.files = len(list((replay_root / "sensors").glob("batch-*.jsonl")))
    late = {
        "event_id": "late-1",
        "sensor_id": "sensor-0001",
        "temperature": 1.0,
        "ts": "2026-01-01T23:00:00Z",
    }
    replay.batch("sensors", [late, {**late, "event_id": "late-2"}])
    written = replay_root / "sensors" / f"batch-{replay.files:04d}.jsonl"
    arrival = datetime(2026, 1, 1, 23, 30, tzinfo=UTC).timestamp()
    os.utime(written, (arrival, arrival))
    try:
        assert run_in_process(spark, config, raw_archive)[0] == 0
    finally:
        written.unlink()

    # Read at once, from the compacted version plus the new file; then compacted into version 2.
    count, _ = compaction.row_digest(read_dataset_day(spark, config, registry.ARCHIVE, DAY))
    assert count == before[0] + 2
    with_late = compaction.row_digest(read_dataset_day(spark, config, registry.ARCHIVE, DAY))
    [result] = compaction.compact(spark, config, datasets=[registry.ARCHIVE])
    [unit] = result.units
    assert (unit.version, unit.new_sources, unit.rows) == (2, 1, with_late[0])
    second = compacted_days.latest(config, registry.ARCHIVE, DAY.isoformat())
    assert set(second.sources) == set(first.sources) | set(sink_log_names(config, registry.ARCHIVE))
    assert compaction.row_digest(read_dataset_day(spark, config, registry.ARCHIVE, DAY)) == with_late
    assert all(f"/{second.folder}/" in path for path in files_read(spark, config, registry.ARCHIVE))


def test_a_reader_whose_log_read_meets_a_new_version_reads_the_day_again_whole(
    spark,
    scenario,  # noqa: F811
    tmp_path,
    monkeypatch,
):
    """The reader takes the compacted versions, then the sink's log. If a version is published in
    between and the log forgets its sources before the reader lists it (a compaction days late), the two
    reads are out of step: the reader sees the versions change and reads both again."""
    config = private_copy(scenario, tmp_path)
    expected = compaction.row_digest(read_dataset_day(spark, config, registry.ARCHIVE, DAY))
    listing = day_reader.sink_log_names
    interleaved: list[str] = []

    def publish_then_forget(config_, dataset):
        if interleaved:
            return listing(config_, dataset)
        interleaved.append(dataset.name)
        [result] = compaction.compact(spark, config_, datasets=[dataset])
        assert result.units[0].outcome == "published"
        return []  # the log has forgotten every file the new version holds

    monkeypatch.setattr(day_reader, "sink_log_names", publish_then_forget)
    assert compaction.row_digest(read_dataset_day(spark, config, registry.ARCHIVE, DAY)) == expected
    assert interleaved == ["archive"]


def test_a_file_that_left_the_log_uncompacted_is_reported_and_the_rest_is_compacted(
    spark,
    scenario,  # noqa: F811
    tmp_path,
):
    config = private_copy(scenario, tmp_path)
    folder = store.location(config.spark.extra_conf, registry.ARCHIVE.location(config))
    [listed] = [name for name in sink_log_names(config, registry.ARCHIVE)][:1]
    # A file of another day that the log forgot ten days ago, before anything compacted it.
    lost = "topic=sensors/arrival_date=2025-12-20/part-00000-lost.c000.snappy.parquet"
    store.write_atomically(folder / lost, (folder / listed).read_bytes())
    ten_days_ago = time.time() - 10 * 86400
    os.utime(folder / lost, (ten_days_ago, ten_days_ago))

    [result] = compaction.compact(spark, config, datasets=[registry.ARCHIVE])
    assert result.lost == [lost] and not result.ok
    assert any("LOST FROM VIEW" in line and lost in line for line in result.lines())
    [unit] = result.units
    assert (unit.unit, unit.outcome) == (DAY.isoformat(), "published")
    # The sweep keeps it and the reconciliation refuses the days it held.
    [sweep] = maintenance.sweep_outputs(config, 3600, datasets=[registry.ARCHIVE])
    assert sweep.uncompacted == [lost] and (folder / lost).is_file()
    with pytest.raises(retention.RetentionPassed, match="archive"):
        maintenance.refuse_if_expired(config, date(2025, 12, 20))
