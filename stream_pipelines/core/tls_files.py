"""The TLS files an operator gives the Kafka clients, opened and checked when the config loads.

A CA file, a client certificate (chain) and its private key come from whatever PKI the operator has,
most often the ``openssl`` command line, which writes a key in several forms: PKCS#8 (``genpkey``,
``req``, ``pkcs8 -topk8``), PKCS#1 for RSA and SEC1 for EC (``genrsa -traditional``, openssl 1.1's
``genrsa``, ``ecparam -genkey``), each plain or encrypted. The two client families read different subsets:

- librdkafka (the project's own clients) is OpenSSL and reads every one of them;
- Kafka's Java client (Spark's source and sink) reads PKCS#8 only, and of the encrypted ones only the
  PBES1 schemes: openssl's default encryption, PBES2 with AES-256-CBC, fails inside the driver with
  "PBES2 SecretKeyFactory not available".

So every file is opened here, once, at config load, and what cannot be opened is refused there, naming
the setting: a wrong key password, a key that is not the certificate's, an expired certificate, a CA
file that holds no CA. The Java client is then given the key as PKCS#8 in memory (``java_client_key``):
plain if the file was plain, otherwise encrypted again with the same password under PBES1
(pbeWithSHAAnd3-KeyTripleDES-CBC, the scheme ``openssl pkcs8 -v1 PBE-SHA1-3DES`` writes). A decrypted key
is never written to a disk, a log or a plan.
"""

from __future__ import annotations

import base64
import hashlib
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.decrepit.ciphers.algorithms import TripleDES
from cryptography.hazmat.primitives import padding, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.ciphers import Cipher, modes

# The key types Kafka's Java client makes a key store of (and a client certificate of these is what
# a broker's TLS accepts from openssl's defaults).
ClientKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey

# pbeWithSHAAnd3-KeyTripleDES-CBC (PKCS#12, RFC 7292 appendix C), which the Java client decrypts.
_PBE_SHA1_3DES = "1.2.840.113549.1.12.1.3"
# openssl's default iteration count for PKCS#8 encryption.
_ITERATIONS = 2048


class TlsFileError(ValueError):
    """A TLS file that cannot be used; the message names the setting and says what is wrong."""


@dataclass(frozen=True)
class ClientIdentity:
    """The client certificate's leaf, as checked (for messages and the expiry)."""

    subject: str
    not_after: datetime


def check_ca_file(location: str) -> None:
    """The CA file holds at least one certificate that can anchor a chain: a CA certificate, or a
    self-signed one (an old X.509 v1 root has no CA flag)."""
    certificates = _certificates("ca_file", location)
    if not any(_is_authority(certificate) for certificate in certificates):
        names = ", ".join(certificate.subject.rfc4514_string() for certificate in certificates)
        raise TlsFileError(
            f"ca_file: {location} holds no CA certificate, only {names}: a client trusts the brokers "
            "through the CA that signs their certificates (the root of their chain), not through a "
            "broker's or a client's own certificate"
        )


def check_client_identity(
    certificate_file: str, key_file: str, password: str | None, password_variable: str | None
) -> ClientIdentity:
    """The certificate is valid now, and the key opens (with the password, if it is encrypted) and is
    the certificate's own."""
    leaf = _certificates("certificate_file", certificate_file)[0]
    now = datetime.now(UTC)
    if leaf.not_valid_after_utc <= now:
        raise TlsFileError(
            f"certificate_file: {certificate_file} ({leaf.subject.rfc4514_string()}) expired on "
            f"{leaf.not_valid_after_utc:%Y-%m-%d %H:%M} UTC; renew it"
        )
    if leaf.not_valid_before_utc > now:
        raise TlsFileError(
            f"certificate_file: {certificate_file} ({leaf.subject.rfc4514_string()}) is valid only from "
            f"{leaf.not_valid_before_utc:%Y-%m-%d %H:%M} UTC (is this host's clock right?)"
        )
    key = open_client_key(key_file, password, password_variable)
    if _public_der(key.public_key()) != _public_der(leaf.public_key()):
        raise TlsFileError(
            f"key_file: {key_file} is not the key of certificate_file {certificate_file} "
            f"({leaf.subject.rfc4514_string()}): the two must be one pair; is one of them from another "
            "certificate?"
        )
    return ClientIdentity(leaf.subject.rfc4514_string(), leaf.not_valid_after_utc)


def open_client_key(location: str, password: str | None, password_variable: str | None) -> ClientKey:
    """The private key in ``location``, in any form openssl writes, opened with ``password`` if it is
    encrypted; ``TlsFileError`` naming the setting when it cannot be."""
    data = _read("key_file", location)
    encrypted = b"ENCRYPTED" in data  # PKCS#8's "ENCRYPTED PRIVATE KEY", or PKCS#1/SEC1's Proc-Type
    if encrypted and password is None:
        raise TlsFileError(
            f"key_file: {location} is encrypted, and no password is given: put it in an environment "
            "variable and name the variable with kafka.security.key_password_env"
        )
    if not encrypted and password is not None:
        raise TlsFileError(
            f"key_password_env is set, but key_file {location} is not encrypted: remove "
            "kafka.security.key_password_env (or give the encrypted key)"
        )
    try:
        key = serialization.load_pem_private_key(data, None if password is None else password.encode())
    except ValueError as error:
        if encrypted and _bad_decrypt(str(error)):
            raise TlsFileError(
                f"key_file: {location} does not open with the password in ${password_variable} "
                "(kafka.security.key_password_env): the password is wrong, or the key is not the one "
                "that password encrypts"
            ) from None
        raise TlsFileError(
            f"key_file: {location} holds no private key that can be read ({error}); give a PEM key as "
            "openssl writes it: PKCS#8, PKCS#1 (RSA) or SEC1 (EC), plain or encrypted"
        ) from None
    except TypeError as error:
        raise TlsFileError(f"key_file: {location}: {error}") from None
    except Exception as error:  # cryptography raises UnsupportedAlgorithm for schemes it does not know
        raise TlsFileError(
            f"key_file: {location} cannot be opened: {error}; convert it with "
            f"`openssl pkcs8 -topk8 -in {location} -out key.pk8.pem` (openssl's default encryption)"
        ) from None
    if not isinstance(key, ClientKey):
        raise TlsFileError(
            f"key_file: {location} is a {type(key).__name__.removeprefix('_')} key; Kafka's Java client "
            "(Spark) takes RSA or EC client keys"
        )
    return key


def java_client_key(location: str, password: str | None) -> str:
    """The key as Kafka's Java client reads it (``ssl.keystore.key``, with ``ssl.key.password`` the same
    password): PKCS#8 PEM, encrypted under PBES1 when the file is encrypted."""
    key = open_client_key(location, password, None)
    if password is None:
        return key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode()
    plain = key.private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return _pem("ENCRYPTED PRIVATE KEY", _pbes1_encrypt(plain, password))


# ------------------------------------------------------------------ reading


def _read(setting: str, location: str) -> bytes:
    try:
        return Path(location).read_bytes()
    except OSError as error:
        raise TlsFileError(f"{setting}: cannot read {location}: {error.strerror}") from None


def _certificates(setting: str, location: str) -> list[x509.Certificate]:
    try:
        certificates = x509.load_pem_x509_certificates(_read(setting, location))
    except ValueError as error:
        raise TlsFileError(f"{setting}: {location} holds no readable PEM certificate ({error})") from None
    return certificates


def _public_der(public_key: Any) -> bytes:
    der, info = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    return public_key.public_bytes(der, info)


def _is_authority(certificate: x509.Certificate) -> bool:
    try:
        return certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        return certificate.issuer == certificate.subject and certificate.version == x509.Version.v1


def _bad_decrypt(message: str) -> bool:
    # cryptography's words for a wrong password differ by key form ("Bad decrypt. Incorrect password?",
    # "Incorrect password, could not decrypt key").
    return "decrypt" in message.lower() or "password" in message.lower()


# ------------------------------------------------------------------ PBES1 for the Java client


def _pbes1_encrypt(plain_der: bytes, password: str) -> bytes:
    """``EncryptedPrivateKeyInfo`` of a PKCS#8 key under pbeWithSHAAnd3-KeyTripleDES-CBC."""
    salt = os.urandom(8)
    secret = password.encode("utf-16-be") + b"\0\0"  # PKCS#12's BMPString, with its terminator
    key = _pkcs12_kdf(secret, salt, 1, 24)
    iv = _pkcs12_kdf(secret, salt, 2, 8)
    padder = padding.PKCS7(64).padder()
    padded = padder.update(plain_der) + padder.finalize()
    encryptor = Cipher(TripleDES(key), modes.CBC(iv)).encryptor()
    encrypted = encryptor.update(padded) + encryptor.finalize()
    algorithm = _der(0x30, _der_oid(_PBE_SHA1_3DES) + _der(0x30, _der(0x04, salt) + _der_int(_ITERATIONS)))
    return _der(0x30, algorithm + _der(0x04, encrypted))


def _pkcs12_kdf(secret: bytes, salt: bytes, purpose: int, size: int) -> bytes:
    """RFC 7292 appendix B.2 with SHA-1 (u = 20, v = 64)."""
    block = 64

    def stretched(data: bytes) -> bytes:
        length = block * -(-len(data) // block)  # copies of data, to a whole number of blocks
        return (data * (length // len(data) + 1))[:length] if data else b""

    diversifier = bytes([purpose]) * block
    joined = bytearray(stretched(salt) + stretched(secret))
    out = b""
    while len(out) < size:
        digest = hashlib.sha1(diversifier + joined).digest()
        for _ in range(_ITERATIONS - 1):
            digest = hashlib.sha1(digest).digest()
        out += digest
        addend = int.from_bytes((digest * 4)[:block], "big") + 1
        for start in range(0, len(joined), block):
            total = (int.from_bytes(joined[start : start + block], "big") + addend) % (1 << (8 * block))
            joined[start : start + block] = total.to_bytes(block, "big")
    return out[:size]


def _der(tag: int, body: bytes) -> bytes:
    size = len(body)
    if size < 0x80:
        return bytes([tag, size]) + body
    length = size.to_bytes((size.bit_length() + 7) // 8, "big")
    return bytes([tag, 0x80 | len(length)]) + length + body


def _der_int(value: int) -> bytes:
    return _der(0x02, value.to_bytes(value.bit_length() // 8 + 1, "big"))


def _der_oid(dotted: str) -> bytes:
    first, second, *rest = (int(part) for part in dotted.split("."))
    body = bytearray([40 * first + second])
    for number in rest:
        chunk = [number & 0x7F]
        number >>= 7
        while number:
            chunk.append(0x80 | (number & 0x7F))
            number >>= 7
        body += bytes(reversed(chunk))
    return _der(0x06, bytes(body))


def _pem(label: str, der: bytes) -> str:
    body = base64.encodebytes(der).decode().replace("\n", "")
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    return "\n".join([f"-----BEGIN {label}-----", *lines, f"-----END {label}-----", ""])
