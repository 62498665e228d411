"""Settings of ``python -m certs``, from the environment with command-line overrides.

Each flag is another way to set one variable (``--secret`` sets ``CERTS_SECRET_NAME``),
so flags and environment are validated together by ``EnvReader`` and every bad value
is reported in one message.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from certs.apply import Target
from certs.plan import Policy, policy_problems
from shared import vocab
from shared.settings import CommonSettings, EnvReader, read_common

#: flag dest → environment variable it overrides.
FLAG_VARIABLES: Mapping[str, str] = {
    "namespace": "POD_NAMESPACE",
    "service": "CERTS_SERVICE_NAME",
    "secret": "CERTS_SECRET_NAME",
    "ca_secret": "CERTS_CA_SECRET_NAME",
    "webhook_configuration": "CERTS_WEBHOOK_CONFIGURATION",
    "renew_before_days": "CERTS_RENEW_BEFORE_DAYS",
    "validity_days": "CERTS_VALIDITY_DAYS",
    "ca_validity_days": "CERTS_CA_VALIDITY_DAYS",
    "directory": "CERTS_DIR",
}

DEFAULT_SERVICE = f"{vocab.PRODUCT_NAME}-webhook"
DEFAULT_SECRET = f"{vocab.PRODUCT_NAME}-webhook-tls"
#: Suffix of the CA Secret's default name (``<secret>-ca``).
CA_SECRET_SUFFIX = "-ca"

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


@dataclass(frozen=True)
class EnsureSettings:
    """Settings of ``ensure``."""

    common: CommonSettings
    target: Target
    policy: Policy


@dataclass(frozen=True)
class FilesSettings:
    """Settings of ``write-files``."""

    common: CommonSettings
    directory: Path
    service: str
    namespace: str
    policy: Policy


def overlay(env: Mapping[str, str], flags: Mapping[str, object]) -> dict[str, str]:
    """``env`` with the variables of every flag that was given replaced."""
    merged = dict(env)
    for dest, variable in FLAG_VARIABLES.items():
        value = flags.get(dest)
        if value is not None:
            merged[variable] = str(value)
    return merged


def read_ensure(env: Mapping[str, str]) -> EnsureSettings:
    """``ensure`` settings; ``SettingsError`` listing every problem."""
    reader = EnvReader(env)
    common = read_common(reader)
    service = _name(reader, "CERTS_SERVICE_NAME", DEFAULT_SERVICE, _DNS_LABEL)
    secret = _name(reader, "CERTS_SECRET_NAME", DEFAULT_SECRET, _DNS_SUBDOMAIN)
    ca_secret = _name(reader, "CERTS_CA_SECRET_NAME", secret + CA_SECRET_SUFFIX, _DNS_SUBDOMAIN)
    configuration = _name(reader, "CERTS_WEBHOOK_CONFIGURATION", vocab.PRODUCT_NAME, _DNS_SUBDOMAIN)
    _check_namespace(reader, common.namespace)
    policy = _policy(reader)
    reader.check()
    assert policy is not None  # reader.check() raised otherwise
    target = Target(common.namespace, service, secret, ca_secret, configuration)
    return EnsureSettings(common, target, policy)


def read_files(env: Mapping[str, str]) -> FilesSettings:
    """``write-files`` settings; ``SettingsError`` listing every problem."""
    reader = EnvReader(env)
    common = read_common(reader)
    directory = reader.required("CERTS_DIR")
    service = _name(reader, "CERTS_SERVICE_NAME", DEFAULT_SERVICE, _DNS_LABEL)
    _check_namespace(reader, common.namespace)
    policy = _policy(reader)
    reader.check()
    assert policy is not None
    return FilesSettings(common, Path(directory), service, common.namespace, policy)


def _name(reader: EnvReader, variable: str, default: str, shape: re.Pattern[str]) -> str:
    value = reader.string(variable, default) or default
    if not shape.match(value) or len(value) > 253:
        reader.problems.append(f"{variable}={value!r} is not a valid Kubernetes name")
    return value


def _check_namespace(reader: EnvReader, namespace: str) -> None:
    if not _DNS_LABEL.match(namespace):
        reader.problems.append(f"POD_NAMESPACE={namespace!r} is not a valid namespace name")


def _policy(reader: EnvReader) -> Policy | None:
    """The lifetimes; their consistency problems join the reader's."""
    renew = reader.integer("CERTS_RENEW_BEFORE_DAYS", 30, minimum=1)
    serving = reader.integer("CERTS_VALIDITY_DAYS", 365, minimum=2)
    authority = reader.integer("CERTS_CA_VALIDITY_DAYS", 3650, minimum=3)
    days = (timedelta(days=serving), timedelta(days=authority), timedelta(days=renew))
    found = policy_problems(*days)
    reader.problems.extend(f"certificate lifetimes: {p}" for p in found)
    return None if found else Policy(*days)
