"""The project against a broker that demands authentication and encryption: the session broker's
SASL_SSL listener (SCRAM-SHA-512, with conf/cluster.yaml's kafka.security as it stands) and its mutual
TLS listener, with certificates made for this session by the openssl command line (a root CA, an
intermediate that signs the broker and the clients, a client key in every form openssl writes).

Every client of the project runs over mutual TLS with a client key encrypted as openssl 3 encrypts one:
the start-up topic check and `pipelinectl topics`, `pipelinectl produce`, the apps' Spark source and
sink (raw_archive and sensor_aggregation: ad_matching's sources take the same one Kafka client config),
the watchdog's offset reads, and a checkpoint reset from a time. SASL_SSL is
what `tests/test_yarn_cluster_mode.py` runs over, with a client certificate too: the start checks, the
producer, a driver and its executors in YARN, the watchdog, and a search for the secrets everywhere.

A refused login, an unknown CA or an expired client certificate is a configuration error, said at
start-up with the setting and the broker's words, and never retried; the password never shows on a
command line or in a log.
"""

from __future__ import annotations

import base64
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from stream_pipelines.core.exit_codes import ExitCode
from stream_pipelines.core.registry import app as declared_app
from stream_pipelines.devtools.processes import free_port
from stream_pipelines.devtools.tls import KEY_FORMS
from tests.conftest import (
    SecuredKafka,
    create_topic,
    make_overrides_config,
    private_source_topics,
    run_app,
    start_dag_test,
)

pytestmark = [pytest.mark.broker]


def pipelinectl(*arguments: str, overrides: list[str], log: Path) -> subprocess.CompletedProcess:
    """The real CLI in its own process; the secrets reach it through the environment alone."""
    command = [
        sys.executable,
        "-m",
        "stream_pipelines.cli",
        *arguments,
        *(argument for item in overrides for argument in ("--set", item)),
    ]
    with log.open("a") as output:
        output.write(f"$ {' '.join(command)}\n")
        output.flush()
        return subprocess.run(command, stdout=output, stderr=subprocess.STDOUT, timeout=300, check=False)


def end_offsets(config, topics: list[str]) -> dict[str, dict[int, int]]:
    """High watermarks per partition, read over the same secured settings."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**config.kafka_client_config(), "group.id": f"t-{uuid.uuid4().hex}"})
    try:
        metadata = consumer.list_topics(timeout=10)
        return {
            topic: {
                partition: consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1]
                for partition in metadata.topics[topic].partitions
            }
            for topic in topics
        }
    finally:
        consumer.close()


@pytest.mark.slow
def test_every_client_runs_over_mutual_tls_with_a_key_encrypted_as_openssl_3_does(
    spark, broker, secured_kafka, make_overrides, monkeypatch, tmp_path
):
    for name, value in secured_kafka.environment().items():
        monkeypatch.setenv(name, value)
    overrides = make_overrides(
        *private_source_topics(),
        f"kafka.topics.sliding_averages.name=sliding-{uuid.uuid4().hex[:8]}",
        # Several batches, so that the watermark moves on and closes the first windows.
        "kafka.max_offsets_per_trigger=300",
        *secured_kafka.mutual_tls(),
    )
    config = make_overrides_config(overrides)
    assert config.kafka.security.protocol == "SSL" and config.kafka.security.key_password_env
    log = tmp_path / "run.log"

    # The CLI: topics, then a scenario produced through the secured listener.
    assert pipelinectl("topics", overrides=overrides, log=log).returncode == 0, log.read_text()
    produced = pipelinectl(
        "produce",
        "--duration=900",
        "--rate=2",
        "--ad-rate=0.5",
        "--start=2026-01-01T00:00:00Z",
        overrides=overrides,
        log=log,
    )
    assert produced.returncode == 0, log.read_text()
    inputs = [topic.name for topic in config.kafka.topics.inputs()]
    written = end_offsets(config, inputs)
    total = sum(sum(partitions.values()) for partitions in written.values())
    assert total > 0

    # The apps: Spark's Kafka source (both apps) and sink (the sliding averages) over the same settings.
    commands = []
    # Over mutual TLS the client key is encrypted as openssl 3 encrypts one by default (PBES2), which
    # Kafka's Java client cannot read as it is: every app's source and sink take it all the same.
    apps = ("raw_archive", "sensor_aggregation")
    with log.open("ab") as output:
        for app in apps:
            driver = run_app(app, "available-now", overrides, stdout=output, stderr=subprocess.STDOUT)
            commands.append(driver.args)
            assert driver.wait(600) == 0, f"{app} failed over mutual TLS; see {log}"
    archive = spark.read.parquet(config.data_path("archive"))
    assert archive.count() == total
    assert archive.select("topic", "partition", "offset").distinct().count() == total
    sliding = config.kafka.topics.sliding_averages.name
    assert sum(end_offsets(config, [sliding])[sliding].values()) > 0, "the Kafka sink wrote nothing"
    windows = spark.read.parquet(config.output_dir("sensor_windows"))
    assert windows.count() > 0

    # The watchdog's offset reads: everything the archive read is on the broker, nothing waits.
    from stream_pipelines.observability.watchdog import KafkaBacklog

    backlog = KafkaBacklog(config)
    try:
        assert (
            backlog({topic: dict.fromkeys(map(str, parts), 0) for topic, parts in written.items()}) == total
        )
        assert (
            backlog({topic: {str(p): o for p, o in parts.items()} for topic, parts in written.items()}) == 0
        )
    finally:
        backlog.close()

    # A reset from a time before every record: the checkpoint starts again at the first offsets.
    reset = pipelinectl(
        "checkpoint",
        "reset",
        "raw_archive",
        "--from=time",
        "--time=2025-12-31T00:00Z",
        "--confirm=raw_archive",
        overrides=overrides,
        log=log,
    )
    assert reset.returncode == 0, log.read_text()
    from stream_pipelines.checkpoint.inspect import preflight

    resumes_at = preflight(config, declared_app("raw_archive")).query("archive").committed_offsets
    assert resumes_at == {topic: dict.fromkeys(partitions, 0) for topic, partitions in written.items()}

    secrets = config.kafka.security.secrets()
    for command in commands:
        assert not any(secret in " ".join(command) for secret in secrets), "a secret on a command line"
    text = log.read_text()
    assert not any(secret in text for secret in secrets), f"a secret in the log; see {log}"
    assert config.kafka.security.key_password_env is not None
    from stream_pipelines.core.tls_files import java_client_key, open_client_key

    key = open_client_key(config.kafka.security.key_file, secrets[-1], None)
    plain = key.private_bytes(Encoding.DER, PrivateFormat.PKCS8, NoEncryption())
    handed = java_client_key(config.kafka.security.key_file, secrets[-1])
    flat = "".join(text.split())
    for shown in (base64.b64encode(plain).decode()[:48], "".join(handed.splitlines()[1:-1])[:48]):
        assert shown not in flat, "the client's private key in the log"


def refused_settings(secured: SecuredKafka, case: str) -> tuple[list[str], dict[str, str], list[str]]:
    """(overrides, environment, what the message must say) for each way a secured broker refuses."""
    if case == "wrong password":
        return (
            secured.sasl_ssl(),
            secured.environment(password="not-the-password"),
            ["refused the SASL login", "kafka.security.sasl_password_env", "Authentication failed"],
        )
    if case == "unknown CA":
        return (
            [*secured.sasl_ssl(), f"kafka.security.ca_file={secured.pki.foreign_ca}"],
            secured.environment(),
            [
                "does not trust",
                f"kafka.security.ca_file ({secured.pki.foreign_ca})",
                "certificate verify failed",
            ],
        )
    return (
        secured.mutual_tls(secured.pki.foreign_client),
        {},
        ["refused the TLS handshake", "kafka.security.certificate_file", "signed by a CA the broker trusts"],
    )


REFUSALS = ("wrong password", "unknown CA", "untrusted client certificate")


@pytest.mark.parametrize("case", REFUSALS)
def test_a_refused_connection_is_a_configuration_error_named_at_start_up(
    broker, secured_kafka, make_overrides, monkeypatch, tmp_path, capsys, case
):
    from stream_pipelines.driver.lifecycle import run_app as run_driver
    from stream_pipelines.kafka.clients import KafkaAccessRefused
    from stream_pipelines.kafka.topics import require_topics

    settings, environment, said = refused_settings(secured_kafka, case)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    overrides = make_overrides(*settings)
    config = make_overrides_config(overrides)

    # The start-up topic check: raised, not a "did not answer; starting anyway" after its 15 s.
    with pytest.raises(KafkaAccessRefused) as refused:
        require_topics(config, declared_app("raw_archive"), timeout_s=60)
    for words in said:
        assert words in str(refused.value)

    # The page's probe, which Prometheus scrapes (KafkaUnreachable): down, and why.
    assert kafka_up_sample(config) == ("refused", 0)

    # The driver's own preflight: exits BAD_CONFIG, which its supervisor never retries.
    started = time.monotonic()
    argv = [argument for item in overrides for argument in ("--set", item)]
    assert run_driver("raw_archive", argv) == ExitCode.BAD_CONFIG
    assert time.monotonic() - started < 30, "said by the broker, not by a client time-out"
    assert said[0] in capsys.readouterr().err

    # The CLI: the same words, exit 2.
    log = tmp_path / "cli.log"
    assert pipelinectl("topics", overrides=overrides, log=log).returncode == ExitCode.BAD_CONFIG
    assert said[0] in log.read_text()
    assert environment.get("KAFKA_PASSWORD", "\0") not in log.read_text()


def kafka_up_sample(config) -> tuple[str | None, int]:
    """The cause label and the value of pipeline_kafka_up, as the api-server's plugin exports it."""
    from prometheus_client.parser import text_string_to_metric_families

    from stream_pipelines.airflow.plugin import KAFKA_UP_METRIC, kafka_exposition

    exposition = kafka_exposition(config, timeout_s=2)
    [family] = [f for f in text_string_to_metric_families(exposition) if f.name == KAFKA_UP_METRIC]
    [sample] = family.samples
    assert sample.labels["bootstrap_servers"] == config.kafka.bootstrap_servers
    return sample.labels.get("cause"), int(sample.value)


def test_the_pages_kafka_probe_says_whether_kafka_answers(broker, secured_kafka, make_overrides, monkeypatch):
    """Up over the plain listener and over SASL_SSL; no answer from a port nothing listens on."""
    assert kafka_up_sample(broker) == (None, 1)
    for name, value in secured_kafka.environment().items():
        monkeypatch.setenv(name, value)
    assert kafka_up_sample(make_overrides_config(make_overrides(*secured_kafka.sasl_ssl()))) == (None, 1)
    silent = make_overrides_config(make_overrides(f"kafka.bootstrap_servers=127.0.0.1:{free_port()}"))
    started = time.monotonic()
    assert kafka_up_sample(silent) == ("no_answer", 0)
    assert time.monotonic() - started < 10, "the probe keeps within its timeout"


@pytest.mark.slow
@pytest.mark.parametrize("case", ["wrong password", "wrong key password"])
def test_the_supervisor_fails_a_refused_login_at_once_without_retrying(
    broker, secured_kafka, airflow_env, make_overrides, monkeypatch, tmp_path, case
):
    """A broker's refusal (at the start checks) and a client key that does not open (at config load,
    in the task and in its retry policy alike) each fail the supervisor's first try, never retried."""
    from stream_pipelines.control.control_store import ControlStore

    if case == "wrong key password":
        settings = secured_kafka.mutual_tls()
        environment = secured_kafka.environment(key_password="not-the-key-password")
        said = ["does not open with the password in $KAFKA_KEY_PASSWORD"]
    else:
        settings, environment, said = refused_settings(secured_kafka, case)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    overrides = make_overrides(*private_source_topics(), *settings)
    log = tmp_path / "dag_test.log"
    supervisor = start_dag_test({**airflow_env, **environment}, "supervise_raw_archive", overrides, log)
    try:
        supervisor.wait(240)
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
    text = log.read_text()
    assert "DAG RUN STATE failed" in text, text[-3000:]
    assert said[0] in text and "AirflowFailException" in text
    assert "new_state=failed" in text and "new_state=up_for_retry" not in text, "the start was retried"
    # The store's config without the TLS settings (the key password in this environment is wrong).
    store = ControlStore(make_overrides_config([o for o in overrides if not o.startswith("kafka.security.")]))
    assert not store.running_pids("raw_archive"), "a driver was started"


@pytest.mark.parametrize("form", KEY_FORMS)
def test_every_key_form_openssl_writes_works_in_both_client_families(
    spark, broker, secured_kafka, make_overrides, monkeypatch, form
):
    """Over mutual TLS, with the client key in each form: librdkafka (the start checks' metadata) and
    Kafka's Java client (Spark's Kafka source, reading what was written) are both let in."""
    from confluent_kafka import Producer

    from stream_pipelines.driver.runtime import kafka_source_options
    from stream_pipelines.kafka.clients import cluster_metadata

    for name, value in secured_kafka.environment().items():
        monkeypatch.setenv(name, value)
    topic = f"key-{form}-{uuid.uuid4().hex[:6]}"
    create_topic(broker, topic, 1)
    producer = Producer(broker.kafka_client_config())
    for number in range(5):
        producer.produce(topic, value=str(number).encode())
    assert producer.flush(30) == 0

    config = make_overrides_config(
        make_overrides(
            f"kafka.topics.sensors.name={topic}", *secured_kafka.mutual_tls(secured_kafka.pki.clients[form])
        )
    )
    assert topic in cluster_metadata(config, timeout_s=30).topics
    options = kafka_source_options(config, [config.kafka.topics.sensors])
    options.pop("maxOffsetsPerTrigger", None)  # a streaming option
    assert spark.read.format("kafka").options(**options).load().count() == 5
