"""Every branch of ``plan``: keep, renew the serving certificate, renew everything."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import pytest

from certs import issue
from certs.material import realize
from certs.pem import to_pem
from certs.plan import CA_CRT, TLS_CRT, TLS_KEY, Action, Plan, Policy, Problem, SecretData, plan

from .helpers import NAMES, NAMESPACE, NOW, SERVICE, ca_data, material, serving_data

POLICY = Policy()
GOOD = material()
OTHER = material()
DAY = timedelta(days=1)


@dataclass(frozen=True)
class Case:
    serving: SecretData | None
    ca: SecretData | None
    action: Action
    problems: tuple[tuple[str, Problem], ...]
    days_later: int = 0


def good_serving(**changes: bytes) -> dict[str, bytes]:
    return {**serving_data(GOOD.serving, GOOD.ca), **changes}


def renamed() -> dict[str, bytes]:
    leaf = issue.issue_serving(GOOD.ca, issue.service_dns_names("old-name", NAMESPACE), NOW)
    return serving_data(leaf, GOOD.ca)


def not_yet_valid() -> dict[str, bytes]:
    leaf = issue.issue_serving(GOOD.ca, NAMES, NOW + 2 * DAY)
    return serving_data(leaf, GOOD.ca)


def short_ca() -> dict[str, bytes]:
    return ca_data(issue.issue_ca(NOW, timedelta(days=390)))


CASES: dict[str, Case] = {
    "nothing exists yet": Case(None, None, Action.RENEW_ALL, (("ca", Problem.MISSING),)),
    "the certificate is still good": Case(good_serving(), ca_data(GOOD.ca), Action.KEEP, ()),
    "still good one day before the renew window": Case(
        good_serving(), ca_data(GOOD.ca), Action.KEEP, (), days_later=365 - 31
    ),
    "serving certificate inside its renew window": Case(
        good_serving(),
        ca_data(GOOD.ca),
        Action.RENEW_SERVING,
        (("serving", Problem.EXPIRING),),
        days_later=365 - 30,
    ),
    "serving certificate expired long ago": Case(
        good_serving(),
        ca_data(GOOD.ca),
        Action.RENEW_SERVING,
        (("serving", Problem.EXPIRING),),
        days_later=500,
    ),
    "serving Secret deleted, CA kept": Case(
        None, ca_data(GOOD.ca), Action.RENEW_SERVING, (("serving", Problem.MISSING),)
    ),
    "SANs name another service": Case(
        renamed(), ca_data(GOOD.ca), Action.RENEW_SERVING, (("serving", Problem.NAMES_MISMATCH),)
    ),
    "key belongs to another certificate": Case(
        serving_data(GOOD.serving, GOOD.ca, key=OTHER.serving),
        ca_data(GOOD.ca),
        Action.RENEW_SERVING,
        (("serving", Problem.KEY_MISMATCH),),
    ),
    "serving certificate signed by another CA": Case(
        serving_data(OTHER.serving, GOOD.ca),
        ca_data(GOOD.ca),
        Action.RENEW_SERVING,
        (("serving", Problem.WRONG_ISSUER),),
    ),
    "ca.crt does not carry the CA": Case(
        good_serving(**{CA_CRT: to_pem([OTHER.ca.certificate])}),
        ca_data(GOOD.ca),
        Action.RENEW_SERVING,
        (("serving", Problem.BUNDLE_MISMATCH),),
    ),
    "serving certificate not valid yet": Case(
        not_yet_valid(),
        ca_data(GOOD.ca),
        Action.RENEW_SERVING,
        (("serving", Problem.NOT_YET_VALID),),
    ),
    "garbage in tls.crt": Case(
        good_serving(**{TLS_CRT: b"-----BEGIN CERTIFICATE-----\nnot base64\n"}),
        ca_data(GOOD.ca),
        Action.RENEW_SERVING,
        (("serving", Problem.MALFORMED),),
    ),
    "garbage in tls.key": Case(
        good_serving(**{TLS_KEY: b"hello"}),
        ca_data(GOOD.ca),
        Action.RENEW_SERVING,
        (("serving", Problem.MALFORMED),),
    ),
    "garbage in ca.crt": Case(
        good_serving(**{CA_CRT: b"\x00\x01"}),
        ca_data(GOOD.ca),
        Action.RENEW_SERVING,
        (("serving", Problem.MALFORMED),),
    ),
    "serving Secret without tls.key": Case(
        {TLS_CRT: GOOD.serving.cert_pem},
        ca_data(GOOD.ca),
        Action.RENEW_SERVING,
        (("serving", Problem.MALFORMED),),
    ),
    "CA close to expiry": Case(
        good_serving(),
        ca_data(GOOD.ca),
        Action.RENEW_ALL,
        (("ca", Problem.EXPIRING),),
        days_later=3650 - 365 - 29,
    ),
    "CA too short-lived to sign a full serving certificate": Case(
        good_serving(), short_ca(), Action.RENEW_ALL, (("ca", Problem.EXPIRING),)
    ),
    "garbage in the CA Secret": Case(
        good_serving(),
        {TLS_CRT: b"junk", TLS_KEY: b"junk"},
        Action.RENEW_ALL,
        (("ca", Problem.MALFORMED),),
    ),
    "CA Secret holds a leaf, not a CA": Case(
        good_serving(), ca_data(GOOD.serving), Action.RENEW_ALL, (("ca", Problem.NOT_A_CA),)
    ),
    "CA key does not match the CA": Case(
        good_serving(),
        ca_data(GOOD.ca, key=OTHER.ca),
        Action.RENEW_ALL,
        (("ca", Problem.KEY_MISMATCH),),
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_plan(case: Case) -> None:
    decision = plan(case.serving, case.ca, SERVICE, NAMESPACE, NOW + case.days_later * DAY, POLICY)
    assert decision.action is case.action
    assert tuple((f.subject, f.problem) for f in decision.findings) == case.problems
    assert all(f.detail for f in decision.findings)
    assert (decision.ca is not None) == (case.action is not Action.RENEW_ALL)


def test_a_kept_ca_is_the_one_in_the_secret() -> None:
    decision = plan(good_serving(), ca_data(GOOD.ca), SERVICE, NAMESPACE, NOW, POLICY)
    assert decision.ca is not None
    assert decision.ca.certificate == GOOD.ca.certificate


def test_a_ca_renewal_keeps_trusting_the_old_ca_while_it_is_valid() -> None:
    later = NOW + (3650 - 300) * DAY
    decision = plan(good_serving(), ca_data(GOOD.ca), SERVICE, NAMESPACE, later, POLICY)
    assert decision.previous_ca == GOOD.ca.certificate
    fresh = realize(decision, NAMES, later, POLICY)
    assert fresh.trusted == (fresh.ca.certificate, GOOD.ca.certificate)
    after = plan(fresh.serving_data(), fresh.ca_data(), SERVICE, NAMESPACE, later, POLICY)
    assert after.action is Action.KEEP


def test_garbage_and_expired_cas_are_not_carried_over() -> None:
    garbage = plan(None, {TLS_CRT: b"junk"}, SERVICE, NAMESPACE, NOW, POLICY)
    assert garbage.previous_ca is None
    expired = plan(None, ca_data(GOOD.ca), SERVICE, NAMESPACE, NOW + 4000 * DAY, POLICY)
    assert expired.action is Action.RENEW_ALL
    assert expired.previous_ca is None


def test_renewing_the_serving_certificate_keeps_the_ca() -> None:
    decision = plan(renamed(), ca_data(GOOD.ca), SERVICE, NAMESPACE, NOW, POLICY)
    fresh = realize(decision, NAMES, NOW, POLICY)
    assert fresh.ca.certificate == GOOD.ca.certificate
    assert fresh.trusted == (GOOD.ca.certificate,)
    assert plan(fresh.serving_data(), ca_data(GOOD.ca), SERVICE, NAMESPACE, NOW, POLICY).action is (
        Action.KEEP
    )


def test_a_keep_plan_has_nothing_to_issue() -> None:
    with pytest.raises(ValueError, match="nothing to issue"):
        realize(Plan(Action.KEEP), NAMES, NOW, POLICY)


BAD_POLICIES: dict[str, Callable[[], Policy]] = {
    "renew window of zero": lambda: Policy(renew_before=timedelta(0)),
    "serving shorter than the window": lambda: Policy(serving_validity=timedelta(days=20)),
    "CA shorter than serving + window": lambda: Policy(ca_validity=timedelta(days=390)),
}


@pytest.mark.parametrize("build", BAD_POLICIES.values(), ids=BAD_POLICIES.keys())
def test_inconsistent_policies_are_refused(build: Callable[[], Policy]) -> None:
    with pytest.raises(ValueError, match="must"):
        build()
