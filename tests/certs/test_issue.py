"""Issuing: names, lifetimes, extensions, and chains a strict verifier accepts."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

from certs import issue
from certs.pem import dns_names, is_ca, key_matches

from .helpers import NAMES, NOW, material


def ext(certificate: x509.Certificate, kind: type[x509.ExtensionType]) -> x509.Extension[Any]:
    return certificate.extensions.get_extension_for_class(kind)


def test_service_dns_names_are_the_four_forms() -> None:
    assert issue.service_dns_names("web", "ns") == (
        "web",
        "web.ns",
        "web.ns.svc",
        "web.ns.svc.cluster.local",
    )


def test_serving_certificate_carries_exactly_the_service_names() -> None:
    leaf = material().serving.certificate
    assert dns_names(leaf) == frozenset(NAMES)
    assert leaf.subject.rfc4514_string() == f"CN={NAMES[2]}"


def test_lifetimes_default_to_one_year_and_ten_years_back_dated_for_skew() -> None:
    pair = material()
    assert pair.serving.certificate.not_valid_before_utc == NOW - issue.BACKDATE
    assert pair.serving.not_after == NOW + timedelta(days=365)
    assert pair.ca.not_after == NOW + timedelta(days=3650)


def test_serving_certificate_never_outlives_its_ca() -> None:
    pair = material(ca_validity=timedelta(days=10))
    assert pair.serving.not_after == pair.ca.not_after


def test_ca_extensions() -> None:
    ca = material().ca.certificate
    constraints = ext(ca, x509.BasicConstraints)
    assert constraints.critical
    assert constraints.value.ca
    assert constraints.value.path_length == 0
    usage = ext(ca, x509.KeyUsage)
    assert usage.critical
    assert usage.value.key_cert_sign
    assert usage.value.crl_sign
    ski = ext(ca, x509.SubjectKeyIdentifier).value
    assert ext(ca, x509.AuthorityKeyIdentifier).value.key_identifier == ski.digest


def test_serving_extensions() -> None:
    pair = material()
    leaf = pair.serving.certificate
    assert not is_ca(leaf)
    assert ext(leaf, x509.BasicConstraints).critical
    usage = ext(leaf, x509.KeyUsage)
    assert usage.critical
    assert usage.value.digital_signature
    assert not usage.value.key_encipherment
    assert not usage.value.key_cert_sign
    assert list(ext(leaf, x509.ExtendedKeyUsage).value) == [ExtendedKeyUsageOID.SERVER_AUTH]
    ca_ski = ext(pair.ca.certificate, x509.SubjectKeyIdentifier).value.digest
    assert ext(leaf, x509.AuthorityKeyIdentifier).value.key_identifier == ca_ski
    assert ext(leaf, x509.SubjectKeyIdentifier).value.digest != ca_ski
    assert key_matches(pair.serving)
    assert key_matches(pair.ca)


@pytest.mark.parametrize("name", NAMES)
def test_chain_verifies_for_every_name_with_a_strict_verifier(name: str) -> None:
    pair = material()
    verifier = (
        PolicyBuilder()
        .store(Store([pair.ca.certificate]))
        .time(NOW + timedelta(days=1))
        .build_server_verifier(x509.DNSName(name))
    )
    chain = verifier.verify(pair.serving.certificate, [])
    assert chain[-1] == pair.ca.certificate


def test_verifier_refuses_other_names_and_other_cas() -> None:
    pair, stranger = material(), material()
    policy = PolicyBuilder().time(NOW + timedelta(days=1))
    wrong_name = policy.store(Store([pair.ca.certificate])).build_server_verifier(
        x509.DNSName("other.gpu-system.svc")
    )
    with pytest.raises(VerificationError):
        wrong_name.verify(pair.serving.certificate, [])
    wrong_ca = policy.store(Store([stranger.ca.certificate])).build_server_verifier(
        x509.DNSName(NAMES[2])
    )
    with pytest.raises(VerificationError):
        wrong_ca.verify(pair.serving.certificate, [])


def test_long_names_keep_a_legal_common_name() -> None:
    names = issue.service_dns_names("s" * 63, "n" * 63)
    leaf = material(names=names).serving.certificate
    common_name = leaf.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value
    assert common_name == "s" * 63
    assert dns_names(leaf) == frozenset(names)


def test_a_serving_certificate_needs_a_name() -> None:
    with pytest.raises(ValueError, match="DNS name"):
        issue.issue_serving(material().ca, (), NOW)
