"""The day states' Kafka side against the session's real broker: a partition with nothing stamped since a
day's end holds the day open, whatever the watermark says; once it delivers and the stream reads past it,
the day closes. (The rules themselves: tests/unit/test_day_states.py; the whole way through Airflow:
tests/test_day_lifecycle.py.)"""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, timedelta

import pytest

from stream_pipelines.kafka import clients as kafka_clients
from stream_pipelines.reconciliation import days
from tests.conftest import create_topic, make_overrides_config
from tests.test_checkpoints import produce_at
from tests.unit.test_day_states import log_batch

pytestmark = pytest.mark.broker
DAY = date(2026, 3, 1)
DAY_END = datetime(2026, 3, 2, tzinfo=UTC)


def ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def test_first_offsets_at_a_moment_come_from_the_broker_and_none_where_nothing_arrived_since(
    broker, make_overrides
):
    config = make_overrides_config(make_overrides())
    topic = f"day-watch-{uuid.uuid4().hex[:6]}"
    create_topic(config, topic, 2)
    produce_at(
        config,
        [
            (topic, 0, ms(DAY_END - timedelta(minutes=2))),
            (topic, 0, ms(DAY_END + timedelta(minutes=1))),
            (topic, 0, ms(DAY_END + timedelta(minutes=3))),
            (topic, 1, ms(DAY_END - timedelta(minutes=1))),
        ],
    )
    reader = kafka_clients.offset_reader(config, "test")
    try:
        found = kafka_clients.first_offsets_at(reader, [(topic, 0), (topic, 1)], ms(DAY_END))
        later = kafka_clients.first_offsets_at(reader, [(topic, 0)], ms(DAY_END + timedelta(minutes=2)))
    finally:
        reader.close()
    assert found == {(topic, 0): 1, (topic, 1): None}
    assert later == {(topic, 0): 2}


def test_a_stalled_partition_holds_the_day_open_until_it_delivers_and_the_stream_reads_past_the_days_end(
    broker, make_overrides
):
    suffix = uuid.uuid4().hex[:6]
    topics = {name: f"{name}-{suffix}" for name in ("sensors", "impressions", "clicks")}
    config = make_overrides_config(
        make_overrides(
            *(f"kafka.topics.{name}.name={topic}" for name, topic in topics.items()),
            "reconciliation.late_horizon=1 hour",
        )
    )
    for topic in topics.values():
        create_topic(config, topic, 2)
    # Every partition has records on both sides of D's end, except sensors[1], which stalled before it.
    before, after = DAY_END - timedelta(minutes=20), DAY_END + timedelta(minutes=30)
    produce_at(
        config,
        [(topic, p, ms(before)) for topic in topics.values() for p in (0, 1)]
        + [
            (topic, p, ms(after))
            for topic in topics.values()
            for p in (0, 1)
            if (topic, p) != (topics["sensors"], 1)
        ],
    )
    sensors = {topics["sensors"]: {0: 2, 1: 1}}
    ads = {topics["impressions"]: {0: 2, 1: 2}, topics["clicks"]: {0: 2, 1: 2}}
    # The streams have read everything there is, and their watermark is well past every window of D.
    for name, ends in (
        ("sensor_aggregation.tumbling", sensors),
        ("sensor_aggregation.sliding", sensors),
        ("ad_matching.matches", ads),
        ("raw_archive.archive", {**sensors, **ads}),
    ):
        log_batch(config, name, 0, watermark=after, planned=after, ends=ends)

    def watch(now: datetime) -> days.Watched:
        reader = kafka_clients.offset_reader(config, "test")
        try:
            return days.watch(
                config,
                now,
                DAY,
                lambda partitions, moment: kafka_clients.first_offsets_at(reader, partitions, moment),
            )
        finally:
            reader.close()

    held = watch(after + timedelta(minutes=1))
    assert held.states == {DAY.isoformat(): days.OPEN} and held.due == []
    waiting = days.read_day(config, DAY)["holding"]
    assert (
        f"sensor_aggregation.tumbling: not yet past 2026-03-02T00:00:00+00:00 in {topics['sensors']}[1]"
        in waiting
    )

    # The stalled partition delivers past D's end, and the streams read it: D closes.
    produce_at(config, [(topics["sensors"], 1, ms(after))])
    sensors[topics["sensors"]][1] = 2
    for name in ("sensor_aggregation.tumbling", "sensor_aggregation.sliding", "raw_archive.archive"):
        log_batch(
            config,
            name,
            1,
            watermark=after,
            planned=after,
            ends={**sensors, **(ads if "archive" in name else {})},
        )
    closed = watch(after + timedelta(minutes=2))
    assert closed.states == {DAY.isoformat(): days.CLOSED}
    assert closed.due == [days.Due(DAY, days.PROVISIONAL)]
