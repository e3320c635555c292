"""How every client of the project authenticates to Kafka and encrypts its traffic: one set of settings.

Two client families talk to the cluster and spell the same settings differently:

- Spark's Kafka source and sink are Kafka's Java client: a JAAS line for SASL, key and trust stores;
- the project's own clients (the start-up topic check, the watchdog's offset reads, a checkpoint
  reset, ``pipelinectl produce`` and ``topics``) are librdkafka (confluent-kafka): ``sasl.username`` and
  ``sasl.password``, PEM files.

``KafkaSecurity`` holds the settings once, typed, and derives each family's properties from them
(``java_properties``, ``librdkafka_properties``). Secrets never enter the config file: the config names
the environment variables that hold them, and they are read when the config loads. Certificates and
keys are PEM files, opened and checked when the config loads (``tls_files``); the Java client is handed
their contents (``ssl.*.certificates``/``ssl.keystore.key``, which it treats as passwords and never logs),
the key converted to a form it reads, so Spark's executors need no copy of the files.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, PrivateAttr, SecretStr, ValidationInfo, model_validator

from stream_pipelines.core import tls_files

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]

# The Java client's properties that carry a secret or key material. Spark prints a source's options in
# its plans (explain, the UI's SQL tab) unless they match spark.sql.redaction.options.regex, whose
# default is only "(?i)url".
SECRET_OPTIONS_PATTERN = (
    r"(?i)url|jaas|password|ssl\.keystore\.key|ssl\.keystore\.certificate|ssl\.truststore\.certificates"
)

# Where the settings are documented; errors point there.
DOC = "docs/clusters.md#kafka-authentication-and-encryption"

_JAAS_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}

# Client properties that are security settings: each family spells them its own way, so they are
# refused in ``kafka.client_properties`` (which both families receive verbatim) and named in kafka.security.
_TYPED_INSTEAD = {
    "bootstrap.servers": "kafka.bootstrap_servers",
    "security.protocol": "kafka.security.protocol",
    "sasl.mechanism": "kafka.security.sasl_mechanism",
    "sasl.mechanisms": "kafka.security.sasl_mechanism",
    "sasl.jaas.config": "kafka.security.sasl_username and sasl_password_env",
    "sasl.username": "kafka.security.sasl_username",
    "sasl.password": "kafka.security.sasl_password_env",
    "ssl.truststore.location": "kafka.security.ca_file (a PEM file)",
    "ssl.truststore.password": "kafka.security.ca_file (a PEM file needs no password)",
    "ssl.ca.location": "kafka.security.ca_file",
    "ssl.keystore.location": "kafka.security.certificate_file and key_file (PEM files)",
    "ssl.keystore.password": "kafka.security.key_password_env",
    "ssl.key.password": "kafka.security.key_password_env",
    "ssl.certificate.location": "kafka.security.certificate_file",
    "ssl.key.location": "kafka.security.key_file",
    "ssl.endpoint.identification.algorithm": "kafka.security.verify_hostname",
}
_SECURITY_PREFIXES = ("security.", "sasl.", "ssl.")
_SECRET_KEYS = {
    "password": "sasl_password_env",
    "sasl_password": "sasl_password_env",
    "key_password": "key_password_env",
}


def refuse_security_properties(properties: Mapping[str, str]) -> None:
    """Raise ValueError naming the first client property that belongs in ``kafka.security``."""
    for name in properties:
        if name in _TYPED_INSTEAD or name.startswith(_SECURITY_PREFIXES):
            instead = _TYPED_INSTEAD.get(name, "kafka.security")
            raise ValueError(
                f"client_properties.{name}: a connection or security setting, which the Java client (Spark) "
                f"and librdkafka (the project's own clients) spell differently; set {instead} instead, "
                f"and each client's spelling is derived from it (see {DOC})"
            )


class KafkaSecurity(BaseModel):
    """Authentication and encryption for every Kafka client of the project."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    protocol: SecurityProtocol = "PLAINTEXT"
    # SASL (protocol SASL_SSL or SASL_PLAINTEXT): the mechanism, the user, and the NAME of the
    # environment variable that holds the password.
    sasl_mechanism: SaslMechanism | None = None
    sasl_username: str | None = None
    sasl_password_env: str | None = None
    # TLS (protocol SSL or SASL_SSL), PEM files on the hosts that start drivers and run Airflow tasks:
    # the CAs that sign the brokers' certificates (unset: the system's and the JVM's defaults), and for
    # mutual TLS the client's certificate (chain) and its private key in any form openssl writes
    # (tls_files.py), with the NAME of the variable holding the key's password if it is encrypted.
    ca_file: str | None = None
    certificate_file: str | None = None
    key_file: str | None = None
    key_password_env: str | None = None
    # Check that a broker's certificate names the host it was reached at (both clients' default).
    verify_hostname: bool = True

    _sasl_password: SecretStr | None = PrivateAttr(default=None)
    _key_password: SecretStr | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _no_secret_values(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            for key, instead in _SECRET_KEYS.items():
                if key in data:
                    raise ValueError(
                        f"{key}: a secret is never written in the config; put it in an environment "
                        f"variable and name the variable with {instead}"
                    )
        return data

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def mutual_tls(self) -> bool:
        return self.certificate_file is not None

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> KafkaSecurity:
        environ = (info.context or {}).get("environ", os.environ)
        sasl = {
            "sasl_mechanism": self.sasl_mechanism,
            "sasl_username": self.sasl_username,
            "sasl_password_env": self.sasl_password_env,
        }
        if self.uses_sasl:
            missing = [name for name, value in sasl.items() if not value]
            if missing:
                raise ValueError(f"protocol {self.protocol} needs {', '.join(missing)} (see {DOC})")
            self._sasl_password = SecretStr(
                _from_environment(environ, "sasl_password_env", self.sasl_password_env)
            )
        else:
            _refuse_unused(sasl, f"protocol {self.protocol} does not use SASL")
        tls = {
            "ca_file": self.ca_file,
            "certificate_file": self.certificate_file,
            "key_file": self.key_file,
            "key_password_env": self.key_password_env,
            "verify_hostname": None if self.verify_hostname else False,
        }
        if not self.uses_tls:
            _refuse_unused(tls, f"protocol {self.protocol} does not use TLS")
            return self
        if (self.certificate_file is None) != (self.key_file is None):
            raise ValueError("certificate_file and key_file go together: mutual TLS needs both")
        if self.key_password_env is not None and self.key_file is None:
            raise ValueError("key_password_env is set, but there is no key_file")
        for name in ("ca_file", "certificate_file", "key_file"):
            _readable_pem(name, getattr(self, name))
        if self.key_password_env is not None:
            self._key_password = SecretStr(
                _from_environment(environ, "key_password_env", self.key_password_env)
            )
        # Every file is opened now, so that one that cannot be is a configuration error at start-up,
        # before any client or JVM: never a driver that fails its first connection and is restarted.
        if self.ca_file is not None:
            tls_files.check_ca_file(self.ca_file)
        if self.certificate_file is not None and self.key_file is not None:
            tls_files.check_client_identity(
                self.certificate_file, self.key_file, self._key_password_value(), self.key_password_env
            )
        return self

    def _key_password_value(self) -> str | None:
        return None if self._key_password is None else self._key_password.get_secret_value()

    # ------------------------------------------------------------------ each family's spelling

    def librdkafka_properties(self) -> dict[str, str]:
        """The settings as librdkafka (confluent-kafka) takes them."""
        properties = {"security.protocol": self.protocol}
        if self.uses_sasl:
            assert self._sasl_password is not None
            properties |= {
                "sasl.mechanism": str(self.sasl_mechanism),
                "sasl.username": str(self.sasl_username),
                "sasl.password": self._sasl_password.get_secret_value(),
            }
        if self.uses_tls:
            properties["ssl.endpoint.identification.algorithm"] = "https" if self.verify_hostname else "none"
            if self.ca_file:
                properties["ssl.ca.location"] = self.ca_file
            if self.certificate_file and self.key_file:
                properties["ssl.certificate.location"] = self.certificate_file
                properties["ssl.key.location"] = self.key_file
            if self._key_password is not None:
                properties["ssl.key.password"] = self._key_password.get_secret_value()
        return properties

    def java_properties(self) -> dict[str, str]:
        """The settings as Kafka's Java client (Spark's source and sink, without their ``kafka.`` prefix)
        takes them; certificates and keys by content, so no executor needs the files."""
        properties = {"security.protocol": self.protocol}
        if self.uses_sasl:
            assert self._sasl_password is not None
            properties |= {
                "sasl.mechanism": str(self.sasl_mechanism),
                "sasl.jaas.config": (
                    f"{_JAAS_MODULES[str(self.sasl_mechanism)]} required "
                    f'username="{_jaas_quoted(str(self.sasl_username))}" '
                    f'password="{_jaas_quoted(self._sasl_password.get_secret_value())}";'
                ),
            }
        if self.uses_tls:
            # An empty algorithm is the Java client's way of saying "no host name check".
            properties["ssl.endpoint.identification.algorithm"] = "https" if self.verify_hostname else ""
            if self.ca_file:
                properties |= {
                    "ssl.truststore.type": "PEM",
                    "ssl.truststore.certificates": Path(self.ca_file).read_text(),
                }
            if self.certificate_file and self.key_file:
                properties |= {
                    "ssl.keystore.type": "PEM",
                    "ssl.keystore.certificate.chain": Path(self.certificate_file).read_text(),
                    # PKCS#8 in a scheme the Java client decrypts, whatever form the file has.
                    "ssl.keystore.key": tls_files.java_client_key(self.key_file, self._key_password_value()),
                }
            if self._key_password is not None:
                properties["ssl.key.password"] = self._key_password.get_secret_value()
        return properties

    def secrets(self) -> list[str]:
        """The secret values these settings hold (what a log or a command line must never show)."""
        return [
            secret.get_secret_value()
            for secret in (self._sasl_password, self._key_password)
            if secret is not None and secret.get_secret_value()
        ]

    def certificate_expiry(self) -> datetime | None:
        """When the client certificate stops being valid (None without mutual TLS)."""
        if self.certificate_file is None:
            return None
        from cryptography import x509

        certificate = x509.load_pem_x509_certificate(Path(self.certificate_file).read_bytes())
        return certificate.not_valid_after_utc


def _from_environment(environ: Mapping[str, str], key: str, variable: str | None) -> str:
    if variable is None or variable not in environ:
        raise ValueError(f"{key}: environment variable {variable} is not set")
    return environ[variable]


def _refuse_unused(settings: Mapping[str, object], why: str) -> None:
    """A setting that the protocol would ignore is refused, not dropped: it says the config is not what
    its author meant."""
    for name, value in settings.items():
        if value is not None:
            raise ValueError(f"{name} is set, but {why}: set protocol, or remove {name} (see {DOC})")


def _readable_pem(key: str, location: str | None) -> None:
    if location is None:
        return
    path = Path(location)
    if not path.is_file():
        raise ValueError(f"{key}: file not found: {location}")
    try:
        content = path.read_bytes()
    except OSError as error:
        raise ValueError(f"{key}: cannot read {location}: {error}") from None
    if b"-----BEGIN " not in content:
        raise ValueError(f"{key}: {location} is not a PEM file (no -----BEGIN line); convert it to PEM")


def _jaas_quoted(value: str) -> str:
    """A value inside a JAAS double-quoted string (Kafka's parser takes backslash escapes)."""
    return value.replace("\\", "\\\\").replace('"', '\\"')


def expired(moment: datetime | None) -> bool:
    return moment is not None and moment <= datetime.now(UTC)
