"""Carrying out a plan: the new certificates and the Secret data that holds them.

Not pure (key generation draws randomness) but free of I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from cryptography import x509

from certs import issue
from certs.pem import KeyPair, to_pem
from certs.plan import CA_CRT, TLS_CRT, TLS_KEY, Action, Plan, Policy


@dataclass(frozen=True)
class Material:
    """A CA, a serving certificate it signed, and the CA bundle clients should trust."""

    ca: KeyPair
    serving: KeyPair
    #: The CA first, then (after a CA renewal) the previous CA still in use.
    trusted: tuple[x509.Certificate, ...]

    def serving_data(self) -> dict[str, bytes]:
        """Data of the serving Secret (``kubernetes.io/tls`` plus ``ca.crt``)."""
        return {
            TLS_CRT: self.serving.cert_pem,
            TLS_KEY: self.serving.key_pem,
            CA_CRT: to_pem(list(self.trusted)),
        }

    def ca_data(self) -> dict[str, bytes]:
        """Data of the CA Secret."""
        return {TLS_CRT: self.ca.cert_pem, TLS_KEY: self.ca.key_pem}


def realize(plan: Plan, names: tuple[str, ...], now: datetime, policy: Policy) -> Material:
    """Issue what ``plan`` asks for (a ``KEEP`` plan has nothing to issue: ``ValueError``)."""
    if plan.action is Action.KEEP:
        raise ValueError("nothing to issue for a plan that keeps the certificates")
    if plan.action is Action.RENEW_SERVING and plan.ca is not None:
        ca = plan.ca
        trusted: tuple[x509.Certificate, ...] = (ca.certificate,)
    else:
        ca = issue.issue_ca(now, policy.ca_validity)
        previous = plan.previous_ca
        trusted = (ca.certificate,) + ((previous,) if previous is not None else ())
    serving = issue.issue_serving(ca, names, now, policy.serving_validity)
    return Material(ca, serving, trusted)
