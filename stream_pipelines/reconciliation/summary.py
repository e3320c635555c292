"""What a reviewer reads first, computed from report.json alone (no Spark, no I/O).

``report_summary(document)`` turns the report document into plain figures and sentences: the verdict
and why, events in, windows compared, late drops and duplicates, the corrected day totals against the
stream's, the largest corrections by sensor and by window, and the pending diffs with when to rerun.
Older reports (without the fields added later) still summarise: each figure says where it came from.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import date, datetime, timedelta
from typing import Any

from stream_pipelines.core.config import Duration
from stream_pipelines.reconciliation.diff import EXPLAINED, MISSING, PENDING, UNEXPLAINED
from stream_pipelines.reconciliation.ledger import DROPPED

TOP_CORRECTIONS = 5


def report_summary(document: dict[str, Any]) -> dict[str, Any]:
    """The summary dict the HTML report opens with (see the module docstring)."""
    inputs = document.get("inputs", {})
    counts = document.get("window_counts", {})
    diffs = document.get("diffs", [])
    corrections = [d for d in diffs if d.get("verdict") != PENDING]
    deliveries = int(inputs.get("sensor_deliveries_for_day") or 0)
    events = int(inputs.get("sensor_events_for_day") or 0)
    return {
        "day": document["day"],
        "status": document["status"],
        "headline": _headline(document),
        "why": _why(document),
        "events": {
            "archive_rows_read": inputs.get("archive_rows_read"),
            "sensor_deliveries": deliveries,
            "sensor_events": events,
            "ad_match_diffs": len(document.get("ad_match_diffs", [])),
        },
        "windows": {
            "exact": counts.get("exact_windows", 0),
            "streaming": counts.get("streaming_windows", 0),
            "matching": counts.get("matching_windows", 0),
            EXPLAINED: counts.get("explained_diffs", 0),
            UNEXPLAINED: counts.get("unexplained_diffs", 0),
            PENDING: counts.get("pending_diffs", 0),
        },
        "late": _late(document),
        "duplicates": {
            "deliveries": deliveries - events,
            "in_differing_windows": sum(int(d.get("duplicate_deliveries") or 0) for d in diffs),
        },
        "day_totals": _day_totals(document, corrections),
        "largest_by_sensor": _by_sensor(corrections)[:TOP_CORRECTIONS],
        "largest_by_window": sorted(
            (_window_correction(d) for d in corrections),
            # Unexplained first: they are what a reviewer must look at.
            key=lambda c: (c["verdict"] != UNEXPLAINED, -abs(c["readings_corrected"]), c["window"]),
        )[:TOP_CORRECTIONS],
        "corrected_windows": len(corrections),
        "pending": _pending(document),
    }


def _headline(document: dict[str, Any]) -> str:
    status, day = document["status"], document["day"]
    if status == "passed":
        return (
            f"PASSED: the stream's figures for {day} are reconciled; "
            "the compliance table holds the exact ones."
        )
    if status == "failed":
        return (
            f"FAILED: some of the stream's figures for {day} differ for no reason "
            "the reconciliation can give."
        )
    if status == "empty_day":
        return f"EMPTY DAY: the archive holds no valid sensor event for {day}; nothing to reconcile."
    return f"{status.upper()}: reconciliation of {day}."


def _why(document: dict[str, Any]) -> list[str]:
    counts = document.get("window_counts", {})
    verdicts = [d.get("verdict") for d in diffs_of(document)]
    explained, unexplained, pending = (verdicts.count(v) for v in (EXPLAINED, UNEXPLAINED, PENDING))
    bad_matches = [d for d in document.get("ad_match_diffs", []) if d.get("verdict") == UNEXPLAINED]
    reasons = []
    if unexplained or bad_matches:
        reasons.append(
            f"{unexplained} sensor window(s) and {len(bad_matches)} ad match(es) differ from the exact "
            "recompute and the late-event ledger does not reproduce the stream's figure: the compliance "
            "table was not updated for this day."
        )
        for failed in [d for d in document.get("diffs", []) if d.get("verdict") == UNEXPLAINED][:3]:
            reasons.append(f"{failed.get('window')}: {'; '.join(failed.get('reasons', []))}")
    elif document["status"] != "empty_day":
        reasons.append(
            f"{counts.get('matching_windows', 0)} of {counts.get('exact_windows', 0)} windows match exactly; "
            f"each of the {explained} that differ is explained by events the watermark dropped as late "
            "or by duplicate deliveries the stream counted."
        )
    if pending:
        reasons.append(f"{pending} window(s) are pending (not a failure): see 'Pending' for when to rerun.")
    reasons.extend(document.get("notes", []))
    return reasons


def _late(document: dict[str, Any]) -> dict[str, Any]:
    ledger = document.get("late_event_ledger", {})
    statuses = ledger.get("tumbling_status_counts")
    if statuses is not None:
        dropped, source = int(statuses.get(DROPPED, 0)), "ledger status counts"
    else:  # reports written before the status counts were recorded
        dropped = sum(int(d.get("dropped_deliveries") or 0) for d in document.get("diffs", []))
        source = "differing windows"
    return {
        "dropped_deliveries": dropped,
        "dropped_source": source,
        "ledger_pairs": ledger.get("count", 0),
        "not_yet_read": ledger.get("pending_deliveries_not_yet_read", 0),
    }


def _readings(figures: dict[str, Any] | None) -> int:
    return int((figures or {}).get("reading_count") or 0)


def _day_totals(document: dict[str, Any], corrections: list[dict[str, Any]]) -> dict[str, Any]:
    totals = document.get("day_totals") or {}
    exact = totals.get("exact_readings")
    streaming = totals.get("streaming_readings")
    if exact is None or streaming is None:  # older reports: the stream's total from the diffs
        exact = int(document.get("inputs", {}).get("sensor_events_for_day") or 0)
        streaming = exact - sum(
            _readings(d.get("exact")) - _readings(d.get("streaming")) for d in diffs_of(document)
        )
    return {
        "exact_readings": exact,
        "streaming_readings": streaming,
        "model_readings": totals.get("model_readings"),
        "readings_corrected": exact - streaming,
        "corrected_windows": len(corrections),
    }


def diffs_of(document: dict[str, Any]) -> list[dict[str, Any]]:
    return document.get("diffs", [])


def _window_correction(diff: dict[str, Any]) -> dict[str, Any]:
    exact, streaming = diff.get("exact") or {}, diff.get("streaming") or {}
    return {
        "window": window_label(diff),
        "sensor_id": diff.get("sensor_id"),
        "kind": diff.get("kind"),
        "verdict": diff.get("verdict"),
        "exact_readings": _readings(exact),
        "streaming_readings": _readings(streaming),
        "readings_corrected": _readings(exact) - _readings(streaming),
        "exact_avg_temperature": exact.get("avg_temperature"),
        "streaming_avg_temperature": streaming.get("avg_temperature"),
        "dropped_deliveries": int(diff.get("dropped_deliveries") or 0),
        "duplicate_deliveries": int(diff.get("duplicate_deliveries") or 0),
    }


def window_label(diff: dict[str, Any]) -> str:
    """[start, end) without the sensor, e.g. "2026-01-01 00:00-00:05" (UTC)."""
    start, end = diff.get("window_start"), diff.get("window_end")
    if not start or not end:
        return str(diff.get("window") or "")
    start_at, end_at = datetime.fromisoformat(str(start)), datetime.fromisoformat(str(end))
    return f"{start_at:%Y-%m-%d %H:%M}-{end_at:%H:%M}"


def _by_sensor(corrections: list[dict[str, Any]]) -> list[dict[str, Any]]:
    per_sensor: dict[str, dict[str, Any]] = defaultdict(
        lambda: {
            "windows": 0,
            "readings_corrected": 0,
            "readings_changed": 0,
            "dropped_deliveries": 0,
            "duplicate_deliveries": 0,
        }
    )
    for diff in corrections:
        row = per_sensor[diff.get("sensor_id")]
        correction = _window_correction(diff)
        row["windows"] += 1
        row["readings_changed"] += abs(correction["readings_corrected"])
        for key in ("readings_corrected", "dropped_deliveries", "duplicate_deliveries"):
            row[key] += correction[key]
    return sorted(
        ({"sensor_id": sensor, **row} for sensor, row in per_sensor.items()),
        key=lambda r: (-r["readings_changed"], -r["windows"], str(r["sensor_id"])),
    )


def _pending(document: dict[str, Any]) -> dict[str, Any]:
    pending = [d for d in diffs_of(document) if d.get("verdict") == PENDING]
    pending += [d for d in document.get("ad_match_diffs", []) if d.get("verdict") == PENDING]
    inputs = document.get("inputs", {})
    # diff.classify makes a missing window pending only while the stream has not closed it.
    not_closed = [d for d in pending if d.get("kind") == MISSING]
    advice = []
    if not_closed:
        last_end = max(str(d["window_end"]) for d in not_closed)
        advice.append(
            f"{len(not_closed)} window(s) the stream has not closed: rerun once the stream's watermark has "
            f"passed {last_end} (it stood at {inputs.get('final_streaming_watermark') or 'none yet'}; the "
            "stream closes a window after reading an event "
            f"{inputs.get('sensor_watermark', 'its watermark delay')} past its end)."
        )
    if len(not_closed) < len(pending):
        advice.append(
            f"{len(pending) - len(not_closed)} diff(s) where the stream read events the archive did not hold "
            "yet: rerun once the raw archive has caught up with the stream (its next batches)."
        )
    final_after = _late_horizon_end(document["day"], inputs.get("late_horizon"))
    if pending and final_after:
        advice.append(
            f"The job takes in events arriving until {final_after} "
            f"(late horizon {inputs.get('late_horizon')}): a run after that time is final for this day."
        )
    return {"count": len(pending), "not_closed": len(not_closed), "rows": pending, "advice": advice}


def _late_horizon_end(day: str, late_horizon: str | None) -> str | None:
    if not late_horizon:
        return None
    end = datetime.combine(date.fromisoformat(day), datetime.min.time()) + timedelta(days=1)
    return f"{(end + timedelta(seconds=Duration.parse(late_horizon).seconds)).isoformat(sep=' ')} UTC"
