"""Where the Kubernetes API is and how to reach it: kubeconfig files or the in-cluster
service account, read by the official loader, and the facts another client needs
(``Endpoint``), with OpenSSL's strict checks as ``K8S_TLS_STRICT_VERIFY`` says."""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from dataclasses import dataclass

import kubernetes.client
import kubernetes.config

#: How the official loader splits a list of kubeconfig files (``$KUBECONFIG``'s form).
KUBECONFIG_SEPARATOR: str = kubernetes.config.kube_config.ENV_KUBECONFIG_PATH_SEPARATOR


@dataclass(frozen=True)
class Endpoint:
    """The configuration's connection facts, for a client other than the official one."""

    #: The API root URL as configured (``https://host:port[/prefix]``).
    root: str
    #: The CA bundle file to verify the server against (None: the system's).
    ca_file: str | None
    #: The client certificate and key files, when the kubeconfig has them.
    cert_file: str | None
    key_file: str | None
    #: False when the kubeconfig says ``insecure-skip-tls-verify``.
    verify: bool
    #: False when the configuration turns the hostname check off.
    check_hostname: bool
    #: The name to present (SNI) and verify instead of the URL's host, if any.
    server_name: str | None
    #: True when calls must go through an HTTP proxy.
    proxied: bool


def load_configuration(
    kubeconfig: str | Sequence[str] | None = None, context: str | None = None
) -> kubernetes.client.Configuration:
    """Client configuration from kubeconfig files, else in-cluster credentials.

    ``kubeconfig`` is one file or several (``$KUBECONFIG``'s list), merged by the
    official loader: the first file that names a cluster, context or user wins.
    ``context`` picks the context (None: the merged ``current-context``). Files are
    never written back (a refreshed token stays in memory)."""
    cfg = kubernetes.client.Configuration()
    if kubeconfig:
        files = [kubeconfig] if isinstance(kubeconfig, str) else list(kubeconfig)
        kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=KUBECONFIG_SEPARATOR.join(files),
            context=context,
            client_configuration=cfg,
            persist_config=False,
        )
    else:
        kubernetes.config.load_incluster_config(  # type: ignore[no-untyped-call]
            client_configuration=cfg
        )
    return cfg


def strict_verification(context: ssl.SSLContext, strict: bool) -> ssl.SSLContext:
    """Turn OpenSSL's strict X.509 checks on or off in ``context`` (K8S_TLS_STRICT_VERIFY).

    Strict is what Python 3.13 does by default and what we ask on every Python: among
    other checks, each certificate the chain runs through must carry an Authority Key
    Identifier. Off only relaxes those checks — the chain is still verified against the
    CA, dates still apply and the host name is still matched."""
    if strict:
        context.verify_flags |= ssl.VERIFY_X509_STRICT
    else:
        context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    return context
