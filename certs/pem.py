"""Certificates and keys as objects and as PEM bytes.

A ``KeyPair`` is one certificate with its private key — a CA or a serving
certificate. The readers here turn untrusted bytes (a Secret's data, files on disk)
into objects and raise ``Malformed`` for anything that is not what it claims to be,
so callers can tell "garbage" apart from "valid but unsuitable".
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

#: Keys we accept for a CA or a serving certificate.
SigningKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey
_SIGNING_KEYS = (rsa.RSAPrivateKey, ec.EllipticCurvePrivateKey, ed25519.Ed25519PrivateKey)

_PUBLIC_DER = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


class Malformed(ValueError):
    """Bytes that should hold a PEM certificate or key do not."""


@dataclass(frozen=True)
class KeyPair:
    """A certificate and the private key of its public key."""

    certificate: x509.Certificate
    key: SigningKey

    @property
    def cert_pem(self) -> bytes:
        """The certificate, PEM."""
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        """The private key, unencrypted PKCS#8 PEM (it lives in a Secret or a 0600 file)."""
        return self.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    @property
    def not_after(self) -> datetime:
        """End of validity, timezone-aware UTC."""
        return self.certificate.not_valid_after_utc


def load_certificates(data: bytes, what: str) -> list[x509.Certificate]:
    """Every certificate of a PEM bundle; ``Malformed`` when there is none or one is bad."""
    try:
        certificates = x509.load_pem_x509_certificates(data)
    except ValueError as exc:
        raise Malformed(f"{what} is not a PEM certificate bundle ({exc})") from exc
    if not certificates:
        raise Malformed(f"{what} holds no certificate")
    return certificates


def load_key(data: bytes, what: str) -> SigningKey:
    """An unencrypted RSA, EC or Ed25519 private key."""
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise Malformed(f"{what} is not an unencrypted PEM private key") from exc
    if not isinstance(key, _SIGNING_KEYS):
        raise Malformed(f"{what} holds a {type(key).__name__}, which we do not use")
    return key


def load_pair(cert_pem: bytes, key_pem: bytes, what: str) -> KeyPair:
    """The first certificate of ``cert_pem`` with the key of ``key_pem``.

    Raises ``Malformed`` for unreadable bytes; a readable pair whose key does not match
    the certificate is returned as is (check it with ``key_matches``).
    """
    certificate = load_certificates(cert_pem, f"{what} certificate")[0]
    return KeyPair(certificate, load_key(key_pem, f"{what} key"))


def key_matches(pair: KeyPair) -> bool:
    """Whether the private key belongs to the certificate's public key."""
    return pair.key.public_key().public_bytes(*_PUBLIC_DER) == (
        pair.certificate.public_key().public_bytes(*_PUBLIC_DER)
    )


def to_pem(certificates: list[x509.Certificate]) -> bytes:
    """A PEM bundle of ``certificates``, in order."""
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certificates)


def fingerprint(certificate: x509.Certificate) -> str:
    """SHA-256 of the DER form, lower-case hex (what ``openssl x509 -fingerprint`` shows)."""
    return hashlib.sha256(certificate.public_bytes(serialization.Encoding.DER)).hexdigest()


def dns_names(certificate: x509.Certificate) -> frozenset[str]:
    """The DNS subject alternative names (empty when the extension is missing)."""
    try:
        san = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return frozenset()
    return frozenset(san.value.get_values_for_type(x509.DNSName))


def is_ca(certificate: x509.Certificate) -> bool:
    """Whether basic constraints mark the certificate as a CA."""
    try:
        return bool(certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except x509.ExtensionNotFound:
        return False
