"""Kafka security settings: one typed section, each client family's spelling derived from it, and every
setting one family could not take refused when the config loads, naming the key."""

from __future__ import annotations

import os
import subprocess

import pytest

from stream_pipelines.core.config import ConfigError, load_config
from stream_pipelines.devtools.tls import KEY_FORMS, make_test_pki


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


KEY_PASSWORD_VARIABLE = "TEST_KAFKA_KEY_PASSWORD"


def mutual_tls(pki, *extra: str, identity=None) -> list[str]:
    identity = identity or pki.clients["pkcs8-rsa"]
    password = [f"kafka.security.key_password_env={KEY_PASSWORD_VARIABLE}"] if identity.key_password else []
    return [
        "kafka.security.protocol=SSL",
        f"kafka.security.ca_file={pki.ca}",
        f"kafka.security.certificate_file={identity.certificate}",
        f"kafka.security.key_file={identity.key}",
        *password,
        *extra,
    ]


def key_environment(identity) -> dict[str, str]:
    return {KEY_PASSWORD_VARIABLE: identity.key_password} if identity.key_password else {}


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
    plain = pki.clients["pkcs8-rsa"]
    config = load_config("local", mutual_tls(pki, identity=plain), environ={})
    librdkafka = config.kafka_client_config()
    assert librdkafka["ssl.certificate.location"] == str(plain.certificate)
    assert librdkafka["ssl.key.location"] == str(plain.key)
    assert "ssl.key.password" not in librdkafka
    java = config.kafka.java_client_properties()
    assert java["ssl.keystore.type"] == "PEM"
    assert java["ssl.keystore.certificate.chain"] == plain.certificate.read_text()
    assert java["ssl.keystore.key"].startswith("-----BEGIN PRIVATE KEY-----")
    assert "ssl.key.password" not in java


@pytest.mark.parametrize("form", KEY_FORMS)
def test_every_key_form_openssl_writes_reaches_the_java_client_as_pkcs8_it_decrypts(pki, tmp_path, form):
    """librdkafka (OpenSSL) reads the file as it is; the Java client gets PKCS#8, and an encrypted key
    stays encrypted, under PBES1 with the same password: openssl itself decrypts it to the file's key."""
    identity = pki.clients[form]
    environ = key_environment(identity)
    config = load_config("local", mutual_tls(pki, identity=identity), environ=environ)
    librdkafka = config.kafka_client_config()
    assert librdkafka["ssl.key.location"] == str(identity.key)
    assert librdkafka.get("ssl.key.password") == identity.key_password
    java = config.kafka.java_client_properties()
    assert java.get("ssl.key.password") == identity.key_password
    handed = tmp_path / "java.key"
    handed.write_text(java["ssl.keystore.key"])
    if identity.key_password is None:
        assert java["ssl.keystore.key"].startswith("-----BEGIN PRIVATE KEY-----")
        decrypt = []
    else:
        assert java["ssl.keystore.key"].startswith("-----BEGIN ENCRYPTED PRIVATE KEY-----")
        scheme = subprocess.run(
            ["openssl", "asn1parse", "-in", str(handed)], capture_output=True, text=True, check=True
        ).stdout
        assert "pbeWithSHA1And3-KeyTripleDES-CBC" in scheme
        decrypt = ["-passin", f"env:{KEY_PASSWORD_VARIABLE}"]
    opened = subprocess.run(
        ["openssl", "pkey", "-in", str(handed), *decrypt, "-pubout"],
        capture_output=True,
        text=True,
        env={**os.environ, **environ},
    )
    assert opened.returncode == 0, opened.stderr
    original = subprocess.run(
        ["openssl", "pkey", "-in", str(identity.key), *decrypt, "-pubout"],
        capture_output=True,
        text=True,
        env={**os.environ, **environ},
        check=True,
    )
    assert opened.stdout == original.stdout
    # Nothing decrypted is handed over: the plaintext PKCS#8 body appears nowhere in the properties.
    if identity.key_password is not None:
        plain = subprocess.run(
            ["openssl", "pkcs8", "-topk8", "-nocrypt", "-in", str(identity.key), *decrypt],
            capture_output=True,
            text=True,
            env={**os.environ, **environ},
            check=True,
        ).stdout
        body = "".join(plain.splitlines()[1:-1])
        assert body[:40] not in "".join("".join(java.values()).split())


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


def test_an_encrypted_key_without_its_password_names_the_setting(pki):
    identity = pki.clients["pkcs8-ec-pbes2"]
    overrides = [line for line in mutual_tls(pki, identity=identity) if "key_password_env" not in line]
    message = refusal(overrides)
    assert f"key_file: {identity.key} is encrypted" in message and "key_password_env" in message


def test_a_password_for_a_plain_key_is_refused_not_dropped(pki):
    overrides = [*mutual_tls(pki), f"kafka.security.key_password_env={KEY_PASSWORD_VARIABLE}"]
    message = refusal(overrides, {KEY_PASSWORD_VARIABLE: "x"})
    assert "key_password_env is set, but key_file" in message and "is not encrypted" in message


@pytest.mark.parametrize("form", [form for form, (encrypted, _) in KEY_FORMS.items() if encrypted])
def test_a_wrong_key_password_is_refused_naming_the_variable(pki, form):
    identity = pki.clients[form]
    message = refusal(mutual_tls(pki, identity=identity), {KEY_PASSWORD_VARIABLE: "not-the-password"})
    assert f"key_file: {identity.key} does not open with the password in ${KEY_PASSWORD_VARIABLE}" in message
    assert "not-the-password" not in message


def test_a_key_that_is_not_the_certificates_is_refused_naming_both(pki):
    certificate = pki.clients["pkcs8-rsa"].certificate
    key = pki.clients["sec1-ec"].key
    message = refusal(
        [
            "kafka.security.protocol=SSL",
            f"kafka.security.certificate_file={certificate}",
            f"kafka.security.key_file={key}",
        ]
    )
    assert f"key_file: {key} is not the key of certificate_file {certificate}" in message


def test_a_certificate_of_another_key_type_than_its_key_is_a_mismatch_not_a_crash(pki, tmp_path):
    """An Ed25519 certificate beside an RSA key: the keys are compared, whatever their types."""
    ed_key, ed_certificate = tmp_path / "ed.key", tmp_path / "ed.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ed25519", "-nodes", "-keyout", str(ed_key), "-out",
         str(ed_certificate), "-days", "1", "-subj", "/CN=ed25519-client"],
        capture_output=True, check=True,
    )  # fmt: skip
    key = pki.clients["pkcs8-rsa"].key
    message = refusal(
        [
            "kafka.security.protocol=SSL",
            f"kafka.security.certificate_file={ed_certificate}",
            f"kafka.security.key_file={key}",
        ]
    )
    assert f"key_file: {key} is not the key of certificate_file {ed_certificate}" in message


def test_an_expired_client_certificate_is_refused_with_its_date(pki):
    message = refusal(mutual_tls(pki, identity=pki.expired_client))
    assert f"certificate_file: {pki.expired_client.certificate}" in message and "expired on" in message


def test_a_ca_file_that_holds_no_ca_is_refused(pki, tmp_path):
    """The broker's own certificate, given where its CA belongs, anchors nothing for librdkafka."""
    leaf = pki.broker.certificate.read_text().split("-----END CERTIFICATE-----")[0]
    only_leaf = tmp_path / "broker-leaf.pem"
    only_leaf.write_text(f"{leaf}-----END CERTIFICATE-----\n")
    message = refusal(["kafka.security.protocol=SSL", f"kafka.security.ca_file={only_leaf}"])
    assert f"ca_file: {only_leaf} holds no CA certificate, only CN=pipeline-broker" in message
    # The chain (leaf, then the intermediate CA) does hold a CA.
    load_config("local", ["kafka.security.protocol=SSL", f"kafka.security.ca_file={pki.broker.certificate}"])


def test_a_key_that_fails_to_load_in_librdkafka_is_a_refusal_naming_the_setting(pki, tmp_path):
    """A key replaced after the config loaded (a bad rotation under a running watchdog): librdkafka
    refuses it when the client is made, which is a configuration error, not a cluster that is down."""
    from stream_pipelines.kafka.clients import KafkaAccessRefused, check_access

    key = tmp_path / "client.key"
    key.write_bytes(pki.clients["pkcs8-rsa"].key.read_bytes())
    overrides = [
        "kafka.bootstrap_servers=127.0.0.1:1",
        "kafka.security.protocol=SSL",
        f"kafka.security.ca_file={pki.ca}",
        f"kafka.security.certificate_file={pki.clients['pkcs8-rsa'].certificate}",
        f"kafka.security.key_file={key}",
    ]
    config = load_config("local", overrides, environ={})
    key.write_bytes(pki.clients["pkcs1-rsa"].key.read_bytes())
    with pytest.raises(KafkaAccessRefused) as refused:
        check_access(config, timeout_s=5)
    assert "kafka.security.key_file" in str(refused.value) and str(key) in str(refused.value)


def test_secrets_never_show_in_the_configs_text(pki):
    config = load_config("local", sasl_ssl(pki), environ={"TEST_KAFKA_PASSWORD": "hunter2-secret"})
    assert config.kafka.security.secrets() == ["hunter2-secret"]
    assert "hunter2-secret" not in repr(config)
    assert "hunter2-secret" not in config.model_dump_json()


def unusable_tls_files(pki, tmp_path, case: str) -> tuple[list[str], dict[str, str], str]:
    """(overrides, environment, what the refusal says) for each TLS file that cannot be opened."""
    encrypted = pki.clients["pkcs8-ec-pbes2"]
    if case == "wrong key password":
        return (
            mutual_tls(pki, identity=encrypted),
            {KEY_PASSWORD_VARIABLE: "not-the-password"},
            f"key_file: {encrypted.key} does not open with the password in ${KEY_PASSWORD_VARIABLE}",
        )
    if case == "key of another certificate":
        plain = pki.clients["pkcs8-rsa"]
        overrides = [
            *mutual_tls(pki, identity=plain)[:3],
            f"kafka.security.key_file={pki.clients['sec1-ec'].key}",
        ]
        return overrides, {}, f"is not the key of certificate_file {plain.certificate}"
    if case == "expired certificate":
        return mutual_tls(pki, identity=pki.expired_client), {}, "expired on"
    leaf = tmp_path / "leaf.pem"
    leaf.write_text(
        pki.broker.certificate.read_text().split("-----END CERTIFICATE-----")[0]
        + "-----END CERTIFICATE-----\n"
    )
    return (
        ["kafka.security.protocol=SSL", f"kafka.security.ca_file={leaf}"],
        {},
        f"ca_file: {leaf} holds no CA",
    )


UNUSABLE = ("wrong key password", "key of another certificate", "expired certificate", "CA file without a CA")
COMMANDS = {
    "topics": ["topics"],
    "produce": ["produce", "--duration=5"],
    "run": ["run", "raw_archive"],
    "checkpoint reset": ["checkpoint", "reset", "raw_archive", "--from=committed", "--confirm=raw_archive"],
}


@pytest.mark.parametrize("case", UNUSABLE)
def test_a_tls_file_that_cannot_be_opened_stops_every_command_at_config_load(
    pki, tmp_path, monkeypatch, capsys, case
):
    """Exit 2 naming the setting, before any client, broker contact or JVM: the CLI's commands and a
    driver started by hand alike (the supervisor's case is in tests/test_secured_kafka.py)."""
    from stream_pipelines.cli import main
    from stream_pipelines.driver.lifecycle import run_app

    overrides, environment, said = unusable_tls_files(pki, tmp_path, case)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    data_root = tmp_path / "data"
    overrides = [*overrides, f"paths.data_root={data_root}", "kafka.bootstrap_servers=127.0.0.1:1"]
    argv = [argument for item in overrides for argument in ("--set", item)]
    for command, words in COMMANDS.items():
        assert main([*words, *argv]) == 2, command
        err = capsys.readouterr().err
        assert said in err and "kafka.security" in err, f"{command}: {err}"
    assert run_app("raw_archive", argv) == 2
    assert said in capsys.readouterr().err
    assert not data_root.exists(), "a command went past its config: it wrote under the data root"
