"""``certs.apply.ensure`` over a fake gateway that enforces optimistic concurrency."""

from __future__ import annotations

import asyncio
import base64
import logging
from datetime import timedelta
from typing import Any

import pytest
from cryptography import x509

from certs.apply import SECRET_TYPE_TLS, CertsError, Outcome, Target, ca_bundle_patch, ensure
from certs.plan import CA_CRT, TLS_CRT, Action, Policy
from shared.clock import ManualClock
from shared.logs import fields_of
from shared.resources import MUTATING_WEBHOOK_CONFIGURATIONS, SECRETS
from tests.fakekube import FakeKube

from .helpers import NAMESPACE, NOW, SERVICE

TARGET = Target(NAMESPACE, SERVICE, "webhook-tls", "webhook-tls-ca", "gpu-admission")
POLICY = Policy()


def configuration(webhooks: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": MUTATING_WEBHOOK_CONFIGURATIONS.api_version,
        "kind": MUTATING_WEBHOOK_CONFIGURATIONS.kind,
        "metadata": {"name": TARGET.webhook_configuration},
        "webhooks": [
            {
                "name": f"hook{i}.example.com",
                "clientConfig": {"service": {"name": SERVICE, "namespace": NAMESPACE}},
            }
            for i in range(webhooks)
        ],
    }


@pytest.fixture
def kube() -> FakeKube:
    fake = FakeKube()
    fake.add(MUTATING_WEBHOOK_CONFIGURATIONS, configuration())
    return fake


def run(kube: FakeKube, days_later: float = 0) -> Outcome:
    clock = ManualClock(NOW + timedelta(days=days_later))
    return asyncio.run(ensure(kube, TARGET, POLICY, clock))


def secret(kube: FakeKube, name: str = TARGET.secret) -> dict[str, Any]:
    return kube.read(SECRETS, name, NAMESPACE)


def data(kube: FakeKube, key: str, name: str = TARGET.secret) -> bytes:
    return base64.b64decode(secret(kube, name)["data"][key])


def bundles(kube: FakeKube) -> list[bytes]:
    mwc = kube.read(MUTATING_WEBHOOK_CONFIGURATIONS, TARGET.webhook_configuration)
    return [base64.b64decode(w["clientConfig"]["caBundle"]) for w in mwc["webhooks"]]


def versions(kube: FakeKube) -> dict[Any, str]:
    return {key: obj["metadata"]["resourceVersion"] for key, obj in kube.objects.items()}


def test_first_run_creates_both_secrets_and_sets_every_ca_bundle(kube: FakeKube) -> None:
    outcome = run(kube)
    assert outcome.action is Action.RENEW_ALL
    assert outcome.secrets_written == (TARGET.ca_secret, TARGET.secret)
    assert outcome.webhooks_patched == 2
    assert secret(kube)["type"] == SECRET_TYPE_TLS
    assert set(secret(kube)["data"]) == {"tls.crt", "tls.key", "ca.crt"}
    assert bundles(kube) == [data(kube, CA_CRT)] * 2
    assert data(kube, CA_CRT) == data(kube, TLS_CRT, TARGET.ca_secret)
    assert outcome.not_after == NOW + POLICY.serving_validity


def test_a_second_run_writes_nothing(kube: FakeKube) -> None:
    run(kube)
    before, writes = versions(kube), kube.writes
    outcome = run(kube, days_later=1)
    assert outcome.action is Action.KEEP
    assert not outcome.changed
    assert (versions(kube), kube.writes) == (before, writes)


def test_a_near_expiry_serving_certificate_is_renewed_under_the_same_ca(kube: FakeKube) -> None:
    first = run(kube)
    ca_version = secret(kube, TARGET.ca_secret)["metadata"]["resourceVersion"]
    bundle = bundles(kube)
    outcome = run(kube, days_later=340)
    assert outcome.action is Action.RENEW_SERVING
    assert outcome.secrets_written == (TARGET.secret,)
    assert outcome.fingerprint != first.fingerprint
    assert secret(kube, TARGET.ca_secret)["metadata"]["resourceVersion"] == ca_version
    assert outcome.webhooks_patched == 0
    assert bundles(kube) == bundle


def test_a_ca_renewal_trusts_old_and_new_ca_during_the_switch(kube: FakeKube) -> None:
    run(kube)
    old_ca = data(kube, TLS_CRT, TARGET.ca_secret)
    outcome = run(kube, days_later=3650 - 380)
    assert outcome.action is Action.RENEW_ALL
    trusted = x509.load_pem_x509_certificates(bundles(kube)[0])
    assert trusted[1] == x509.load_pem_x509_certificate(old_ca)
    assert trusted[0] == x509.load_pem_x509_certificate(data(kube, TLS_CRT, TARGET.ca_secret))


def test_garbage_in_the_secret_is_reissued_with_a_clear_log(
    kube: FakeKube, caplog: pytest.LogCaptureFixture
) -> None:
    run(kube)
    stored = secret(kube)
    stored["data"][TLS_CRT] = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nxx").decode()
    stored["data"]["tls.key"] = "%%% not base64 %%%"
    kube.add(SECRETS, stored, NAMESPACE)
    with caplog.at_level(logging.INFO, logger="certs.apply"):
        outcome = run(kube)
    assert outcome.action is Action.RENEW_SERVING
    warnings = [fields_of(r) for r in caplog.records if r.getMessage() == "certs.secret_malformed"]
    assert len(warnings) == 1
    assert warnings[0]["part"] == "serving"
    assert "tls.key" in warnings[0]["detail"]
    assert run(kube).action is Action.KEEP


def test_a_secret_of_another_type_is_refused(kube: FakeKube) -> None:
    body = {"metadata": {"name": TARGET.secret}, "type": "Opaque", "data": {}}
    kube.add(SECRETS, body, NAMESPACE)
    with pytest.raises(CertsError, match="Opaque"):
        run(kube)


def test_a_concurrent_writer_makes_the_run_reread_and_replan(kube: FakeKube) -> None:
    run(kube)

    def someone_else_touches_the_secret() -> None:
        stored = secret(kube)
        stored["metadata"]["labels"] = {"touched": "yes"}
        kube.add(SECRETS, stored, NAMESPACE)

    kube.before["replace"] = someone_else_touches_the_secret
    outcome = run(kube, days_later=340)
    assert outcome.action is Action.RENEW_SERVING
    assert secret(kube)["metadata"]["labels"]["touched"] == "yes"
    assert run(kube, days_later=340).action is Action.KEEP


def test_a_racing_creator_is_resolved_by_a_second_round(kube: FakeKube) -> None:
    rival = FakeKube()
    rival.add(MUTATING_WEBHOOK_CONFIGURATIONS, configuration())
    run(rival)
    kube.before["create"] = lambda: kube.add(SECRETS, secret(rival, TARGET.ca_secret), NAMESPACE)
    outcome = run(kube)
    assert outcome.action is Action.RENEW_SERVING  # the rival's CA is adopted
    assert data(kube, TLS_CRT, TARGET.ca_secret) == data(rival, TLS_CRT, TARGET.ca_secret)


def test_a_changed_configuration_fails_the_patch_test_and_is_reread(kube: FakeKube) -> None:
    def someone_edits_the_configuration() -> None:
        kube.add(MUTATING_WEBHOOK_CONFIGURATIONS, configuration(webhooks=3))

    kube.before["patch"] = someone_edits_the_configuration
    outcome = run(kube)
    assert outcome.webhooks_patched == 3
    assert bundles(kube) == [data(kube, CA_CRT)] * 3


def test_a_missing_configuration_is_an_error() -> None:
    with pytest.raises(CertsError, match="not found"):
        run(FakeKube())


def test_ca_bundle_patch_touches_only_differing_webhooks() -> None:
    mwc = configuration(webhooks=2)
    mwc["metadata"]["resourceVersion"] = "7"
    mwc["webhooks"][0]["clientConfig"]["caBundle"] = "QUJD"
    ops = ca_bundle_patch(mwc, "QUJD")
    assert ops == [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
        {"op": "test", "path": "/webhooks/1/name", "value": "hook1.example.com"},
        {"op": "add", "path": "/webhooks/1/clientConfig/caBundle", "value": "QUJD"},
    ]
    mwc["webhooks"][1]["clientConfig"]["caBundle"] = "QUJD"
    assert ca_bundle_patch(mwc, "QUJD") == []
