"""Compacted days and the sweep, on a local disk and on the loopback S3 server (and on HDFS through
tests/test_hdfs_store.py): a file its sink's log has forgotten goes only once every day it holds is
compacted (or the dataset's retention has passed); until then it is kept and the run fails, since its
rows are out of the readers' view, and the reconciliation refuses the days it held. Replaced versions
and failed attempts of a compacted day go after the grace period; a day past retention goes whole.

The compactions here are manifests published by hand over hand-made files (the Spark job and the
readers are in tests/test_compaction.py); ages are simulated with the maintenance's ``now``.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from stream_pipelines.core import registry, store
from stream_pipelines.core.config import load_config
from stream_pipelines.tables import compacted_days, maintenance, retention
from tests.unit.test_output_sweep import build_sink, parquet_bytes
from tests.unit.test_retention import NEW, OLD

DAY = 86400.0
UNIT = "2026-01-01"  # OLD's arrival day
GRACE = 3600.0


@pytest.fixture
def config(stored_root):
    return load_config("local", stored_root, environ={})


def publish(config, unit: str, sources: dict[str, list[str]], version: int = 1, folder: str = "a1") -> None:
    """A compacted version of ``unit`` holding ``sources``, with one (hand-made) file."""
    url = f"{compacted_days.unit_url(config, registry.ARCHIVE, unit)}/{folder}/part-00000.parquet"
    store.write_atomically(store.location(config.spark.extra_conf, url), parquet_bytes([1]))
    manifest = compacted_days.Manifest(
        dataset="archive",
        unit=unit,
        version=version,
        folder=folder,
        files=("part-00000.parquet",),
        rows=1,
        checksum="1",
        bytes=1,
        sources=sources,
    )
    assert compacted_days.publish(config, registry.ARCHIVE, manifest)


def test_a_forgotten_file_goes_once_every_day_it_holds_is_compacted_and_is_kept_loudly_until_then(config):
    folder = build_sink(config, {NEW: [10]}, {OLD: parquet_bytes([1, 2])})
    week_later = time.time() + 8 * DAY  # past the sink log's 7 days + the grace period

    # Forgotten by the log, not compacted: its rows are out of the readers' view. Kept, and reported.
    outcome = maintenance.maintain(config, GRACE, now=week_later)
    [sweep] = [s for s in outcome.sweeps if s.dataset == "archive"]
    assert sweep.uncompacted == [OLD] and sweep.removed == []
    assert not outcome.ok and "KEPT that the log forgot" in sweep.summary()
    assert maintenance.taken_out_before(config, registry.ARCHIVE, now=week_later) is not None

    # Compacted (its unit's newest version names it): it goes, as compacted, and no marker moves.
    publish(config, UNIT, {OLD: [UNIT]})
    outcome = maintenance.maintain(config, GRACE, now=week_later)
    [sweep] = [s for s in outcome.sweeps if s.dataset == "archive"]
    assert [(item["file"], item["compacted"], item["expired"]) for item in sweep.removed] == [
        (OLD, True, False)
    ]
    assert outcome.ok and OLD not in store.files_under(folder) and NEW in store.files_under(folder)
    assert retention.removed_before(folder) is None, "nothing left the readers' view"
    assert maintenance.taken_out_before(config, registry.ARCHIVE, now=week_later) is None


def test_a_file_holding_two_days_stays_until_both_are_compacted(config):
    folder = build_sink(config, {NEW: [10]}, {OLD: parquet_bytes([1, 2])})
    week_later = time.time() + 8 * DAY
    publish(config, UNIT, {OLD: [UNIT, "2026-01-02"]})
    [sweep] = maintenance.sweep_outputs(config, GRACE, now=week_later, datasets=[registry.ARCHIVE])
    assert sweep.uncompacted == [OLD] and OLD in store.files_under(folder)

    publish(config, "2026-01-02", {OLD: [UNIT, "2026-01-02"]})
    [sweep] = maintenance.sweep_outputs(config, GRACE, now=week_later, datasets=[registry.ARCHIVE])
    assert [item["file"] for item in sweep.removed] == [OLD]


def test_a_compacted_file_the_log_forgot_waits_out_the_grace_after_the_logs_retention(config):
    # Unlisted and older than the config's floor: maybe forgotten, so not debris. Compacted: it goes once
    # the log has forgotten it by the retention it runs with, and the grace period has passed since.
    folder = build_sink(config, {NEW: [10]}, {OLD: parquet_bytes([1])})
    publish(config, UNIT, {OLD: [UNIT]})
    written = maintenance.data_files(folder)[OLD][1]
    left = maintenance.left_the_log_after(config, registry.ARCHIVE)
    log_kept = registry.ARCHIVE.sink_log_kept(config).seconds
    assert left == config.sink_log_floor().seconds < log_kept
    for moment in (written + left + GRACE + 60, written + log_kept + 60):
        [kept] = maintenance.sweep_outputs(config, GRACE, now=moment, datasets=[registry.ARCHIVE])
        assert kept.young == [OLD] and kept.removed == []
    [later] = maintenance.sweep_outputs(
        config, GRACE, now=written + log_kept + GRACE + 60, datasets=[registry.ARCHIVE]
    )
    assert [(item["file"], item["compacted"]) for item in later.removed] == [(OLD, True)]


def test_a_failed_first_compaction_of_a_day_goes_after_the_grace(config):
    failed = f"{compacted_days.unit_url(config, registry.ARCHIVE, UNIT)}/a1/part-00000.parquet"
    store.write_atomically(store.location(config.spark.extra_conf, failed), b"half a file")
    unit_folder = store.location(
        config.spark.extra_conf, compacted_days.unit_url(config, registry.ARCHIVE, UNIT)
    )
    soon = retention.sweep_compacted(config, registry.ARCHIVE, GRACE, time.time() + 60, dry_run=False)
    assert soon.removed == [] and store.files_under(unit_folder)
    later = retention.sweep_compacted(config, registry.ARCHIVE, GRACE, time.time() + 2 * GRACE, dry_run=False)
    assert [item["what"] for item in later.removed] == ["unpublished attempt a1"]
    assert store.files_under(unit_folder) == []


def test_one_sinks_failing_compaction_does_not_stop_the_others(config, monkeypatch):
    from stream_pipelines.tables import compaction

    def fail_on_the_archive(spark, config_, dataset, now, dry_run, progress):
        if dataset is registry.ARCHIVE:
            raise OSError("the store is away")
        return compaction.DatasetCompaction(dataset.name)

    monkeypatch.setattr(compaction, "compact_dataset", fail_on_the_archive)
    results = compaction.compact(None, config, progress=lambda line: None)
    assert [r.dataset for r in results] == [d.name for d in maintenance.file_sinks()]
    [failed] = [r for r in results if not r.ok]
    assert failed.dataset == "archive" and failed.failed == "OSError: the store is away"
    assert "FAILED: OSError: the store is away" in failed.lines()[1]


def test_an_event_day_expires_from_when_it_closes_not_from_its_end(config):
    # sensor_windows keeps 30 days, counted from the day's end plus the 2-day late horizon.
    dataset = registry.SENSOR_WINDOWS
    closes = dataset.unit_closes_at(UNIT, config).timestamp()
    assert closes == datetime(2026, 1, 4, tzinfo=UTC).timestamp()
    kept = dataset.kept_for(config).seconds
    assert not dataset.unit_expired(UNIT, config, closes + kept - 60)
    assert dataset.unit_expired(UNIT, config, closes + kept + 60)
    assert dataset.unit_end(UNIT) == datetime(2026, 1, 2, tzinfo=UTC)


def test_an_output_files_days_are_looked_up_around_when_it_was_written(config):
    written = datetime(2026, 1, 10, 12, tzinfo=UTC).timestamp()
    days = compacted_days.candidate_units(config, registry.SENSOR_WINDOWS, "part-0.parquet", written)
    # A row of day D is written from D on, until D + 1 day + the 2-day horizon, and a clock a day ahead.
    assert min(days) == "2026-01-06" and max(days) == "2026-01-11"
    assert compacted_days.candidate_units(config, registry.ARCHIVE, OLD, written) == {UNIT}


def test_replaced_versions_and_failed_attempts_go_after_the_grace_and_a_day_past_retention_goes_whole(config):
    build_sink(config, {NEW: [10]}, {})
    publish(config, UNIT, {OLD: [UNIT]}, version=1, folder="a1")
    publish(config, UNIT, {OLD: [UNIT], NEW: [UNIT]}, version=2, folder="a2")
    failed = f"{compacted_days.unit_url(config, registry.ARCHIVE, UNIT)}/a3/part-00000.parquet"
    store.write_atomically(store.location(config.spark.extra_conf, failed), b"half a file")
    unit_folder = store.location(
        config.spark.extra_conf, compacted_days.unit_url(config, registry.ARCHIVE, UNIT)
    )

    # Within the grace period: a reader may still hold version 1, or a compaction be writing a3.
    soon = retention.sweep_compacted(config, registry.ARCHIVE, GRACE, time.time() + 60, dry_run=False)
    assert soon.removed == [] and len(store.files_under(unit_folder)) == 5

    later = retention.sweep_compacted(config, registry.ARCHIVE, GRACE, time.time() + 2 * GRACE, dry_run=False)
    assert sorted(item["what"] for item in later.removed) == ["unpublished attempt a3", "v00001.json"]
    assert store.files_under(unit_folder) == ["a2/part-00000.parquet", "v00002.json"]
    assert compacted_days.latest(config, registry.ARCHIVE, UNIT).version == 2

    # The archive's 400 days after the day's end: the whole day goes, and the marker moves to its end.
    day_end = datetime(2026, 1, 2, tzinfo=UTC)
    expired = retention.sweep_compacted(
        config, registry.ARCHIVE, GRACE, day_end.timestamp() + 401 * DAY, dry_run=False
    )
    assert [item["unit"] for item in expired.removed] == [UNIT]
    assert store.files_under(unit_folder) == []
    assert (
        retention.removed_before(store.location(config.spark.extra_conf, registry.ARCHIVE.location(config)))
        == day_end
    )


def test_a_day_whose_files_left_the_log_uncompacted_is_refused_by_the_reconciliation(config):
    build_sink(config, {NEW: [10]}, {OLD: parquet_bytes([1])})
    folder = store.location(config.spark.extra_conf, registry.ARCHIVE.location(config))
    written = datetime.fromtimestamp(maintenance.data_files(folder)[OLD][1], UTC)
    with pytest.raises(retention.RetentionPassed, match="archive"):
        maintenance.refuse_if_expired(config, written.date(), now=time.time() + 8 * DAY)
    publish(config, UNIT, {OLD: [UNIT]})
    maintenance.refuse_if_expired(config, written.date(), now=time.time() + 8 * DAY)


def test_only_one_compaction_publishes_a_version(config):
    publish(config, UNIT, {OLD: [UNIT]}, version=1, folder="a1")
    second = compacted_days.Manifest("archive", UNIT, 1, "a2", ("x.parquet",), 1, "1", 1, {NEW: [UNIT]})
    assert not compacted_days.publish(config, registry.ARCHIVE, second)
    assert compacted_days.latest(config, registry.ARCHIVE, UNIT).folder == "a1"
    assert compacted_days.units(config, registry.ARCHIVE) == [UNIT]


def test_a_raised_sink_log_retention_does_not_turn_files_the_running_sink_forgot_into_debris(stored_root):
    # The sinks still run with 7 days; the config now says 10. A file of 8 days, unlisted and not
    # compacted, may be one the running sink's log forgot: kept and reported, not swept as debris.
    config = load_config("local", [*stored_root, "compaction.sink_log=10 days"], environ={})
    folder = build_sink(config, {NEW: [10]}, {OLD: parquet_bytes([1])})
    written = maintenance.data_files(folder)[OLD][1]
    [sweep] = maintenance.sweep_outputs(config, GRACE, now=written + 8 * DAY, datasets=[registry.ARCHIVE])
    assert sweep.uncompacted == [OLD] and sweep.removed == []
    assert OLD in store.files_under(folder)
