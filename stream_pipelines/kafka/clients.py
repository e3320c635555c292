"""The project's own Kafka clients (librdkafka), and what a broker's refusal of them means.

Every client here is built from ``config.kafka_client_config()``, the one librdkafka spelling of the
cluster's settings. A broker that refuses the client's credentials or its TLS handshake is a
configuration error, not an outage: librdkafka would retry it quietly until a timeout, so the first
contact (``cluster_metadata``) listens for the refusal and raises ``KafkaAccessRefused`` within a second
or two, naming the setting to fix and quoting what the broker said.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from stream_pipelines.core.config import PipelineConfig
from stream_pipelines.core.kafka_security import DOC, KafkaSecurity, expired


class KafkaAccessRefused(RuntimeError):
    """The broker refused this client's login or TLS handshake: fix the named setting; retrying won't help."""


def admin_client(config: PipelineConfig, **extra: Any) -> Any:
    from confluent_kafka.admin import AdminClient

    return _made(config, AdminClient, {**config.kafka_client_config(), **extra})


def _made(config: PipelineConfig, client_class: Any, properties: dict[str, Any]) -> Any:
    """A client of ``client_class``; ``KafkaAccessRefused`` when librdkafka refuses to make one from
    these settings (a key or certificate it cannot load): a configuration error, not a cluster that is
    down, so it is never read as "did not answer"."""
    from confluent_kafka import KafkaException

    try:
        return client_class(properties)
    except KafkaException as error:
        raise KafkaAccessRefused(_describe_unmade(config, str(error.args[0]))) from None


def _describe_unmade(config: PipelineConfig, text: str) -> str:
    security = config.kafka.security
    for prefix, setting, location in (
        ("ssl.key", "kafka.security.key_file (and key_password_env)", security.key_file),
        ("ssl.certificate", "kafka.security.certificate_file", security.certificate_file),
        ("ssl.ca", "kafka.security.ca_file", security.ca_file),
    ):
        if prefix in text:
            return (
                f"the Kafka client cannot use {setting}, {location}: it changed since the config was "
                f"checked, or does not match the other TLS files. librdkafka said: {text}. See {DOC}"
            )
    return f"the Kafka client cannot be made from kafka.security: {text}. See {DOC}"


def cluster_metadata(config: PipelineConfig, timeout_s: float) -> Any:
    """The cluster's metadata (topics, partitions, brokers), asked once the client is let in.

    Raises ``KafkaAccessRefused`` as soon as the broker refuses the login or the TLS handshake (or the
    client cannot be made from the settings), and librdkafka's ``KafkaException`` when the cluster does
    not answer within ``timeout_s``.
    """
    from confluent_kafka import KafkaException

    errors: list[Any] = []
    admin = admin_client(config, error_cb=errors.append)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return admin.list_topics(timeout=max(min(1.0, deadline - time.monotonic()), 0.1))
        except KafkaException:
            admin.poll(0)  # serves error_cb with what the connection attempts met
            refusal = describe_refusal(config, errors)
            if refusal is not None:
                raise KafkaAccessRefused(refusal) from None
            if time.monotonic() >= deadline:
                raise


def check_access(config: PipelineConfig, timeout_s: float = 15.0) -> None:
    """Fail fast with ``KafkaAccessRefused`` if the cluster refuses this config's credentials; a cluster
    that does not answer is left to the caller's own client and time-outs."""
    cluster_answers(config, timeout_s)


def cluster_answers(config: PipelineConfig, timeout_s: float) -> bool:
    """Whether the cluster answers a metadata request within ``timeout_s``; ``KafkaAccessRefused`` when
    it refuses this config's login or TLS handshake."""
    from confluent_kafka import KafkaException

    try:
        cluster_metadata(config, timeout_s)
    except KafkaException:
        return False
    return True


def describe_refusal(config: PipelineConfig, errors: list[Any]) -> str | None:
    """What the first refusal among librdkafka's errors says, for the person who has to fix it; None
    when the errors are only of a cluster that is down or slow."""
    from confluent_kafka import KafkaError

    security = config.kafka.security
    where = f"{config.kafka.bootstrap_servers} ({security.protocol})"
    for error in errors:
        code, text = error.code(), error.str()
        if code == KafkaError._AUTHENTICATION:
            return (
                f"the broker at {where} refused the SASL login: kafka.security.sasl_username "
                f"({security.sasl_username!r}), the password in ${security.sasl_password_env} "
                f"(kafka.security.sasl_password_env) or kafka.security.sasl_mechanism "
                f"({security.sasl_mechanism}) is wrong. The broker said: {text}. See {DOC}"
            )
        if code == KafkaError._SSL and "certificate verify failed" in text:
            return (
                f"the broker at {where} presented a certificate this client does not trust: "
                f"{_trust_setting(security)}. The TLS library said: {text}. See {DOC}"
            )
        if code in (KafkaError._SSL, KafkaError._TRANSPORT) and "alert" in text:
            return (
                f"the broker at {where} refused the TLS handshake: {_client_certificate(security)}. "
                f"The broker said: {text}. See {DOC}"
            )
        if code == KafkaError._SSL:
            return f"TLS with the broker at {where} failed (check kafka.security): {text}. See {DOC}"
    return None


def _trust_setting(security: KafkaSecurity) -> str:
    if security.ca_file is None:
        return (
            "kafka.security.ca_file is not set, so the system's CAs are used; set it to the PEM file of the "
            "CA that signs the brokers' certificates"
        )
    return f"kafka.security.ca_file ({security.ca_file}) does not hold the CA that signed it"


def _client_certificate(security: KafkaSecurity) -> str:
    if security.certificate_file is None:
        return (
            "it requires a client certificate (mutual TLS), and kafka.security.certificate_file and "
            "key_file are not set"
        )
    expiry = security.certificate_expiry()
    if expired(expiry):
        return (
            f"kafka.security.certificate_file ({security.certificate_file}) expired on "
            f"{expiry:%Y-%m-%d %H:%M} UTC; renew it"
        )
    return (
        f"it does not accept the client certificate in kafka.security.certificate_file "
        f"({security.certificate_file}): is it signed by a CA the broker trusts?"
    )


def offset_reader(config: PipelineConfig, purpose: str) -> Any:
    """A consumer that only asks offsets (never subscribes or commits): its group is a formality
    librdkafka wants, named for what asks so that the broker's logs say who it was."""
    from confluent_kafka import Consumer

    return _made(
        config,
        Consumer,
        {**config.kafka_client_config(), "group.id": f"pipeline-{purpose}", "enable.auto.commit": False},
    )


def first_offsets_at(
    consumer: Any, partitions: Iterable[tuple[str, int]], timestamp_ms: int, timeout_s: float = 15.0
) -> dict[tuple[str, int], int | None]:
    """Per partition, the offset of its first record stamped at or after ``timestamp_ms``; None when it
    has none yet (nothing has arrived there since). Raises ``KafkaException`` when the cluster does not
    answer, and ``KafkaError`` details in a RuntimeError for a partition it cannot look up."""
    from confluent_kafka import TopicPartition

    wanted = [TopicPartition(topic, partition, timestamp_ms) for topic, partition in sorted(partitions)]
    if not wanted:
        return {}
    found: dict[tuple[str, int], int | None] = {}
    for item in consumer.offsets_for_times(wanted, timeout=timeout_s):
        if item.error is not None:
            raise RuntimeError(f"offsets for time failed for {item.topic}[{item.partition}]: {item.error}")
        found[(item.topic, item.partition)] = item.offset if item.offset >= 0 else None
    return found
