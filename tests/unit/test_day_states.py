"""Day states: completeness from the batch log and the partitions, forward only; runs due at least once
and claimed at most once per kind; sign-off bound to the report shown. On a local disk and on S3.

The batch log here is real files in the store (what the recorder copies: offsets/N and commits/N), read
by ``batch_log.newest_committed``; Kafka's per-partition answer is given as the table it would return
(the real broker's answer is tested in tests/test_day_watcher.py).
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta

import pytest

from stream_pipelines.core import store
from stream_pipelines.core.config import load_config
from stream_pipelines.driver import batch_log
from stream_pipelines.reconciliation import days

DAY = date(2026, 3, 1)
DAY_END = datetime(2026, 3, 2, tzinfo=UTC)
HORIZON = timedelta(hours=1)
MS = 1000


@pytest.fixture
def config(stored_root):
    return load_config(
        "local",
        [
            *stored_root,
            "reconciliation.late_horizon=1 hour",
            "reconciliation.request_retry=10 minutes",
            "reconciliation.final_deadline=2 hours",
        ],
        environ={},
    )


def ms(moment: datetime) -> int:
    return int(moment.timestamp() * MS)


def log_batch(
    config, name: str, batch: int, *, watermark: datetime, planned: datetime, ends: dict, committed=True
):
    """One batch of a query in the batch log, as the recorder copies it from the checkpoint."""
    app, query = name.split(".")
    folder = batch_log.query_log_dir(config, app, query)
    metadata = {"batchWatermarkMs": ms(watermark), "batchTimestampMs": ms(planned), "conf": {}}
    offsets = {topic: {str(p): o for p, o in parts.items()} for topic, parts in ends.items()}
    store.write_atomically(
        folder / "offsets" / str(batch), f"v1\n{json.dumps(metadata)}\n{json.dumps(offsets)}"
    )
    if committed:
        store.write_atomically(folder / "commits" / str(batch), 'v1\n{"nextBatchWatermarkMs":0}')


SENSORS = {"sensors": {0: 100, 1: 100}}
ADS = {"impressions": {0: 100}, "clicks": {0: 100}}
ALL = {**SENSORS, **ADS}


def log_streams(config, batch: int, watermark: datetime, planned: datetime, ends=None):
    for name, read in (
        ("sensor_aggregation.tumbling", SENSORS),
        ("sensor_aggregation.sliding", SENSORS),
        ("ad_matching.matches", ADS),
        ("raw_archive.archive", ALL),
    ):
        log_batch(config, name, batch, watermark=watermark, planned=planned, ends=ends or read)


class Kafka:
    """The broker's answer to 'first offset stamped at or after T', per partition: every partition holds
    records stamped up to ``newest`` (one per offset, a minute apart, offset 0 at ``first``), except the
    stalled ones, which stopped at ``stalled_at``."""

    def __init__(self, first: datetime, stalled: dict[tuple[str, int], datetime] | None = None) -> None:
        self.first, self.stalled = first, stalled or {}
        self.asked: list[int] = []

    def __call__(self, partitions, moment_ms: int):
        self.asked.append(moment_ms)
        answer = {}
        for coordinate in partitions:
            offset = max(0, -(-(moment_ms - ms(self.first)) // 60_000))
            stop = self.stalled.get(coordinate)
            answer[coordinate] = None if stop is not None and moment_ms > ms(stop) else offset
        return answer


def watch(config, now: datetime, kafka: Kafka, first_day: date = DAY) -> days.Watched:
    return days.watch(config, now, first_day, kafka)


def test_a_day_closes_when_every_query_has_written_its_last_window_and_is_final_after_the_horizon(config):
    # Offsets are a minute apart from the day's last hour: offset 60 is the first record at D's end.
    kafka = Kafka(DAY_END - timedelta(hours=1))
    log_streams(config, 1, watermark=DAY_END - timedelta(minutes=10), planned=DAY_END)
    first = watch(config, DAY_END + timedelta(minutes=1), kafka)
    assert first.states == {"2026-03-01": days.OPEN} and first.due == []
    holding = days.read_day(config, DAY)["holding"]
    assert any(
        "sensor_aggregation.tumbling: at 2026-03-01T23:50:00+00:00, needs 2026-03-02T00:00:00" in h
        for h in holding
    )

    # The watermark passes the tumbling window's end but not the sliding one's (5 minutes later) nor the
    # match interval's: still open.
    log_streams(config, 2, watermark=DAY_END, planned=DAY_END + timedelta(minutes=5), ends=None)
    assert watch(config, DAY_END + timedelta(minutes=6), kafka).states["2026-03-01"] == days.OPEN

    log_streams(config, 3, watermark=DAY_END + timedelta(minutes=5), planned=DAY_END + timedelta(minutes=10))
    closed = watch(config, DAY_END + timedelta(minutes=11), kafka)
    assert closed.states["2026-03-01"] == days.CLOSED
    assert closed.due == [days.Due(DAY, days.PROVISIONAL)]

    # The horizon passes by the clock, but the archive has not read past it: closed, no final run due
    # (the provisional one, with no outcome recorded, is asked for again).
    late = watch(config, DAY_END + HORIZON + timedelta(minutes=1), kafka)
    assert late.states["2026-03-01"] == days.CLOSED and late.due == [days.Due(DAY, days.PROVISIONAL)]
    assert any(h.startswith("raw_archive.archive: at ") for h in days.read_day(config, DAY)["holding"])

    log_streams(
        config,
        4,
        watermark=DAY_END + HORIZON,
        planned=DAY_END + HORIZON + timedelta(minutes=1),
        ends={"sensors": {0: 200, 1: 200}, "impressions": {0: 200}, "clicks": {0: 200}},
    )
    final = watch(config, DAY_END + HORIZON + timedelta(minutes=2), kafka)
    assert final.states["2026-03-01"] == days.FINAL
    assert final.due == [days.Due(DAY, days.FINAL)]
    assert [h["state"] for h in days.read_day(config, DAY)["history"]] == [days.CLOSED, days.FINAL]


def test_a_stalled_partition_holds_the_day_open_though_the_watermark_has_passed(config):
    kafka = Kafka(DAY_END - timedelta(hours=1), stalled={("sensors", 1): DAY_END - timedelta(minutes=30)})
    log_streams(config, 1, watermark=DAY_END + HORIZON, planned=DAY_END + HORIZON)
    seen = watch(config, DAY_END + timedelta(minutes=30), kafka)
    assert seen.states["2026-03-01"] == days.OPEN and seen.due == []
    holding = days.read_day(config, DAY)["holding"]
    assert any(
        "sensor_aggregation.tumbling: not yet past 2026-03-02T00:00:00+00:00 in sensors[1]" in h
        for h in holding
    )

    # The partition delivers past D's end and the streams read it: closed.
    kafka.stalled.clear()
    assert watch(config, DAY_END + timedelta(minutes=31), kafka).states["2026-03-01"] == days.CLOSED


def test_completeness_never_moves_back(config):
    kafka = Kafka(DAY_END - timedelta(hours=1))
    log_streams(config, 1, watermark=DAY_END + timedelta(minutes=10), planned=DAY_END + timedelta(minutes=10))
    assert watch(config, DAY_END + timedelta(minutes=11), kafka).states["2026-03-01"] == days.CLOSED
    # A reset checkpoint's batch log starts over behind D's end: D stays closed.
    store.remove_tree(batch_log.query_log_dir(config, "sensor_aggregation", "tumbling"))
    log_batch(
        config,
        "sensor_aggregation.tumbling",
        0,
        watermark=DAY_END - timedelta(hours=2),
        planned=DAY_END + timedelta(minutes=12),
        ends=SENSORS,
    )
    assert watch(config, DAY_END + timedelta(minutes=13), kafka).states["2026-03-01"] == days.CLOSED


def test_a_due_run_is_asked_again_only_after_the_retry_and_never_once_its_outcome_is_recorded(config):
    kafka = Kafka(DAY_END - timedelta(hours=1))
    log_streams(config, 1, watermark=DAY_END + timedelta(minutes=10), planned=DAY_END + timedelta(minutes=10))
    now = DAY_END + timedelta(minutes=11)
    assert watch(config, now, kafka).due == [days.Due(DAY, days.PROVISIONAL)]
    assert watch(config, now + timedelta(minutes=9), kafka).due == []  # asked 9 minutes ago: not again
    assert watch(config, now + timedelta(minutes=10), kafka).due == [days.Due(DAY, days.PROVISIONAL)]

    claim = days.begin_run(config, DAY, requested_kind=days.PROVISIONAL, manual=False, run_id="r1", now=now)
    assert claim.kind == days.PROVISIONAL
    days.record_run(config, DAY, days.PROVISIONAL, {"status": "passed", "diffs": []}, "report.html", now)
    assert watch(config, now + timedelta(hours=5), kafka).due == []
    assert days.state_of(days.read_day(config, DAY)) == days.RECONCILED_PROVISIONAL

    # A second asset event for the same day and kind (a re-ask that crossed the outcome) is declined...
    again = days.begin_run(config, DAY, requested_kind=days.PROVISIONAL, manual=False, run_id="r2", now=now)
    assert again.kind is None and "already recorded" in again.reason
    # ...and a manual rerun is not.
    manual = days.begin_run(config, DAY, requested_kind=None, manual=True, run_id="m1", now=now)
    assert manual.kind == days.PROVISIONAL


def test_an_ask_no_run_claimed_is_asked_again_after_the_claim_wait_doubling_and_a_claimed_one_after_the_retry(
    stored_root,
):
    """The asset event that asks for a run travels with the watcher task's report of success: when the
    metadata database is down at that moment, the ask is recorded in D's record but no run ever comes.
    Such an ask is repeated after ``claim_wait`` (doubling each time, up to ``request_retry``), not an
    hour later; once a run has claimed D, only ``request_retry`` asks again."""
    config = load_config(
        "local",
        [
            *stored_root,
            "reconciliation.late_horizon=1 hour",
            "reconciliation.request_retry=10 minutes",
            "reconciliation.claim_wait=2 minutes",
        ],
        environ={},
    )
    kafka = Kafka(DAY_END - timedelta(hours=1))
    log_streams(config, 1, watermark=DAY_END + timedelta(minutes=10), planned=DAY_END + timedelta(minutes=10))
    asked = DAY_END + timedelta(minutes=11)
    provisional = [days.Due(DAY, days.PROVISIONAL)]
    assert watch(config, asked, kafka).due == provisional
    assert watch(config, asked + timedelta(seconds=119), kafka).due == []
    again = asked + timedelta(minutes=2)
    assert watch(config, again, kafka).due == provisional  # no run claimed D: its event was lost
    assert watch(config, again + timedelta(seconds=239), kafka).due == []  # the second wait is 4 minutes
    third = again + timedelta(minutes=4)
    assert watch(config, third, kafka).due == provisional
    assert days.read_day(config, DAY)["requests"][days.PROVISIONAL]["times"] == 3
    # The waits double (8 minutes after the third ask), then stop at request_retry (10, not 16).
    assert watch(config, third + timedelta(seconds=479), kafka).due == []
    fourth = third + timedelta(minutes=8)
    assert watch(config, fourth, kafka).due == provisional
    assert watch(config, fourth + timedelta(seconds=599), kafka).due == []
    fifth = fourth + timedelta(minutes=10)
    assert watch(config, fifth, kafka).due == provisional

    # A run claims D: it is running (or died without an outcome), asked again only after the retry.
    claimed_at = fifth + timedelta(seconds=30)
    claim = days.begin_run(
        config, DAY, requested_kind=days.PROVISIONAL, manual=False, run_id="r", now=claimed_at
    )
    assert claim.kind == days.PROVISIONAL
    assert watch(config, fifth + timedelta(minutes=9), kafka).due == []
    assert watch(config, fifth + timedelta(minutes=10), kafka).due == provisional

    # D goes final: the provisional run's claim came before the final ask, so it does not count as
    # the final ask's claim, which is repeated after the claim wait.
    log_streams(
        config,
        2,
        watermark=DAY_END + HORIZON,
        planned=DAY_END + HORIZON + timedelta(minutes=1),
        ends={"sensors": {0: 200, 1: 200}, "impressions": {0: 200}, "clicks": {0: 200}},
    )
    final_asked = DAY_END + HORIZON + timedelta(minutes=2)
    assert watch(config, final_asked, kafka).due == [days.Due(DAY, days.FINAL)]
    assert watch(config, final_asked + timedelta(seconds=119), kafka).due == []
    assert watch(config, final_asked + timedelta(minutes=2), kafka).due == [days.Due(DAY, days.FINAL)]


def test_an_open_day_is_not_reconciled_by_the_day_states_but_a_manual_rerun_still_runs(config):
    now = DAY_END + timedelta(minutes=1)
    declined = days.begin_run(config, DAY, requested_kind=days.PROVISIONAL, manual=False, run_id="r", now=now)
    assert declined.kind is None and "still open" in declined.reason
    assert days.begin_run(config, DAY, requested_kind=None, manual=True, run_id="m", now=now).kind == "manual"


def test_a_watcher_down_for_days_skips_no_day_and_then_reads_from_the_first_unfinished_one(config):
    kafka = Kafka(DAY_END - timedelta(days=3))
    first_day = DAY - timedelta(days=2)
    later = DAY_END + timedelta(days=3)
    log_streams(
        config,
        1,
        watermark=later,
        planned=later,
        ends={"sensors": {0: 10**6, 1: 10**6}, "impressions": {0: 10**6}, "clicks": {0: 10**6}},
    )
    seen = watch(config, later + timedelta(minutes=1), kafka, first_day)
    assert [d.day for d in seen.due] == [first_day + timedelta(days=n) for n in range(5)]
    assert all(d.kind == days.FINAL for d in seen.due)
    assert seen.first_unfinished == first_day

    for due in seen.due[:3]:
        days.begin_run(config, due.day, requested_kind=days.FINAL, manual=False, run_id="r", now=later)
        days.record_run(config, due.day, days.FINAL, {"status": "passed"}, "r.html", later)
    after = watch(config, later + timedelta(minutes=2), kafka, first_day)
    assert after.first_unfinished == first_day + timedelta(days=3)
    # The next pass starts there: the finished days are not read again (the last day has not closed).
    following = watch(config, later + timedelta(minutes=3), kafka, first_day)
    assert list(following.states) == [(first_day + timedelta(days=n)).isoformat() for n in range(3, 6)]
    assert following.states[(first_day + timedelta(days=5)).isoformat()] == days.OPEN


def test_a_sign_off_binds_the_report_shown_and_a_rejection_leaves_the_day_unsigned(config):
    now = DAY_END + HORIZON
    report = {"status": "passed", "diffs": [{"verdict": "explained"}], "window_counts": {"exact_windows": 3}}
    digest = days.report_digest(report)
    days.record_run(config, DAY, days.FINAL, report, "final.html", now)
    record = days.read_day(config, DAY)
    assert record["runs"]["final"]["figures"]["diffs"] == {"explained": 1}

    with pytest.raises(days.SignOffRefused, match="not signed"):
        days.record_sign_off(
            config,
            DAY,
            decision=days.APPROVED,
            by="ann",
            comment="",
            shown_digest="sha256:other",
            current_digest=digest,
            now=now,
        )
    rejected = days.record_sign_off(
        config,
        DAY,
        decision=days.REJECTED,
        by="ann",
        comment="window 12:05 looks short",
        shown_digest=digest,
        current_digest=digest,
        now=now,
    )
    assert days.state_of(rejected) == days.RECONCILED_FINAL
    assert rejected["sign_off"]["comment"] == "window 12:05 looks short"

    signed = days.record_sign_off(
        config,
        DAY,
        decision=days.APPROVED,
        by="bob",
        comment="ok",
        shown_digest=digest,
        current_digest=digest,
        now=now + timedelta(minutes=1),
    )
    assert days.state_of(signed) == days.SIGNED_OFF
    assert [s["decision"] for s in signed["sign_offs"]] == ["rejected", "approved"]
    # What the day states add to the report (the sign-off, the runs side by side) leaves its digest alone.
    shown = {**report, "sign_off": signed["sign_off"], "day_state": days.day_section(signed)}
    assert days.report_digest(shown) == digest
    assert days.report_digest({**report, "status": "failed"}) != digest

    # A new final report (a rerun with other figures) needs its own sign-off.
    other = {**report, "window_counts": {"exact_windows": 4}}
    rerun = days.record_run(config, DAY, days.FINAL, other, "final.html", now)
    assert days.state_of(rerun) == days.RECONCILED_FINAL and "sign_off" not in rerun


def test_a_day_without_its_final_run_past_the_deadline_is_overdue_until_the_run_is_recorded(config):
    deadline = DAY_END + HORIZON + timedelta(hours=2)
    assert days.overdue_days(config, DAY, deadline - timedelta(seconds=1)) == []
    assert days.overdue_days(config, DAY, deadline) == ["2026-03-01"]
    days.record_run(config, DAY, days.FINAL, {"status": "passed"}, "r.html", deadline)
    assert days.overdue_days(config, DAY, deadline) == []


def test_a_final_run_that_failed_reconciles_nothing_pages_at_the_deadline_and_cannot_be_signed(config):
    """A failed final run (unexplained diffs) is recorded, so it is not asked for again every hour; but
    the day has no final figures: not reconciled, overdue past the deadline, the cursor waits on it."""
    kafka = Kafka(DAY_END - timedelta(hours=1))
    ends = {"sensors": {0: 500, 1: 500}, "impressions": {0: 500}, "clicks": {0: 500}}
    log_streams(
        config, 1, watermark=DAY_END + HORIZON, planned=DAY_END + HORIZON + timedelta(minutes=5), ends=ends
    )
    now = DAY_END + HORIZON + timedelta(minutes=6)
    assert watch(config, now, kafka).due == [days.Due(DAY, days.FINAL)]
    days.begin_run(config, DAY, requested_kind=days.FINAL, manual=False, run_id="r", now=now)
    failed = {"status": "failed", "diffs": [{"verdict": "unexplained"}]}
    record = days.record_run(config, DAY, days.FINAL, failed, "f.html", now)

    assert days.state_of(record) == days.FINAL and not days.final_reconciled(record)
    later = watch(config, now + timedelta(hours=5), kafka)
    assert later.due == [] and later.first_unfinished == DAY
    assert days.overdue_days(config, DAY, DAY_END + HORIZON + timedelta(hours=2)) == ["2026-03-01"]
    digest = days.report_digest(failed)
    with pytest.raises(days.SignOffRefused, match="did not pass"):
        days.record_sign_off(
            config, DAY, decision=days.APPROVED, by="ann", comment="", shown_digest=digest,
            current_digest=digest, now=now,
        )  # fmt: skip

    # Fixed and rerun by hand: reconciled, off the deadline.
    days.begin_run(config, DAY, requested_kind=None, manual=True, run_id="m", now=now + timedelta(hours=6))
    days.record_run(
        config, DAY, days.FINAL, {"status": "passed"}, "f.html", now + timedelta(hours=6, minutes=2)
    )
    assert days.final_reconciled(days.read_day(config, DAY))
    assert days.overdue_days(config, DAY, now + timedelta(hours=7)) == []


def test_a_day_that_never_closes_is_declared_final_by_hand_with_its_reason(config):
    """A partition that will never deliver again holds D open for good: a manual run with a reason makes D
    final, that run is D's final one, it can be signed off and D leaves the deadline."""
    now = DAY_END + HORIZON + timedelta(hours=3)
    assert days.overdue_days(config, DAY, now) == ["2026-03-01"]
    claim = days.begin_run(
        config, DAY, requested_kind=None, manual=True, run_id="m1", now=now,
        declare_final="gateway 7 decommissioned: sensors[1] will not deliver again",
    )  # fmt: skip
    assert claim.kind == days.FINAL
    record = days.read_day(config, DAY)
    assert record["completeness"] == days.FINAL
    assert record["history"][-1] == {
        "state": days.FINAL, "at": now.isoformat(), "by_hand": "m1",
        "reason": "gateway 7 decommissioned: sensors[1] will not deliver again",
    }  # fmt: skip
    report = {"status": "passed", "diffs": []}
    days.record_run(config, DAY, days.FINAL, report, "f.html", now + timedelta(minutes=2))
    digest = days.report_digest(report)
    signed = days.record_sign_off(
        config, DAY, decision=days.APPROVED, by="ann", comment="sensors[1] gone since 23:10",
        shown_digest=digest, current_digest=digest, now=now + timedelta(minutes=5),
    )  # fmt: skip
    assert days.state_of(signed) == days.SIGNED_OFF
    assert days.overdue_days(config, DAY, now + timedelta(minutes=6)) == []
    # Without the reason, a manual run of an open day stays what it was.
    other = DAY + timedelta(days=1)
    assert (
        days.begin_run(config, other, requested_kind=None, manual=True, run_id="m2", now=now).kind == "manual"
    )
    assert days.read_day(config, other)["completeness"] == days.OPEN


def test_no_sign_off_is_recorded_while_a_rerun_of_the_day_is_in_progress(config):
    now = DAY_END + HORIZON
    report = {"status": "passed", "diffs": []}
    digest = days.report_digest(report)
    days.begin_run(config, DAY, requested_kind=None, manual=True, run_id="m1", now=now, declare_final="test")
    days.record_run(config, DAY, days.FINAL, report, "f.html", now + timedelta(minutes=1))
    # The rerun is claimed: its job will rewrite the compliance rows and the report.
    days.begin_run(config, DAY, requested_kind=None, manual=True, run_id="m2", now=now + timedelta(minutes=2))
    assert days.rerun_in_progress(days.read_day(config, DAY)["runs"][days.FINAL])
    with pytest.raises(days.SignOffRefused, match="in progress"):
        days.record_sign_off(
            config, DAY, decision=days.APPROVED, by="ann", comment="", shown_digest=digest,
            current_digest=digest, now=now + timedelta(minutes=3),
        )  # fmt: skip
    assert "sign_off" not in days.read_day(config, DAY)


def test_the_digest_ignores_the_pdf_copy_which_every_rewrite_renders_again():
    report = {"status": "passed", "diffs": [], "pdf": {"rendered": True, "path": "r.pdf"}}
    assert days.report_digest(report) == days.report_digest(
        {**report, "pdf": {"rendered": False, "reason": "x"}}
    )
