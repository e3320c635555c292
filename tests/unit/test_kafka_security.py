"""Kafka security settings: one typed section, each client family's spelling derived from it, and every
setting one family could not take refused when the config loads, naming the key."""

from __future__ import annotations

import pytest

from stream_pipelines.core.config import ConfigError, load_config
from stream_pipelines.devtools.tls import make_test_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_test_pki(tmp_path_factory.mktemp("tls"))


def sasl_ssl(pki, *extra: str) -> list[str]:
    return [
        "kafka.security.protocol=SASL_SSL",
        "kafka.security.sasl_mechanism=SCRAM-SHA-512",
        "kafka.security.sasl_username=pipeline",
        "kafka.security.sasl_password_env=TEST_KAFKA_PASSWORD",
        f"kafka.security.ca_file={pki.ca}",
        *extra,
    ]


def mutual_tls(pki, *extra: str) -> list[str]:
    return [
        "kafka.security.protocol=SSL",
        f"kafka.security.ca_file={pki.ca}",
        f"kafka.security.certificate_file={pki.client.certificate}",
        f"kafka.security.key_file={pki.client.key}",
        *extra,
    ]


def refusal(overrides: list[str], environ: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        load_config("local", overrides, environ=environ or {})
    return str(caught.value)


def test_plaintext_is_the_local_default_and_adds_nothing_but_the_protocol():
    config = load_config("local", environ={})
    assert config.kafka.security.protocol == "PLAINTEXT"
    assert config.kafka_client_config() == {
        "bootstrap.servers": config.kafka.bootstrap_servers,
        "security.protocol": "PLAINTEXT",
    }


def test_sasl_ssl_is_spelled_for_librdkafka_and_for_the_java_client(pki):
    config = load_config("local", sasl_ssl(pki), environ={"TEST_KAFKA_PASSWORD": 'p"a\\ss'})
    assert config.kafka_client_config() == {
        "bootstrap.servers": config.kafka.bootstrap_servers,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "pipeline",
        "sasl.password": 'p"a\\ss',
        "ssl.endpoint.identification.algorithm": "https",
        "ssl.ca.location": str(pki.ca),
    }
    java = config.kafka.java_client_properties()
    assert java["sasl.jaas.config"] == (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="pipeline" password="p\\"a\\\\ss";'
    )
    assert java["ssl.truststore.type"] == "PEM"
    assert java["ssl.truststore.certificates"] == pki.ca.read_text()
    assert "ssl.truststore.location" not in java  # by content: no executor needs the file


def test_mutual_tls_hands_the_java_client_the_certificate_and_key_by_content(pki):
    config = load_config("local", mutual_tls(pki), environ={})
    librdkafka = config.kafka_client_config()
    assert librdkafka["ssl.certificate.location"] == str(pki.client.certificate)
    assert librdkafka["ssl.key.location"] == str(pki.client.key)
    java = config.kafka.java_client_properties()
    assert java["ssl.keystore.type"] == "PEM"
    assert java["ssl.keystore.certificate.chain"] == pki.client.certificate.read_text()
    assert java["ssl.keystore.key"] == pki.client.key.read_text()


def test_spark_source_and_sink_get_the_java_spelling_with_their_prefix(pki):
    from stream_pipelines.driver.runtime import kafka_sink_options, kafka_source_options

    config = load_config("local", sasl_ssl(pki), environ={"TEST_KAFKA_PASSWORD": "x"})
    for options in (
        kafka_source_options(config, config.kafka.topics.inputs()),
        kafka_sink_options(config, config.kafka.topics.sliding_averages),
    ):
        assert options["kafka.security.protocol"] == "SASL_SSL"
        assert options["kafka.sasl.jaas.config"].endswith('password="x";')
        assert "kafka.sasl.password" not in options


@pytest.mark.parametrize(
    ("key", "instead"),
    [
        ("sasl.jaas.config", "kafka.security.sasl_username and sasl_password_env"),
        ("ssl.truststore.location", "kafka.security.ca_file"),
        ("security.protocol", "kafka.security.protocol"),
        ("ssl.cipher.suites", "kafka.security"),
    ],
)
def test_a_security_property_among_the_client_properties_is_refused_naming_it(key, instead):
    message = refusal([f"kafka.client_properties.{key}=x"])
    assert f"kafka.client_properties: client_properties.{key}: a connection or security setting" in message
    assert f"set {instead}" in message


def test_a_password_written_in_the_config_is_refused():
    message = refusal(["kafka.security.sasl_password=hunter2"])
    assert "sasl_password: a secret is never written in the config" in message
    assert "sasl_password_env" in message


def test_a_missing_password_variable_is_named(pki):
    assert "environment variable TEST_KAFKA_PASSWORD is not set" in refusal(sasl_ssl(pki))


def test_sasl_settings_under_a_protocol_without_sasl_are_refused_not_dropped(pki):
    message = refusal([*mutual_tls(pki), "kafka.security.sasl_username=pipeline"])
    assert "sasl_username is set, but protocol SSL does not use SASL" in message


def test_tls_settings_under_plaintext_are_refused_not_dropped(pki):
    message = refusal([f"kafka.security.ca_file={pki.ca}"])
    assert "ca_file is set, but protocol PLAINTEXT does not use TLS" in message


def test_sasl_without_its_settings_names_what_is_missing():
    message = refusal(["kafka.security.protocol=SASL_SSL"])
    assert "protocol SASL_SSL needs sasl_mechanism, sasl_username, sasl_password_env" in message


def test_a_certificate_without_its_key_is_refused(pki):
    message = refusal(
        ["kafka.security.protocol=SSL", f"kafka.security.certificate_file={pki.client.certificate}"]
    )
    assert "certificate_file and key_file go together" in message


def test_a_missing_or_non_pem_file_is_named(pki, tmp_path):
    assert f"ca_file: file not found: {tmp_path}/nope.pem" in refusal(
        ["kafka.security.protocol=SSL", f"kafka.security.ca_file={tmp_path}/nope.pem"]
    )
    der = tmp_path / "ca.der"
    der.write_bytes(b"0\x82\x01")
    assert "is not a PEM file" in refusal(["kafka.security.protocol=SSL", f"kafka.security.ca_file={der}"])


def test_a_key_the_java_client_cannot_read_is_refused_with_the_conversion(pki, tmp_path):
    pkcs1 = tmp_path / "client-rsa.key"
    pkcs1.write_text("-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n")
    message = refusal(
        [
            "kafka.security.protocol=SSL",
            f"kafka.security.certificate_file={pki.client.certificate}",
            f"kafka.security.key_file={pkcs1}",
        ]
    )
    assert "is not a PKCS#8 key" in message and "openssl pkcs8 -topk8" in message


def test_secrets_never_show_in_the_configs_text(pki):
    config = load_config("local", sasl_ssl(pki), environ={"TEST_KAFKA_PASSWORD": "hunter2-secret"})
    assert config.kafka.security.secrets() == ["hunter2-secret"]
    assert "hunter2-secret" not in repr(config)
    assert "hunter2-secret" not in config.model_dump_json()
