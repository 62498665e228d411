"""Issuing the webhook's CA and serving certificate (pure apart from key generation).

Keys are ECDSA P-256: every TLS stack we meet (Go's crypto/tls in the apiserver,
OpenSSL in Python, browsers, curl) accepts it; handshakes and signatures are cheaper
than RSA-2048 at a stronger security level (~128 bits vs ~112); keys are generated in
well under a millisecond, where RSA-2048 takes tens to hundreds of milliseconds; and
it is what cert-manager's documented webhook bootstrap uses.

Certificates carry what strict verifiers (Go, rustls/webpki, cryptography's verifier)
require: DNS SANs (never CommonName alone — Go refuses that since 1.15), critical
basic constraints and key usage, extended key usage ``serverAuth`` on the leaf, and
subject/authority key identifiers so chains build unambiguously across CA rotations.
``not_before`` is back-dated a few minutes to absorb clock skew between nodes.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from certs.pem import KeyPair
from shared import vocab

#: Default lifetime of the CA.
CA_VALIDITY = timedelta(days=3650)
#: Default lifetime of a serving certificate.
SERVING_VALIDITY = timedelta(days=365)
#: How far ``not_before`` is back-dated, for nodes whose clocks run a little behind.
BACKDATE = timedelta(minutes=5)
#: Longest CommonName X.509 allows (ub-common-name).
_MAX_COMMON_NAME = 64

CA_COMMON_NAME = f"{vocab.PRODUCT_NAME}-webhook-ca"


def service_dns_names(service: str, namespace: str) -> tuple[str, ...]:
    """The names a client may use for ``service`` in ``namespace``, shortest first.

    The apiserver dials and verifies ``<svc>.<ns>.svc`` (kubernetes-facts §1.8); the
    others serve in-cluster clients that use a shorter or the fully qualified form.
    """
    return (
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    )


def new_key() -> ec.EllipticCurvePrivateKey:
    """A fresh ECDSA P-256 private key."""
    return ec.generate_private_key(ec.SECP256R1())


def issue_ca(
    now: datetime, validity: timedelta = CA_VALIDITY, common_name: str = CA_COMMON_NAME
) -> KeyPair:
    """A self-signed CA valid from ``now`` (back-dated) for ``validity``.

    ``path_length=0``: it signs serving certificates only, never other CAs.
    """
    key = new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    builder = (
        _base(name, name, key.public_key(), now, now + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(cert_sign=True), critical=True)
        .add_extension(ski, critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False
        )
    )
    return KeyPair(builder.sign(key, hashes.SHA256()), key)


def issue_serving(
    ca: KeyPair, names: tuple[str, ...], now: datetime, validity: timedelta = SERVING_VALIDITY
) -> KeyPair:
    """A serving certificate for ``names`` signed by ``ca``.

    It never outlives the CA: ``not_after`` is capped at the CA's own end.
    """
    if not names:
        raise ValueError("a serving certificate needs at least one DNS name")
    key = new_key()
    not_after = min(now + validity, ca.not_after)
    builder = (
        _base(_serving_subject(names), ca.certificate.subject, key.public_key(), now, not_after)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .add_extension(_authority_key_id(ca.certificate), critical=False)
    )
    return KeyPair(builder.sign(ca.key, hashes.SHA256()), key)


def _base(
    subject: x509.Name,
    issuer: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    now: datetime,
    not_after: datetime,
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(not_after)
    )


def _key_usage(cert_sign: bool) -> x509.KeyUsage:
    """CA: sign certificates and CRLs. Leaf (ECDSA): digital signature only.

    ``key_encipherment`` is deliberately absent: it means RSA key transport, which an
    EC key cannot do, and strict verifiers reject it on EC leaves.
    """
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _authority_key_id(ca: x509.Certificate) -> x509.AuthorityKeyIdentifier:
    """The CA's SKI when it has one (ours always do), else derived from its key."""
    try:
        ski = ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    except x509.ExtensionNotFound:
        ski = x509.SubjectKeyIdentifier.from_public_key(ca.public_key())
    return x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski)


def _serving_subject(names: tuple[str, ...]) -> x509.Name:
    """CN = the name the apiserver dials when it fits, else the shortest (informational)."""
    preferred = [n for n in (names[2:3] or names[:1]) if len(n) <= _MAX_COMMON_NAME]
    fallback = min(names, key=len)[:_MAX_COMMON_NAME]
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, (preferred or [fallback])[0])])
