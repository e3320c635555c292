"""Certificates made on the spot, for the local broker's TLS listeners and the clients that test them.

A private CA signs the broker's certificate (for 127.0.0.1 and localhost) and the clients'; a second,
unrelated CA and an expired client certificate are there to be refused. Keys are EC P-256 in PKCS#8
PEM, the one key format both Kafka's Java client and librdkafka read. Nothing here is for production.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

LOOPBACK_NAMES = ("127.0.0.1", "localhost")


@dataclass(frozen=True)
class Identity:
    """A PEM certificate and its PKCS#8 key, in two files."""

    certificate: Path
    key: Path


@dataclass(frozen=True)
class LoopbackPki:
    """Everything a TLS test needs, under one folder."""

    ca: Path  # the CA that signs the broker and the good clients
    broker: Identity
    broker_keystore: Path  # the broker's key and certificate chain in one PEM file (Kafka's PEM keystore)
    client: Identity
    expired_client: Identity  # signed by the CA, but no longer valid
    foreign_ca: Path  # a CA that signed none of them


def make_test_pki(folder: Path) -> LoopbackPki:
    """Write a CA, a broker identity and client identities under ``folder`` (made if missing)."""
    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.now(UTC)
    ca_key, ca_cert = _authority("pipeline test CA", now)
    foreign_key, foreign_cert = _authority("some other CA", now)
    del foreign_key
    ca = _write(folder / "ca.pem", _pem(ca_cert))
    foreign_ca = _write(folder / "foreign-ca.pem", _pem(foreign_cert))
    broker = _issue(folder, "broker", ca_key, ca_cert, now, now + timedelta(days=2), server=True)
    client = _issue(folder, "client", ca_key, ca_cert, now, now + timedelta(days=2), server=False)
    expired = _issue(
        folder,
        "expired-client",
        ca_key,
        ca_cert,
        now - timedelta(days=3),
        now - timedelta(days=1),
        server=False,
    )
    keystore = _write(
        folder / "broker-keystore.pem",
        broker.key.read_text() + broker.certificate.read_text() + ca.read_text(),
    )
    return LoopbackPki(ca, broker, keystore, client, expired, foreign_ca)


def _authority(name: str, now: datetime) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, certificate


def _issue(
    folder: Path,
    name: str,
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    not_before: datetime,
    not_after: datetime,
    *,
    server: bool,
) -> Identity:
    key = ec.generate_private_key(ec.SECP256R1())
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"pipeline-{name}")]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before - timedelta(minutes=5))
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address(LOOPBACK_NAMES[0])), x509.DNSName(LOOPBACK_NAMES[1])]
            ),
            critical=False,
        )
    certificate = builder.sign(ca_key, hashes.SHA256())
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    key_path = _write(folder / f"{name}.key", key_pem)
    key_path.chmod(0o600)
    return Identity(_write(folder / f"{name}.pem", _pem(certificate)), key_path)


def _pem(certificate: x509.Certificate) -> str:
    return certificate.public_bytes(serialization.Encoding.PEM).decode()


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
