"""A minimal cert-manager for the sandbox: what the chart's cert-manager mode relies on.

The chart's ``certManager.enabled: true`` renders a SelfSigned Issuer, a CA Certificate,
a CA Issuer and the serving Certificate, and annotates the webhook configuration with
``cert-manager.io/inject-ca-from: <namespace>/<certificate>``. On a cluster
cert-manager issues them and its cainjector fills the ``caBundle``; here one loop does
the part the chart uses, with the certificates of our own ``certs`` package:

- a Certificate whose Secret is missing (or lacks ``tls.crt``/``tls.key``) is issued
  by its Issuer — ``selfSigned``: a self-signed CA (``isCA``) named by its
  ``commonName``; ``ca``: a serving certificate for its ``dnsNames`` signed by the CA
  in the Issuer's ``secretName`` — into a ``kubernetes.io/tls`` Secret holding
  ``tls.crt``, ``tls.key`` and ``ca.crt``;
- every webhook configuration with ``inject-ca-from`` gets that Certificate's
  ``ca.crt`` as the ``caBundle`` of each webhook.

Not done (docs/developer/sandbox.md): renewal (``renewBefore``), key algorithms other than our
ECDSA P-256, ClusterIssuers, Certificate status conditions.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
from typing import Any

from certs.issue import issue_ca, issue_serving
from certs.pem import load_pair
from shared.clock import Clock
from shared.errors import Conflict, KubeError, NotFound
from shared.gateway import Gateway
from shared.resources import MUTATING_WEBHOOK_CONFIGURATIONS, SECRETS, Resource

log = logging.getLogger(__name__)
Obj = dict[str, Any]

CERTIFICATES = Resource("cert-manager.io", "v1", "certificates", "Certificate")
ISSUERS = Resource("cert-manager.io", "v1", "issuers", "Issuer")
INJECT_CA_FROM = "cert-manager.io/inject-ca-from"
TLS_CRT, TLS_KEY, CA_CRT = "tls.crt", "tls.key", "ca.crt"
#: Seconds between passes.
PERIOD_S = 0.3


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _data(secret: Obj | None) -> dict[str, bytes]:
    return {k: base64.b64decode(v) for k, v in ((secret or {}).get("data") or {}).items()}


class CertManager:
    """Issues Certificates of one namespace and injects CA bundles."""

    def __init__(self, gateway: Gateway, namespace: str, clock: Clock) -> None:
        self.gateway, self.namespace, self.clock = gateway, namespace, clock
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            try:
                await self.run_once()
            except KubeError as exc:  # the next pass tries again
                log.warning("sandbox cert-manager pass failed: %s", exc)
            await asyncio.sleep(PERIOD_S)

    async def run_once(self) -> None:
        """One pass: issue what is missing, then inject bundles."""
        issuers = {
            i["metadata"]["name"]: i
            for i in (await self.gateway.list_all(ISSUERS, self.namespace)).items
        }
        certificates = (await self.gateway.list_all(CERTIFICATES, self.namespace)).items
        for certificate in certificates:
            await self._issue(certificate, issuers)
        await self._inject({c["metadata"]["name"]: c for c in certificates})

    async def _secret(self, name: str) -> Obj | None:
        try:
            return await self.gateway.get(SECRETS, name, self.namespace)
        except NotFound:
            return None

    async def _issue(self, certificate: Obj, issuers: dict[str, Obj]) -> None:
        spec = certificate.get("spec") or {}
        name = spec.get("secretName")
        if not name or {TLS_CRT, TLS_KEY} <= set(_data(await self._secret(name))):
            return
        issuer = issuers.get((spec.get("issuerRef") or {}).get("name", ""))
        if issuer is None:
            return
        now = self.clock.now()
        issuer_spec = issuer.get("spec") or {}
        if "selfSigned" in issuer_spec:
            pair = issue_ca(now, common_name=str(spec.get("commonName") or name))
            ca_pem = pair.cert_pem
        elif "ca" in issuer_spec:
            ca_data = _data(await self._secret(str(issuer_spec["ca"].get("secretName", ""))))
            if not {TLS_CRT, TLS_KEY} <= set(ca_data):
                return  # the CA is not issued yet: the next pass
            ca = load_pair(ca_data[TLS_CRT], ca_data[TLS_KEY], "CA")
            pair = issue_serving(ca, tuple(spec.get("dnsNames") or ()), now)
            ca_pem = ca.cert_pem
        else:
            return
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {"name": name, "namespace": self.namespace},
            "data": {
                TLS_CRT: _b64(pair.cert_pem),
                TLS_KEY: _b64(pair.key_pem),
                CA_CRT: _b64(ca_pem),
            },
        }
        with contextlib.suppress(Conflict):
            await self.gateway.create(SECRETS, body, self.namespace)

    async def _inject(self, certificates: dict[str, Obj]) -> None:
        for config in (await self.gateway.list_all(MUTATING_WEBHOOK_CONFIGURATIONS)).items:
            source = (config["metadata"].get("annotations") or {}).get(INJECT_CA_FROM, "")
            namespace, _, name = source.partition("/")
            if namespace != self.namespace or name not in certificates:
                continue
            secret_name = (certificates[name].get("spec") or {}).get("secretName", "")
            ca = _data(await self._secret(secret_name)).get(CA_CRT)
            hooks = config.get("webhooks") or []
            if ca is None or all(
                (h.get("clientConfig") or {}).get("caBundle") == _b64(ca) for h in hooks
            ):
                continue
            for hook in hooks:
                hook.setdefault("clientConfig", {})["caBundle"] = _b64(ca)
            with contextlib.suppress(Conflict):  # changed meanwhile: the next pass
                await self.gateway.replace(
                    MUTATING_WEBHOOK_CONFIGURATIONS, config["metadata"]["name"], config
                )
