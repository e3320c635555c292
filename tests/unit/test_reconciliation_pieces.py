"""The parts of the nightly reconciliation that are plain Python: day bounds, verdicts, figures, report."""

from __future__ import annotations

from datetime import date, datetime

import pytest

from stream_pipelines.core import registry
from stream_pipelines.core.config import Duration, PipelineConfig, load_config
from stream_pipelines.driver.batch_log import BatchRecord
from stream_pipelines.reconciliation import ads, advisor, diff, events, job, ledger
from stream_pipelines.reconciliation.report import report_dir

DAY = date(2026, 1, 1)


@pytest.fixture
def config() -> PipelineConfig:
    return load_config("local", ["paths.data_root=/srv/pipeline"], environ={})


@pytest.mark.parametrize(
    ("horizon", "dates", "cutoff"),
    [
        ("2 days", ["2025-12-31", "2026-01-01", "2026-01-02", "2026-01-03"], datetime(2026, 1, 4)),
        # An arrival at D+1 00:00 exactly is outside a one-day horizon: D+1 is still the last day read.
        ("1 day", ["2025-12-31", "2026-01-01", "2026-01-02"], datetime(2026, 1, 3)),
        ("1 hour", ["2025-12-31", "2026-01-01", "2026-01-02"], datetime(2026, 1, 2, 1)),
        ("1 second", ["2025-12-31", "2026-01-01", "2026-01-02"], datetime(2026, 1, 2, 0, 0, 1)),
    ],
)
def test_arrival_days_read_for_a_day_run_from_the_day_before_to_the_horizon(horizon, dates, cutoff):
    assert registry.arrival_dates(DAY, Duration.parse(horizon)) == dates
    assert registry.arrival_cutoff(DAY, Duration.parse(horizon)) == cutoff


def test_the_report_of_a_day_has_its_own_folder(config: PipelineConfig):
    assert str(report_dir(config, "2026-01-01")) == "/srv/pipeline/reports/reconciliation/2026-01-01"


def test_every_topic_is_in_the_quarantine_counts_even_without_rejections():
    assert events.count_rejections(None, ["sensors", "clicks"]) == {"sensors": {}, "clicks": {}}


def test_the_recommended_watermark_is_p99_with_the_margin_rounded_up():
    assert advisor.recommended_watermark_s(100.0, 0.4) == 140.0
    assert advisor.recommended_watermark_s(100.1, 0.4) == 141.0
    assert advisor.recommended_watermark_s(-3.0, 0.4) == 0.0
    assert advisor.recommended_watermark_s(None, 0.4) is None


def test_only_committed_batches_make_a_window_final():
    batches = [
        BatchRecord(0, eviction_watermark_ms=100, committed=True),
        BatchRecord(1, eviction_watermark_ms=200, committed=True),
        BatchRecord(2, eviction_watermark_ms=300, committed=False),
    ]
    assert ledger.final_eviction_watermark_ms(batches) == 200
    assert ledger.final_eviction_watermark_ms(batches[2:]) is None


def test_range_buckets_are_a_typical_range_wide_and_few():
    assert ledger.range_bucket_width([]) == 1
    assert ledger.range_bucket_width([10, 10, 5000]) == 10
    assert ledger.range_bucket_width([1] * 3 + [ledger.MAX_RANGE_BUCKETS * 50]) == 51


def match_row(impression: str, click: str = "", *, in_exact: bool = False, **evidence) -> dict:
    return {
        "impression_id": impression,
        "click_key": click,
        "in_exact": True if in_exact else None,
        "in_stream": None if in_exact else True,
        "impression_late": None,
        "click_late": None,
        "impression_archived": True,
        "click_archived": True if click else None,
        "pending": False,
        **evidence,
    }


def test_match_verdicts():
    diffs = ads.classify_matches(
        [
            # The click was dropped by the watermark: the exact match is missing from the stream, which
            # wrote the impression unmatched instead.
            match_row("imp-1", "click-1", in_exact=True, click_late=True),
            match_row("imp-1"),
            # The stream's watermark has not passed the impression's interval yet.
            match_row("imp-2", "click-2", in_exact=True, pending=True),
            # The stream matched a click the archive read does not hold yet.
            match_row("imp-3", "click-3", click_archived=None),
            match_row("imp-3", in_exact=True),
            match_row("imp-4", "click-4"),
        ]
    )
    assert [(d.impression_id, d.click_id, d.kind, d.verdict) for d in diffs] == [
        ("imp-1", None, ads.WRONG_MATCH, "explained"),
        ("imp-1", "click-1", ads.MISSING_MATCH, "explained"),
        ("imp-2", "click-2", ads.MISSING_MATCH, "pending"),
        ("imp-3", None, ads.MISSING_MATCH, "pending"),
        ("imp-3", "click-3", ads.WRONG_MATCH, "pending"),
        ("imp-4", "click-4", ads.WRONG_MATCH, "unexplained"),
    ]


def window_diff(minute: int, kind: str, verdict: str) -> diff.WindowDiff:
    return diff.WindowDiff(
        window_start=datetime(2026, 1, 1, 0, minute),
        window_end=datetime(2026, 1, 1, 0, minute + 5),
        sensor_id="sensor-0001",
        kind=kind,
        verdict=verdict,
        reasons=("because",),
    )


def test_window_counts_from_the_diffs():
    diffs = [
        window_diff(0, diff.DIFFERENT, diff.EXPLAINED),
        window_diff(5, diff.MISSING, diff.PENDING),
        window_diff(10, diff.EXTRA, diff.UNEXPLAINED),
    ]
    assert job.count_windows({"exact_windows": 7, "streaming_windows": 6}, diffs) == {
        "exact_windows": 7,
        "streaming_windows": 6,
        # An extra window is not one of the exact ones.
        "matching_windows": 5,
        "explained_diffs": 1,
        "unexplained_diffs": 1,
        "pending_diffs": 1,
    }


def test_input_notes_name_what_is_missing():
    assert job.input_notes("2026-01-01", 10, 3, "/out", batches_logged=5, unknown_deliveries=0) == []
    assert job.input_notes("2026-01-01", 0, 0, "/out", batches_logged=0, unknown_deliveries=2) == [
        "empty day: no valid sensor event for 2026-01-01 in the archive",
        "no streaming output for 2026-01-01 (at /out); windows the stream has not closed are pending, "
        "not diffs",
        "the batch log is empty: every delivery is pending for the stream",
        "2 delivery(ies) fall in a batch log gap",
    ]


def result_with(diffs: list[diff.WindowDiff], match_diffs: list[ads.MatchDiff]) -> job.ReconciliationResult:
    return job.ReconciliationResult(
        day="2026-01-01",
        status="failed",
        notes=[],
        inputs={},
        window_counts={},
        diffs=diffs,
        ledger=[],
        ledger_count=0,
        pending_deliveries=0,
        unknown_deliveries=0,
        delay_stats=[],
        recommended_watermark_s=None,
        what_if=[],
        quarantine={},
        compliance_rows=0,
        match_diffs=match_diffs,
        report_json="/srv/pipeline/reports/reconciliation/2026-01-01/report.json",
    )


def test_the_failure_names_every_unexplained_window_and_match_and_the_report():
    result = result_with(
        [window_diff(0, diff.DIFFERENT, diff.EXPLAINED), window_diff(10, diff.MISSING, diff.UNEXPLAINED)],
        [ads.MatchDiff("imp-4", "click-4", ads.WRONG_MATCH, "unexplained", "not reproduced by the ledger")],
    )
    assert [d.verdict for d in result.unexplained] == ["unexplained", "unexplained"]
    assert str(job.UnexplainedDifferences(result)) == (
        "reconciliation of 2026-01-01 FAILED: 2 unexplained window diff(s): "
        "[2026-01-01 00:10:00, 00:15:00) sensor-0001 missing_window: because; "
        "impression imp-4 / click click-4 wrong_match: not reproduced by the ledger. "
        "Report: /srv/pipeline/reports/reconciliation/2026-01-01/report.json"
    )


def test_a_long_failure_lists_twenty_and_counts_the_rest():
    result = result_with([window_diff(minute, diff.DIFFERENT, diff.UNEXPLAINED) for minute in range(25)], [])
    assert "25 unexplained window diff(s)" in str(job.UnexplainedDifferences(result))
    assert "(and 5 more)" in str(job.UnexplainedDifferences(result))


def test_the_report_json_keeps_its_sections():
    document = result_with([window_diff(0, diff.MISSING, diff.PENDING)], []).as_json()
    assert list(document) == [
        "day",
        "status",
        "notes",
        "inputs",
        "window_counts",
        "diffs",
        "ad_match_diffs",
        "ad_ledger_scope",
        "late_event_ledger",
        "delay_analysis",
        "quarantine",
        "compliance_rows",
        "outputs",
        "quality_gates",
        "day_totals",
    ]
    assert document["diffs"][0]["window"] == "[2026-01-01 00:00:00, 00:05:00) sensor-0001"
