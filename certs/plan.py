"""What to do about the webhook's certificates: a pure decision over what exists.

Two Secrets hold the material. The *serving* Secret (type ``kubernetes.io/tls``:
``tls.crt``, ``tls.key``, ``ca.crt``) is what the webhook mounts. The *CA* Secret
(``tls.crt``, ``tls.key`` of the CA) stays with the issuer only, so the webhook pod
never holds a key that can mint certificates.

``plan`` looks at both and answers keep, renew the serving certificate, or renew
everything, with ``Finding``s saying why. No side effects, no logging: the shell logs
the findings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from cryptography import x509
from cryptography.exceptions import InvalidSignature

from certs import issue
from certs.pem import (
    KeyPair,
    Malformed,
    dns_names,
    is_ca,
    key_matches,
    load_certificates,
    load_pair,
)

TLS_CRT = "tls.crt"
TLS_KEY = "tls.key"
CA_CRT = "ca.crt"

SecretData = Mapping[str, bytes]


class Action(StrEnum):
    """The three outcomes, in increasing cost."""

    KEEP = "keep"
    RENEW_SERVING = "renew-serving"
    RENEW_ALL = "renew-all"


class Problem(StrEnum):
    """Why something must be (re)issued."""

    MISSING = "missing"
    MALFORMED = "malformed"
    NOT_A_CA = "not-a-ca"
    KEY_MISMATCH = "key-mismatch"
    EXPIRING = "expiring"
    NOT_YET_VALID = "not-yet-valid"
    WRONG_ISSUER = "wrong-issuer"
    NAMES_MISMATCH = "names-mismatch"
    BUNDLE_MISMATCH = "bundle-mismatch"


@dataclass(frozen=True)
class Finding:
    """One problem with the CA (``subject="ca"``) or the serving material (``"serving"``)."""

    subject: str
    problem: Problem
    detail: str


@dataclass(frozen=True)
class Policy:
    """Lifetimes and the renewal window.

    The CA is renewed once it could no longer sign a full-length serving certificate
    that ends outside the renew window: ``ca.not_after - now < serving_validity +
    renew_before``. So a serving certificate is never cut short by its CA.
    """

    serving_validity: timedelta = issue.SERVING_VALIDITY
    ca_validity: timedelta = issue.CA_VALIDITY
    renew_before: timedelta = timedelta(days=30)

    def __post_init__(self) -> None:
        problems = policy_problems(self.serving_validity, self.ca_validity, self.renew_before)
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def ca_renew_before(self) -> timedelta:
        """Remaining CA lifetime below which the CA is renewed."""
        return self.serving_validity + self.renew_before


def policy_problems(
    serving_validity: timedelta, ca_validity: timedelta, renew_before: timedelta
) -> list[str]:
    """Every inconsistency between the three durations of a ``Policy``."""
    found = []
    if renew_before <= timedelta(0):
        found.append("renew-before must be positive")
    if serving_validity <= renew_before:
        found.append("serving validity must be longer than renew-before")
    if ca_validity <= serving_validity + renew_before:
        found.append("CA validity must exceed serving validity + renew-before")
    return found


@dataclass(frozen=True)
class Plan:
    """The decision. ``ca`` is the CA to sign with when it is kept; ``previous_ca``,
    on a CA renewal, is the old CA certificate still worth trusting during the switch
    (the webhook serves its old certificate until it reloads)."""

    action: Action
    findings: tuple[Finding, ...] = ()
    ca: KeyPair | None = None
    previous_ca: x509.Certificate | None = field(default=None)


def plan(
    serving: SecretData | None,
    ca: SecretData | None,
    service: str,
    namespace: str,
    now: datetime,
    policy: Policy,
) -> Plan:
    """Decide from the serving and CA Secrets' decoded data (``None``: no Secret)."""
    authority, ca_findings = check_ca(ca, now, policy)
    if authority is None:
        return Plan(Action.RENEW_ALL, ca_findings, None, _still_trusted(ca, now))
    names = issue.service_dns_names(service, namespace)
    findings = check_serving(serving, authority, names, now, policy)
    if findings:
        return Plan(Action.RENEW_SERVING, findings, authority)
    return Plan(Action.KEEP, (), authority)


def check_ca(
    data: SecretData | None, now: datetime, policy: Policy
) -> tuple[KeyPair | None, tuple[Finding, ...]]:
    """The usable CA, or ``None`` and why not."""
    try:
        pair = read_pair(data, "CA")
    except Malformed as exc:
        problem = Problem.MISSING if data is None else Problem.MALFORMED
        return None, (Finding("ca", problem, str(exc)),)
    reason = _ca_problem(pair, now, policy)
    return (None, (reason,)) if reason else (pair, ())


def check_serving(
    data: SecretData | None,
    ca: KeyPair,
    names: tuple[str, ...],
    now: datetime,
    policy: Policy,
) -> tuple[Finding, ...]:
    """Every reason the serving material cannot stay; empty when it is good."""
    try:
        pair = read_pair(data, "serving certificate")
        bundle = load_certificates((data or {}).get(CA_CRT, b""), f"serving {CA_CRT}")
    except Malformed as exc:
        problem = Problem.MISSING if data is None else Problem.MALFORMED
        return (Finding("serving", problem, str(exc)),)
    checks = (
        _pair_problem(pair),
        _issuer_problem(pair.certificate, ca),
        _names_problem(pair.certificate, names),
        _time_problem(pair.certificate, now, policy.renew_before),
        None if ca.certificate in bundle else _bundle_finding(),
    )
    return tuple(f for f in checks if f is not None)


def read_pair(data: SecretData | None, what: str) -> KeyPair:
    """``tls.crt`` + ``tls.key`` of a Secret; ``Malformed`` when absent or unreadable."""
    if data is None:
        raise Malformed(f"{what} does not exist")
    missing = [k for k in (TLS_CRT, TLS_KEY) if not data.get(k)]
    if missing:
        raise Malformed(f"{what} lacks {', '.join(missing)}")
    return load_pair(data[TLS_CRT], data[TLS_KEY], what)


def _ca_problem(pair: KeyPair, now: datetime, policy: Policy) -> Finding | None:
    if not is_ca(pair.certificate):
        return Finding("ca", Problem.NOT_A_CA, "the CA certificate is not marked as a CA")
    if not key_matches(pair):
        return Finding("ca", Problem.KEY_MISMATCH, "the CA key does not match its certificate")
    if pair.not_after - now < policy.ca_renew_before:
        detail = f"the CA expires at {pair.not_after.isoformat()}"
        return Finding("ca", Problem.EXPIRING, detail)
    return None


def _pair_problem(pair: KeyPair) -> Finding | None:
    if key_matches(pair):
        return None
    return Finding("serving", Problem.KEY_MISMATCH, "tls.key does not match tls.crt")


def _issuer_problem(certificate: x509.Certificate, ca: KeyPair) -> Finding | None:
    try:
        certificate.verify_directly_issued_by(ca.certificate)
    except (ValueError, TypeError, InvalidSignature):
        return Finding("serving", Problem.WRONG_ISSUER, "tls.crt is not signed by the CA")
    return None


def _names_problem(certificate: x509.Certificate, names: tuple[str, ...]) -> Finding | None:
    present = dns_names(certificate)
    if present == frozenset(names):
        return None
    detail = f"SANs {sorted(present)} differ from {sorted(names)}"
    return Finding("serving", Problem.NAMES_MISMATCH, detail)


def _time_problem(
    certificate: x509.Certificate, now: datetime, renew_before: timedelta
) -> Finding | None:
    if certificate.not_valid_before_utc > now:
        return Finding("serving", Problem.NOT_YET_VALID, "tls.crt is not valid yet")
    not_after = certificate.not_valid_after_utc
    if not_after - now <= renew_before:
        return Finding("serving", Problem.EXPIRING, f"tls.crt expires at {not_after.isoformat()}")
    return None


def _bundle_finding() -> Finding:
    return Finding("serving", Problem.BUNDLE_MISMATCH, f"{CA_CRT} does not carry the CA")


def _still_trusted(data: SecretData | None, now: datetime) -> x509.Certificate | None:
    """The old CA certificate, when it is readable, a CA and not expired yet."""
    try:
        old = load_certificates((data or {}).get(TLS_CRT, b""), "old CA")[0]
    except Malformed:
        return None
    return old if is_ca(old) and old.not_valid_after_utc > now else None
