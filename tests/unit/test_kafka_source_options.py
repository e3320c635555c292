"""The Kafka source's options: a short broker-side fetch wait by default, the deployment's own wins."""

from __future__ import annotations

from stream_pipelines.core.config import load_config
from stream_pipelines.driver.runtime import SOURCE_FETCH_MAX_WAIT_MS, kafka_source_options


def test_the_source_asks_the_broker_to_hold_an_empty_fetch_briefly_not_for_kafkas_500_ms() -> None:
    config = load_config("local")
    options = kafka_source_options(config, [config.kafka.topics.sensors])
    assert options["kafka.fetch.max.wait.ms"] == str(SOURCE_FETCH_MAX_WAIT_MS)
    assert SOURCE_FETCH_MAX_WAIT_MS < 500
    assert options["subscribe"] == config.kafka.topics.sensors.name


def test_a_fetch_wait_in_the_deployments_client_properties_wins() -> None:
    config = load_config("local", ['kafka.client_properties={"fetch.max.wait.ms": "200"}'])
    options = kafka_source_options(config, [config.kafka.topics.sensors])
    assert options["kafka.fetch.max.wait.ms"] == "200"
