"""Making the cluster hold good certificates: Secrets and the webhook's ``caBundle``.

The imperative shell around ``certs.plan``: read both Secrets, plan, issue what the
plan asks for, write with optimistic concurrency, then make every webhook of the
MutatingWebhookConfiguration trust the serving Secret's ``ca.crt``. A stale read (409
on a write) starts over from a fresh read, so two runs racing each other converge on
one certificate. With good certificates in place a run only reads.
"""

from __future__ import annotations

import base64
import binascii
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from certs import issue
from certs.material import realize
from certs.pem import fingerprint, load_certificates
from certs.plan import CA_CRT, TLS_CRT, Action, Finding, Plan, Policy, Problem, plan
from shared import vocab
from shared.clock import Clock
from shared.errors import Conflict, Invalid, NotFound
from shared.gateway import PatchType, Response
from shared.logs import log
from shared.resources import MUTATING_WEBHOOK_CONFIGURATIONS, SECRETS, Resource

_log = logging.getLogger(__name__)

SECRET_TYPE_TLS = "kubernetes.io/tls"
#: Full read-plan-write rounds before giving up on a contended object.
DEFAULT_ATTEMPTS = 5
#: Labels on Secrets we create (an existing Secret keeps its own and gains these).
SECRET_LABELS = {
    "app.kubernetes.io/part-of": vocab.PRODUCT_NAME,
    "app.kubernetes.io/component": "webhook-certificates",
}


class CertsError(Exception):
    """The certificates could not be put in place (the message says why)."""


class KubeAccess(Protocol):
    """The part of ``shared.gateway.Gateway`` this module uses."""

    async def get(
        self, res: Resource, name: str, namespace: str | None = None
    ) -> dict[str, Any]: ...

    async def create(
        self,
        res: Resource,
        body: dict[str, Any],
        namespace: str | None = None,
        dry_run: bool = False,
    ) -> Response: ...

    async def replace(
        self,
        res: Resource,
        name: str,
        body: dict[str, Any],
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> dict[str, Any]: ...

    async def patch(
        self,
        res: Resource,
        name: str,
        patch: dict[str, Any] | list[dict[str, Any]],
        namespace: str | None = None,
        patch_type: PatchType = "json",
        subresource: str | None = None,
    ) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Target:
    """Where the certificates go."""

    namespace: str
    #: The webhook's Service (its DNS names become the SANs).
    service: str
    #: The serving Secret the webhook mounts.
    secret: str
    #: The CA Secret, read and written by the issuer only.
    ca_secret: str
    #: The MutatingWebhookConfiguration whose webhooks get the ``caBundle``.
    webhook_configuration: str


@dataclass(frozen=True)
class Outcome:
    """What a run found and did."""

    action: Action
    findings: tuple[Finding, ...]
    #: Names of the Secrets written (empty when nothing changed).
    secrets_written: tuple[str, ...]
    #: How many webhooks got a new ``caBundle``.
    webhooks_patched: int
    #: End of validity and SHA-256 fingerprint of the serving certificate in place.
    not_after: datetime
    fingerprint: str

    @property
    def changed(self) -> bool:
        """Whether anything was written."""
        return bool(self.secrets_written) or self.webhooks_patched > 0


async def ensure(
    kube: KubeAccess,
    target: Target,
    policy: Policy,
    clock: Clock,
    attempts: int = DEFAULT_ATTEMPTS,
) -> Outcome:
    """Put good certificates in place; idempotent. ``CertsError`` when it cannot."""
    for attempt in range(1, attempts + 1):
        try:
            return await _ensure_once(kube, target, policy, clock.now(), attempts)
        except Conflict as exc:
            log(_log, logging.INFO, "certs.conflict", attempt=attempt, message=exc.message)
    raise CertsError(f"Secret {target.namespace}/{target.secret} kept changing under us")


async def _ensure_once(
    kube: KubeAccess, target: Target, policy: Policy, now: datetime, attempts: int
) -> Outcome:
    serving_obj = await read_secret(kube, target.namespace, target.secret)
    ca_obj = await read_secret(kube, target.namespace, target.ca_secret)
    decision = plan(
        secret_data(serving_obj), secret_data(ca_obj), target.service, target.namespace, now, policy
    )
    _log_plan(target, decision)
    written: list[str] = []
    if decision.action is not Action.KEEP:
        names = issue.service_dns_names(target.service, target.namespace)
        material = realize(decision, names, now, policy)
        if decision.action is Action.RENEW_ALL:
            await write_secret(kube, target.namespace, target.ca_secret, ca_obj, material.ca_data())
            written.append(target.ca_secret)
        serving_obj = await write_secret(
            kube, target.namespace, target.secret, serving_obj, material.serving_data()
        )
        written.append(target.secret)
    data = secret_data(serving_obj) or {}
    patched = await patch_ca_bundle(kube, target.webhook_configuration, data[CA_CRT], attempts)
    leaf = load_certificates(data[TLS_CRT], "serving certificate")[0]
    return Outcome(
        decision.action,
        decision.findings,
        tuple(written),
        patched,
        leaf.not_valid_after_utc,
        fingerprint(leaf),
    )


async def read_secret(kube: KubeAccess, namespace: str, name: str) -> dict[str, Any] | None:
    """The Secret, or ``None``; ``CertsError`` when it exists with another type."""
    try:
        secret = await kube.get(SECRETS, name, namespace)
    except NotFound:
        return None
    if secret.get("type") != SECRET_TYPE_TLS:
        raise CertsError(
            f"Secret {namespace}/{name} has type {secret.get('type')!r}, not "
            f"{SECRET_TYPE_TLS!r}; the type cannot change: delete it and run again"
        )
    return secret


def secret_data(secret: dict[str, Any] | None) -> dict[str, bytes] | None:
    """The decoded ``data`` of a Secret; a value that is not base64 reads as empty."""
    if secret is None:
        return None
    return {key: _b64decode(value) for key, value in (secret.get("data") or {}).items()}


async def write_secret(
    kube: KubeAccess,
    namespace: str,
    name: str,
    existing: dict[str, Any] | None,
    data: dict[str, bytes],
) -> dict[str, Any]:
    """Create the Secret, or replace ``existing`` at its resourceVersion (409 if stale)."""
    encoded = {key: base64.b64encode(value).decode("ascii") for key, value in data.items()}
    if existing is None:
        body = {
            "apiVersion": SECRETS.api_version,
            "kind": SECRETS.kind,
            "metadata": {"name": name, "namespace": namespace, "labels": dict(SECRET_LABELS)},
            "type": SECRET_TYPE_TLS,
            "data": encoded,
        }
        stored = (await kube.create(SECRETS, body, namespace)).body
    else:
        body = dict(existing, data=encoded)
        metadata = dict(existing.get("metadata") or {})
        metadata["labels"] = {**(metadata.get("labels") or {}), **SECRET_LABELS}
        body["metadata"] = metadata
        stored = await kube.replace(SECRETS, name, body, namespace)
    log(_log, logging.INFO, "certs.secret_written", namespace=namespace, secret=name)
    return stored


async def patch_ca_bundle(
    kube: KubeAccess, configuration: str, bundle: bytes, attempts: int = DEFAULT_ATTEMPTS
) -> int:
    """Set ``caBundle`` on every webhook that differs; returns how many changed.

    The JSON Patch tests the resourceVersion and each webhook's name, so a concurrent
    edit makes it fail (422) instead of writing into the wrong webhook; then re-read.
    """
    encoded = base64.b64encode(bundle).decode("ascii")
    for _ in range(attempts):
        try:
            current = await kube.get(MUTATING_WEBHOOK_CONFIGURATIONS, configuration)
        except NotFound as exc:
            raise CertsError(f"MutatingWebhookConfiguration {configuration} not found") from exc
        ops = ca_bundle_patch(current, encoded)
        if not ops:
            return 0
        try:
            await kube.patch(MUTATING_WEBHOOK_CONFIGURATIONS, configuration, ops)
        except (Conflict, Invalid) as exc:
            log(_log, logging.INFO, "certs.ca_bundle_conflict", message=exc.message)
            continue
        changed = (len(ops) - 1) // 2
        log(_log, logging.INFO, "certs.ca_bundle_patched", name=configuration, webhooks=changed)
        return changed
    raise CertsError(f"MutatingWebhookConfiguration {configuration} kept changing under us")


def ca_bundle_patch(configuration: dict[str, Any], encoded: str) -> list[dict[str, Any]]:
    """JSON Patch setting every webhook's ``caBundle`` to ``encoded`` (empty: none differ).

    No side effects. ``add`` on an object member replaces it if present (RFC 6902).
    """
    ops: list[dict[str, Any]] = []
    for index, webhook in enumerate(configuration.get("webhooks") or []):
        if (webhook.get("clientConfig") or {}).get("caBundle") == encoded:
            continue
        ops.append({"op": "test", "path": f"/webhooks/{index}/name", "value": webhook["name"]})
        path = f"/webhooks/{index}/clientConfig/caBundle"
        ops.append({"op": "add", "path": path, "value": encoded})
    if not ops:
        return []
    version = (configuration.get("metadata") or {}).get("resourceVersion")
    return [{"op": "test", "path": "/metadata/resourceVersion", "value": version}, *ops]


def _log_plan(target: Target, decision: Plan) -> None:
    for finding in decision.findings:
        if finding.problem is Problem.MALFORMED:
            log(
                _log,
                logging.WARNING,
                "certs.secret_malformed",
                namespace=target.namespace,
                part=finding.subject,
                detail=finding.detail,
            )
    log(
        _log,
        logging.INFO,
        "certs.plan",
        namespace=target.namespace,
        secret=target.secret,
        action=str(decision.action),
        findings=[f"{f.subject}: {f.problem}: {f.detail}" for f in decision.findings],
    )


def _b64decode(value: object) -> bytes:
    try:
        return base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError):
        return b""
