"""How `make game-day` judges a scene from what the webhook receiver logged, and that its scenes cover
every paging alert of monitoring/rules (or say why one is not caused)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from stream_pipelines.devtools import game_day
from stream_pipelines.devtools.game_day import SCENES, SceneRecord, account, notification_bound_s

START = 1_800_000_000.0


def received(
    after_s: float, alertname: str, receiver: str, *, case: str = "", app: str = "a", group: str = "g"
) -> dict[str, Any]:
    """One line of monitoring/webhook_receiver.py's log."""
    labels = {"alertname": alertname, "app": app, **({"case": case} if case else {})}
    return {
        "received_at": datetime.fromtimestamp(START + after_s, UTC).isoformat(),
        "receiver": receiver,
        "status": "firing",
        "alertname": alertname,
        "severity": "page" if receiver == "on-call" else "ticket",
        "labels": labels,
        "summary": f"{alertname} summary",
        "runbook_url": f"http://ui/streaming-pipeline/runbooks#{alertname.lower()}",
        "group_key": f"{receiver}:{group}:{alertname}:{app}",
    }


def scene(**changes: Any) -> SceneRecord:
    return SceneRecord("s", "a fault", "x", started=START, **changes)


def test_one_page_of_the_expected_alert_within_its_bound_passes() -> None:
    record = scene(pending_since=START + 10)
    log = [received(50, "KafkaUnreachable", "on-call"), received(400, "RestartStorm", "ticket")]
    account(record, ("KafkaUnreachable", None), log, until=START + 600)
    assert record.problems == []
    assert record.page_s == 50 and record.pending_s == 10
    assert record.bound_s == notification_bound_s(("KafkaUnreachable", None))
    assert record.first == {
        "receiver": "on-call",
        "alerts": ["KafkaUnreachable a"],
        "after_s": 50,
        "summary": "KafkaUnreachable summary",
        "runbook_url": "http://ui/streaming-pipeline/runbooks#kafkaunreachable",
    }
    assert (len(record.pages), len(record.tickets)) == (1, 1)


def test_a_second_page_a_late_page_and_a_page_outside_the_window_are_told_apart() -> None:
    bound = notification_bound_s(("QueryDown", None))
    record = scene(pending_since=START)
    log = [
        received(bound + 30, "QueryDown", "on-call"),
        received(bound + 40, "NoProgress", "on-call", group="h"),
        received(2000, "NoProgress", "on-call", group="i"),  # the next scene's
    ]
    account(record, ("QueryDown", None), log, until=START + 1000)
    assert len(record.pages) == 2
    assert any("expected one page, got 2" in problem for problem in record.problems)
    assert any(f"over its bound of {bound:.0f}s" in problem for problem in record.problems)


def test_alerts_of_one_notification_count_once() -> None:
    record = scene()
    one = [received(30, "PartitionStalled", "ticket", app=app) for app in ("a", "b")]
    for line in one:
        line["group_key"] = "ticket:{}:PartitionStalled"
    account(record, None, one, until=START + 100)
    assert record.tickets == ["PartitionStalled a, PartitionStalled b"]
    assert record.problems == []


def test_a_page_where_none_is_expected_and_a_wrong_case_are_problems() -> None:
    record = scene()
    log = [
        received(300, "WatermarkLagHigh", "ticket", case="old_events"),
        received(600, "WatermarkLagHigh", "ticket", case="silent_producers", group="h"),
        received(650, "QueryDown", "on-call"),
    ]
    account(record, ("WatermarkLagHigh", "silent_producers"), log, until=START + 900)
    assert any("expected no page, got 1" in problem for problem in record.problems)
    assert any("another case: WatermarkLagHigh/old_events a" in problem for problem in record.problems)
    assert record.page_s == 600  # the silent-producers ticket, the expected notification


def test_what_fired_and_was_not_notified_since_the_scene_began_was_held_back() -> None:
    record = scene(
        fired=[
            {"alertname": "KafkaUnreachable", "app": "a"},
            {"alertname": "NoProgress", "app": "b", "query": "b.q"},
            {"alertname": "QueryDown", "app": "c"},  # paged in an earlier scene, held back in this one
        ]
    )
    log = [received(-900, "QueryDown", "on-call", app="c"), received(50, "KafkaUnreachable", "on-call")]
    account(record, ("KafkaUnreachable", None), log, until=START + 300)
    assert record.held_back == ["NoProgress b.q", "QueryDown c"]


def test_every_paging_alert_is_caused_by_a_scene_or_says_why_not() -> None:
    caused = {s.expects for s in SCENES if s.expects is not None}
    paging = set(game_day.paging_alerts())
    assert paging, "monitoring/rules has paging alerts"
    assert paging - caused == set(game_day.NOT_CAUSED), (
        f"paging alerts without a scene: {paging - caused - set(game_day.NOT_CAUSED)}; "
        f"NOT_CAUSED names some a scene causes: {set(game_day.NOT_CAUSED) & caused}"
    )
    assert all(game_day.NOT_CAUSED.values())


def test_the_table_shows_each_scene_on_one_row() -> None:
    record = scene(pending_since=START + 10)
    account(record, ("KafkaUnreachable", None), [received(50, "KafkaUnreachable", "on-call")], START + 60)
    lines = game_day.render_table([record]).splitlines()
    assert len(lines) == 3 and lines[2].startswith("s ")
    assert "50s on-call: KafkaUnreachable a" in lines[2]
    json.dumps(record.__dict__)  # the report writes it as it is
