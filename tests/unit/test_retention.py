"""Retention, on a local disk and on the loopback S3 server: every dataset has a stated life; the daily
maintenance removes exactly what has outlived it and nothing in use (a file its sink's log lists, the
batch log's newest batches, a recent reset copy); each removal moves a marker forward, and the
reconciliation refuses a day whose inputs it removed.

Ages are simulated with the maintenance's ``now``: the files are written now and swept as if days
later, which is what a run months into production sees.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, date, datetime, timedelta

import pytest

from stream_pipelines import cli
from stream_pipelines.core import registry, store
from stream_pipelines.core.config import ConfigError, load_config
from stream_pipelines.driver.batch_log import parse_batch_log, query_log_dir
from stream_pipelines.reconciliation.job import run_reconciliation
from stream_pipelines.tables import maintenance, retention
from tests.unit.test_output_sweep import build_sink, parquet_bytes, rows_read_plainly

DAY = 86400.0
OLD = "topic=sensors/arrival_date=2026-01-01/part-00000-old.c000.snappy.parquet"
NEW = "topic=sensors/arrival_date=2026-01-02/part-00000-new.c000.snappy.parquet"
LISTED_OLD = "topic=sensors/arrival_date=2026-01-01/part-00001-listed.c000.snappy.parquet"


@pytest.fixture
def config(stored_root):
    return load_config("local", stored_root, environ={})


def test_every_dataset_states_a_retention_and_the_defaults_are_the_documented_ones():
    config = load_config("local", environ={})
    stated = retention.stated(config)
    assert set(registry.DATASETS) <= set(stated)
    assert stated["archive"] == "400 days"
    assert stated["sensor_aggregation_quarantine"] == stated["ad_matching_quarantine"] == "90 days"
    assert stated["sensor_windows"] == stated["ad_matches"] == stated["ad_ctr"] == "30 days"
    assert stated["compliance_sensor_windows"] == stated["late_event_ledger"] == "forever"
    assert stated["reports"] == "forever"
    assert stated["batch_log"] == "7 days"


def test_a_retention_shorter_than_the_reconciliation_needs_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"retention\.outputs .* at least 6 days"):
        load_config("local", ["retention.outputs=2 days"], environ={})
    with pytest.raises(ConfigError, match=r"retention\.archive"):
        load_config("local", ["retention.archive=0 days"], environ={})
    kept = load_config("local", ["retention.archive=forever"], environ={})
    assert kept.retention.archive is None and registry.ARCHIVE.kept_for(kept) is None


def test_a_file_sinks_log_keeps_the_compaction_window_or_the_datasets_retention_if_shorter():
    from stream_pipelines.driver.runtime import sink_log_options

    config = load_config("local", environ={})
    week = f"{7 * 86400 * 1000}ms"
    assert sink_log_options(config, registry.ARCHIVE) == {"retention": week}
    assert sink_log_options(config, registry.SENSOR_WINDOWS) == {"retention": week}
    forever = load_config("local", ["retention.archive=forever"], environ={})
    assert sink_log_options(forever, registry.ARCHIVE) == {"retention": week}
    short = load_config("local", ["retention.outputs=156 hours"], environ={})
    assert sink_log_options(short, registry.AD_MATCHES) == {"retention": f"{int(6.5 * 86400 * 1000)}ms"}


def test_a_sink_log_shorter_than_a_day_takes_to_close_and_settle_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"compaction\.sink_log \(5 days\) .* at least 150 hours"):
        load_config("local", ["compaction.sink_log=5 days"], environ={})
    assert load_config("local", ["compaction.sink_log=150 hours"], environ={}).compaction.sink_log


def written_at(folder, name: str) -> float:
    return maintenance.data_files(folder)[name][1]


def test_a_file_the_log_forgot_goes_once_past_retention_a_listed_one_never(config):
    # The log lists two files; a third (written, then forgotten by the log's retention) is unlisted.
    folder = build_sink(config, {NEW: [10, 11], LISTED_OLD: [5]}, {OLD: parquet_bytes([1, 2])})
    kept_for = registry.ARCHIVE.kept_for(config).seconds
    old_written = written_at(folder, OLD)

    # Just past its retention: the log forgot it at its last compaction, and a reader that listed the
    # log before may still read it: it stays until the grace period has passed since it expired.
    [fresh] = maintenance.sweep_outputs(
        config, 3600, now=old_written + kept_for + 60, datasets=[registry.ARCHIVE]
    )
    assert fresh.removed == [] and fresh.young == [OLD]

    later = old_written + kept_for + DAY
    [sweep] = maintenance.sweep_outputs(config, 3600, now=later, datasets=[registry.ARCHIVE])
    assert [(item["file"], item["expired"]) for item in sweep.removed] == [(OLD, True)]
    # The listed file is past its retention too, but Spark's readers rely on it until the log forgets it.
    assert LISTED_OLD in store.files_under(folder) and NEW in store.files_under(folder)
    assert rows_read_plainly(folder) == [5, 10, 11]
    # The marker stands at the removed file's own time: data up to then is gone.
    marker = retention.removed_before(folder)
    assert marker is not None and abs(marker.timestamp() - old_written) < 1


def test_debris_younger_than_the_retention_goes_as_debris_and_moves_no_marker(config):
    folder = build_sink(config, {NEW: [10]}, {OLD: parquet_bytes([1])})
    [sweep] = maintenance.sweep_outputs(config, 3600, now=time.time() + 2 * 3600, datasets=[registry.ARCHIVE])
    assert [(item["file"], item["expired"]) for item in sweep.removed] == [(OLD, False)]
    assert retention.removed_before(folder) is None, "debris is not data removed by retention"


def test_a_log_that_forgot_every_file_lets_them_go_one_naming_files_elsewhere_is_refused(config):
    folder = build_sink(config, {}, {OLD: parquet_bytes([1]), NEW: parquet_bytes([2])})
    months_later = time.time() + 401 * DAY
    # An idle sink whose log forgot everything: every file is past its retention.
    [sweep] = maintenance.sweep_outputs(config, 3600, now=months_later, datasets=[registry.ARCHIVE])
    assert sweep.refused is None and {item["file"] for item in sweep.removed} == {OLD, NEW}

    # A log naming files elsewhere (a moved folder): refused however old its files are.
    build_sink(config, {}, {OLD: parquet_bytes([1])})
    elsewhere = "v1\n" + json.dumps({"path": "file:/elsewhere/part-0.parquet", "size": 1, "action": "add"})
    store.write_atomically(folder / "_spark_metadata" / "0", elsewhere)
    [moved] = maintenance.sweep_outputs(config, 3600, now=months_later, datasets=[registry.ARCHIVE])
    assert moved.refused and moved.removed == [] and OLD in store.files_under(folder)


def test_a_partition_folder_emptied_by_retention_goes_with_its_last_file(config):
    folder = build_sink(config, {NEW: [10]}, {OLD: parquet_bytes([1])})
    maintenance.sweep_outputs(config, 3600, now=time.time() + 401 * DAY, datasets=[registry.ARCHIVE])
    assert [name for name in store.files_under(folder) if not name.startswith("_")] == [NEW]
    if not store.on_object_store(folder):  # an object store has no folders to leave behind
        assert not (folder / "topic=sensors/arrival_date=2026-01-01").exists()
        assert (folder / "topic=sensors").is_dir()


def write_batches(config, app: str, query: str, batches: range) -> None:
    """Batch-log entries as the recorder copies them: batch N read offsets [100 N, 100 (N + 1)) of
    sensors/0 and ran with watermark 1000 N; the Kafka source's initial offsets in sources/0/0."""
    folder = query_log_dir(config, app, query)
    for batch in batches:
        header = {"batchWatermarkMs": 1000 * batch, "batchTimestampMs": 0, "conf": {}}
        offsets = {"sensors": {"0": 100 * (batch + 1)}}
        store.write_atomically(
            folder / "offsets" / str(batch), f"v1\n{json.dumps(header)}\n{json.dumps(offsets)}"
        )
        store.write_atomically(folder / "commits" / str(batch), 'v1\n{"nextBatchWatermarkMs":0}')
    store.write_atomically(folder / "sources" / "0" / "0", 'v1\n{"sensors":{"0":0}}')


def test_the_batch_log_loses_its_old_batches_but_the_one_the_next_starts_from(config):
    app, query = registry.SENSOR_AGGREGATION.name, "tumbling"
    folder = query_log_dir(config, app, query)
    write_batches(config, app, query, range(4))
    time.sleep(1.5)  # S3 keeps whole seconds: the two groups of batches must differ in time
    write_batches(config, app, query, range(4, 6))
    written = {int(name): modified for name, (_, modified) in store.entries(folder / "offsets").items()}
    # Seven days and a little after batch 3 was written: batches 0-3 are past retention, 4-5 are not.
    now = max(written[batch] for batch in range(4)) + 7 * DAY + 0.5

    dry = retention.prune_batch_log(config, app, query, now, dry_run=True)
    assert [item["batch"] for item in dry.removed] == [0, 1, 2]
    assert (folder / "offsets" / "0").exists(), "a dry run removed something"

    removal = retention.prune_batch_log(config, app, query, now, dry_run=False)
    assert [item["batch"] for item in removal.removed] == [0, 1, 2] and removal.kept == 3
    for log in ("offsets", "commits"):
        assert sorted(store.entries(folder / log)) == ["3", "4", "5"], f"{log} kept the wrong batches"
    left = parse_batch_log(folder)
    assert [record.batch_id for record in left] == [3, 4, 5]
    # Batch 4 still knows where it started and the watermark its late-row filter used: batch 3's.
    assert left[1].kafka_ranges == {("sensors", 0): (400, 500)}
    assert left[1].late_filter_watermark_ms == 3000
    assert (folder / "sources" / "0" / "0").exists(), "the source's initial offsets went"
    # What batch 3 read can no longer be attributed: the marker stands at its offsets' time.
    marker = retention.removed_before(folder)
    assert marker is not None and abs(marker.timestamp() - written[3]) < 1

    again = retention.prune_batch_log(config, app, query, now, dry_run=False)
    assert again.removed == [], "the anchor batch was removed on a second run"


def test_reset_copies_go_by_the_time_in_their_name_and_a_recent_one_stays(config):
    root = store.location(config.spark.extra_conf, config.data_path("checkpoints"))
    now = datetime(2026, 11, 26, tzinfo=UTC)
    old = (now - timedelta(days=31)).strftime("%Y%m%dT%H%M%SZ")
    recent = (now - timedelta(days=2)).strftime("%Y%m%dT%H%M%SZ")
    for name in (f"tumbling.reset-{old}", f"tumbling.reset-{old}-2", f"sliding.reset-{recent}", "tumbling"):
        store.write_atomically(root / "sensor_aggregation" / name / "metadata", '{"id":"x"}')
    removal = retention.remove_reset_copies(config, now.timestamp(), dry_run=False)
    assert sorted(item["folder"] for item in removal.removed) == [
        f"sensor_aggregation/tumbling.reset-{old}",
        f"sensor_aggregation/tumbling.reset-{old}-2",
    ]
    assert removal.kept == 1
    left = {path.split("/")[0] for path in store.files_under(root / "sensor_aggregation")}
    assert left == {"tumbling", f"sliding.reset-{recent}"}, "a live checkpoint or a recent copy went"


def test_the_daily_run_records_each_dataset_retention_and_what_it_removed(config):
    build_sink(config, {NEW: [10]}, {OLD: parquet_bytes([1])})
    outcome = maintenance.maintain(config, 3600, now=time.time() + 401 * DAY)
    document = json.loads(store.location(config.spark.extra_conf, outcome.record).read_text())
    assert document["retention"]["archive"] == "400 days"
    archive = next(sink for sink in document["sinks"] if sink["dataset"] == "archive")
    assert [(item["file"], item["expired"]) for item in archive["removed"]] == [(OLD, True)]
    assert {removal["kind"] for removal in document["removals"]} >= {"reset copies", "maintenance records"}
    assert any("past the dataset's retention" in line for line in outcome.lines())


def test_maintenance_records_go_after_their_own_retention(config):
    first = maintenance.maintain(config, 3600)
    later = maintenance.maintain(config, 3600, now=time.time() + 91 * DAY)
    removed = next(r for r in later.removals if r.kind == "maintenance records").removed
    assert first.record.rsplit("/", 1)[-1] in {item["file"] for item in removed}


class NoSpark:
    """Stands in for the SparkSession: any use fails, so a refusal must come before anything is read."""

    def __getattr__(self, name):
        raise AssertionError(f"the reconciliation used Spark ({name}) before refusing the day")


def test_a_day_whose_inputs_retention_removed_is_refused_before_anything_is_read(config):
    folder = store.location(config.spark.extra_conf, registry.ARCHIVE.location(config))
    retention.move_marker(folder, datetime(2026, 3, 10, tzinfo=UTC), {"retention": "400 days"})
    with pytest.raises(retention.RetentionPassed, match=r"2026-03-01 cannot be reconciled again.*archive"):
        run_reconciliation(config, date(2026, 3, 1), spark=NoSpark())
    # A day whose inputs all arrived after the removal is not refused by retention.
    maintenance.refuse_if_expired(config, date(2026, 3, 12))
    # The marker only moves forward.
    retention.move_marker(folder, datetime(2026, 1, 1, tzinfo=UTC), {})
    assert retention.removed_before(folder) == datetime(2026, 3, 10, tzinfo=UTC)


def test_a_file_the_log_forgot_refuses_its_day_before_the_sweep_removes_it(config):
    # Written today; months later the log has forgotten it (unlisted, past retention) but no sweep ran.
    folder = build_sink(config, {}, {OLD: parquet_bytes([1])})
    today = datetime.fromtimestamp(written_at(folder, OLD), UTC).date()
    months_later = time.time() + 401 * DAY
    with pytest.raises(retention.RetentionPassed, match="archive"):
        maintenance.refuse_if_expired(config, today, now=months_later)
    # The same day, while the file is within its retention: not refused.
    maintenance.refuse_if_expired(config, today, now=time.time())


def test_a_day_whose_batches_were_pruned_is_refused(config):
    folder = query_log_dir(config, registry.AD_MATCHING.name, "matches")
    retention.move_marker(folder, datetime(2026, 5, 2, 12, tzinfo=UTC), {"through_batch": 40})
    with pytest.raises(retention.RetentionPassed, match=r"batch log of ad_matching\.matches"):
        maintenance.refuse_if_expired(config, date(2026, 5, 2))


def test_pipelinectl_maintain_prints_every_retention_and_what_it_would_remove(config, stored_root, capsys):
    folder = build_sink(config, {NEW: [10]}, {OLD: parquet_bytes([1])})
    overrides = [argument for value in stored_root for argument in ("--set", value)]
    assert cli.main(["maintain", "--dry-run", *overrides]) == 0
    printed = capsys.readouterr().out
    for dataset in registry.DATASETS:
        assert f"retention {dataset}: " in printed
    assert "retention batch_log: 7 days" in printed
    # The unlisted file was written a moment ago: younger than the grace period, it stays.
    assert "archive: 1 committed file(s) kept; would remove 0 unlisted file(s)" in printed
    assert "1 unlisted file(s) younger than the grace period left" in printed
    assert "batch log sensor_aggregation.tumbling: would remove 0 item(s) older than 7 days" in printed
    assert OLD in store.files_under(folder)
