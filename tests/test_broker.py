"""The local KRaft broker: topics, a clear error on a taken port, and durability across restarts."""

from __future__ import annotations

import socket

import pytest
from confluent_kafka import Consumer, TopicPartition

from stream_pipelines.devtools.broker import BrokerError, LocalBroker
from stream_pipelines.kafka.topics import ensure_topics
from tests.conftest import config_for, free_port, produce


def test_topics_are_created_idempotently_with_configured_partitions(broker):
    first = ensure_topics(broker)
    again = ensure_topics(broker)
    assert set(again) == {"sensors", "impressions", "clicks_ads", "sensor_sliding_avg"}
    assert all(outcome == "exists (3 partitions)" for outcome in again.values()), again
    assert all(outcome.startswith(("created", "exists")) for outcome in first.values())


def test_taken_port_gives_a_clear_error(tmp_path):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        config = config_for(tmp_path, (taken, free_port()))
        with pytest.raises(BrokerError) as caught:
            LocalBroker(config).start()
    assert f"port {taken} on 127.0.0.1 is already taken" in str(caught.value)
    assert "--set broker.port=" in str(caught.value)


def test_committed_events_survive_a_broker_restart(tmp_path):
    config = config_for(tmp_path, (free_port(), free_port()))
    local = LocalBroker(config)
    local.start()
    try:
        ensure_topics(config)
        produce(config, "sensors", [(f"k{i}", f"event-{i}".encode()) for i in range(300)])
        local.stop()
        assert not local.status().running
        local.start()
        consumer = Consumer({**config.kafka_client_config(), "group.id": "restart-check"})
        total = 0
        for partition in range(3):
            low, high = consumer.get_watermark_offsets(TopicPartition("sensors", partition), timeout=10)
            assert low == 0
            total += high
        consumer.close()
        assert total == 300
        assert (tmp_path / "kafka" / "log" / "meta.properties").exists()
    finally:
        local.stop()
