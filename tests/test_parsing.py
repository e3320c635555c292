"""The shared parsing layer: every record gets one verdict; bad ones are quarantined with a reason."""

from __future__ import annotations

from datetime import UTC, datetime

from stream_pipelines.devtools import generator
from stream_pipelines.inputs.parsing import (
    CLICK,
    IMPRESSION,
    QUARANTINE_SCHEMA,
    RAW_SCHEMA,
    SENSOR_READING,
    parse_events,
    quarantined_events,
    valid_events,
)

ARRIVAL = datetime(2026, 1, 1, 0, 10, tzinfo=UTC)


def raw_frame(spark, payloads: list[bytes | None], topic: str = "sensors"):
    rows = [("k", payload, topic, 0, offset, ARRIVAL, None) for offset, payload in enumerate(payloads)]
    return spark.createDataFrame(rows, RAW_SCHEMA)


def reasons(spark, payloads, event_type=SENSOR_READING, quality=None):
    from stream_pipelines.core.config import QualitySettings

    parsed = parse_events(raw_frame(spark, payloads), event_type, quality or QualitySettings())
    return [row["quarantine_reason"] for row in parsed.orderBy("offset").collect()]


def test_valid_reading_is_typed_and_keeps_its_coordinates(spark):
    from stream_pipelines.core.config import QualitySettings

    payload = (
        b'{"event_id":"e1","sensor_id":"sensor-0001","temperature":21.5,"ts":"2026-01-01T00:00:01.250Z"}'
    )
    parsed = parse_events(raw_frame(spark, [payload]), SENSOR_READING, QualitySettings())
    row = valid_events(parsed, SENSOR_READING).first()
    assert row["temperature"] == 21.5
    assert row["ts"] == datetime(2026, 1, 1, 0, 0, 1, 250000)
    assert (row["topic"], row["partition"], row["offset"]) == ("sensors", 0, 0)
    assert quarantined_events(parsed, SENSOR_READING).count() == 0


def test_each_kind_of_bad_record_gets_its_reason(spark):
    payloads = [
        b'{"event_id":"e1","sensor_id":"s","temperature":21.5,"ts":"2026-01-01T00:00:0',
        b"[1, 2, 3]",
        b'{"event_id":"e2","sensor_id":"s","temperature":"hot","ts":"2026-01-01T00:00:00Z"}',
        b'{"event_id":"e3","sensor_id":"s","ts":"2026-01-01T00:00:00Z"}',
        b'{"event_id":"e4","sensor_id":"s","temperature":20.0,"ts":"yesterday"}',
        b'{"event_id":"e5","sensor_id":"s","temperature":9999.0,"ts":"2026-01-01T00:00:00Z"}',
        b'{"event_id":"e6","sensor_id":"s","temperature":20.0,"ts":"1970-01-01T00:00:00Z"}',
        b'{"event_id":"e7","sensor_id":"s","temperature":20.0,"ts":"2100-01-01T00:00:00Z"}',
        None,
        b'{"event_id":"e8","sensor_id":"s","temperature":20.0,"ts":"2026-01-01T00:00:00Z"}',
    ]
    got = reasons(spark, payloads)
    assert got[0].startswith("broken_json")
    assert got[1].startswith("broken_json")
    assert got[2] == "wrong_type: temperature=hot"
    assert got[3] == "missing_field: temperature"
    assert got[4] == "bad_timestamp: ts=yesterday"
    assert got[5].startswith("out_of_range: temperature=9999.0")
    assert got[6].startswith("out_of_range: ts=1970-01-01T00:00:00Z is before")
    assert got[7].startswith("out_of_range: ts=2100-01-01T00:00:00Z is more than 1 hours ahead")
    assert got[8].startswith("empty record")
    assert got[9] is None


def test_quarantine_rows_keep_payload_reason_and_coordinates(spark):
    from stream_pipelines.core.config import QualitySettings

    parsed = parse_events(raw_frame(spark, [b"{not json", b'{"event_id":1}']), IMPRESSION, QualitySettings())
    rows = quarantined_events(parsed, IMPRESSION).orderBy("offset").collect()
    assert [r["offset"] for r in rows] == [0, 1]
    assert rows[0]["payload"] == "{not json" and rows[0]["raw_value"] == b"{not json"
    assert rows[0]["event_type"] == "impression" and rows[0]["topic"] == "sensors"
    assert rows[1]["reason"] == "missing_field: ad_id, user_id, shown_at"
    assert quarantined_events(parsed, IMPRESSION).schema.fieldNames() == QUARANTINE_SCHEMA.fieldNames()


def test_generated_scenario_splits_without_loss(spark):
    """Every generated record lands on exactly one side; every malformed one is quarantined."""
    from stream_pipelines.core.config import QualitySettings

    mix = generator.DelayMix(malformed_share=0.05)
    spec = generator.ScenarioSpec(seed=3, duration_s=120, sensor_rate=10, ad_rate=5, mix=mix)
    records = generator.generate(spec)
    for event_type, topic in (
        (SENSOR_READING, "sensors"),
        (IMPRESSION, "impressions"),
        (CLICK, "clicks_ads"),
    ):
        mine = [r for r in records if r.topic == topic]
        rows = [("k", r.value, topic, r.partition, n, r.delivery_time, None) for n, r in enumerate(mine)]
        parsed = parse_events(spark.createDataFrame(rows, RAW_SCHEMA), event_type, QualitySettings()).cache()
        quarantined = {r["offset"] for r in quarantined_events(parsed, event_type).collect()}
        valid = {r["offset"] for r in valid_events(parsed, event_type).collect()}
        parsed.unpersist()
        assert quarantined.isdisjoint(valid)
        assert len(quarantined) + len(valid) == len(mine)
        malformed = {n for n, r in enumerate(mine) if r.kind.startswith("malformed:")}
        assert malformed, f"the scenario has no malformed {topic} records to check"
        assert quarantined == malformed, (
            f"{topic}: quarantined set differs from the generator's malformed set"
        )


def filters_that_parse_json(frame) -> list[str]:
    """The optimized plan's Filter nodes whose condition runs a JSON parse of its own."""
    plan = frame._jdf.queryExecution().optimizedPlan().toString()
    return [line.strip() for line in plan.splitlines() if "Filter " in line and "from_json" in line]


def test_the_valid_quarantine_split_parses_each_record_once(spark):
    # A plain where() on quarantine_reason let the optimizer push the filter below the parse and
    # inline the parse into it once per field it reads: 34 JSON parses in the plan, 4x the CPU a row.
    from stream_pipelines.core.config import QualitySettings

    for event_type, topic in ((SENSOR_READING, "sensors"), (IMPRESSION, "impressions"), (CLICK, "clicks")):
        parsed = parse_events(raw_frame(spark, [b"{}"], topic), event_type, QualitySettings())
        for split in (valid_events(parsed, event_type), quarantined_events(parsed, event_type)):
            assert filters_that_parse_json(split) == [], event_type.name
