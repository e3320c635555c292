"""Certificates made on the spot with the ``openssl`` command line, as an operator makes them, for the
local broker's TLS listeners and the clients that test them.

A root CA signs an intermediate CA, and the intermediate signs the broker's certificate (for 127.0.0.1
and localhost) and the clients'; the broker serves its chain, the clients trust the root only and send
their chain (leaf, then intermediate). There is one client identity for each form in which openssl writes
a key (``KEY_FORMS``): PKCS#8, PKCS#1 and SEC1, plain and encrypted, RSA and EC. A second, unrelated
CA and an expired client certificate are there to be refused. Nothing here is for production.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

LOOPBACK_NAMES = ("127.0.0.1", "localhost")
# The password of every encrypted client key: characters a shell, a JAAS line or a properties file
# would each mangle, so that a client which passes it on unquoted fails the tests.
KEY_PASSWORD = "k3y 'pass\" \\$;="
_PASSWORD_VARIABLE = "PIPELINE_TEST_KEY_PASSWORD"

_EC = ["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"]
_RSA = ["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"]
_OUT_PASSWORD = ["-passout", f"env:{_PASSWORD_VARIABLE}"]

# Each form openssl writes a private key in, by default or by a common flag: name -> (encrypted,
# the commands that write it to {out}, from a plain PKCS#8 key in {plain} where they convert one).
KEY_FORMS: dict[str, tuple[bool, list[list[str]]]] = {
    # openssl 1.1 and 3: genpkey and req -nodes write plain PKCS#8.
    "pkcs8-rsa": (False, [["genpkey", *_RSA, "-out", "{out}"]]),
    # openssl 3's `pkcs8 -topk8` (and 1.1.1's): PBES2, AES-256-CBC, HMAC-SHA256.
    "pkcs8-ec-pbes2": (
        True,
        [
            ["genpkey", *_EC, "-out", "{plain}"],
            ["pkcs8", "-topk8", "-in", "{plain}", *_OUT_PASSWORD, "-out", "{out}"],
        ],
    ),
    # genpkey with a cipher (and `req -newkey` without -nodes): PBES2 as well.
    "pkcs8-rsa-pbes2": (
        True,
        [["genpkey", *_RSA, "-aes-256-cbc", "-pass", f"env:{_PASSWORD_VARIABLE}", "-out", "{out}"]],
    ),
    # `pkcs8 -topk8 -v1 PBE-SHA1-3DES`: the PBES1 scheme Kafka's Java client reads as it is.
    "pkcs8-ec-pbes1": (
        True,
        [
            ["genpkey", *_EC, "-out", "{plain}"],
            ["pkcs8", "-topk8", "-v1", "PBE-SHA1-3DES", "-in", "{plain}", *_OUT_PASSWORD, "-out", "{out}"],
        ],
    ),
    # openssl 1.1's genrsa (3's with -traditional): PKCS#1.
    "pkcs1-rsa": (False, [["genrsa", "-traditional", "-out", "{out}", "2048"]]),
    # openssl 1.1's `genrsa -aes256`: PKCS#1 with a Proc-Type/DEK-Info header.
    "pkcs1-rsa-aes": (True, [["genrsa", "-traditional", "-aes256", *_OUT_PASSWORD, "-out", "{out}", "2048"]]),
    # `ecparam -genkey`: SEC1, after an EC PARAMETERS block.
    "sec1-ec": (False, [["ecparam", "-genkey", "-name", "prime256v1", "-out", "{out}"]]),
    # `ec -aes256`: SEC1 with a Proc-Type/DEK-Info header.
    "sec1-ec-aes": (
        True,
        [
            ["ecparam", "-genkey", "-name", "prime256v1", "-out", "{plain}"],
            ["ec", "-in", "{plain}", "-aes256", *_OUT_PASSWORD, "-out", "{out}"],
        ],
    ),
}


@dataclass(frozen=True)
class Identity:
    """A PEM certificate chain (leaf first) and its private key, in two files; the key's password if it
    is encrypted."""

    certificate: Path
    key: Path
    key_password: str | None = None


@dataclass(frozen=True)
class LoopbackPki:
    """Everything a TLS test needs, under one folder."""

    ca: Path  # the root CA: what the clients and the broker trust
    broker: Identity
    broker_keystore: Path  # the broker's key and certificate chain in one PEM file (Kafka's PEM keystore)
    clients: Mapping[str, Identity]  # one per KEY_FORMS entry, each signed by the intermediate
    expired_client: Identity  # signed by the intermediate, but no longer valid
    foreign_ca: Path  # a CA that signed none of the broker's
    foreign_client: Identity  # valid, but signed by the foreign CA, which the broker does not trust

    @property
    def client(self) -> Identity:
        """The client a new operator most likely has: a key encrypted by openssl 3's default."""
        return self.clients["pkcs8-ec-pbes2"]


def make_test_pki(folder: Path) -> LoopbackPki:
    """Write a root and an intermediate CA, a broker identity and client identities under ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    openssl = _Openssl(folder)
    ca = openssl.authority("root", "pipeline test root CA")
    foreign_ca = openssl.authority("foreign", "some other CA")
    intermediate = openssl.intermediate(ca)
    broker = openssl.leaf("broker", intermediate, server=True)
    keystore = folder / "broker-keystore.pem"
    keystore.write_text(broker.key.read_text() + broker.certificate.read_text())
    clients = {form: openssl.leaf(f"client-{form}", intermediate, form=form) for form in KEY_FORMS}
    expired = _expired_client(folder, intermediate)
    foreign_client = openssl.leaf("foreign-client", foreign_ca, form="sec1-ec")
    return LoopbackPki(
        ca.certificate, broker, keystore, clients, expired, foreign_ca.certificate, foreign_client
    )


class _Openssl:
    """The openssl command line in one folder; an encrypted key's password reaches it through the
    environment, never its arguments."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.environment = {**os.environ, _PASSWORD_VARIABLE: KEY_PASSWORD}

    def run(self, *arguments: str) -> None:
        done = subprocess.run(
            ["openssl", *arguments], cwd=self.folder, env=self.environment, capture_output=True, text=True
        )
        if done.returncode != 0:
            raise RuntimeError(f"openssl {' '.join(arguments)} failed: {done.stderr.strip()}")

    def authority(self, name: str, common_name: str) -> Identity:
        key, certificate = self.folder / f"{name}-ca.key", self.folder / f"{name}-ca.pem"
        self.run(
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", str(key), "-out", str(certificate), "-days", "3", "-subj", f"/CN={common_name}",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        )  # fmt: skip
        return Identity(certificate, key)

    def intermediate(self, root: Identity) -> Identity:
        key = self.folder / "intermediate-ca.key"
        self.run("genpkey", *_EC, "-out", str(key))
        certificate = self.sign(
            "intermediate-ca", key, root, "basicConstraints=critical,CA:TRUE,pathlen:0\n"
            "keyUsage=critical,keyCertSign,cRLSign\nsubjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n",
        )  # fmt: skip
        return Identity(certificate, key)

    def leaf(self, name: str, issuer: Identity, *, server: bool = False, form: str = "pkcs8-rsa") -> Identity:
        encrypted, commands = KEY_FORMS[form]
        key, plain = self.folder / f"{name}.key", self.folder / f"{name}.plain.key"
        for command in commands:
            self.run(*(part.format(out=key, plain=plain) for part in command))
        plain.unlink(missing_ok=True)
        key.chmod(0o600)
        usage = (
            f"extendedKeyUsage=serverAuth\nsubjectAltName=IP:{LOOPBACK_NAMES[0]},DNS:{LOOPBACK_NAMES[1]}\n"
            if server
            else "extendedKeyUsage=clientAuth\n"
        )
        leaf = self.sign(
            name, key, issuer, f"basicConstraints=critical,CA:FALSE\n{usage}authorityKeyIdentifier=keyid\n",
            key_encrypted=encrypted,
        )  # fmt: skip
        chain = self.folder / f"{name}-chain.pem"
        chain.write_text(leaf.read_text() + issuer.certificate.read_text())
        return Identity(chain, key, KEY_PASSWORD if encrypted else None)

    def sign(
        self, name: str, key: Path, issuer: Identity, extensions: str, *, key_encrypted: bool = False
    ) -> Path:
        request, certificate = self.folder / f"{name}.csr", self.folder / f"{name}.pem"
        extension_file = self.folder / f"{name}.ext"
        extension_file.write_text(extensions)
        password = ["-passin", f"env:{_PASSWORD_VARIABLE}"] if key_encrypted else []
        self.run(
            "req", "-new", "-key", str(key), *password, "-subj", f"/CN=pipeline-{name}", "-out", str(request)
        )
        self.run(
            "x509", "-req", "-in", str(request), "-CA", str(issuer.certificate), "-CAkey", str(issuer.key),
            "-set_serial", str(secrets.randbits(63)), "-days", "2", "-extfile", str(extension_file),
            "-out", str(certificate),
        )  # fmt: skip
        request.unlink()
        extension_file.unlink()
        return certificate


def _expired_client(folder: Path, issuer: Identity) -> Identity:
    """A client certificate whose validity ended yesterday (openssl 3.0's x509 cannot back-date one)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.now(UTC)
    issuer_certificate = x509.load_pem_x509_certificate(issuer.certificate.read_bytes())
    issuer_key = serialization.load_pem_private_key(issuer.key.read_bytes(), None)
    key = ec.generate_private_key(ec.SECP256R1())
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pipeline-expired-client")]))
        .issuer_name(issuer_certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=3))
        .not_valid_after(now - timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(issuer_key, hashes.SHA256())  # type: ignore[arg-type]
    )
    key_path = folder / "expired-client.key"
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    key_path.chmod(0o600)
    chain = folder / "expired-client-chain.pem"
    chain.write_text(
        certificate.public_bytes(serialization.Encoding.PEM).decode() + issuer.certificate.read_text()
    )
    return Identity(chain, key_path)
