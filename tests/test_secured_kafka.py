"""The project against a broker that demands authentication and encryption: the session broker's
SASL_SSL listener (SCRAM-SHA-512, with conf/cluster.yaml's kafka.security as it stands) and its mutual
TLS listener, with certificates made for this session.

Every client of the project runs over both: the start-up topic check and `pipelinectl topics`,
`pipelinectl produce`, the apps' Spark source and sink (raw_archive, sensor_aggregation), the watchdog's
offset reads, and a checkpoint reset from a time. A refused login, an unknown CA or an expired client
certificate is a configuration error, said at start-up with the setting and the broker's words, and
never retried; the password never shows on a command line or in a log.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from stream_pipelines.core.exit_codes import ExitCode
from tests.conftest import (
    SecuredKafka,
    make_overrides_config,
    private_source_topics,
    run_app,
    start_dag_test,
)

pytestmark = [pytest.mark.broker]

PROTOCOLS = ("sasl_ssl", "mutual_tls")


def secured_overrides(secured: SecuredKafka, protocol: str) -> list[str]:
    return secured.sasl_ssl() if protocol == "sasl_ssl" else secured.mutual_tls()


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
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_every_client_runs_over_the_secured_listener(
    spark, broker, secured_kafka, make_overrides, monkeypatch, tmp_path, protocol
):
    for name, value in secured_kafka.environment().items():
        monkeypatch.setenv(name, value)
    overrides = make_overrides(
        *private_source_topics(),
        f"kafka.topics.sliding_averages.name=sliding-{uuid.uuid4().hex[:8]}",
        # Several batches, so that the watermark moves on and closes the first windows.
        "kafka.max_offsets_per_trigger=300",
        *secured_overrides(secured_kafka, protocol),
    )
    config = make_overrides_config(overrides)
    assert config.kafka.security.protocol == ("SASL_SSL" if protocol == "sasl_ssl" else "SSL")
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
    with log.open("ab") as output:
        for app in ("raw_archive", "sensor_aggregation"):
            driver = run_app(app, "available-now", overrides, stdout=output, stderr=subprocess.STDOUT)
            commands.append(driver.args)
            assert driver.wait(600) == 0, f"{app} failed over {protocol}; see {log}"
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

    resumes_at = preflight(config, "raw_archive").query("archive").committed_offsets
    assert resumes_at == {topic: dict.fromkeys(partitions, 0) for topic, partitions in written.items()}

    secrets = config.kafka.security.secrets()
    for command in commands:
        assert not any(secret in " ".join(command) for secret in secrets), "a secret on a command line"
    text = log.read_text()
    assert not any(secret in text for secret in secrets), f"a secret in the log; see {log}"
    if protocol == "mutual_tls":
        key = Path(config.kafka.security.key_file).read_text()
        body = "".join(key.splitlines()[1:-1])
        assert body not in "".join(text.splitlines()), "the client's private key in the log"


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
        secured.mutual_tls(secured.pki.expired_client),
        {},
        ["refused the TLS handshake", "kafka.security.certificate_file", "expired on", "alert"],
    )


REFUSALS = ("wrong password", "unknown CA", "expired certificate")


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
        require_topics(config, "raw_archive", timeout_s=60)
    for words in said:
        assert words in str(refused.value)

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


@pytest.mark.slow
def test_the_supervisor_fails_a_refused_login_at_once_without_retrying(
    broker, secured_kafka, airflow_env, make_overrides, monkeypatch, tmp_path
):
    from stream_pipelines.control.control_store import ControlStore

    settings, environment, said = refused_settings(secured_kafka, "wrong password")
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
    store = ControlStore(make_overrides_config(overrides))
    assert not store.running_pids("raw_archive"), "a driver was started"
