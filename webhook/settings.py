"""The webhook's settings, read once from the environment at start (DESIGN §7).

Seed variables (``POD_SCHEDULING_GATE_NAME``, ``REQUIRED_GROUP_LABEL``,
``ONDEMAND_HORIZON_MINUTES``…) keep their names and lenient parsing; the variables
this project adds are strict. ``docs/operator/configuration.md`` ("webhook" table) documents
every one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from shared.clock import Clock
from shared.policy.matching import MatchRules
from shared.settings import CommonSettings, EnvReader, read_clock, read_common, read_rules

#: WEBHOOK_MAX_BODY_BYTES's default: more than any review the API server sends
#: (docs/developer/webhook.md, "Review size").
MAX_BODY_BYTES = 16 * 1024 * 1024
#: RESERVATION_TOLERATION_POLICY values.
STRIP = "strip"
DENY = "deny"


@dataclass(frozen=True, kw_only=True)
class ServingSettings:
    """Where the webhook listens and with which certificate."""

    #: WEBHOOK_HOST: address both listeners bind.
    host: str
    #: WEBHOOK_PORT: the TLS port of ``POST /mutate``.
    port: int
    #: WEBHOOK_HEALTH_PORT: the plain-HTTP port of /healthz, /readyz, /metrics.
    health_port: int
    #: TLS_CERT_FILE / TLS_KEY_FILE: the serving pair, reloaded when it changes.
    cert_file: str
    key_file: str
    #: TLS_RELOAD_SECONDS: how often the files are looked at.
    tls_reload_s: float
    #: WEBHOOK_MAX_BODY_BYTES: larger AdmissionReviews are refused with 400 (logged,
    #: counted).
    max_body_bytes: int
    #: WEBHOOK_CLIENT_CA_FILE: when set, the TLS port requires a client certificate
    #: chaining to a CA of this PEM file (the API server's; docs/operator/certificates.md).
    client_ca_file: str | None = None


@dataclass(frozen=True, kw_only=True)
class PolicySettings:
    """What the decision needs (pure data, passed to ``decide``)."""

    rules: MatchRules
    #: POD_SCHEDULING_GATE_NAME: gate added to queued pods (None: no gate).
    gate_name: str | None
    #: RESERVATION_TOLERATION_POLICY: strip or deny a self-declared reservation toleration.
    toleration_policy: str
    #: CONTROLLER_SERVICE_ACCOUNTS: usernames allowed to change controller-owned state.
    #: Empty means every service account of the controller namespace.
    controller_accounts: frozenset[str]
    #: The controller namespace (POD_NAMESPACE), where GPUReservations live.
    namespace: str

    def is_controller(self, username: str) -> bool:
        """Whether ``username`` is one of the controller's service accounts."""
        if self.controller_accounts:
            return username in self.controller_accounts
        return username.startswith(f"system:serviceaccount:{self.namespace}:")


@dataclass(frozen=True, kw_only=True)
class WebhookSettings:
    """Everything the webhook reads from the environment."""

    common: CommonSettings
    serving: ServingSettings
    policy: PolicySettings
    #: WEBHOOK_LEDGER_DEADLINE_MS: budget for the ledger claim inside one request.
    ledger_deadline_s: float
    clock: Clock


def load(env: Mapping[str, str] | None = None) -> tuple[WebhookSettings, EnvReader]:
    """Read and validate; raises ``SettingsError`` listing every invalid variable."""
    reader = EnvReader(os.environ if env is None else env)
    common = read_common(reader)
    settings = WebhookSettings(
        common=common,
        serving=_serving(reader),
        policy=_policy(reader, common.namespace),
        ledger_deadline_s=reader.integer("WEBHOOK_LEDGER_DEADLINE_MS", 2000, 50, 29000) / 1000,
        clock=read_clock(reader).build(),
    )
    reader.check()
    return settings, reader


def _serving(reader: EnvReader) -> ServingSettings:
    return ServingSettings(
        host=reader.string("WEBHOOK_HOST", "0.0.0.0") or "0.0.0.0",
        port=reader.integer("WEBHOOK_PORT", 8443, 1, 65535),
        health_port=reader.integer("WEBHOOK_HEALTH_PORT", 8080, 1, 65535),
        cert_file=reader.required("TLS_CERT_FILE"),
        key_file=reader.required("TLS_KEY_FILE"),
        tls_reload_s=reader.number("TLS_RELOAD_SECONDS", 10.0, minimum=0.05),
        max_body_bytes=reader.integer("WEBHOOK_MAX_BODY_BYTES", MAX_BODY_BYTES, 1024),
        client_ca_file=reader.string("WEBHOOK_CLIENT_CA_FILE"),
    )


def _policy(reader: EnvReader, namespace: str) -> PolicySettings:
    accounts = reader.string("CONTROLLER_SERVICE_ACCOUNTS") or ""
    return PolicySettings(
        rules=read_rules(reader),
        gate_name=reader.string("POD_SCHEDULING_GATE_NAME"),
        toleration_policy=reader.choice("RESERVATION_TOLERATION_POLICY", STRIP, (STRIP, DENY)),
        controller_accounts=frozenset(a.strip() for a in accounts.split(",") if a.strip()),
        namespace=namespace,
    )
