"""Impression-to-click matching and CTR through the real ad_matching app (files source).

Config: both watermarks 10 minutes, match interval 5 minutes, CTR window 5 minutes.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from stream_pipelines.apps import ad_matching
from stream_pipelines.core.registry import app as declared_app
from stream_pipelines.observability.metrics import ProgressRecorder
from tests.conftest import (
    Replay,
    committed_batches_of_files,
    files_source_overrides,
    make_overrides_config,
    overrides_for,
    run_in_process,
)


def impression(event_id: str, ad: str, user: str, minute: int, second: int = 0) -> dict:
    return {
        "event_id": event_id,
        "ad_id": ad,
        "user_id": user,
        "shown_at": f"2026-01-01T00:{minute:02d}:{second:02d}Z",
    }


def click(event_id: str, ad: str, user: str, minute: int, second: int = 0) -> dict:
    return {
        "event_id": event_id,
        "ad_id": ad,
        "user_id": user,
        "clicked_at": f"2026-01-01T00:{minute:02d}:{second:02d}Z",
    }


def at(minute: int) -> datetime:
    return datetime(2026, 1, 1, 0, minute)


@pytest.fixture(scope="module")
def ad_run(spark, broker_ports, tmp_path_factory):
    """One run of the app over a scripted scenario; the tests below read its outputs."""
    tmp_path = tmp_path_factory.mktemp("ads")
    replay = Replay(tmp_path / "replay")
    # Both topics advance together, one file each per batch.
    replay.batch(
        "impressions",
        [
            impression("i1", "ad-1", "u1", 0),
            impression("i1", "ad-1", "u1", 0),  # duplicate delivery
            impression("i2", "ad-1", "u2", 0),
            impression("i3", "ad-2", "u3", 1),
        ],
    )
    replay.batch(
        "clicks_ads",
        [
            click("c1", "ad-1", "u1", 2),  # inside i1's interval
            click("c1", "ad-1", "u1", 2),  # duplicate delivery
            click("c2", "ad-1", "u2", 7),  # 7 minutes after i2: outside the 5-minute interval
            "{broken click",
        ],
    )
    replay.batch("impressions", [impression("i9", "ad-9", "u9", 30)])
    replay.batch("clicks_ads", [click("c9", "ad-8", "u8", 30)])
    replay.batch("impressions", [impression("i10", "ad-9", "u9", 55)])
    replay.batch("clicks_ads", [click("c10", "ad-8", "u8", 55)])
    config = make_overrides_config(
        overrides_for(tmp_path / "data", broker_ports, *files_source_overrides(replay.root))
    )
    code, queries = run_in_process(spark, config, ad_matching)
    assert code == 0
    return config, queries


def test_matches_duplicates_and_unmatched_impressions(spark, ad_run):
    config, _ = ad_run
    output = Path(config.output_dir("ad_matches"))
    rows = {r["impression_id"]: r for r in spark.read.parquet(str(output)).collect()}
    assert set(rows) == {"i1", "i2", "i3", "i9"}, "each impression once; i10's interval is still open"
    assert (rows["i1"]["click_id"], rows["i1"]["matched"]) == ("c1", True)
    for unmatched in ("i2", "i3", "i9"):
        assert rows[unmatched]["click_id"] is None and rows[unmatched]["clicked_at"] is None
        assert rows[unmatched]["matched"] is False
    # The match is emitted by the batch that saw it; unmatched impressions only later, after the watermark.
    owners = committed_batches_of_files(output)
    batch_of = {}
    for part in output.glob("*.parquet"):
        for row in spark.read.parquet(str(part)).collect():
            batch_of[row["impression_id"]] = owners[part.name]
    assert batch_of["i1"] < batch_of["i2"]


def test_ctr_per_ad_per_window_counts_each_event_once(spark, ad_run):
    config, _ = ad_run
    ctr = {
        (r["window_start"], r["ad_id"]): r for r in spark.read.parquet(config.output_dir("ad_ctr")).collect()
    }
    first = ctr[(at(0), "ad-1")]
    assert (first["impressions"], first["clicks"], first["ctr"]) == (2, 1, 0.5)
    late_click = ctr[(at(5), "ad-1")]
    assert (late_click["impressions"], late_click["clicks"], late_click["ctr"]) == (0, 1, None)
    assert (ctr[(at(0), "ad-2")]["impressions"], ctr[(at(0), "ad-2")]["clicks"]) == (1, 0)


def test_bad_clicks_are_quarantined(spark, ad_run):
    config, _ = ad_run
    quarantine = spark.read.parquet(f"{config.data_path('quarantine')}/ad_matching").collect()
    assert [(r["event_type"], r["reason"].split(":")[0]) for r in quarantine] == [("click", "broken_json")]


def test_the_quarantined_rows_are_counted_for_the_metrics(ad_run):
    # pipeline_quarantined_rows_total, the page's "quarantined" and Grafana's panel read these counts,
    # through the exporter's own reading of each batch's progress; without them the ad app's
    # quarantine showed 0 whatever it held.
    config, queries = ad_run
    recorder = ProgressRecorder(config, declared_app("ad_matching"))
    for progress in queries["quarantine"].recentProgress:
        recorder.query_progress(progress)
    counted = [
        sample.value
        for family in recorder.collect()
        for sample in family.samples
        if sample.name == "pipeline_quarantined_rows_total"
    ]
    assert counted == [1.0], "the one broken click, counted once"


def test_each_input_s_watermark_is_exported(ad_run):
    # WatermarkLagHigh's stalled_input case compares the inputs' watermarks of one query: without them a
    # click stream that stopped read as old events (the game day found it). The inputs' partitions'
    # event times come from the same observation (the files source here has no partitions).
    config, queries = ad_run
    recorder = ProgressRecorder(config, declared_app("ad_matching"))
    for name in ("matches", "ctr"):
        for progress in queries[name].recentProgress:
            recorder.query_progress(progress)
    samples = [sample for family in recorder.collect() for sample in family.samples]
    delays = {"impressions": config.ads.impressions_watermark, "clicks": config.ads.clicks_watermark}
    newest = {"impressions": at(55), "clicks": at(55)}
    for query in ("ad_matching.matches", "ad_matching.ctr"):
        watermarks = {
            s.labels["stream"]: s.value
            for s in samples
            if s.name == "pipeline_stream_watermark_seconds" and s.labels["query"] == query
        }
        assert watermarks == {
            stream: newest[stream].replace(tzinfo=UTC).timestamp() - delays[stream].seconds
            for stream in newest
        }, query
