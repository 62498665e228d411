"""Certificate material for the certs tests, generated at test time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from certs import issue
from certs.material import Material
from certs.pem import KeyPair, to_pem
from certs.plan import CA_CRT, TLS_CRT, TLS_KEY

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
SERVICE = "gpu-webhook"
NAMESPACE = "gpu-system"
NAMES = issue.service_dns_names(SERVICE, NAMESPACE)


def material(
    now: datetime = NOW,
    names: tuple[str, ...] = NAMES,
    ca: KeyPair | None = None,
    serving_validity: timedelta = issue.SERVING_VALIDITY,
    ca_validity: timedelta = issue.CA_VALIDITY,
) -> Material:
    """A CA (new unless given) and a serving certificate it signed."""
    authority = ca or issue.issue_ca(now, ca_validity)
    serving = issue.issue_serving(authority, names, now, serving_validity)
    return Material(authority, serving, (authority.certificate,))


def serving_data(serving: KeyPair, ca: KeyPair, key: KeyPair | None = None) -> dict[str, bytes]:
    """Serving Secret data; ``key`` puts another pair's key next to the certificate."""
    return {
        TLS_CRT: serving.cert_pem,
        TLS_KEY: (key or serving).key_pem,
        CA_CRT: to_pem([ca.certificate]),
    }


def ca_data(ca: KeyPair, key: KeyPair | None = None) -> dict[str, bytes]:
    """CA Secret data."""
    return {TLS_CRT: ca.cert_pem, TLS_KEY: (key or ca).key_pem}
