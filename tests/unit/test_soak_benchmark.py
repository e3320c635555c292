"""The soak benchmark's arithmetic: jstat parsing, batch figures, and the trends that name what grows
with run time and project it to 90 and 365 days, with and without the configured retention."""

from __future__ import annotations

import pytest

from stream_pipelines.core import registry
from stream_pipelines.core.config import load_config
from stream_pipelines.devtools.benchmarks import soak

# ``jstat -gc`` output (KB), as JDK 17 prints it; the columns past OU trimmed (they are not read).
JSTAT = "\n".join(
    [
        "    S0C    S1C    S0U    S1U      EC       EU        OC         OU",
        "    0.0 4096.0    0.0 4096.0 61440.0  2048.0   65536.0    30720.5",
    ]
)


def test_jstat_columns_become_bytes_of_heap_and_old_generation():
    assert soak.parse_jstat_gc(JSTAT) == {
        "heap_used_bytes": int((4096.0 + 2048.0 + 30720.5) * 1024),
        "old_used_bytes": int(30720.5 * 1024),
    }
    assert soak.parse_jstat_gc("garbage") is None


def test_batch_figures_set_compacting_batches_apart():
    durations = [(batch, 1.0) for batch in range(30)]
    durations[9] = (9, 5.0)
    durations[19] = (19, 7.0)
    durations[29] = (29, 6.0)
    compacting = soak.compacting_batch_ids(durations)
    assert compacting == {9, 19, 29}
    figures = soak.batch_figures(durations, compacting)
    assert figures["batches"] == 30 and figures["p50_s"] == 1.0
    assert figures["compacting_p50_s"] == 6.0 and figures["p95_s"] == 6.0


def slice_with(batches: int, listed: int, rss: float, archive_files: int) -> dict:
    queries = {
        registry.spark_query_name(app.name, query.name): {"committed_total": batches, "p50_s": 0.5}
        for app in registry.APPS.values()
        for query in app.queries
    }
    datasets = {
        dataset.name: {
            "files": archive_files,
            "bytes": archive_files * 1000,
            "sink_log": {"listed_files": listed, "compact_bytes": listed * 200, "read_s": 0.01},
        }
        for dataset in (query.sink for app in registry.APPS.values() for query in app.queries if query.sink)
    }
    return {
        "queries": queries,
        "drivers": {"raw_archive": {"rss_bytes": rss}},
        "datasets": datasets,
        "batch_log": {"files": 2 * batches, "bytes": 400 * batches},
    }


def test_a_figure_that_grows_per_batch_is_named_and_projected_flat_ones_are_not():
    config = load_config("local", environ={})
    slices = [slice_with(batches, 7 * batches, 1.6e9, 7 * batches) for batches in (100, 200, 300)]
    trends = {trend["figure"]: trend for trend in soak.trends(slices, config, batches_per_day=8640)}

    listed = trends["archive sink log listed files"]
    assert listed["grows"] and listed["per_batch"] == pytest.approx(7)
    # 90 days of batches at 8,640 a day, 7 files each; every sink's log lists 7 days of files (its days
    # are compacted by then), whatever the dataset's own retention.
    assert listed["90d"] == pytest.approx(7 * 90 * 8640)
    assert listed["90d_with_retention"] == pytest.approx(7 * 7 * 8640)
    windows = trends["sensor_windows sink log listed files"]
    assert windows["365d"] == pytest.approx(7 * 365 * 8640)
    assert windows["365d_with_retention"] == pytest.approx(7 * 7 * 8640)
    # The data itself is kept for the dataset's retention: the archive's 400 days, beyond 365.
    archive_bytes = trends["archive dataset bytes"]
    assert archive_bytes["365d_with_retention"] == pytest.approx(archive_bytes["365d"])
    assert trends["batch log files"]["365d_with_retention"] == pytest.approx(2 * 7 * 8640)

    assert not trends["raw_archive driver rss bytes"]["grows"]
    assert not trends["raw_archive.archive p50 s"]["grows"]
    data = trends["archive dataset files"]
    assert data["data"] and not data["grows"], "the data itself is not degradation"
    growing = [trend["figure"] for trend in soak.trends(slices, config, 8640) if trend["grows"]]
    assert "archive sink log listed files" in growing and "raw_archive driver rss bytes" not in growing


def test_the_table_shows_what_grows_and_both_projections():
    config = load_config("local", environ={})
    slices = [slice_with(batches, 7 * batches, 1.6e9, 7 * batches) for batches in (100, 200)]
    results = {
        "slices": slices,
        "slice_minutes": 10.0,
        "trigger": "1 second",
        "rate": 20.0,
        "ad_rate": 10.0,
        "default_trigger_s": 10.0,
        "batches": [100, 200],
        "trends": soak.trends(slices, config, 8640),
    }
    table = soak.format_table(results)
    assert "archive sink log listed files" in table and "GROWS" in table
    assert "90 d kept" in table and "grows with run time" in table


def test_committed_batches_count_from_the_newest_commit_not_the_entries_spark_keeps(tmp_path):
    commits = tmp_path / "commits"
    commits.mkdir()
    for batch in range(150, 251):  # Spark keeps the last ~100 entries
        (commits / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    assert soak.committed_count(tmp_path) == 251
    assert soak.committed_count(tmp_path / "missing") == 0
